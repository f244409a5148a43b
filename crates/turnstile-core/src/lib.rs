//! Turnstile's pure, deterministic lock state machine.
//!
//! Module map:
//! - [`limits`]: every bound the state machine and the API enforce, units in the names.
//! - [`command`]: what a log entry carries ([`Envelope`], [`Command`]); append-only enum.
//! - [`response`]: what applying an entry returns ([`Response`], [`Outcome`], [`ApplyError`]).
//! - [`state`]: the replicated records (keys, leases, locks, counters, request records).
//! - [`apply`]: `State::apply`, the only way state changes; `locks` is its lock engine
//!   (modes, semaphores, queues, multi-lock), [`deadlock`] the wait-for graph, [`events`]
//!   the replicated watch history; `records` keeps request-id records bounded (pinned while
//!   a hold or wait lives, then a retry window, or gone at once when acknowledged).
//! - [`elections`]: an election is a lock whose holder publishes a value; campaign,
//!   proclaim, resign, and the leader read.
//! - [`many`]: several lock commands in one entry, and the rule that keeps tokens exact.
//! - [`txn`]: transactions: compares judged together, then one branch applied whole.
//! - [`auth`]: users, roles, tokens, ownership and quotas, judged in `apply` for `Command::As`.
//! - [`invariants`]: cross-record checks, run after every apply in tests.
//! - [`cow`]: the state's copy-on-write maps and sets (O(1) clone for snapshots and digests).
//! - [`codec`]: versioned bincode encodings of entries and state, and the state digest.
//!
//! No I/O, clock, randomness or async here: time arrives inside entries (`Envelope::now_ms`),
//! and every collection is ordered, so two replicas applying the same log end byte-identical.

pub mod apply;
pub mod auth;
mod auth_apply;
#[cfg(feature = "bug-injection")]
pub mod bugs;
pub mod codec;
pub mod command;
pub mod cow;
pub mod deadlock;
pub mod elections;
pub mod events;
pub mod invariants;
pub mod key_changes;
pub mod key_span;
pub mod limits;
mod locks;
pub mod many;
mod records;
pub mod response;
pub mod state;
pub mod txn;

pub use apply::Applied;
pub use command::{Command, Condition, Envelope, Fence, Item, LockMode};
pub use deadlock::{Victim, VictimPolicy};
pub use events::{Event, ReleaseCause};
pub use response::{ApplyError, KeepaliveResult, Notice, Outcome, Response};
pub use state::{Holder, KeyRecord, Lease, Lock, RequestRecord, State, Ticket};
