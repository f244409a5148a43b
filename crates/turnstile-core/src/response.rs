//! What applying an entry returns. Every response carries the entry's `revision` (its log
//! index) and `term`; a replayed request-id returns the stored first response unchanged.

use serde::{Deserialize, Serialize};

use crate::command::LockMode;

/// The result of applying one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// Log index of the entry that produced this outcome (for a replay: the first entry).
    pub revision: u64,
    /// Term of that entry.
    pub term: u64,
    /// True when this is a stored outcome returned for a retried `request_id`.
    pub replayed: bool,
    pub outcome: Result<Outcome, ApplyError>,
}

/// A successful outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Tick, blank and membership entries.
    Applied,
    ClusterId {
        cluster_id: String,
    },
    LeaseGranted {
        lease_id: u64,
        ttl_ms: u64,
    },
    LeasesKept {
        results: Vec<KeepaliveResult>,
    },
    LeaseRevoked {
        lease_id: u64,
    },
    Expired {
        lease_ids: Vec<u64>,
    },
    /// Locks granted by this entry (one, or all of an `acquire-many`), sharing its index.
    Granted {
        names: Vec<String>,
        token: u64,
        term: u64,
        lease_id: u64,
        mode: LockMode,
    },
    /// The acquire waits in the queue under `waiter_id`; a later entry answers it.
    Queued {
        waiter_id: String,
    },
    /// A `Cancel` entry: `released` when the waiter's grant had already won and was released.
    Cancelled {
        waiter_id: String,
        released: bool,
    },
    /// An `AbortWaiter` entry: `aborted` is false when the deadlock no longer existed.
    Aborted {
        waiter_id: String,
        aborted: bool,
    },
    LockReleased {
        name: String,
    },
    KvWritten {
        key: String,
    },
    KvDeleted {
        key: String,
        existed: bool,
    },
    Counter {
        name: String,
        value: i64,
    },
    /// A user, role or token change; `auth_revision` is this entry's index.
    AuthChanged {
        auth_revision: u64,
    },
    /// A token was stored; the caller shows its secret once.
    TokenCreated {
        token_id: String,
        expires_ms: Option<u64>,
    },
    /// The leader of election `name` published a new value.
    Proclaimed {
        name: String,
        token: u64,
    },
    /// A `Txn` entry: which branch ran (`succeeded`: every compare held) and one result per
    /// op of that branch, in order.
    Txn {
        succeeded: bool,
        results: Vec<crate::txn::TxnResult>,
    },
    /// A `Command::Many` or `Command::KeyWrites` entry: one response per item, in order. Never stored in a request
    /// record (the items' own responses are).
    Many {
        responses: Vec<Response>,
    },
}

/// Per-lease result of a keepalive entry. `remaining_ms` is `None` when the lease was gone or
/// already due at apply time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepaliveResult {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub remaining_ms: Option<u64>,
}

/// A definite refusal: the entry committed but changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    #[error("lease {lease_id} not found or already expired")]
    LeaseNotFound { lease_id: u64 },
    #[error("lock {name} is held (token {holder_token})")]
    LockHeld { name: String, holder_token: u64 },
    #[error("lease {lease_id} does not hold lock {name} with token {token}")]
    NotHolder {
        name: String,
        lease_id: u64,
        token: u64,
    },
    #[error("condition on key {key} failed")]
    CompareFailed { key: String },
    #[error("fenced: token {token} is not the current grant of lock {lock}")]
    Fenced {
        lock: String,
        token: u64,
        current_token: Option<u64>,
    },
    #[error("request_id {request_id} was used for a different request")]
    RequestIdReused { request_id: String },
    #[error("counter {name} would overflow")]
    CounterOverflow { name: String },
    #[error("limit reached: {limit}")]
    LimitReached { limit: String },
    #[error("invalid command: {reason}")]
    Invalid { reason: String },
    #[error("wait for {waiter_id} ended before a grant")]
    WaitTimeout { waiter_id: String },
    #[error("lock {name}: {reason}")]
    ModeMismatch { name: String, reason: String },
    #[error("deadlock: waiter {waiter_id} aborted to break the cycle of leases {cycle:?}")]
    DeadlockVictim { waiter_id: String, cycle: Vec<u64> },
    #[error("permission denied: {reason}")]
    PermissionDenied { reason: String },
    #[error("quota exceeded: {quota} (at most {limit})")]
    QuotaExceeded { quota: String, limit: u64 },
    #[error("unauthenticated: {reason}")]
    Unauthenticated { reason: String },
    #[error("{what} not found")]
    AuthNotFound { what: String },
    #[error("token {token} is not the current leader of election {name}")]
    NotLeader { name: String, token: u64 },
}

/// A final answer for a waiter, produced by the entry that decided it (grant, lease end,
/// cancel, deadlock abort). Only the node holding the waiter's request sends it on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub waiter_id: String,
    pub response: Response,
}

impl Response {
    /// The granted lock's token, if this response is a grant.
    pub fn token(&self) -> Option<u64> {
        match &self.outcome {
            Ok(Outcome::Granted { token, .. }) => Some(*token),
            _ => None,
        }
    }
}
