//! Graceful stop (SIGTERM), step one: stop looking ready, and if this node leads, hand
//! leadership to the most caught-up reachable voter before anything closes, so clients see a
//! planned hand-over of milliseconds instead of an election timeout. Requests keep being
//! served (a follower forwards them) until `RunningNode::shutdown` closes the listener; that
//! step ends this node's waits and watches, whose clients resume on another node with the
//! same `request_id` / `Last-Event-ID`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::Instant as _;
use turnstile_raft::types::RaftMetrics;

use crate::app::App;

/// What a drain did, for the log and for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// The node that took over leadership from this one, if this node was leader.
    pub handed_to: Option<u64>,
    /// From the transfer request to seeing the new leader.
    pub handover_ms: Option<u64>,
}

/// The voter other than `me` with the highest replicated log index among those that
/// acknowledged the leader within `window` (leader only: followers have no replication view).
pub fn best_successor(m: &RaftMetrics, me: u64, window: Duration) -> Option<u64> {
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    let replication = m.replication.as_ref()?;
    let heartbeat = m.heartbeat.as_ref()?;
    voters
        .into_iter()
        .filter(|id| *id != me)
        .filter(|id| {
            heartbeat
                .get(id)
                .and_then(|t| t.as_ref())
                .is_some_and(|t| t.elapsed() <= window)
        })
        .max_by_key(|id| {
            let matched = replication
                .get(id)
                .and_then(|l| l.as_ref())
                .map(|l| l.index);
            // Ties go to the lower id, so the choice is deterministic.
            (matched, std::cmp::Reverse(*id))
        })
}

impl App {
    /// Marks the node as draining and hands leadership over if it leads.
    pub async fn drain(&self) -> Drained {
        self.draining.store(true, Ordering::Relaxed);
        let me = self.node_id();
        if !self.is_leader() {
            return Drained {
                handed_to: None,
                handover_ms: None,
            };
        }
        let election = Duration::from_millis(self.cfg.election_timeout_ms_max);
        let metrics = self.raft.metrics().borrow_watched().clone();
        let Some(to) = best_successor(&metrics, me, self.reachable_window()) else {
            tracing::warn!("draining leader has no reachable voter to hand leadership to");
            return Drained {
                handed_to: None,
                handover_ms: None,
            };
        };
        let started = Instant::now();
        if let Err(e) = self.raft.trigger().transfer_leader(to).await {
            tracing::warn!(error = %e, to, "leader transfer failed");
        }
        let handed = self
            .raft
            .wait(Some(2 * election))
            .metrics(
                |m| m.current_leader.is_some_and(|l| l != me),
                "another leader",
            )
            .await;
        let handover_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match handed {
            Ok(m) => {
                tracing::info!(to = ?m.current_leader, handover_ms, "leadership handed over");
                Drained {
                    handed_to: m.current_leader,
                    handover_ms: Some(handover_ms),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, to, "no new leader after the transfer; stopping anyway");
                Drained {
                    handed_to: None,
                    handover_ms: None,
                }
            }
        }
    }
}
