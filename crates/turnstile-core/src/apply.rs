//! `State::apply`: the one way state changes.
//!
//! Order of work for every application entry: advance `sm_time`, expire every lease that is
//! now due (so a keepalive, grant or release applied after a deadline fails even before an
//! `Expire` entry commits; the expiry frees locks and hands them to live waiters in this same
//! entry), then the request-id check, then the command itself. Blank and membership entries
//! only advance `applied_index`.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::auth;
use crate::codec;
use crate::command::{Command, Condition, Envelope, Fence, Item, LockMode};
use crate::events::{Event, ReleaseCause};
use crate::limits;
use crate::locks::{AcquireReq, Ctx};
use crate::many;
use crate::response::{ApplyError, KeepaliveResult, Notice, Outcome, Response};
use crate::state::{KeyRecord, Lease, State};

type ApplyResult = Result<Outcome, ApplyError>;

/// Everything applying one entry produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The answer to the entry's own request.
    pub response: Response,
    /// Final answers for queued waiters decided by this entry.
    pub notices: Vec<Notice>,
}

impl State {
    /// Applies a blank or membership entry: only the applied index moves.
    pub fn apply_blank(&mut self, index: u64) {
        self.applied_index = index;
    }

    /// Applies one application entry at `index` of `term`.
    pub fn apply(&mut self, index: u64, term: u64, env: &Envelope) -> Response {
        self.apply_full(index, term, env).response
    }

    /// Applies one application entry and also returns the waiter notices it produced.
    pub fn apply_full(&mut self, index: u64, term: u64, env: &Envelope) -> Applied {
        let mut notices = Vec::new();
        let mut ctx = Ctx {
            index,
            term,
            notices: &mut notices,
        };
        self.applied_index = index;
        self.sm_time_ms = self.sm_time_ms.max(env.now_ms);
        let expired = self.expire_due(&mut ctx);
        self.expire_request_records();
        let response = match &env.command {
            Command::Many { items } => self.apply_many(&mut ctx, many::Kind::Locks, items),
            Command::KeyWrites { items } => self.apply_many(&mut ctx, many::Kind::Keys, items),
            command => self.apply_request(&mut ctx, env.request_id.as_deref(), command, expired),
        };
        Applied { response, notices }
    }

    /// `Command::Many` and `Command::KeyWrites`: each item in order, as if alone, under the
    /// rule of `crate::many`.
    fn apply_many(&mut self, ctx: &mut Ctx<'_>, kind: many::Kind, items: &[Item]) -> Response {
        let mut named = BTreeSet::new();
        let responses = items
            .iter()
            .enumerate()
            .map(|(position, item)| {
                match many::check(kind, position, item, ctx.index, &mut named) {
                    Ok(()) => {
                        self.apply_request(ctx, item.request_id.as_deref(), &item.command, vec![])
                    }
                    Err(refusal) => respond(ctx, Err(refusal)),
                }
            })
            .collect();
        respond(ctx, Ok(Outcome::Many { responses }))
    }

    fn apply_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        request_id: Option<&str>,
        command: &Command,
        expired: Vec<u64>,
    ) -> Response {
        let Some(request_id) = request_id else {
            let outcome = self.run(ctx, command, None, expired, None);
            return respond(ctx, outcome);
        };
        let sha = command_sha256(command);
        if let Some(record) = self.requests.get(request_id) {
            if record.command_sha256 == sha {
                let mut response = record.response.clone();
                response.replayed = true;
                return response;
            }
            return respond(
                ctx,
                Err(ApplyError::RequestIdReused {
                    request_id: request_id.to_string(),
                }),
            );
        }
        if let Some(principal) = auth::request_id_principal(request_id).filter(|p| *p != auth::ROOT)
        {
            let limit = self.auth.quotas(principal).request_records();
            if self.auth.usage_of(principal).request_records >= limit {
                return respond(
                    ctx,
                    Err(ApplyError::QuotaExceeded {
                        quota: "request_records".into(),
                        limit,
                    }),
                );
            }
        }
        if self.requests.len() >= limits::REQUEST_RECORDS_MAX {
            return respond(
                ctx,
                Err(ApplyError::LimitReached {
                    limit: "request_records_max".into(),
                }),
            );
        }
        let outcome = self.run(ctx, command, Some(request_id), expired, None);
        let response = respond(ctx, outcome);
        self.record_request(request_id, sha, command, &response);
        response
    }

    /// Runs `cmd` for `viewer`, the principal of an authenticated command (`None`: auth is
    /// off or not yet judged; a transaction's compares then see every key's lease, and with a
    /// principal they see the leases as its reads do).
    fn run(
        &mut self,
        ctx: &mut Ctx<'_>,
        cmd: &Command,
        request_id: Option<&str>,
        expired: Vec<u64>,
        viewer: Option<&str>,
    ) -> ApplyResult {
        let index = ctx.index;
        match cmd {
            Command::Tick => Ok(Outcome::Applied),
            Command::InitCluster { cluster_id } => Ok(self.init_cluster(cluster_id)),
            Command::LeaseGrant { ttl_ms } => self.lease_grant(index, *ttl_ms),
            Command::LeaseKeepalive { lease_ids } => self.lease_keepalive(lease_ids),
            Command::LeaseRevoke { lease_id } => self.lease_revoke(ctx, *lease_id),
            Command::Expire { .. } => Ok(Outcome::Expired { lease_ids: expired }),
            Command::LockAcquire { name, lease_id } => {
                let names = [name.clone()];
                let req = AcquireReq {
                    names: &names,
                    lease_id: *lease_id,
                    mode: LockMode::Exclusive,
                    permits: None,
                    wait: false,
                    waiter_id: None,
                };
                self.acquire(ctx, req)
            }
            Command::Acquire {
                names,
                lease_id,
                mode,
                permits,
                wait,
            } => {
                let req = AcquireReq {
                    names,
                    lease_id: *lease_id,
                    mode: *mode,
                    permits: *permits,
                    wait: *wait,
                    waiter_id: request_id,
                };
                self.acquire(ctx, req)
            }
            Command::AcquireFor {
                names,
                lease_id,
                mode,
                permits,
                wait_ms,
            } => {
                let req = AcquireReq {
                    names,
                    lease_id: *lease_id,
                    mode: *mode,
                    permits: *permits,
                    wait: *wait_ms > 0,
                    waiter_id: request_id,
                };
                self.acquire(ctx, req)
            }
            Command::LockRelease {
                name,
                lease_id,
                token,
            } => self.lock_release(ctx, name, *lease_id, *token),
            Command::Cancel { waiter_id } => Ok(self.cancel(ctx, waiter_id)),
            Command::AbortWaiter { waiter_id, cycle } => {
                Ok(self.abort_waiter(ctx, waiter_id, cycle))
            }
            Command::KvPut {
                key,
                value,
                lease_id,
                condition,
                fence,
            } => self.kv_put(
                index,
                key,
                value,
                *lease_id,
                condition.as_ref(),
                fence.as_ref(),
            ),
            Command::KvDelete {
                key,
                condition,
                fence,
            } => self.kv_delete(index, key, condition.as_ref(), fence.as_ref()),
            Command::CounterIncr { name, by } => self.counter_incr(name, *by),
            Command::Ack { request_ids } => Ok(self.ack(request_ids)),
            Command::As {
                principal,
                token_id,
                command,
            } => self.run_as(
                ctx,
                principal,
                token_id.as_deref(),
                command,
                request_id,
                expired,
            ),
            Command::Campaign {
                name,
                lease_id,
                value,
                wait_ms,
            } => self.campaign(ctx, name, *lease_id, value, *wait_ms, request_id),
            Command::Proclaim {
                name,
                lease_id,
                token,
                value,
            } => self.proclaim(ctx, name, *lease_id, *token, value),
            Command::Resign {
                name,
                lease_id,
                token,
            } => self.resign(ctx, name, *lease_id, *token),
            Command::Txn {
                compares,
                success,
                failure,
            } => self.txn(index, viewer, compares, success, failure),
            Command::Many { .. } | Command::KeyWrites { .. } => Err(ApplyError::Invalid {
                reason: format!("a {} entry cannot be nested", cmd.kind()),
            }),
            Command::AuthPutRole { .. }
            | Command::AuthDeleteRole { .. }
            | Command::AuthPutUser { .. }
            | Command::AuthDeleteUser { .. }
            | Command::AuthChangeIf { .. }
            | Command::AuthSetUserRoles { .. }
            | Command::AuthCreateToken { .. }
            | Command::AuthDeleteToken { .. } => Err(ApplyError::Invalid {
                reason: "auth changes need an authenticated root".into(),
            }),
        }
    }

    /// `Command::As`: the token must still be valid and the principal allowed (judged now,
    /// at apply); what the command creates is recorded as the principal's; a refusal hides
    /// what the principal may not see.
    fn run_as(
        &mut self,
        ctx: &mut Ctx<'_>,
        principal: &str,
        token_id: Option<&str>,
        cmd: &Command,
        request_id: Option<&str>,
        expired: Vec<u64>,
    ) -> ApplyResult {
        if let Some(id) = token_id {
            let now = self.sm_time_ms;
            let valid = self
                .auth
                .tokens
                .get(id)
                .is_some_and(|t| t.user == principal && t.expires_ms.is_none_or(|e| now < e));
            if !valid {
                return Err(ApplyError::Unauthenticated {
                    reason: format!("token {id} was deleted or has expired"),
                });
            }
        }
        self.authorize(principal, cmd)?;
        if let Some(result) = self.apply_auth_change(ctx.index, cmd) {
            return result;
        }
        let created_key = match cmd {
            Command::KvPut { key, .. } if !self.keys.contains_key(key) => Some(key.as_str()),
            _ => None,
        };
        let result = self.run(ctx, cmd, request_id, expired, Some(principal));
        match (&result, created_key) {
            (Ok(Outcome::LeaseGranted { lease_id, .. }), _) => {
                self.auth.own_lease(principal, *lease_id)
            }
            (Ok(Outcome::KvWritten { .. }), Some(key)) => self.auth.own_key(principal, key),
            _ => {}
        }
        let result = match result {
            Ok(Outcome::Txn { succeeded, results }) => {
                Ok(self.txn_as(principal, cmd, succeeded, results))
            }
            other => other,
        };
        result.map_err(|e| self.redact_error(principal, e))
    }

    fn init_cluster(&mut self, cluster_id: &str) -> Outcome {
        let current = self
            .cluster_id
            .get_or_insert_with(|| cluster_id.to_string());
        Outcome::ClusterId {
            cluster_id: current.clone(),
        }
    }

    fn lease_grant(&mut self, index: u64, ttl_ms: u64) -> ApplyResult {
        if !(limits::TTL_MS_MIN..=limits::TTL_MS_MAX).contains(&ttl_ms) {
            return Err(ApplyError::Invalid {
                reason: format!("ttl_ms {ttl_ms} out of range"),
            });
        }
        if self.leases.len() >= limits::LEASES_MAX {
            return Err(ApplyError::LimitReached {
                limit: "leases_max".into(),
            });
        }
        let deadline_ms = self.sm_time_ms.saturating_add(ttl_ms);
        let lease = Lease {
            ttl_ms,
            deadline_ms,
            locks: Default::default(),
            tickets: Default::default(),
            keys: Default::default(),
            request_ids: Default::default(),
        };
        self.leases.insert(index, lease);
        self.lease_deadlines.insert((deadline_ms, index));
        Ok(Outcome::LeaseGranted {
            lease_id: index,
            ttl_ms,
        })
    }

    fn lease_keepalive(&mut self, lease_ids: &[u64]) -> ApplyResult {
        if lease_ids.len() > limits::KEEPALIVE_LEASES_PER_ENTRY_MAX {
            return Err(ApplyError::Invalid {
                reason: "too many leases in one keepalive".into(),
            });
        }
        let now = self.sm_time_ms;
        let results = lease_ids
            .iter()
            .map(|&lease_id| match self.leases.get_mut(&lease_id) {
                // Due leases were expired on entry to `apply`, so any lease found is live.
                Some(lease) => {
                    self.lease_deadlines.remove(&(lease.deadline_ms, lease_id));
                    lease.deadline_ms = now.saturating_add(lease.ttl_ms);
                    self.lease_deadlines.insert((lease.deadline_ms, lease_id));
                    KeepaliveResult {
                        lease_id,
                        ttl_ms: lease.ttl_ms,
                        remaining_ms: Some(lease.ttl_ms),
                    }
                }
                None => KeepaliveResult {
                    lease_id,
                    ttl_ms: 0,
                    remaining_ms: None,
                },
            })
            .collect();
        Ok(Outcome::LeasesKept { results })
    }

    fn lease_revoke(&mut self, ctx: &mut Ctx<'_>, lease_id: u64) -> ApplyResult {
        if !self.leases.contains_key(&lease_id) {
            return Err(ApplyError::LeaseNotFound { lease_id });
        }
        self.end_lease(ctx, lease_id, ReleaseCause::Revoked);
        Ok(Outcome::LeaseRevoked { lease_id })
    }

    fn lock_release(
        &mut self,
        ctx: &mut Ctx<'_>,
        name: &str,
        lease_id: u64,
        token: u64,
    ) -> ApplyResult {
        if !self.lease_is_live(lease_id) {
            return Err(ApplyError::LeaseNotFound { lease_id });
        }
        if !self.release_hold(ctx, name, lease_id, token, ReleaseCause::Released) {
            return Err(ApplyError::NotHolder {
                name: name.to_string(),
                lease_id,
                token,
            });
        }
        Ok(Outcome::LockReleased {
            name: name.to_string(),
        })
    }

    fn kv_put(
        &mut self,
        index: u64,
        key: &str,
        value: &str,
        lease_id: Option<u64>,
        condition: Option<&Condition>,
        fence: Option<&Fence>,
    ) -> ApplyResult {
        check_len("key", key, limits::KEY_BYTES_MAX)?;
        if value.len() > limits::VALUE_BYTES_MAX {
            let reason = format!("value must be at most {} bytes", limits::VALUE_BYTES_MAX);
            return Err(ApplyError::Invalid { reason });
        }
        if let Some(lease_id) = lease_id.filter(|&id| !self.lease_is_live(id)) {
            return Err(ApplyError::LeaseNotFound { lease_id });
        }
        self.check_guards(key, condition, fence)?;
        if !self.keys.contains_key(key) && self.keys.len() >= limits::KEYS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "keys_max".into(),
            });
        }
        self.write_key(index, key, value, lease_id);
        Ok(Outcome::KvWritten {
            key: key.to_string(),
        })
    }

    /// Stores a key and emits its `put` event. The caller has checked everything (lengths,
    /// lease, guards, `KEYS_MAX`): this cannot fail, so a transaction that checked its branch
    /// first applies it whole.
    pub(crate) fn write_key(&mut self, index: u64, key: &str, value: &str, lease_id: Option<u64>) {
        let previous = self.keys.remove(key);
        if let Some(lease) = previous
            .as_ref()
            .and_then(|p| p.lease_id)
            .and_then(|id| self.leases.get_mut(&id))
        {
            lease.keys.remove(key);
        }
        if let Some(lease) = lease_id.and_then(|id| self.leases.get_mut(&id)) {
            lease.keys.insert(key.to_string());
        }
        let record = KeyRecord {
            value: value.to_string(),
            create_revision: previous.as_ref().map_or(index, |p| p.create_revision),
            mod_revision: index,
            version: previous.as_ref().map_or(1, |p| p.version + 1),
            lease_id,
        };
        self.push_put_event(index, key, &record, previous);
        self.keys.insert(key.to_string(), record.into());
    }

    fn kv_delete(
        &mut self,
        index: u64,
        key: &str,
        condition: Option<&Condition>,
        fence: Option<&Fence>,
    ) -> ApplyResult {
        check_len("key", key, limits::KEY_BYTES_MAX)?;
        self.check_guards(key, condition, fence)?;
        let existed = self.delete_key(index, key);
        Ok(Outcome::KvDeleted {
            key: key.to_string(),
            existed,
        })
    }

    fn counter_incr(&mut self, name: &str, by: i64) -> ApplyResult {
        check_len("counter name", name, limits::COUNTER_NAME_BYTES_MAX)?;
        if by.unsigned_abs() > limits::COUNTER_STEP_ABS_MAX.unsigned_abs() {
            return Err(ApplyError::Invalid {
                reason: "counter step too large".into(),
            });
        }
        if !self.counters.contains_key(name) && self.counters.len() >= limits::COUNTERS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "counters_max".into(),
            });
        }
        let current = self.counters.get(name).copied().unwrap_or(0);
        let value = current
            .checked_add(by)
            .ok_or_else(|| ApplyError::CounterOverflow {
                name: name.to_string(),
            })?;
        self.counters.insert(name.to_string(), value);
        Ok(Outcome::Counter {
            name: name.to_string(),
            value,
        })
    }

    /// The token of the lock's current exclusive grant, if it has exactly one (semaphores and
    /// shared holds cannot fence).
    pub fn exclusive_token(&self, lock: &str) -> Option<u64> {
        let l = self.locks.get(lock)?;
        match l.holders.as_slice() {
            [h] if l.permits == 1 && h.mode == LockMode::Exclusive => Some(h.token),
            _ => None,
        }
    }

    /// Fence first (a superseded holder must learn it is fenced), then the condition.
    fn check_guards(
        &self,
        key: &str,
        condition: Option<&Condition>,
        fence: Option<&Fence>,
    ) -> Result<(), ApplyError> {
        if let Some(fence) = fence {
            let current_token = self.exclusive_token(&fence.lock);
            if current_token != Some(fence.token) {
                return Err(ApplyError::Fenced {
                    lock: fence.lock.clone(),
                    token: fence.token,
                    current_token,
                });
            }
        }
        let existing = self.keys.get(key);
        let ok = match condition {
            None => true,
            Some(Condition::Absent) => existing.is_none(),
            Some(Condition::ModRevision(rev)) => existing.is_some_and(|k| k.mod_revision == *rev),
            Some(Condition::Value(v)) => existing.is_some_and(|k| &k.value == v),
        };
        if ok {
            Ok(())
        } else {
            Err(ApplyError::CompareFailed {
                key: key.to_string(),
            })
        }
    }

    /// Expires every lease due at the current `sm_time`; returns their ids.
    ///
    /// First every due lease's queued waits are failed, and only then are their locks freed:
    /// freeing one due lease's lock must never hand it to a waiter whose lease is due in this
    /// same entry (which would answer a dead waiter with a grant, then free it again under
    /// the same token).
    fn expire_due(&mut self, ctx: &mut Ctx<'_>) -> Vec<u64> {
        let due = self.leases_due_at(self.sm_time_ms, usize::MAX);
        let mut affected = std::collections::BTreeSet::new();
        for &lease_id in due.iter().filter(|_| !fail_due_waits_late()) {
            let tickets: Vec<String> = self
                .leases
                .get(&lease_id)
                .map(|l| l.tickets.iter().cloned().collect())
                .unwrap_or_default();
            for waiter_id in tickets {
                if let Some(t) =
                    self.drop_ticket(ctx, &waiter_id, Err(ApplyError::LeaseNotFound { lease_id }))
                {
                    affected.extend(t.names);
                }
            }
        }
        for &lease_id in &due {
            self.push_event(ctx.index, Event::LeaseExpired { lease_id });
            self.end_lease(ctx, lease_id, ReleaseCause::Expired);
        }
        self.pump(ctx, affected);
        due
    }

    /// Ends a lease: fails its queued waits with `lease_not_found`, frees its locks (handing
    /// them to live waiters), deletes its keys, and moves the request records it pinned onto
    /// the retry window so a retry shortly after still sees the first outcome.
    fn end_lease(&mut self, ctx: &mut Ctx<'_>, lease_id: u64, cause: ReleaseCause) {
        let Some(lease) = self.leases.get(&lease_id) else {
            return;
        };
        let tickets: Vec<String> = lease.tickets.iter().cloned().collect();
        let mut affected = std::collections::BTreeSet::new();
        for waiter_id in tickets {
            if let Some(t) =
                self.drop_ticket(ctx, &waiter_id, Err(ApplyError::LeaseNotFound { lease_id }))
            {
                affected.extend(t.names);
            }
        }
        let Some(lease) = self.leases.remove(&lease_id) else {
            return;
        };
        self.auth.forget_lease(lease_id);
        self.lease_deadlines.remove(&(lease.deadline_ms, lease_id));
        for name in &lease.locks {
            let token = self.locks.get_mut(name).and_then(|l| {
                let pos = l.holders.iter().position(|h| h.lease_id == lease_id)?;
                Some(l.holders.remove(pos).token)
            });
            if let Some(token) = token {
                self.push_event(
                    ctx.index,
                    Event::LockReleased {
                        name: name.clone(),
                        lease_id,
                        token,
                        cause,
                    },
                );
                self.hold_left(ctx.index, name, lease_id, token, cause);
                affected.insert(name.clone());
            }
        }
        self.pump(ctx, affected);
        for key in &lease.keys {
            self.auth.forget_key(key);
            if let Some(prev) = self.keys.remove(key) {
                self.push_delete_event(ctx.index, key, prev);
            }
        }
        for request_id in &lease.request_ids {
            self.unpin_record(request_id);
        }
    }

    /// Deletes a key (emitting its `delete` event); false if it did not exist.
    pub(crate) fn delete_key(&mut self, index: u64, key: &str) -> bool {
        let Some(record) = self.keys.remove(key) else {
            return false;
        };
        self.auth.forget_key(key);
        if let Some(lease) = record.lease_id.and_then(|id| self.leases.get_mut(&id)) {
            lease.keys.remove(key);
        }
        self.push_delete_event(index, key, record);
        true
    }
}

/// A fresh (not replayed) response of the entry being applied.
fn respond(ctx: &Ctx<'_>, outcome: ApplyResult) -> Response {
    Response {
        revision: ctx.index,
        term: ctx.term,
        replayed: false,
        outcome,
    }
}

pub(crate) fn check_len(what: &str, s: &str, max: usize) -> Result<(), ApplyError> {
    if s.is_empty() || s.len() > max {
        return Err(ApplyError::Invalid {
            reason: format!("{what} must be 1..={max} bytes"),
        });
    }
    Ok(())
}

pub(crate) fn command_sha256(cmd: &Command) -> [u8; 32] {
    Sha256::digest(codec::encode_command(cmd)).into()
}

#[cfg(test)]
#[path = "apply_test.rs"]
mod apply_test;

#[cfg(test)]
#[path = "locks_test.rs"]
mod locks_test;

/// Whether expiry skips failing due leases' waits before freeing locks (a test-only bug).
#[cfg(feature = "bug-injection")]
fn fail_due_waits_late() -> bool {
    crate::bugs::grant_due_waiters()
}

#[cfg(not(feature = "bug-injection"))]
fn fail_due_waits_late() -> bool {
    false
}
