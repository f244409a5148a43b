//! Membership changes on the leader: add a learner (it catches up before the call returns),
//! promote a learner to voter, remove a node. A change that would leave the voters without a
//! reachable quorum is refused before anything is proposed, with the arithmetic in the reason.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::Instant as _;
use openraft::{BasicNode, ChangeMembers};

use crate::app::App;
use crate::leader_ops::route_error;
use crate::proto::{MemberOp, RouteError};

/// Path on the node being admitted as a voter.
pub const ADMIT_PATH: &str = "/raft/admit";
/// Path on the node about to be added as a learner.
pub const PREPARE_JOIN_PATH: &str = "/raft/prepare-join";

/// A follower counts as reachable if it acknowledged the leader within this many heartbeat
/// intervals. Tight on purpose: a node wrongly taken for down only gets a change refused,
/// while a node wrongly taken for up can let through a change that never commits and stalls
/// the cluster until that node returns.
const REACHABLE_HEARTBEATS: u64 = 5;

/// Refuses a change after which the reachable voters would not form a majority of the new
/// voter set: the change itself could not commit, and if it did the cluster would stop
/// granting locks.
pub fn check_quorum_after(
    new_voters: &BTreeSet<u64>,
    reachable: &BTreeSet<u64>,
) -> Result<(), String> {
    let up: BTreeSet<u64> = new_voters.intersection(reachable).copied().collect();
    let needed = new_voters.len() / 2 + 1;
    if up.len() >= needed {
        return Ok(());
    }
    let down: BTreeSet<u64> = new_voters.difference(reachable).copied().collect();
    Err(format!(
        "the voters would be {new_voters:?}, of which only {up:?} answer the leader \
         ({down:?} do not); a quorum needs {needed}: bring the unreachable nodes back first"
    ))
}

impl App {
    /// [`App::member_local`] with a deadline; past it the change's outcome is unknown.
    pub(crate) async fn member_bounded(
        &self,
        op: &MemberOp,
        timeout_ms: u64,
    ) -> Result<Result<(), String>, RouteError> {
        let change = self.member_local(op);
        let deadline = Duration::from_millis(timeout_ms);
        tokio::time::timeout(deadline, change)
            .await
            .unwrap_or(Err(RouteError::Indeterminate))
    }

    /// How recent a follower's last acknowledgement must be for it to count as reachable.
    pub fn reachable_window(&self) -> Duration {
        Duration::from_millis(self.cfg.heartbeat_ms * REACHABLE_HEARTBEATS)
    }

    /// The leader and the nodes that acknowledged it recently; `None` on a follower, which
    /// has no view of the others.
    pub fn reachable_nodes(&self) -> Option<BTreeSet<u64>> {
        let window = self.reachable_window();
        let metrics = self.raft.metrics().borrow_watched().clone();
        let heartbeat = metrics.heartbeat.as_ref()?;
        let mut up = BTreeSet::from([self.node_id()]);
        for (id, acked) in heartbeat {
            if acked.is_some_and(|t| t.elapsed() <= window) {
                up.insert(*id);
            }
        }
        Some(up)
    }

    /// [`check_quorum_after`] against the reachable nodes, waiting up to an election timeout
    /// for enough of them to answer: a leader elected a moment ago has not yet heard from its
    /// followers, and that must not read as "they are down". A node that stops leading
    /// meanwhile answers `NotLeader`, and the request is routed to the new leader.
    async fn check_reachable_quorum(
        &self,
        after: &BTreeSet<u64>,
    ) -> Result<Result<(), String>, RouteError> {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.cfg.election_timeout_ms_max);
        loop {
            let Some(reachable) = self.reachable_nodes().filter(|_| self.is_leader()) else {
                return Err(RouteError::NotLeader {
                    leader_id: self.current_leader(),
                });
            };
            let verdict = check_quorum_after(after, &reachable);
            if verdict.is_ok() || tokio::time::Instant::now() >= deadline {
                return Ok(verdict);
            }
            tokio::time::sleep(Duration::from_millis(self.cfg.heartbeat_ms)).await;
        }
    }

    /// Executes a membership change on the leader. The inner `Err` is a definite refusal
    /// (nothing changed), with the reason.
    pub(crate) async fn member_local(
        &self,
        op: &MemberOp,
    ) -> Result<Result<(), String>, RouteError> {
        if !self.is_leader() {
            return Err(RouteError::NotLeader {
                leader_id: self.current_leader(),
            });
        }
        let refused = |reason: String| Ok(Err(reason));
        let membership = self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .clone();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        match op {
            MemberOp::AddLearner { node_id, addr } => {
                if membership.get_node(node_id).is_some() {
                    return refused(format!(
                        "node {node_id} is already a member; remove it first"
                    ));
                }
                if let Err(reason) = self.tell_node(*node_id, addr, PREPARE_JOIN_PATH).await {
                    return refused(reason);
                }
                let node = BasicNode { addr: addr.clone() };
                self.raft
                    .add_learner(*node_id, node, true)
                    .await
                    .map_err(route_error)?;
                // The answer lists reachability, and the learner's first heartbeat
                // acknowledgement comes up to a heartbeat after its catch-up: wait that long
                // rather than show a node that just caught up as unreachable.
                let acked = |m: &openraft::RaftMetrics<_>| {
                    m.heartbeat
                        .as_ref()
                        .and_then(|h| h.get(node_id))
                        .is_some_and(Option::is_some)
                };
                let _ = self
                    .raft
                    .wait(Some(self.reachable_window()))
                    .metrics(acked, "the learner's first heartbeat")
                    .await;
            }
            MemberOp::Promote { node_id } => {
                let Some(node) = membership.get_node(node_id) else {
                    return refused(format!("node {node_id} is not a learner; add it first"));
                };
                if voters.contains(node_id) {
                    return refused(format!("node {node_id} is already a voter"));
                }
                let mut after = voters.clone();
                after.insert(*node_id);
                if let Err(reason) = self.check_reachable_quorum(&after).await? {
                    return refused(reason);
                }
                if let Err(reason) = self.tell_node(*node_id, &node.addr, ADMIT_PATH).await {
                    return refused(reason);
                }
                let change = ChangeMembers::AddVoterIds(BTreeSet::from([*node_id]));
                self.raft
                    .change_membership(change, false)
                    .await
                    .map_err(route_error)?;
            }
            MemberOp::Remove { node_id } => {
                if *node_id == self.node_id() {
                    return refused("cannot remove the current leader; remove it from another node after a leader change".into());
                }
                if membership.get_node(node_id).is_none() {
                    return refused(format!("node {node_id} is not a member"));
                }
                if voters.contains(node_id) && voters.len() <= 1 {
                    return refused("cannot remove the last voter".into());
                }
                let change = if voters.contains(node_id) {
                    let mut after = voters.clone();
                    after.remove(node_id);
                    if let Err(reason) = self.check_reachable_quorum(&after).await? {
                        return refused(reason);
                    }
                    ChangeMembers::RemoveVoters(BTreeSet::from([*node_id]))
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([*node_id]))
                };
                self.raft
                    .change_membership(change, false)
                    .await
                    .map_err(route_error)?;
            }
        }
        Ok(Ok(()))
    }

    /// Tells a joining node it may accept entries (`PREPARE_JOIN_PATH`) or vote (`ADMIT_PATH`).
    async fn tell_node(&self, node_id: u64, addr: &str, path: &str) -> Result<(), String> {
        let timeout = Duration::from_millis(self.cfg.request_timeout_ms);
        self.peers
            .rpc::<(), ()>(node_id, addr, path, &(), timeout)
            .await
            .map_err(|e| format!("node {node_id} refused {path}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_majority_of_the_new_voters_must_be_reachable() {
        // 5 -> 4 voters with one of the remaining four down: 3 of 4 answer, 3 needed.
        assert!(check_quorum_after(&set(&[1, 2, 3, 4]), &set(&[1, 2, 3])).is_ok());
        // 3 -> 2 voters while the other remaining voter is down: 1 of 2, 2 needed.
        let err = check_quorum_after(&set(&[1, 2]), &set(&[1, 3])).expect_err("refused");
        assert!(
            err.contains("needs 2") && err.contains("({2} do not)"),
            "{err}"
        );
        // Promoting a fourth voter while two are down: 2 of 4 answer, 3 needed.
        assert!(check_quorum_after(&set(&[1, 2, 3, 4]), &set(&[1, 4])).is_err());
        // A lone voter that is the leader is its own quorum.
        assert!(check_quorum_after(&set(&[1]), &set(&[1])).is_ok());
    }
}
