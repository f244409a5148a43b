//! The acquire flow shared by `acquire` and `acquire-many`: propose, and when queued, hold the
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
use crate::error::ApiError;

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

/// Proposes a `Cancel` if dropped while armed: the client went away mid-wait.
struct CancelOnDrop {
    armed: Option<(Arc<App>, String)>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((app, waiter_id)) = self.armed.take() {
            tracing::info!(waiter_id, "client left while waiting; cancelling its wait");
            tokio::spawn(async move {
                if let Err(e) = app
                    .write(
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
}

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
pub async fn run(app: Arc<App>, args: AcquireArgs) -> Result<Written, ApiError> {
    let wait = args.wait_ms > 0;
    let waiter_id = match (&args.request_id, wait) {
        (Some(id), _) => Some(id.clone()),
        (None, true) => Some(app.new_waiter_id()),
        (None, false) => None,
    };
    // Register before proposing, so the entry that grants us cannot be missed.
    let registration = match (&waiter_id, wait) {
        (Some(id), true) => Some(
            app.waiters
                .register(id)
                .map_err(|e| ApiError::Unavailable(e.to_string()))?,
        ),
        _ => None,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(args.wait_ms);
    let command = Command::Acquire {
        names: args.names,
        lease_id: args.lease_id,
        mode: args.mode,
        permits: args.permits,
        wait,
    };
    let mut guard = CancelOnDrop { armed: None };
    if let Some(id) = &waiter_id {
        guard.armed = wait.then(|| (app.clone(), id.clone()));
    }
    let first = app.write(waiter_id.clone(), command).await;
    let written = match first {
        Ok(w) => w,
        Err(e) => {
            // Refused or failed before queueing: nothing to cancel for a definite refusal.
            if matches!(e, ApiError::Apply(_)) {
                guard.armed = None;
            }
            return Err(e);
        }
    };
    let (Outcome::Queued { waiter_id }, Some(mut registration)) = (&written.outcome, registration)
    else {
        guard.armed = None;
        return Ok(written);
    };
    let waiter_id = waiter_id.clone();
    let cluster_id = written.cluster_id.clone();
    tokio::select! {
        outcome = &mut registration.rx => {
            guard.armed = None;
            match outcome {
                Ok(response) => finish(response, cluster_id),
                Err(_) => Err(ApiError::Unavailable("node stopping".into())),
            }
        }
        _ = tokio::time::sleep_until(deadline) => {
            guard.armed = None;
            cancel(&app, &waiter_id, registration).await
        }
    }
}

/// Cancels a timed-out wait and reports its final outcome.
async fn cancel(
    app: &App,
    waiter_id: &str,
    mut registration: crate::waiters::Registration,
) -> Result<Written, ApiError> {
    app.write(
        None,
        Command::Cancel {
            waiter_id: waiter_id.to_string(),
        },
    )
    .await
    .map_err(|e| match e {
        ApiError::Route(_) => ApiError::Route(crate::proto::RouteError::Indeterminate),
        e => e,
    })?;
    // Entries before the cancel have been applied here by now: an outcome decided by one of
    // them (lease gone, deadlock victim) is already in the registration.
    match registration.rx.try_recv() {
        Ok(Response {
            outcome: Err(e), ..
        }) if !matches!(e, ApplyError::WaitTimeout { .. }) => Err(ApiError::Apply(e)),
        _ => Err(ApiError::Apply(ApplyError::WaitTimeout {
            waiter_id: waiter_id.to_string(),
        })),
    }
}
