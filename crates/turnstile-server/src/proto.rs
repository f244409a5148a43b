//! Node-to-node messages beyond Raft's own: a follower hands a client's write or read to the
//! leader with these, so a request is parsed and validated where it arrived and executed where
//! it can be decided. Bodies are bincode; see `turnstile_raft::network::PeerClient::rpc`.

use serde::{Deserialize, Serialize};
use turnstile_core::{Command, Response};

use crate::ranges::{LeaseItem, Page, Range};
use crate::views::{CounterView, FenceView, KeyView, LeaseView, LockView};

/// Peer path for proposing a write on the leader.
pub const PROPOSE_PATH: &str = "/raft/propose";
/// Peer path for a linearizable read on the leader.
pub const READ_PATH: &str = "/raft/read";
/// Peer path for membership operations on the leader.
pub const MEMBER_PATH: &str = "/raft/member";

/// A write for the leader to stamp and propose.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProposeRequest {
    pub request_id: Option<String>,
    pub command: Command,
    /// How long the leader may wait for the commit before answering `Indeterminate`.
    pub timeout_ms: u64,
}

/// A committed write's outcome, with the cluster id read right after it applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Proposed {
    pub response: Response,
    pub cluster_id: Option<String>,
}

/// Why a write or read produced no definite outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RouteError {
    /// This node is not the leader; nothing was appended. Retry at `leader_id`.
    #[error("not the leader (leader: {leader_id:?})")]
    NotLeader { leader_id: Option<u64> },
    /// No leader with a valid lease could be reached; nothing was appended.
    #[error("no quorum: no leader with a valid lease is reachable")]
    NoQuorum,
    /// The entry may have been appended, but its commit is unknown at the deadline.
    #[error("outcome unknown: the write may or may not have committed")]
    Indeterminate,
    /// This node cannot take part (stopped, fatal storage error, not a member).
    #[error("node unavailable: {reason}")]
    Unavailable { reason: String },
}

/// A linearizable read, executed on the leader after a ReadIndex round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReadQuery {
    Lease {
        lease_id: u64,
    },
    Lock {
        name: String,
    },
    Key {
        key: String,
    },
    Counter {
        name: String,
    },
    Fence {
        name: String,
        token: u64,
    },
    /// Users, roles and token ids (root only).
    Auth,
    /// The principal's own record and usage (only inside `As`).
    Whoami,
    /// `query` for an authenticated principal: the leader judges it after its ReadIndex
    /// round and shows only what the principal may read (`leader_ops.rs`).
    As {
        principal: String,
        query: Box<ReadQuery>,
    },
    /// An election's leader and published value.
    Election {
        name: String,
    },
    /// A page of keys (`crate::ranges`).
    Keys(Range<String>),
    /// A page of locks.
    Locks(Range<String>),
    /// A page of leases: the principal's own inside `As` (root: all), else all.
    Leases(Range<u64>),
    /// A page of elections (names with a candidate).
    Elections(Range<String>),
    /// etcd's `Range` (`crate::key_span`; the etcd port).
    KeySpan(crate::key_span::KeySpan),
}

/// The answer to a [`ReadQuery`]; `None` where the record does not exist.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReadAnswer {
    Lease(Option<LeaseView>),
    Lock(LockView),
    Key(Option<KeyView>),
    Counter(CounterView),
    Fence(FenceView),
    Auth(crate::auth_views::AuthView),
    Whoami(crate::auth_views::WhoamiView),
    /// The principal may not read what it asked for.
    Denied {
        reason: String,
    },
    Election(crate::election_views::ElectionView),
    Keys(Page<KeyView>),
    Locks(Page<LockView>),
    Leases(Page<LeaseItem>),
    Elections(Page<crate::election_views::ElectionView>),
    KeySpan(Result<crate::key_span::SpanAnswer, crate::key_span::SpanError>),
}

/// Membership operations executed by the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MemberOp {
    /// Add a node as a learner and wait until it has caught up.
    AddLearner { node_id: u64, addr: String },
    /// Admit a caught-up learner (it may then vote) and make it a voter.
    Promote { node_id: u64 },
    /// Remove a node from the voters and the membership.
    Remove { node_id: u64 },
}
