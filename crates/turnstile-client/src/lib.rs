//! Rust client for Turnstile: leases, locks with fencing tokens, keys, counters, watches, and
//! sessions that keep a lease alive and say when it can no longer be trusted.
//!
//! Module map:
//! - [`Client`] (`client.rs`): the typed HTTP API; any node answers, the client prefers the
//!   node that last answered and moves on when one fails (`endpoints.rs`).
//! - [`Prepared`] (`request.rs`): one request with its `request_id`, and the retry loop that
//!   resends it (same id) on `no_quorum`, `indeterminate` and transport errors until a
//!   deadline. The server applies it at most once.
//! - [`Error`] (`error.rs`): one variant per server code; [`Error::Indeterminate`] is the
//!   outcome-unknown answer, never folded into a failure.
//! - `acks.rs`: answered request ids, acknowledged on the next requests so the server can
//!   forget their records at once.
//! - `admin.rs`: operator calls on [`Client`]: membership, snapshots, backups.
//! - `auth.rs`: root's calls on [`Client`]: roles, users, tokens, and `whoami` for anyone.
//! - `ranges.rs`: pages of keys, locks and leases ([`Page`]) and walkers over them;
//!   `txn.rs`: transactions ([`TxnRequest`], [`TxnResponse`]).
//! - [`Security`] (`security.rs`): the CA bundle to trust (TLS), the client certificate, and
//!   the bearer token, all checked when the client is built.
//! - [`Watch`] (`watch.rs`, `sse.rs`): a server-sent-events stream that resumes by itself with
//!   `Last-Event-ID`.
//! - [`Session`] (`session.rs`, `keepalive.rs`), [`Lost`] (`lost.rs`) and [`LockGuard`]
//!   (`guard.rs`): a lease kept alive at TTL/3, a local deadline measured from the send time
//!   of the last confirmed keepalive, and holds that carry their fencing token.
//! - `recipes/`: [`StripedLock`] (N locks for an unbounded key space), [`Barrier`], and
//!   [`ManyGuard`] (`Session::lock_many`: several locks granted by one entry, held as one).
//! - [`Election`] (`election.rs`) and [`Leadership`] (`leadership.rs`): campaign in FIFO order
//!   under a session, publish a value, resign; the leadership's token fences writes, and its
//!   [`Lost`] also fires when the watch shows the leadership ended.
//!
//! ```no_run
//! # async fn demo() -> Result<(), turnstile_client::Error> {
//! use std::time::Duration;
//! use turnstile_client::{Client, LockOptions, PutOptions};
//!
//! let client = Client::new(vec!["127.0.0.1:7001".into(), "127.0.0.1:7002".into()])?;
//! let session = client.session(Duration::from_secs(10)).await?;
//! let guard = session
//!     .lock("report", LockOptions { wait: Duration::from_secs(30), ..Default::default() })
//!     .await?;
//! // Writes through the fence are refused once this hold has been superseded.
//! let fenced = PutOptions { fence: Some(guard.fence()), ..Default::default() };
//! client.put("report/latest", "v1", fenced).await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod acks;
mod admin;
mod auth;
mod client;
mod election;
mod endpoints;
mod error;
mod guard;
mod keepalive;
mod leadership;
mod lost;
mod ranges;
mod recipes;
mod request;
mod security;
mod session;
mod sse;
mod txn;
mod types;
mod watch;

pub use acks::{PendingAcks, ACKS_PER_REQUEST_MAX, ACK_HEADER, PENDING_ACKS_MAX};
pub use admin::{Members, SnapshotTaken};
pub use auth::{
    Access, NamedRole, NamedUser, Permission, PermissionKind, Quotas, Role, TokenCreated, User,
    WhoAmI,
};
pub use client::{
    Client, ClientConfig, CONNECT_TIMEOUT_MS_DEFAULT, REQUEST_TIMEOUT_MS_DEFAULT,
    RETRY_BUDGET_MS_DEFAULT,
};
pub use election::{Campaigned, Election, ElectionInfo, ElectionLeader};
pub use error::Error;
pub use guard::LockGuard;
pub use keepalive::{local_deadline, safety_margin, SAFETY_MARGIN_MS_MIN};
pub use leadership::Leadership;
pub use lost::{Lost, LostReason};
pub use ranges::{LeaseItem, ListOptions, Listing, Page};
pub use recipes::{stripe_of, Barrier, ManyGuard, StripedLock, STRIPES_MAX};
pub use request::{new_request_id, Prepared};
pub use security::{Security, PEM_BYTES_MAX};
pub use session::{Session, SessionOptions, SESSION_TTL_MS_DEFAULT};
pub use txn::{Compare, TxnOp, TxnRequest, TxnResponse, TxnResult};
pub use types::{
    AcquireOptions, ClusterInfo, Condition, CounterValue, DeleteOptions, Deleted, Fence,
    FenceCheck, Grant, Holder, Keepalive, KeyValue, LeaseGrant, LeaseInfo, LockInfo, LockOptions,
    Member, Mode, MultiGrant, PutOptions, Waiter, Written,
};
pub use watch::{EventKind, Watch, WatchEvent, WatchOptions, WATCH_IDLE_MS_DEFAULT};
