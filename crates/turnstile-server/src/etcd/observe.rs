//! etcd's `Observe` (v3election) over Turnstile's elections: a stream of an election's
//! leaders. It starts with the leader at a linearizable read (after waiting for one if there
//! is none), then answers every `election_leader` event of the replicated watch history: a new
//! leader, or the leader proclaiming a new value. As in `Leader`, the leader key is
//! `<name>/<lease id in hex>` and its `create_revision` is the leadership's fencing token;
//! `mod_revision` is the event's revision.
//!
//! A stream counts as one of the node's watch streams and one of the caller's `watches`
//! quota. A leader of another principal cannot be named to the caller (its lease and token are
//! hidden, as in `Leader`): the stream ends with `PermissionDenied` there. A reader that falls
//! behind the bounded history skips to the current leader instead of ending.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};
use turnstile_core::{Event, State};
use turnstile_etcd_proto::mvccpb::KeyValue;
use turnstile_etcd_proto::v3electionpb::{LeaderRequest, LeaderResponse};

use crate::app::App;
use crate::auth::{NodeQuota, NodeUsage};
use crate::etcd::common::{
    caller, header, judged_principal, signed, status, unexpected, value_bytes,
};
use crate::etcd::lock::lock_key;
use crate::etcd::watch::{stream_slot, Wakeups};
use crate::proto::{ReadAnswer, ReadQuery};

/// Answers buffered per stream before its reader must catch up.
const STREAM_BUFFER: usize = 16;
/// Events looked at per pass over the history, so one stream holds the state lock briefly.
const EVENTS_PER_PASS_MAX: usize = 4_096;

/// One leadership as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leading {
    lease_id: u64,
    token: u64,
    value: String,
    /// The revision it became leader or proclaimed at; 0 when read from the state.
    revision: u64,
}

/// `Observe` on election `name` for `caller`.
pub async fn observe(
    app: &Arc<App>,
    req: Request<LeaderRequest>,
    name: String,
) -> Result<Response<BoxStream<LeaderResponse>>, Status> {
    let caller = caller(app, &req).await?;
    // A linearizable read first (and the caller's right to read the election): the stream
    // starts from a state at least that new.
    let answer = app
        .read(&caller, ReadQuery::Election { name: name.clone() })
        .await
        .map_err(|e| status(&e))?;
    if !matches!(answer, ReadAnswer::Election(_)) {
        return Err(unexpected(&answer));
    }
    let node_slot = stream_slot()?;
    let quota_slot = NodeUsage::take(app, &caller, NodeQuota::Watches).map_err(|e| status(&e))?;
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let observer = Observer {
        app: app.clone(),
        principal: judged_principal(&caller),
        name,
        after: (0, 0),
        last: None,
    };
    tokio::spawn(async move {
        let _slots = (node_slot, quota_slot);
        if let Err(end) = observer.run(&tx).await {
            let _ = tx.send(Err(end)).await;
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

struct Observer {
    app: Arc<App>,
    principal: Option<String>,
    name: String,
    /// The position of the last history event looked at.
    after: (u64, u32),
    /// The last leadership sent.
    last: Option<Leading>,
}

type Out = mpsc::Sender<Result<LeaderResponse, Status>>;

impl Observer {
    async fn run(mut self, tx: &Out) -> Result<(), Status> {
        let mut wakeups = Wakeups::new(&self.app);
        if let Some(leading) = self.current()? {
            self.send(tx, leading).await?;
        }
        loop {
            wakeups.seen();
            let (found, more) = self.next_leaders()?;
            for leading in found {
                self.send(tx, leading).await?;
            }
            if !more {
                wakeups.applied().await?;
            }
        }
    }

    /// The leader now (if any), and the history from here on.
    fn current(&mut self) -> Result<Option<Leading>, Status> {
        let app = self.app.clone();
        let inner = app.sm.read();
        let state = &inner.state;
        self.after = (state.applied_index, u32::MAX);
        let Some(l) = state.election_leader(&self.name) else {
            return Ok(None);
        };
        let leading = Leading {
            lease_id: l.holder.lease_id,
            token: l.holder.token,
            value: l.value.to_string(),
            revision: 0,
        };
        self.visible(state, leading).map(Some)
    }

    /// Leaderships of the history after `after` (or, when the history dropped some, the
    /// current one); `true` when a bound cut the pass.
    fn next_leaders(&mut self) -> Result<(Vec<Leading>, bool), Status> {
        let app = self.app.clone();
        let inner = app.sm.read();
        let state = &inner.state;
        let Ok(history) = state.events_after(self.after) else {
            drop(inner);
            return Ok((self.current()?.into_iter().collect(), false));
        };
        let mut found = Vec::new();
        for (looked, (&position, e)) in history.enumerate() {
            if looked >= EVENTS_PER_PASS_MAX {
                return Ok((found, true));
            }
            self.after = position;
            if let Event::ElectionLeader {
                name,
                lease_id,
                token,
                value,
            } = e
            {
                if *name == self.name {
                    let leading = Leading {
                        lease_id: *lease_id,
                        token: *token,
                        value: value.clone(),
                        revision: position.0,
                    };
                    found.push(self.visible(state, leading)?);
                }
            }
        }
        Ok((found, false))
    }

    /// `leading` if the caller may see whose it is.
    fn visible(&self, state: &State, leading: Leading) -> Result<Leading, Status> {
        match &self.principal {
            Some(p) if !state.auth.owns_lease(p, leading.lease_id) => Err(
                Status::permission_denied("the election's leader is another principal's"),
            ),
            _ => Ok(leading),
        }
    }

    async fn send(&mut self, tx: &Out, leading: Leading) -> Result<(), Status> {
        let same = |l: &Leading| {
            l.lease_id == leading.lease_id && l.token == leading.token && l.value == leading.value
        };
        // A resync after the history dropped events may find the leader already sent.
        if self.last.as_ref().is_some_and(same) {
            return Ok(());
        }
        let revision = self.app.sm.read().state.applied_index;
        let answer = LeaderResponse {
            header: header(&self.app, revision),
            kv: Some(KeyValue {
                key: lock_key(&self.name, leading.lease_id).into_bytes(),
                create_revision: signed(leading.token),
                mod_revision: signed(leading.revision),
                version: 0,
                value: value_bytes(leading.value.clone()),
                lease: signed(leading.lease_id),
            }),
        };
        self.last = Some(leading);
        // The client went away: end quietly.
        tx.send(Ok(answer)).await.map_err(|_| Status::cancelled(""))
    }
}
