//! A membership newer than this node's own log, as a member vouched for it.
//!
//! The certificate check (`super::peer_check`) judges a sender against the membership this node
//! knows. A node that is behind knows an old one: if its newest membership entry removed node
//! N, and N was since wiped, re-added and elected, the node would refuse N's appends forever and
//! never learn that N is back. So a refusal for "not a member" makes the node ask the members
//! of its own membership (at most once per [`ASK_INTERVAL_MS`]) for theirs, over the
//! authenticated peer API. The answer with the newest log id is kept, and it replaces the
//! node's own membership in the check while it is newer than the node's own. A removed node's
//! certificate stays refused: no member's membership names it.
//!
//! Trust: an answer comes from a node this node already counts as a member, over mutual TLS,
//! with a signed reply. A member could lie, but a member can already vote and lead.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};
use turnstile_raft::types::LogId;

use crate::app::App;

/// Peer path answering this node's own membership ([`MembershipView`]).
pub const MEMBERSHIP_PATH: &str = "/raft/membership";
/// Least time between two rounds of asking: a refused sender (hostile or not) costs the
/// members at most one call each per interval.
pub const ASK_INTERVAL_MS: u64 = 500;
/// How long one member has to answer.
const ASK_TIMEOUT_MS: u64 = 1_000;

/// A node's membership as it knows it: the log id of the entry that set it, voters and
/// learners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipView {
    pub log_id: Option<LogId>,
    pub members: BTreeSet<u64>,
}

impl MembershipView {
    /// This node's own membership (the newest entry in its log).
    pub fn of(app: &App) -> MembershipView {
        let metrics = app.raft.metrics();
        let metrics = metrics.borrow_watched();
        let stored = &metrics.membership_config;
        MembershipView {
            log_id: *stored.log_id(),
            members: stored.membership().nodes().map(|(id, _)| *id).collect(),
        }
    }
}

/// The newest membership members vouched for, and when they were last asked.
#[derive(Debug, Default)]
pub struct MemberVouch {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    newest: Option<MembershipView>,
    asked_at: Option<Instant>,
}

impl MemberVouch {
    /// The membership to judge senders by: `own`, or the vouched one if it is newer.
    pub fn newest(&self, own: MembershipView) -> MembershipView {
        let inner = self.lock();
        match &inner.newest {
            Some(v) if v.log_id > own.log_id => v.clone(),
            _ => own,
        }
    }

    /// Keeps `view` if it is newer than the one kept; true if it was.
    pub fn offer(&self, view: MembershipView) -> bool {
        let mut inner = self.lock();
        if inner
            .newest
            .as_ref()
            .is_some_and(|v| v.log_id >= view.log_id)
        {
            return false;
        }
        inner.newest = Some(view);
        true
    }

    /// True (and the round counted) if a round of asking may start now.
    fn round_due(&self, now: Instant) -> bool {
        let mut inner = self.lock();
        let due = inner
            .asked_at
            .is_none_or(|at| now.duration_since(at) >= Duration::from_millis(ASK_INTERVAL_MS));
        if due {
            inner.asked_at = Some(now);
        }
        due
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is two plain values; a panic elsewhere cannot leave them half-written.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// After a "not a member" refusal: asks the members of this node's own membership for theirs,
/// in the background, unless a round ran within [`ASK_INTERVAL_MS`].
pub fn ask_members_if_due(app: &Arc<App>) {
    if !app.member_vouch.round_due(Instant::now()) {
        return;
    }
    let app = app.clone();
    tokio::spawn(async move {
        let members: Vec<(u64, String)> = {
            let metrics = app.raft.metrics();
            let metrics = metrics.borrow_watched();
            metrics
                .membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != app.node_id())
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect()
        };
        let timeout = Duration::from_millis(ASK_TIMEOUT_MS);
        let answers = futures::future::join_all(members.iter().map(|(id, addr)| {
            app.peers
                .rpc::<(), MembershipView>(*id, addr, MEMBERSHIP_PATH, &(), timeout)
        }))
        .await;
        for (answer, (id, _)) in answers.into_iter().zip(&members) {
            match answer {
                Ok(view) => {
                    let log_id = view.log_id;
                    if app.member_vouch.offer(view) {
                        tracing::info!(
                            by = id,
                            ?log_id,
                            "a member vouched for a membership newer than this node's log"
                        );
                    }
                }
                Err(e) => tracing::debug!(peer = id, error = %e, "membership not asked"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_raft::types::TypeConfig;

    fn view(term: u64, index: u64, members: &[u64]) -> MembershipView {
        MembershipView {
            log_id: Some(openraft::testing::log_id::<TypeConfig>(term, 1, index)),
            members: members.iter().copied().collect(),
        }
    }

    #[test]
    fn only_a_newer_vouched_membership_replaces_the_own() {
        let vouch = MemberVouch::default();
        let own = view(2, 10, &[1, 2, 3]);
        assert_eq!(vouch.newest(own.clone()), own, "nothing vouched yet");
        assert!(vouch.offer(view(3, 12, &[1, 2, 3, 4])));
        assert_eq!(
            vouch.newest(own.clone()).members,
            BTreeSet::from([1, 2, 3, 4])
        );
        assert!(
            !vouch.offer(view(2, 11, &[1, 2])),
            "an older answer is ignored"
        );
        let caught_up = view(3, 14, &[1, 2, 3]);
        assert_eq!(vouch.newest(caught_up.clone()), caught_up, "own log newer");
    }

    #[test]
    fn rounds_are_spaced() {
        let vouch = MemberVouch::default();
        let t0 = Instant::now();
        assert!(vouch.round_due(t0));
        assert!(!vouch.round_due(t0 + Duration::from_millis(ASK_INTERVAL_MS - 1)));
        assert!(vouch.round_due(t0 + Duration::from_millis(ASK_INTERVAL_MS)));
    }
}
