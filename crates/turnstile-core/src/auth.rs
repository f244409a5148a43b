//! Who may touch what: users, roles, tokens, lease and key ownership and per-principal
//! quotas, replicated with everything else (DESIGN.md, "Security and tenancy").
//!
//! A node that authenticated a caller wraps the caller's command in `Command::As`; `apply`
//! judges it here against the auth state *at apply time*, so a permission or token revoked
//! before the entry commits cannot be used by it, and every replica decides the same way.
//! Commands without `As` come from nodes themselves (ticks, expiry, acks, deadlock aborts) or
//! from a cluster running without TLS, where there is no authentication at all.
//!
//! Ownership: a lease belongs to the principal whose `As` granted it; only that principal (or
//! root) may use it. Using someone else's lease answers exactly as a lease that does not exist
//! (`lease_not_found`), so lease ids, which are log indexes and easy to guess, tell a tenant
//! nothing. Keys are counted against the principal that created them.
//!
//! Request ids of authenticated callers are scoped by the node (`scoped_request_id`), so two
//! tenants choosing the same id never share a record, and a record counts against the quota of
//! the principal its id names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::events::Event;
use crate::response::ApplyError;
use crate::state::State;

/// The superuser: its client certificate (CN `root`) may do everything, including managing
/// users, roles and tokens. It has no quotas (the cluster-wide caps still apply).
pub const ROOT: &str = "root";
/// Longest user or role name, in bytes.
pub const PRINCIPAL_BYTES_MAX: usize = 64;
/// Most roles in the cluster.
pub const ROLES_MAX: usize = 1_000;
/// Most users in the cluster.
pub const USERS_MAX: usize = 10_000;
/// Most tokens in the cluster.
pub const TOKENS_MAX: usize = 100_000;
/// Most permissions in one role.
pub const PERMISSIONS_PER_ROLE_MAX: usize = 64;
/// Most roles of one user.
pub const ROLES_PER_USER_MAX: usize = 16;
/// Longest permission prefix, in bytes (a key is at most `KEY_BYTES_MAX`).
pub const PREFIX_BYTES_MAX: usize = crate::limits::KEY_BYTES_MAX;
/// Length of a token id, in hex characters.
pub const TOKEN_ID_HEX_LEN: usize = 16;

/// Quotas a user gets where its record sets none. Each is far below the cluster-wide cap of
/// the same thing (`limits`), so no single principal can reach a cap that refuses everyone.
pub const QUOTA_LEASES_DEFAULT: u64 = 1_000;
/// Held plus waiting lock acquisitions, over all of the principal's leases.
pub const QUOTA_LOCKS_DEFAULT: u64 = 10_000;
pub const QUOTA_KEYS_DEFAULT: u64 = 10_000;
pub const QUOTA_REQUEST_RECORDS_DEFAULT: u64 = 100_000;
/// Watch streams open at once, per node.
pub const QUOTA_WATCHES_DEFAULT: u64 = 64;
/// Requests waiting for a lock at once, per node.
pub const QUOTA_WAITING_DEFAULT: u64 = 1_000;

/// What a permission covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Lock,
    Key,
    Counter,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Key => "key",
            Kind::Counter => "counter",
        }
    }

    /// The kind [`Kind::as_str`] names, if `s` names one.
    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Lock, Kind::Key, Kind::Counter]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// `Write` implies `Read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }

    /// The access [`Access::as_str`] names, if `s` names one.
    pub fn parse(s: &str) -> Option<Access> {
        [Access::Read, Access::Write]
            .into_iter()
            .find(|a| a.as_str() == s)
    }
}

/// One grant of a role: `access` to every `kind` name starting with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    pub kind: Kind,
    pub prefix: String,
    pub access: Access,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    pub permissions: Vec<Permission>,
    /// May read `/metrics`.
    pub metrics: bool,
}

/// Per-principal limits; `None` takes the default (`QUOTA_*_DEFAULT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    pub leases: Option<u64>,
    pub locks: Option<u64>,
    pub keys: Option<u64>,
    pub request_records: Option<u64>,
    pub watches: Option<u64>,
    pub waiting: Option<u64>,
}

impl Quotas {
    pub fn leases(&self) -> u64 {
        self.leases.unwrap_or(QUOTA_LEASES_DEFAULT)
    }
    pub fn locks(&self) -> u64 {
        self.locks.unwrap_or(QUOTA_LOCKS_DEFAULT)
    }
    pub fn keys(&self) -> u64 {
        self.keys.unwrap_or(QUOTA_KEYS_DEFAULT)
    }
    pub fn request_records(&self) -> u64 {
        self.request_records
            .unwrap_or(QUOTA_REQUEST_RECORDS_DEFAULT)
    }
    pub fn watches(&self) -> u64 {
        self.watches.unwrap_or(QUOTA_WATCHES_DEFAULT)
    }
    pub fn waiting(&self) -> u64 {
        self.waiting.unwrap_or(QUOTA_WAITING_DEFAULT)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub roles: Vec<String>,
    pub quotas: Quotas,
}

/// A bearer token. Only the SHA-256 of its secret is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub user: String,
    pub secret_sha256: [u8; 32],
    /// Cluster time after which the token is refused; `None`: until deleted.
    pub expires_ms: Option<u64>,
}

/// What a principal holds, counted against its quotas. Derived, never encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub keys: u64,
    pub request_records: u64,
}

/// The replicated auth state. Encoded beside `State` in the state frame (version 2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    /// Index of the last entry that changed users, roles or tokens.
    pub revision: u64,
    pub roles: BTreeMap<String, Role>,
    pub users: BTreeMap<String, User>,
    /// By token id.
    pub tokens: BTreeMap<String, Token>,
    /// The principal that granted each live lease (only leases granted under `As`).
    pub lease_owners: crate::cow::Map<u64, String>,
    /// The principal that created each live key (only keys created under `As`).
    pub key_owners: crate::cow::Map<String, String>,
    /// Derived from `lease_owners`: each principal's live leases.
    #[serde(skip)]
    pub leases_by_owner: BTreeMap<String, crate::cow::Set<u64>>,
    /// Derived from `key_owners` and the request records' scoped ids.
    #[serde(skip)]
    pub usage: BTreeMap<String, Usage>,
}

/// The request id under which an authenticated caller's `request_id` is recorded: prefixed by
/// its principal and a space, which no client id contains (client ids are printable ASCII
/// without spaces), so tenants never collide.
pub fn scoped_request_id(principal: &str, request_id: &str) -> String {
    format!("{principal} {request_id}")
}

/// The principal a scoped request id belongs to, if it is scoped.
pub fn request_id_principal(id: &str) -> Option<&str> {
    id.split_once(' ').map(|(p, _)| p)
}

/// The client's own part of a request id (what it sent).
pub fn unscoped_request_id(id: &str) -> &str {
    id.split_once(' ').map_or(id, |(_, rid)| rid)
}

/// True for names that are node identities (`node-<digits>`), never users.
pub fn is_node_name(name: &str) -> bool {
    name.strip_prefix("node-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a user or role name: 1..=64 bytes of `[A-Za-z0-9._@-]`, not a node name.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > PRINCIPAL_BYTES_MAX {
        return Err(format!("{what} must be 1..={PRINCIPAL_BYTES_MAX} bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
    {
        return Err(format!(
            "{what} may contain only letters, digits and . _ @ -"
        ));
    }
    if is_node_name(name) {
        return Err(format!("{what} {name}: node-<N> names are node identities"));
    }
    Ok(())
}

fn denied(reason: String) -> ApplyError {
    ApplyError::PermissionDenied { reason }
}

pub(crate) fn over(quota: &str, limit: u64) -> ApplyError {
    ApplyError::QuotaExceeded {
        quota: quota.to_string(),
        limit,
    }
}

impl AuthState {
    /// The user record of `principal`; a certificate principal without one has no roles and
    /// the default quotas.
    pub fn user(&self, principal: &str) -> User {
        self.users.get(principal).cloned().unwrap_or_default()
    }

    pub fn quotas(&self, principal: &str) -> Quotas {
        self.users
            .get(principal)
            .map(|u| u.quotas)
            .unwrap_or_default()
    }

    /// True if `principal` may `access` the `kind` named `name`.
    pub fn allowed(&self, principal: &str, kind: Kind, name: &str, access: Access) -> bool {
        if principal == ROOT {
            return true;
        }
        let Some(user) = self.users.get(principal) else {
            return false;
        };
        user.roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flat_map(|r| &r.permissions)
            .any(|p| {
                p.kind == kind
                    && name.starts_with(p.prefix.as_str())
                    && (p.access == Access::Write || access == Access::Read)
            })
    }

    /// `allowed`, or a `permission_denied` naming what is missing.
    pub fn require(
        &self,
        principal: &str,
        kind: Kind,
        name: &str,
        access: Access,
    ) -> Result<(), ApplyError> {
        if self.allowed(principal, kind, name, access) {
            return Ok(());
        }
        Err(denied(format!(
            "{principal} lacks {} access to {} {name}",
            access.as_str(),
            kind.as_str()
        )))
    }

    /// True if `principal` may read `/metrics`.
    pub fn may_read_metrics(&self, principal: &str) -> bool {
        principal == ROOT
            || self.users.get(principal).is_some_and(|u| {
                u.roles
                    .iter()
                    .filter_map(|r| self.roles.get(r))
                    .any(|r| r.metrics)
            })
    }

    /// True if the lease is `principal`'s to use. Root may use every lease; a lease granted
    /// without authentication (before TLS was turned on) belongs to root alone.
    pub fn owns_lease(&self, principal: &str, lease_id: u64) -> bool {
        principal == ROOT || self.lease_owners.get(&lease_id).map(String::as_str) == Some(principal)
    }

    /// The user a bearer token authenticates, if `token_id` names a token whose secret hashes
    /// to `secret_sha256` and that has not expired at `now_ms`. Constant-time comparison.
    pub fn token_user(
        &self,
        token_id: &str,
        secret_sha256: &[u8; 32],
        now_ms: u64,
    ) -> Option<&str> {
        let token = self.tokens.get(token_id)?;
        let same = token
            .secret_sha256
            .iter()
            .zip(secret_sha256)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
        let live = token.expires_ms.is_none_or(|t| now_ms < t);
        (same && live).then_some(token.user.as_str())
    }

    /// Number of leases `principal` holds.
    pub fn leases_of(&self, principal: &str) -> u64 {
        self.leases_by_owner
            .get(principal)
            .map_or(0, |s| s.len() as u64)
    }

    pub fn usage_of(&self, principal: &str) -> Usage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    pub(crate) fn own_lease(&mut self, principal: &str, lease_id: u64) {
        self.lease_owners.insert(lease_id, principal.to_string());
        self.leases_by_owner
            .entry(principal.to_string())
            .or_default()
            .insert(lease_id);
    }

    pub(crate) fn forget_lease(&mut self, lease_id: u64) {
        let Some(owner) = self.lease_owners.remove(&lease_id) else {
            return;
        };
        if let Some(set) = self.leases_by_owner.get_mut(&owner) {
            set.remove(&lease_id);
            if set.is_empty() {
                self.leases_by_owner.remove(&owner);
            }
        }
    }

    pub(crate) fn own_key(&mut self, principal: &str, key: &str) {
        if self.key_owners.contains_key(key) {
            return;
        }
        self.key_owners
            .insert(key.to_string(), principal.to_string());
        self.usage.entry(principal.to_string()).or_default().keys += 1;
    }

    pub(crate) fn forget_key(&mut self, key: &str) {
        let Some(owner) = self.key_owners.remove(key) else {
            return;
        };
        self.change_usage(&owner, |u| u.keys = u.keys.saturating_sub(1));
    }

    pub(crate) fn record_added(&mut self, request_id: &str) {
        if let Some(p) = request_id_principal(request_id) {
            self.usage.entry(p.to_string()).or_default().request_records += 1;
        }
    }

    pub(crate) fn record_removed(&mut self, request_id: &str) {
        if let Some(p) = request_id_principal(request_id) {
            let p = p.to_string();
            self.change_usage(&p, |u| {
                u.request_records = u.request_records.saturating_sub(1)
            });
        }
    }

    fn change_usage(&mut self, principal: &str, f: impl FnOnce(&mut Usage)) {
        if let Some(u) = self.usage.get_mut(principal) {
            f(u);
            if *u == Usage::default() {
                self.usage.remove(principal);
            }
        }
    }
}

impl State {
    /// Recomputes the auth indexes that are not encoded.
    pub(crate) fn rebuild_auth_derived(&mut self) {
        let (leases_by_owner, usage) = self.derived_auth();
        self.auth.leases_by_owner = leases_by_owner;
        self.auth.usage = usage;
    }

    /// The derived auth indexes as the encoded records say they must be.
    pub(crate) fn derived_auth(
        &self,
    ) -> (
        BTreeMap<String, crate::cow::Set<u64>>,
        BTreeMap<String, Usage>,
    ) {
        let mut leases_by_owner: BTreeMap<String, crate::cow::Set<u64>> = BTreeMap::new();
        let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
        for (lease_id, owner) in &self.auth.lease_owners {
            leases_by_owner
                .entry(owner.clone())
                .or_default()
                .insert(*lease_id);
        }
        for owner in self.auth.key_owners.values() {
            usage.entry(owner.clone()).or_default().keys += 1;
        }
        for id in self.requests.keys() {
            if let Some(p) = request_id_principal(id) {
                usage.entry(p.to_string()).or_default().request_records += 1;
            }
        }
        (leases_by_owner, usage)
    }

    /// Held and waiting acquisitions over all of `principal`'s leases.
    pub fn locks_of(&self, principal: &str) -> u64 {
        self.auth
            .leases_by_owner
            .get(principal)
            .into_iter()
            .flatten()
            .filter_map(|id| self.leases.get(id))
            .map(|l| (l.locks.len() + l.tickets.len()) as u64)
            .sum()
    }

    /// Judges `cmd` for `principal` before it runs: permissions, ownership and quotas.
    /// Root passes everything but still owns what it creates.
    pub(crate) fn authorize(&self, principal: &str, cmd: &Command) -> Result<(), ApplyError> {
        let auth = &self.auth;
        let is_root = principal == ROOT;
        let quotas = auth.quotas(principal);
        let own = |lease_id: u64| {
            if auth.owns_lease(principal, lease_id) {
                Ok(())
            } else {
                Err(ApplyError::LeaseNotFound { lease_id })
            }
        };
        match cmd {
            Command::AuthPutRole { .. }
            | Command::AuthDeleteRole { .. }
            | Command::AuthPutUser { .. }
            | Command::AuthDeleteUser { .. }
            | Command::AuthCreateToken { .. }
            | Command::AuthDeleteToken { .. }
            | Command::AuthChangeIf { .. }
            | Command::AuthSetUserRoles { .. } => {
                if is_root {
                    Ok(())
                } else {
                    Err(denied(format!(
                        "{principal} is not root: only root manages auth"
                    )))
                }
            }
            Command::LeaseGrant { .. } => {
                let limit = quotas.leases();
                if !is_root && auth.leases_of(principal) >= limit {
                    return Err(over("leases", limit));
                }
                Ok(())
            }
            Command::LeaseKeepalive { lease_ids } => lease_ids.iter().try_for_each(|&id| own(id)),
            Command::LeaseRevoke { lease_id } => own(*lease_id),
            Command::LockAcquire { name, lease_id } => {
                own(*lease_id)?;
                auth.require(principal, Kind::Lock, name, Access::Write)?;
                self.lock_quota(principal, 1, &quotas)
            }
            Command::Acquire {
                names, lease_id, ..
            }
            | Command::AcquireFor {
                names, lease_id, ..
            } => {
                own(*lease_id)?;
                for name in names {
                    auth.require(principal, Kind::Lock, name, Access::Write)?;
                }
                self.lock_quota(principal, names.len() as u64, &quotas)
            }
            Command::LockRelease { name, lease_id, .. } => {
                own(*lease_id)?;
                auth.require(principal, Kind::Lock, name, Access::Write)
            }
            // An election is the lock of its name: the same permission and quota.
            Command::Campaign { name, lease_id, .. } => {
                own(*lease_id)?;
                auth.require(principal, Kind::Lock, name, Access::Write)?;
                self.lock_quota(principal, 1, &quotas)
            }
            Command::Proclaim { name, lease_id, .. } | Command::Resign { name, lease_id, .. } => {
                own(*lease_id)?;
                auth.require(principal, Kind::Lock, name, Access::Write)
            }
            Command::KvPut {
                key,
                lease_id,
                fence,
                ..
            } => {
                auth.require(principal, Kind::Key, key, Access::Write)?;
                if let Some(id) = lease_id {
                    own(*id)?;
                }
                if let Some(f) = fence {
                    self.authorize_fence(principal, &f.lock, f.token)?;
                }
                let limit = quotas.keys();
                if !is_root
                    && !self.keys.contains_key(key)
                    && auth.usage_of(principal).keys >= limit
                {
                    return Err(over("keys", limit));
                }
                Ok(())
            }
            Command::KvDelete { key, fence, .. } => {
                auth.require(principal, Kind::Key, key, Access::Write)?;
                match fence {
                    Some(f) => self.authorize_fence(principal, &f.lock, f.token),
                    None => Ok(()),
                }
            }
            Command::CounterIncr { name, .. } => {
                auth.require(principal, Kind::Counter, name, Access::Write)
            }
            Command::Txn {
                compares,
                success,
                failure,
            } => self.authorize_txn(principal, compares, success, failure),
            // A node scopes a caller's waiter ids by its principal; a cancel names only those.
            Command::Cancel { waiter_id } => {
                if is_root || request_id_principal(waiter_id) == Some(principal) {
                    Ok(())
                } else {
                    Err(denied(format!("{principal} may cancel only its own waits")))
                }
            }
            Command::Tick
            | Command::InitCluster { .. }
            | Command::Expire { .. }
            | Command::AbortWaiter { .. }
            | Command::Ack { .. }
            | Command::As { .. }
            | Command::Many { .. }
            | Command::KeyWrites { .. } => Err(ApplyError::Invalid {
                reason: format!("{} is not a client command", cmd.kind()),
            }),
        }
    }

    fn lock_quota(&self, principal: &str, adding: u64, quotas: &Quotas) -> Result<(), ApplyError> {
        let limit = quotas.locks();
        if principal != ROOT && self.locks_of(principal).saturating_add(adding) > limit {
            return Err(over("locks", limit));
        }
        Ok(())
    }

    /// A fence is the caller's to use only if it may read the lock and the token, when it is
    /// the current grant, is held by one of the caller's leases: a token learnt from someone
    /// else guards nothing for the caller.
    pub(crate) fn authorize_fence(
        &self,
        principal: &str,
        lock: &str,
        token: u64,
    ) -> Result<(), ApplyError> {
        self.auth
            .require(principal, Kind::Lock, lock, Access::Read)?;
        let holder = self
            .locks
            .get(lock)
            .and_then(|l| l.holders.iter().find(|h| h.token == token));
        match holder {
            Some(h) if !self.auth.owns_lease(principal, h.lease_id) => Err(denied(format!(
                "token {token} of lock {lock} is not held by a lease of {principal}"
            ))),
            _ => Ok(()),
        }
    }

    /// Hides, in a refusal, what the caller may not see: another principal's token.
    pub(crate) fn redact_error(&self, principal: &str, err: ApplyError) -> ApplyError {
        let foreign = |lock: &str, token: u64| {
            self.locks
                .get(lock)
                .and_then(|l| l.holders.iter().find(|h| h.token == token))
                .is_some_and(|h| !self.auth.owns_lease(principal, h.lease_id))
        };
        match err {
            ApplyError::LockHeld { name, holder_token } if foreign(&name, holder_token) => {
                ApplyError::LockHeld {
                    name,
                    holder_token: 0,
                }
            }
            ApplyError::Fenced {
                lock,
                token,
                current_token: Some(t),
            } if foreign(&lock, t) => ApplyError::Fenced {
                lock,
                token,
                current_token: None,
            },
            other => other,
        }
    }

    /// The event as `principal` may see it: `None` if it may not read the key or lock at
    /// all; lease ids and tokens of leases that are not its own removed (set to 0, which is
    /// never a lease id or token: log index 0 holds no entry).
    pub fn event_for(&self, principal: &str, event: &Event) -> Option<Event> {
        if principal == ROOT {
            return Some(event.clone());
        }
        let auth = &self.auth;
        let mine =
            |lease_id: u64| auth.lease_owners.get(&lease_id).map(String::as_str) == Some(principal);
        let lease_seen = |lease_id: u64| if mine(lease_id) { lease_id } else { 0 };
        match event {
            Event::Put {
                key,
                value,
                lease_id,
            } => auth
                .allowed(principal, Kind::Key, key, Access::Read)
                .then(|| Event::Put {
                    key: key.clone(),
                    value: value.clone(),
                    lease_id: lease_id.filter(|id| mine(*id)),
                }),
            Event::Delete { key } => auth
                .allowed(principal, Kind::Key, key, Access::Read)
                .then(|| event.clone()),
            Event::LockGranted {
                name,
                lease_id,
                token,
                mode,
            } => auth
                .allowed(principal, Kind::Lock, name, Access::Read)
                .then(|| Event::LockGranted {
                    name: name.clone(),
                    lease_id: lease_seen(*lease_id),
                    token: if mine(*lease_id) { *token } else { 0 },
                    mode: *mode,
                }),
            Event::LockReleased {
                name,
                lease_id,
                token,
                cause,
            } => auth
                .allowed(principal, Kind::Lock, name, Access::Read)
                .then(|| Event::LockReleased {
                    name: name.clone(),
                    lease_id: lease_seen(*lease_id),
                    token: if mine(*lease_id) { *token } else { 0 },
                    cause: *cause,
                }),
            // The published value is public to readers of the lock; whose lease leads is not.
            Event::ElectionLeader {
                name,
                lease_id,
                token,
                value,
            } => auth
                .allowed(principal, Kind::Lock, name, Access::Read)
                .then(|| Event::ElectionLeader {
                    name: name.clone(),
                    lease_id: lease_seen(*lease_id),
                    token: if mine(*lease_id) { *token } else { 0 },
                    value: value.clone(),
                }),
            Event::ElectionResigned {
                name,
                lease_id,
                token,
                cause,
            } => auth
                .allowed(principal, Kind::Lock, name, Access::Read)
                .then(|| Event::ElectionResigned {
                    name: name.clone(),
                    lease_id: lease_seen(*lease_id),
                    token: if mine(*lease_id) { *token } else { 0 },
                    cause: *cause,
                }),
            // A lease's expiry is news only to its owner. The owner map no longer names an
            // expired lease, so this is decided by the caller with what it knew (the server
            // keeps lease events out of non-root streams).
            Event::LeaseExpired { .. } => None,
        }
    }
}

#[cfg(test)]
#[path = "auth_test.rs"]
mod auth_test;
