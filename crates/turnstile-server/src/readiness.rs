//! `/readyz`: whether this node can serve a linearizable request now. A node is ready when it
//! is a member, is not draining, the cluster has its id, and a ReadIndex round through the
//! leader (on this node if it leads, forwarded otherwise) succeeds within about two election
//! timeouts. That round needs a quorum to acknowledge the leader, so a leader cut off from the
//! majority, and every node that can reach only such a leader, answer `503 no_quorum`: load
//! balancers stop sending clients where every request would fail.
//!
//! The round is a network call, and `/readyz` needs no credentials, so a result is reused for
//! [`READY_PROBE_REUSE_MS`] and probes run one at a time: however often it is called, a node
//! starts at most a few rounds a second for it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Mutex;

use crate::app::App;
use crate::auth::Caller;
use crate::identity::Phase;
use crate::proto::ReadQuery;

/// How long one probe's result answers `/readyz` calls.
pub const READY_PROBE_REUSE_MS: u64 = 250;

/// Why a node is not ready (`reason` in the 503 body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotReady {
    /// Not (or not yet, or no longer) a voting member: see `phase`.
    NotMember,
    /// Stopping gracefully: clients should go elsewhere first.
    Draining,
    /// The cluster has no id yet (it is forming), so no grant could carry one.
    NoClusterId,
    /// No leader is known, or the known leader got no quorum acknowledgement in time.
    NoQuorum,
    /// Raft has stopped here (shutdown or a storage failure), or the leader refused this node.
    Unavailable,
}

/// The outcome of the newest probe, kept for [`READY_PROBE_REUSE_MS`].
#[derive(Default)]
pub struct ReadyProbe {
    last: Mutex<Option<(Instant, Result<(), NotReady>)>>,
}

impl ReadyProbe {
    /// Ready, or why not. Waits for a probe in flight rather than starting a second one.
    pub async fn check(&self, app: &App) -> Result<(), NotReady> {
        if app.phase() != Phase::Member {
            return Err(NotReady::NotMember);
        }
        if app.draining.load(Ordering::Relaxed) {
            return Err(NotReady::Draining);
        }
        if app.sm.read().state.cluster_id.is_none() {
            return Err(NotReady::NoClusterId);
        }
        let mut last = self.last.lock().await;
        if let Some((at, result)) = *last {
            if at.elapsed() < Duration::from_millis(READY_PROBE_REUSE_MS) {
                return result;
            }
        }
        let result = probe(app).await;
        *last = Some((Instant::now(), result));
        result
    }
}

/// One ReadIndex round through the leader, bounded by two election timeouts.
async fn probe(app: &App) -> Result<(), NotReady> {
    let deadline = Duration::from_millis(app.cfg.no_quorum_after_ms());
    // Any query does: the answer is dropped, only the round matters. A counter read is the
    // smallest, and as the node itself it is not judged against any principal.
    let query = ReadQuery::Counter {
        name: "readyz".into(),
    };
    match tokio::time::timeout(deadline, app.read(&Caller::Node, query)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(crate::error::ApiError::Route(crate::proto::RouteError::Unavailable {
            ..
        }))) => Err(NotReady::Unavailable),
        Ok(Err(_)) | Err(_) => Err(NotReady::NoQuorum),
    }
}
