//! The replicated records. Everything is in ordered maps so that encoding the state is
//! deterministic: two replicas that applied the same log encode to the same bytes.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::command::LockMode;
use crate::cow;
use crate::events::Event;
use crate::response::Response;

/// The whole state machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Index of the last applied entry (application, blank or membership).
    pub applied_index: u64,
    /// The cluster's time, advanced only by entries; never goes backwards.
    pub sm_time_ms: u64,
    /// Chosen once by the first leader and replicated; travels with every token.
    pub cluster_id: Option<String>,
    pub keys: Keys,
    pub leases: cow::Map<u64, Lease>,
    /// `(deadline_ms, lease_id)` of every lease, so due leases are found without a scan.
    pub lease_deadlines: cow::Set<(u64, u64)>,
    /// Only locks with a holder or a waiter are stored; an idle lock is absent.
    pub locks: cow::Map<String, cow::Shared<Lock>>,
    /// Queued acquires by waiter id (the acquire's request id).
    pub tickets: cow::Map<String, Ticket>,
    pub counters: cow::Map<String, i64>,
    pub requests: cow::Map<String, cow::Shared<RequestRecord>>,
    /// `(expires_ms, request_id)` of records on the retry window (finished requests).
    pub request_expiries: cow::Set<(u64, String)>,
    /// `(lease_id, token, request_id)` of every pinned acquire record whose grant is held, so
    /// the release of a hold finds its record without a scan. Derived from `requests`: not
    /// encoded, rebuilt by [`State::rebuild_derived`] after a decode.
    #[serde(skip)]
    pub grant_requests: cow::Set<(u64, u64, String)>,
    /// Watch history by `(revision, seq)`, bounded by `WATCH_HISTORY_EVENTS_MAX`.
    pub events: cow::Map<(u64, u32), cow::Shared<Event>>,
    /// Position of the newest event dropped from the history, if any.
    pub events_dropped_through: Option<(u64, u32)>,
    /// This node's etcd details of the key events in `events` (`crate::key_changes`): not
    /// replicated, never encoded, and equal in every state as far as `==` sees.
    #[serde(skip)]
    pub key_changes: crate::key_changes::KeyChanges,
    /// Users, roles, tokens, ownership (`crate::auth`). Encoded after the rest of the state
    /// in a version-2 frame (`codec`), so version-1 snapshots still decode (with no auth).
    #[serde(skip)]
    pub auth: crate::auth::AuthState,
    /// Election candidates' published values by `(election, lease_id)` (`crate::elections`).
    /// Encoded after the auth state in a version-3 frame (`codec`), so version-1 and -2
    /// snapshots still decode (with no campaigns).
    #[serde(skip)]
    pub campaigns: cow::Map<(String, u64), crate::elections::Campaign>,
}

/// The keys by name. A record sits behind `cow::Shared`, like the other large records: a
/// value may be 64 KiB, and a tree leaf copied after a snapshot's copy would copy every value
/// in it.
pub type Keys = cow::Map<String, cow::Shared<KeyRecord>>;

/// One key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    /// Number of writes since creation (1 after the first put).
    pub version: u64,
    pub lease_id: Option<u64>,
}

/// One lease. Its id is the index of the entry that granted it. Its sets are persistent
/// (`cow::Set`), like the state's own collections: a lease may hold thousands of locks, and
/// with plain sets the first write to it after a snapshot's copy copied all of them
/// (`examples/first_write_after_copy.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub ttl_ms: u64,
    /// Live while `sm_time_ms < deadline_ms`.
    pub deadline_ms: u64,
    /// Locks this lease holds.
    pub locks: cow::Set<String>,
    /// Waiter ids of this lease's queued acquires.
    pub tickets: cow::Set<String>,
    /// Keys bound to this lease (deleted when it ends).
    pub keys: cow::Set<String>,
    /// Request-id records pinned by this lease: its own grant's, and those of its acquires
    /// that still wait or hold. They leave for the retry window when that ends.
    pub request_ids: cow::Set<String>,
}

/// One lock with its holders and FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// 1 for a read-write lock; N for a semaphore. Fixed while the lock is not idle.
    pub permits: u32,
    /// Current grants, in grant order.
    pub holders: Vec<Holder>,
    /// Waiter ids in commit order of their enqueue.
    pub queue: VecDeque<String>,
}

/// One grant of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub lease_id: u64,
    /// Index of the entry that made the grant: the fencing token.
    pub token: u64,
    /// Term of that entry.
    pub term: u64,
    /// `sm_time_ms` at the grant.
    pub since_ms: u64,
    pub mode: LockMode,
}

/// A queued acquire of one or several locks (all granted together).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub lease_id: u64,
    /// Sorted, distinct lock names.
    pub names: Vec<String>,
    pub mode: LockMode,
    /// `sm_time_ms` at the enqueue.
    pub since_ms: u64,
    /// Index of the entry that enqueued it.
    pub enqueued_index: u64,
}

/// The stored first outcome of a request made with a `request_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// SHA-256 of the encoded command, to tell a retry from a different request.
    pub command_sha256: [u8; 32],
    pub response: Response,
    /// Set while the record is pinned by a live lease (see `Lease::request_ids`).
    pub lease_id: Option<u64>,
    /// Set once the record is on the expiry window instead.
    pub expires_ms: Option<u64>,
}

impl State {
    /// Records the state holds, all kinds together: what a snapshot's cost is proportional
    /// to. O(1).
    pub fn records_count(&self) -> u64 {
        let n = self.keys.len()
            + self.leases.len()
            + self.locks.len()
            + self.tickets.len()
            + self.counters.len()
            + self.requests.len()
            + self.events.len()
            + self.auth.lease_owners.len()
            + self.auth.key_owners.len()
            + self.campaigns.len();
        n as u64
    }

    /// True while the lease exists and is not due at the current `sm_time`.
    pub fn lease_is_live(&self, lease_id: u64) -> bool {
        self.leases
            .get(&lease_id)
            .is_some_and(|l| self.sm_time_ms < l.deadline_ms)
    }

    /// Leases due at `now_ms`, oldest deadline first, at most `limit`.
    pub fn leases_due_at(&self, now_ms: u64, limit: usize) -> Vec<u64> {
        self.lease_deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit)
            .map(|(_, id)| *id)
            .collect()
    }

    /// True if the state has anything whose fate depends on time moving (leases, or
    /// request records on the expiry window). When false, the leader need not tick.
    pub fn needs_time(&self) -> bool {
        !self.leases.is_empty() || !self.request_expiries.is_empty()
    }
}
