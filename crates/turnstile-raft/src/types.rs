//! The openraft type configuration and the aliases the rest of Turnstile uses. Every openraft
//! type the other crates touch is named here, so an openraft upgrade stays contained.

use std::io::Cursor;

use turnstile_core::{Envelope, Response};

openraft::declare_raft_types!(
    /// Turnstile's Raft types: entries carry an [`Envelope`], apply returns a [`Response`].
    pub TypeConfig:
        D = Envelope,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
);

pub type NodeId = u64;
pub type Node = openraft::BasicNode;
pub type SnapshotData = Cursor<Vec<u8>>;
pub type Raft = openraft::Raft<TypeConfig, crate::state_machine::StateMachineStore>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
pub type ClientWriteError = openraft::errors::ClientWriteError<TypeConfig>;
pub type RaftError<E = openraft::errors::Infallible> = openraft::errors::RaftError<TypeConfig, E>;
pub type ForwardToLeader = openraft::errors::ForwardToLeader<TypeConfig>;
pub type LinearizableReadError = openraft::errors::LinearizableReadError<TypeConfig>;

/// The term of the entry with this log id.
pub fn term_of(log_id: &LogId) -> u64 {
    log_id.leader_id.term
}
