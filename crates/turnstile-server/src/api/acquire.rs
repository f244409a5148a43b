//! The acquire flow shared by `acquire`, `acquire-many` and election campaigns: propose, and when queued, hold the
//! request until this node's registry hears the waiter's outcome or `wait_ms` passes.
//!
//! A wait that ends without a grant (timeout, or the client's connection dropping) goes
//! through a committed `Cancel`: it dequeues the waiter, or releases the grant if the grant
//! won the race. `409 wait_timeout` is sent only after that cancel committed; if the cancel's
//! own outcome is unknown, the answer is `504 indeterminate`.

use std::sync::Arc;
use std::time::Duration;

use turnstile_core::{ApplyError, Command, LockMode, Outcome, Response};

use crate::api::ops::Written;
use crate::app::App;
use crate::auth::{Caller, NodeQuota, NodeUsage};
use crate::error::ApiError;
use crate::waiters::Registration;

/// Longest server-side wait of one acquire.
pub const WAIT_MS_MAX: u64 = 300_000;

/// What the caller asked for.
pub struct AcquireArgs {
    pub names: Vec<String>,
    pub lease_id: u64,
    pub mode: LockMode,
    pub permits: Option<u32>,
    pub wait_ms: u64,
    pub request_id: Option<String>,
}

/// A queued wait held by this request. If the request goes away while waiting (the client's
/// connection dropped), it proposes a `Cancel` — unless another request on this node waits
/// for the same waiter id (a retry re-attached here), which keeps the queue entry alive.
struct Wait {
    app: Arc<App>,
    waiter_id: String,
    registration: Registration,
    armed: bool,
}

impl Drop for Wait {
    fn drop(&mut self) {
        // Our own registration is still counted here (fields drop after this runs).
        if !self.armed || self.app.waiters.registrations(&self.waiter_id) > 1 {
            return;
        }
        let (app, waiter_id) = (self.app.clone(), self.waiter_id.clone());
        tracing::info!(waiter_id, "client left while waiting; cancelling its wait");
        tokio::spawn(async move {
            if let Err(e) = app
                .write(
                    &Caller::Node,
                    None,
                    Command::Cancel {
                        waiter_id: waiter_id.clone(),
                    },
                )
                .await
            {
                tracing::warn!(waiter_id, error = %e, "cancel of an abandoned wait failed");
            }
        });
    }
}

/// The answer to a wait this node holds when it stops gracefully.
pub const STOPPING_WAIT_KEPT: &str = "node stopping: the wait stays queued in its place; retry \
     with the same request_id and wait_ms on another node to keep waiting, or revoke the lease";

/// The answer to a wait without a `request_id` when its node stops gracefully.
pub const STOPPING_WAIT_CANCELLED: &str =
    "node stopping: the wait (sent without a request_id) was cancelled; acquire again on another node";

fn finish(response: Response, cluster_id: Option<String>) -> Result<Written, ApiError> {
    match response.outcome {
        Ok(outcome) => Ok(Written {
            outcome,
            revision: response.revision,
            term: response.term,
            cluster_id,
        }),
        Err(e) => Err(ApiError::Apply(e)),
    }
}

/// Runs an acquire to its final answer.
pub async fn run(app: Arc<App>, caller: Caller, args: AcquireArgs) -> Result<Written, ApiError> {
    // `wait_ms` travels in the command so that it is part of the request's identity: a reuse
    // of a queued acquire's id with another `wait_ms` is `request_id_reused`, and cannot
    // re-attach and then cancel the first requester's wait on its own, earlier, deadline.
    let command = Command::AcquireFor {
        names: args.names,
        lease_id: args.lease_id,
        mode: args.mode,
        permits: args.permits,
        wait_ms: args.wait_ms,
    };
    run_queued(app, caller, args.request_id, args.wait_ms, command).await
}

/// Runs a command that may queue (`AcquireFor`, `Campaign`: it carries `wait_ms`, and the
/// envelope's request id is its waiter id) to its final answer.
pub async fn run_queued(
    app: Arc<App>,
    caller: Caller,
    request_id: Option<String>,
    wait_ms: u64,
    command: Command,
) -> Result<Written, ApiError> {
    let wait = wait_ms > 0;
    // Only a wait the client named can be found again by a retry on another node.
    let retryable = request_id.is_some();
    // Scoped to the caller (`Caller::request_id`), so no tenant can name another's wait.
    let waiter_id = match (request_id, wait) {
        (Some(id), _) => caller.request_id(Some(id)),
        (None, true) => caller.request_id(Some(app.new_waiter_id())),
        (None, false) => None,
    };
    let (true, Some(waiter_id)) = (wait, waiter_id.clone()) else {
        return app.write_scoped(&caller, waiter_id, command).await;
    };
    let _waiting = NodeUsage::take(&app, &caller, NodeQuota::Waiting)?;
    // Register before proposing, so the entry that grants us cannot be missed.
    let registration = app.waiters.register(&waiter_id).map_err(|_| {
        ApiError::Apply(turnstile_core::ApplyError::LimitReached {
            limit: "waiters_per_node_max".into(),
        })
    })?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let mut w = Wait {
        app: app.clone(),
        waiter_id: waiter_id.clone(),
        registration,
        armed: true,
    };
    let written = match app
        .write_scoped(&caller, Some(waiter_id.clone()), command)
        .await
    {
        Ok(written) => written,
        Err(e) => {
            // A definite refusal queued nothing. An unknown outcome may have queued us: a wait
            // the client named stays queued, because the answer (`504 indeterminate`) tells the
            // client to resend the same request_id, which re-attaches to it (cancelling it made
            // that resend answer `wait_timeout` long before `wait_ms`; CI, 2026-12-02). A wait
            // with a node-made id can never be found again, so it is cancelled.
            w.armed = !matches!(e, ApiError::Apply(_)) && !retryable;
            return Err(e);
        }
    };
    if !matches!(written.outcome, Outcome::Queued { .. }) {
        w.armed = false;
        return Ok(written);
    }
    let cluster_id = written.cluster_id.clone();
    let mut stopping = app.stopping.subscribe();
    tokio::select! {
        outcome = &mut w.registration.rx => {
            w.armed = false;
            match outcome {
                Ok(response) => finish(response, cluster_id),
                Err(_) => Err(ApiError::Unavailable("node stopping".into())),
            }
        }
        _ = tokio::time::sleep_until(deadline) => {
            w.armed = false;
            cancel(&app, &mut w).await
        }
        // A graceful stop leaves a wait the client named queued, in its place: the client
        // retries on another node with the same request_id (and wait_ms), which re-attaches
        // to the same queue entry (cancelling it made that retry answer `wait_timeout`). A
        // wait with a node-made id can never be found again, so it is cancelled.
        _ = async { stopping.wait_for(|s| *s).await.map(|_| ()) } => {
            w.armed = false;
            if retryable {
                return Err(ApiError::Unavailable(STOPPING_WAIT_KEPT.into()));
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), cancel(&app, &mut w)).await;
            Err(ApiError::Unavailable(STOPPING_WAIT_CANCELLED.into()))
        }
    }
}

/// Cancels a timed-out wait and reports its final outcome.
async fn cancel(app: &App, w: &mut Wait) -> Result<Written, ApiError> {
    let waiter_id = w.waiter_id.clone();
    app.write(
        &Caller::Node,
        None,
        Command::Cancel {
            waiter_id: waiter_id.clone(),
        },
    )
    .await
    .map_err(|e| match e {
        ApiError::Route(_) => ApiError::Route(crate::proto::RouteError::Indeterminate),
        e => e,
    })?;
    // Entries before the cancel have been applied here by now: an outcome decided by one of
    // them (lease gone, deadlock victim) is already in the registration.
    match w.registration.rx.try_recv() {
        Ok(Response {
            outcome: Err(e), ..
        }) if !matches!(e, ApplyError::WaitTimeout { .. }) => Err(ApiError::Apply(e)),
        _ => Err(ApiError::Apply(ApplyError::WaitTimeout { waiter_id })),
    }
}
