//! What a log entry carries. `Envelope` wraps every command with the leader's `sm_time` stamp
//! and the client's optional `request_id`.
//!
//! Compatibility rule: logs and snapshots written by older binaries must keep decoding, so
//! `Command`, `Condition` and `Fence` (and the transaction types in `crate::txn`) are
//! append-only. New variants go at the end; a variant's
//! fields never change (add a new variant instead). `tests/golden/` pins today's encodings.

use serde::{Deserialize, Serialize};

/// One application entry of the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The proposing leader's time: `sm_time` at its election plus monotonic time elapsed
    /// since. `apply` moves `sm_time` to `max(sm_time, now_ms)`; it never goes backwards.
    pub now_ms: u64,
    /// Client-chosen id that makes a mutating request idempotent (see `State::apply`).
    pub request_id: Option<String>,
    pub command: Command,
}

/// A state machine command. Append-only: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Moves `sm_time` forward when the cluster is otherwise idle; expires due leases.
    Tick,
    /// Sets the replicated `cluster_id` if none is set yet; later ones are no-ops.
    InitCluster {
        cluster_id: String,
    },
    /// Grants a lease; its id is this entry's index.
    LeaseGrant {
        ttl_ms: u64,
    },
    /// Renews each named lease that is still live at apply time.
    LeaseKeepalive {
        lease_ids: Vec<u64>,
    },
    /// Ends a lease now: releases its locks and deletes its keys.
    LeaseRevoke {
        lease_id: u64,
    },
    /// Proposed by the leader when it believes leases are due. Applies only to those still
    /// due at apply time: a renewal committed in between wins.
    Expire {
        lease_ids: Vec<u64>,
    },
    /// Try-acquires an exclusive lock for a lease.
    LockAcquire {
        name: String,
        lease_id: u64,
    },
    /// Releases one acquisition, named by its token and lease.
    LockRelease {
        name: String,
        lease_id: u64,
        token: u64,
    },
    /// Writes a key, optionally bound to a lease, guarded by a condition and/or a fence.
    KvPut {
        key: String,
        value: String,
        lease_id: Option<u64>,
        condition: Option<Condition>,
        fence: Option<Fence>,
    },
    /// Deletes a key, guarded by a condition and/or a fence.
    KvDelete {
        key: String,
        condition: Option<Condition>,
        fence: Option<Fence>,
    },
    /// Adds `by` to a counter (created at 0).
    CounterIncr {
        name: String,
        by: i64,
    },
    /// Acquires one lock, or several atomically (all or nothing, one entry), in `mode`. With
    /// `wait`, a request that cannot be granted now is queued FIFO under the envelope's
    /// `request_id` (its waiter id) and answered later by the entry that grants it.
    Acquire {
        names: Vec<String>,
        lease_id: u64,
        mode: LockMode,
        /// Semaphore size; fixed by the first acquire of an idle lock (1 unless given).
        permits: Option<u32>,
        wait: bool,
    },
    /// Withdraws a waiter (timeout, client cancel, dropped connection). Dequeues it, or, if
    /// its grant won the race, releases that grant.
    Cancel {
        waiter_id: String,
    },
    /// Fails a waiter chosen as a deadlock victim, only if it is still deadlocked at apply.
    AbortWaiter {
        waiter_id: String,
        cycle: Vec<u64>,
    },
    /// Clients have seen the answers to these requests and will not retry them: their
    /// records go now instead of at the end of the retry window. Ids without a record are
    /// ignored. Proposed by nodes in batches of what clients acknowledged.
    Ack {
        request_ids: Vec<String>,
    },
    /// `Acquire` that also names how long the caller waits (`wait_ms`; 0 = try once). The
    /// state machine acts exactly as for `Acquire { wait: wait_ms > 0 }`; carrying `wait_ms`
    /// makes it part of the request's identity, so a request that reuses a queued acquire's
    /// `request_id` with another `wait_ms` is refused as `request_id_reused` instead of
    /// re-attaching to (and, on its own earlier timeout, cancelling) someone else's wait.
    AcquireFor {
        names: Vec<String>,
        lease_id: u64,
        mode: LockMode,
        permits: Option<u32>,
        wait_ms: u64,
    },
    /// A client command made by an authenticated principal (with the bearer token it used,
    /// if any). `apply` judges it against the auth state at apply time (`crate::auth`): a
    /// token deleted or a permission revoked before this entry commits is not honoured.
    As {
        principal: String,
        token_id: Option<String>,
        command: Box<Command>,
    },
    /// Creates or replaces a role (root only).
    AuthPutRole {
        role: String,
        permissions: Vec<crate::auth::Permission>,
        metrics: bool,
    },
    /// Deletes a role; users naming it lose what it granted.
    AuthDeleteRole {
        role: String,
    },
    /// Creates or replaces a user (root only).
    AuthPutUser {
        user: String,
        roles: Vec<String>,
        quotas: crate::auth::Quotas,
    },
    /// Deletes a user and every token of it. Its leases live on until they end.
    AuthDeleteUser {
        user: String,
    },
    /// Stores a token's id and the SHA-256 of its secret (the secret itself is made by the
    /// node and shown to the caller once; it never enters the log).
    AuthCreateToken {
        token_id: String,
        user: String,
        secret_sha256: [u8; 32],
        ttl_ms: Option<u64>,
    },
    AuthDeleteToken {
        token_id: String,
    },
    /// Campaigns in election `name` (`crate::elections`): an exclusive acquire of the lock
    /// `name` that also publishes `value` while it leads. Queued FIFO like `AcquireFor`
    /// (under the envelope's `request_id` as waiter id when `wait_ms > 0`); the entry that
    /// makes it leader gives it that entry's index as its token.
    Campaign {
        name: String,
        lease_id: u64,
        value: String,
        wait_ms: u64,
    },
    /// The leader `{lease_id, token}` of election `name` publishes a new value.
    Proclaim {
        name: String,
        lease_id: u64,
        token: u64,
        value: String,
    },
    /// The leader `{lease_id, token}` of election `name` steps down; the next campaigner in
    /// FIFO order leads from this entry.
    Resign {
        name: String,
        lease_id: u64,
        token: u64,
    },
    /// A transaction (`crate::txn`): every compare is judged against the state at apply,
    /// then `success` (all compares hold) or `failure` runs, all of its ops or none.
    Txn {
        compares: Vec<crate::txn::Compare>,
        success: Vec<crate::txn::TxnOp>,
        failure: Vec<crate::txn::TxnOp>,
    },
    /// `change` (a role or user put or delete, or a user's roles) only if the auth state is still at
    /// `auth_revision`, the revision the change was computed from: the etcd port's
    /// read-modify-write of a role's permissions or a user's roles (grant one, revoke one)
    /// loses no concurrent change (root only; `CompareFailed` on `auth_revision` otherwise).
    AuthChangeIf {
        auth_revision: u64,
        change: Box<Command>,
    },
    /// Replaces an existing user's roles, keeping its quotas (root only): etcd's
    /// `UserGrantRole` and `UserRevokeRole`, inside an `AuthChangeIf`.
    AuthSetUserRoles {
        user: String,
        roles: Vec<String>,
    },
    /// Several lock commands in one entry, applied in order, each with its own request id and
    /// its own response (`Outcome::Many`): the leader's group proposal of concurrent acquires
    /// and releases. Only commands that `crate::many` admits, no two naming the same lock, so
    /// one entry never grants an exclusive lock twice and a token stays the index of the entry
    /// that granted it (`crate::many` has the rule and why it suffices). The envelope's own
    /// `request_id` is not used: each item carries its own.
    Many {
        items: Vec<Item>,
    },
    /// Several key writes in one entry (`KvPut` and `KvDelete` of distinct keys, each possibly
    /// inside `As`), applied in order as if alone, answered like `Many` (`Outcome::Many`), all
    /// at the entry's index as their `revision`: the leader's group proposal of concurrent
    /// writes of the HTTP API. A variant of its own, not more kinds in `Many`: a node that
    /// does not know it stops at the entry instead of applying it differently. The etcd port
    /// never proposes a plain `KvPut` (its puts are transactions), so each of its writes keeps
    /// a revision of its own, as etcd's recipes expect.
    KeyWrites {
        items: Vec<Item>,
    },
}

/// One command of a `Command::Many` or `Command::KeyWrites` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// As `Envelope::request_id`, for this command alone.
    pub request_id: Option<String>,
    pub command: Command,
}

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LockMode {
    /// Excludes every other holder (on a semaphore: takes one permit).
    Exclusive,
    /// Shares the lock with other shared holders, excludes exclusive ones.
    Shared,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }
}

/// A compare for conditional key writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// The key must not exist.
    Absent,
    /// The key must exist with this `mod_revision`.
    ModRevision(u64),
    /// The key must exist with this value.
    Value(String),
}

/// A fencing guard: the write applies only while `token` is the lock's current exclusive grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub lock: String,
    pub token: u64,
}

impl Command {
    /// The command itself, without an `As` wrapper.
    pub fn inner(&self) -> &Command {
        match self {
            Command::As { command, .. } => command,
            other => other,
        }
    }

    /// The lease a request-id record of this command should live as long as, if any.
    pub fn concerned_lease(&self) -> Option<u64> {
        match self {
            Command::LeaseRevoke { lease_id }
            | Command::LockAcquire { lease_id, .. }
            | Command::Acquire { lease_id, .. }
            | Command::AcquireFor { lease_id, .. }
            | Command::LockRelease { lease_id, .. }
            | Command::Campaign { lease_id, .. }
            | Command::Proclaim { lease_id, .. }
            | Command::Resign { lease_id, .. } => Some(*lease_id),
            Command::KvPut { lease_id, .. } => *lease_id,
            Command::As { command, .. } => command.concerned_lease(),
            _ => None,
        }
    }

    /// Short stable name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Tick => "tick",
            Command::InitCluster { .. } => "init_cluster",
            Command::LeaseGrant { .. } => "lease_grant",
            Command::LeaseKeepalive { .. } => "lease_keepalive",
            Command::LeaseRevoke { .. } => "lease_revoke",
            Command::Expire { .. } => "expire",
            Command::LockAcquire { .. } => "lock_acquire",
            Command::LockRelease { .. } => "lock_release",
            Command::KvPut { .. } => "kv_put",
            Command::KvDelete { .. } => "kv_delete",
            Command::CounterIncr { .. } => "counter_incr",
            Command::Acquire { .. } | Command::AcquireFor { .. } => "acquire",
            Command::Ack { .. } => "ack",
            Command::Cancel { .. } => "cancel",
            Command::AbortWaiter { .. } => "abort_waiter",
            Command::As { command, .. } => command.kind(),
            Command::AuthPutRole { .. } => "auth_put_role",
            Command::AuthDeleteRole { .. } => "auth_delete_role",
            Command::AuthPutUser { .. } => "auth_put_user",
            Command::AuthDeleteUser { .. } => "auth_delete_user",
            Command::AuthChangeIf { .. } => "auth_change_if",
            Command::AuthSetUserRoles { .. } => "auth_set_user_roles",
            Command::AuthCreateToken { .. } => "auth_create_token",
            Command::AuthDeleteToken { .. } => "auth_delete_token",
            Command::Campaign { .. } => "campaign",
            Command::Proclaim { .. } => "proclaim",
            Command::Resign { .. } => "resign",
            Command::Txn { .. } => "txn",
            Command::Many { .. } => "many",
            Command::KeyWrites { .. } => "key_writes",
        }
    }
}

impl std::fmt::Display for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}ms", self.command.kind(), self.now_ms)
    }
}
