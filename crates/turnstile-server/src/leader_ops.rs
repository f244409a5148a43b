//! What the leader does with a routed request: stamp and propose a write, serve a
//! linearizable read after a ReadIndex round, or change membership.

use openraft::async_runtime::WatchReceiver;
use std::collections::BTreeSet;
use std::time::Duration;

use openraft::errors::{ClientWriteError, ForwardReason, LinearizableReadError, RaftError};
use openraft::{BasicNode, ChangeMembers, ReadPolicy};
use turnstile_core::Envelope;

use crate::app::App;
use crate::proto::{MemberOp, ProposeRequest, Proposed, ReadAnswer, ReadQuery, RouteError};
use crate::views::{CounterView, FenceView, KeyView, LeaseView, LockView};

/// Path on the node being admitted as a voter.
pub const ADMIT_PATH: &str = "/raft/admit";
/// Path on the node about to be added as a learner.
pub const PREPARE_JOIN_PATH: &str = "/raft/prepare-join";

type WriteError = RaftError<
    turnstile_raft::types::TypeConfig,
    ClientWriteError<turnstile_raft::types::TypeConfig>,
>;

fn route_error(e: WriteError) -> RouteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f))
            if f.reason == ForwardReason::LeaseExpired =>
        {
            RouteError::NoQuorum
        }
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => RouteError::NotLeader {
            leader_id: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => RouteError::Indeterminate,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            RouteError::Unavailable {
                reason: e.to_string(),
            }
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(e)) => RouteError::Unavailable {
            reason: e.to_string(),
        },
        RaftError::Fatal(f) => RouteError::Unavailable {
            reason: f.to_string(),
        },
    }
}

impl App {
    /// Stamps a write with the leader clock and proposes it; waits up to `timeout_ms` for it
    /// to commit and apply.
    pub(crate) async fn propose_local(&self, req: &ProposeRequest) -> Result<Proposed, RouteError> {
        if !self.is_leader() {
            return Err(RouteError::NotLeader {
                leader_id: self.current_leader(),
            });
        }
        let (sm_time_ms, has_cluster_id) = {
            let inner = self.sm.read();
            (inner.state.sm_time_ms, inner.state.cluster_id.is_some())
        };
        // Every grant carries the cluster id; until the new cluster has chosen one (the
        // driver's first entry), client writes wait. Nothing is appended, so this retries.
        if !has_cluster_id && !matches!(req.command, turnstile_core::Command::InitCluster { .. }) {
            return Err(RouteError::NotLeader { leader_id: None });
        }
        let now_ms = self.clock.now_ms(self.term(), sm_time_ms);
        let env = Envelope {
            now_ms,
            request_id: req.request_id.clone(),
            command: req.command.clone(),
        };
        let write = self.raft.client_write(env);
        match tokio::time::timeout(Duration::from_millis(req.timeout_ms), write).await {
            Err(_elapsed) => Err(RouteError::Indeterminate),
            Ok(Err(e)) => Err(route_error(e)),
            Ok(Ok(resp)) => {
                let cluster_id = self.sm.read().state.cluster_id.clone();
                Ok(Proposed {
                    response: resp.data,
                    cluster_id,
                })
            }
        }
    }

    /// Confirms leadership with a quorum (ReadIndex, never a clock-based lease), waits for the
    /// state machine to reach the read index, then reads.
    pub(crate) async fn read_local(&self, query: &ReadQuery) -> Result<ReadAnswer, RouteError> {
        let timeout = Duration::from_millis(self.cfg.no_quorum_after_ms());
        match tokio::time::timeout(
            timeout,
            self.raft.ensure_linearizable(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_elapsed) => return Err(RouteError::NoQuorum),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f)))) => {
                return Err(RouteError::NotLeader {
                    leader_id: f.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)))) => {
                return Err(RouteError::NoQuorum)
            }
            Ok(Err(RaftError::Fatal(f))) => {
                return Err(RouteError::Unavailable {
                    reason: f.to_string(),
                })
            }
            Ok(Ok(_)) => {}
        }
        Ok(self.answer_locally(query))
    }

    /// Answers a read from this node's applied state. Linearizable only after ReadIndex.
    pub(crate) fn answer_locally(&self, query: &ReadQuery) -> ReadAnswer {
        let term = self.term();
        let inner = self.sm.read();
        let state = &inner.state;
        let now_ms = self.clock.now_ms(term, state.sm_time_ms);
        match query {
            ReadQuery::Lease { lease_id } => {
                ReadAnswer::Lease(LeaseView::of(state, *lease_id, now_ms))
            }
            ReadQuery::Lock { name } => ReadAnswer::Lock(LockView::of(state, name)),
            ReadQuery::Key { key } => ReadAnswer::Key(KeyView::of(state, key)),
            ReadQuery::Counter { name } => ReadAnswer::Counter(CounterView::of(state, name)),
            ReadQuery::Fence { name, token } => {
                ReadAnswer::Fence(FenceView::of(state, name, *token))
            }
        }
    }

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
            }
            MemberOp::Promote { node_id } => {
                let Some(node) = membership.get_node(node_id) else {
                    return refused(format!("node {node_id} is not a learner; add it first"));
                };
                if voters.contains(node_id) {
                    return refused(format!("node {node_id} is already a voter"));
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
