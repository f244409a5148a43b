//! The openraft type configuration and the aliases the rest of Turnstile uses. Every openraft
//! type the other crates touch is named here, so an openraft upgrade stays contained.

use std::io::Cursor;

use turnstile_core::{Envelope, Response};

/// Turnstile's Raft types: entries carry an [`Envelope`], apply returns a [`Response`], and a
/// write is answered through a [`Reply`](crate::responder::Reply). Written out rather than by
/// `openraft::declare_raft_types!`, whose syntax cannot name a generic responder; the other
/// types are openraft's defaults.
#[derive(Debug, Clone, Copy, Default, Eq, PartialEq, Ord, PartialOrd)]
pub struct TypeConfig {}

impl openraft::RaftTypeConfig for TypeConfig {
    type D = Envelope;
    type R = Response;
    type NodeId = u64;
    type Node = openraft::BasicNode;
    type Term = u64;
    type LeaderId = openraft::impls::leader_id_adv::LeaderId<Self::Term, Self::NodeId>;
    type Vote = openraft::impls::Vote<Self::LeaderId>;
    type Payload = openraft::EntryPayload<Self::D, Self::NodeId, Self::Node>;
    type Entry =
        openraft::Entry<<Self::LeaderId as openraft::vote::RaftLeaderId>::Committed, Self::Payload>;
    type Responder<T>
        = crate::responder::Reply<T>
    where
        T: openraft::OptionalSend + 'static;
    type Batch<T>
        = openraft::impls::InlineBatch<T>
    where
        T: openraft::OptionalSend + 'static;
    type AsyncRuntime = openraft::impls::TokioRuntime;
    type ErrorSource = openraft::impls::BoxedErrorSource;
}

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
pub type ClientWriteResult = openraft::raft::ClientWriteResult<TypeConfig>;
pub type ClientWriteError = openraft::errors::ClientWriteError<TypeConfig>;
pub type RaftError<E = openraft::errors::Infallible> = openraft::errors::RaftError<TypeConfig, E>;
pub type ForwardToLeader = openraft::errors::ForwardToLeader<TypeConfig>;
pub type LinearizableReadError = openraft::errors::LinearizableReadError<TypeConfig>;

/// The term of the entry with this log id.
pub fn term_of(log_id: &LogId) -> u64 {
    log_id.leader_id.term
}
