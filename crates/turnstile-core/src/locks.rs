//! The lock engine: read-write locks, semaphores, multi-lock acquires and their FIFO queues.
//!
//! Rules (the specification is DESIGN.md "Semantics that must hold"):
//! - A request is granted at once only if every named lock has an empty queue and room for
//!   it; otherwise, with `wait`, it is queued in commit order on every named lock at once.
//!   No barging: a shared request behind a queued exclusive one waits, so writers are not
//!   starved by a stream of readers.
//! - Compatibility: on a semaphore (`permits > 1`) a holder takes one permit; on a read-write
//!   lock, shared holders coexist and an exclusive holder excludes everyone.
//! - Whatever frees room (release, lease end, cancel, abort) re-examines the queues in the
//!   same entry: a ticket at the head of every queue it is in, with room everywhere, is
//!   granted with that entry's index as its token. Due waiters never exist at that point:
//!   a lease's tickets are dropped (with `lease_not_found`) when the lease ends.

use std::collections::BTreeSet;

use crate::command::LockMode;
use crate::events::{Event, ReleaseCause};
use crate::limits;
use crate::response::{ApplyError, Notice, Outcome, Response};
use crate::state::{Holder, Lock, State, Ticket};

/// The entry being applied: where grants get their token and notices are collected.
pub(crate) struct Ctx<'a> {
    pub index: u64,
    pub term: u64,
    pub notices: &'a mut Vec<Notice>,
}

/// A validated acquire request.
pub(crate) struct AcquireReq<'a> {
    pub names: &'a [String],
    pub lease_id: u64,
    pub mode: LockMode,
    pub permits: Option<u32>,
    pub wait: bool,
    pub waiter_id: Option<&'a str>,
}

/// True if `lock` can take one more holder in `mode`.
pub(crate) fn room_for(lock: &Lock, mode: LockMode) -> bool {
    if lock.holders.is_empty() {
        return true;
    }
    if lock.permits > 1 {
        return lock.holders.len() < lock.permits as usize;
    }
    mode == LockMode::Shared && lock.holders.iter().all(|h| h.mode == LockMode::Shared)
}

impl State {
    pub(crate) fn acquire(
        &mut self,
        ctx: &mut Ctx<'_>,
        req: AcquireReq<'_>,
    ) -> Result<Outcome, ApplyError> {
        let names = self.check_acquire(&req)?;
        let now_free = names.iter().all(|n| {
            self.locks
                .get(n)
                .is_none_or(|l| l.queue.is_empty() && room_for(l, req.mode))
        });
        if now_free {
            self.grant(ctx, req.lease_id, &names, req.mode, req.permits);
            return Ok(self.granted_outcome(ctx, names, req.lease_id, req.mode));
        }
        let (true, Some(waiter_id)) = (req.wait, req.waiter_id) else {
            let name = names
                .iter()
                .find(|n| self.locks.get(*n).is_some_and(|l| !l.holders.is_empty()));
            let lock = name.and_then(|n| self.locks.get(n));
            let holder_token = lock.and_then(|l| l.holders.first()).map_or(0, |h| h.token);
            let name = name.or(names.first()).cloned().unwrap_or_default();
            return Err(ApplyError::LockHeld { name, holder_token });
        };
        self.enqueue(ctx, waiter_id, req.lease_id, names, req.mode, req.permits)?;
        Ok(Outcome::Queued {
            waiter_id: waiter_id.to_string(),
        })
    }

    /// Validates names, lease and modes; returns the sorted, distinct names.
    fn check_acquire(&self, req: &AcquireReq<'_>) -> Result<Vec<String>, ApplyError> {
        let names: Vec<String> = req
            .names
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if names.is_empty() || names.len() > limits::LOCKS_PER_ACQUIRE_MAX {
            let reason = format!(
                "an acquire names 1..={} locks",
                limits::LOCKS_PER_ACQUIRE_MAX
            );
            return Err(ApplyError::Invalid { reason });
        }
        for name in &names {
            crate::apply::check_len("lock name", name, limits::LOCK_NAME_BYTES_MAX)?;
        }
        let permits = req.permits.unwrap_or(1);
        if permits == 0 || permits > limits::PERMITS_MAX || (names.len() > 1 && permits > 1) {
            let reason = format!(
                "permits must be 1..={} (1 for acquire-many)",
                limits::PERMITS_MAX
            );
            return Err(ApplyError::Invalid { reason });
        }
        if req.wait && req.waiter_id.is_none() {
            return Err(ApplyError::Invalid {
                reason: "a waiting acquire needs a request_id".into(),
            });
        }
        let Some(lease) = self
            .leases
            .get(&req.lease_id)
            .filter(|_| self.lease_is_live(req.lease_id))
        else {
            return Err(ApplyError::LeaseNotFound {
                lease_id: req.lease_id,
            });
        };
        if lease.locks.len() + names.len() > limits::LOCKS_PER_LEASE_MAX {
            return Err(ApplyError::LimitReached {
                limit: "locks_per_lease_max".into(),
            });
        }
        for name in &names {
            self.check_mode(name, req, permits)?;
            if let Some(lock) = self.locks.get(name) {
                if let Some(h) = lock.holders.iter().find(|h| h.lease_id == req.lease_id) {
                    // Re-acquiring through the same lease would wait on itself forever.
                    return Err(ApplyError::LockHeld {
                        name: name.clone(),
                        holder_token: h.token,
                    });
                }
                let waits = lock.queue.iter().any(|w| {
                    self.tickets
                        .get(w)
                        .is_some_and(|t| t.lease_id == req.lease_id)
                });
                if waits {
                    let reason = format!("lease {} already waits for lock {name}", req.lease_id);
                    return Err(ApplyError::Invalid { reason });
                }
            }
        }
        Ok(names)
    }

    fn check_mode(&self, name: &str, req: &AcquireReq<'_>, permits: u32) -> Result<(), ApplyError> {
        let mismatch = |reason: String| {
            Err(ApplyError::ModeMismatch {
                name: name.to_string(),
                reason,
            })
        };
        match self.locks.get(name) {
            Some(lock) => {
                if req.permits.is_some_and(|p| p != lock.permits) {
                    return mismatch(format!("lock is a {}-permit lock", lock.permits));
                }
                if lock.permits > 1 && req.mode == LockMode::Shared {
                    return mismatch("a semaphore has no shared mode".into());
                }
            }
            None if permits > 1 && req.mode == LockMode::Shared => {
                return mismatch("a semaphore has no shared mode".into());
            }
            None => {}
        }
        Ok(())
    }

    fn enqueue(
        &mut self,
        ctx: &mut Ctx<'_>,
        waiter_id: &str,
        lease_id: u64,
        names: Vec<String>,
        mode: LockMode,
        permits: Option<u32>,
    ) -> Result<(), ApplyError> {
        if self.tickets.contains_key(waiter_id) {
            return Err(ApplyError::RequestIdReused {
                request_id: waiter_id.to_string(),
            });
        }
        if names.iter().any(|n| {
            self.locks
                .get(n)
                .is_some_and(|l| l.queue.len() >= limits::WAITERS_PER_LOCK_MAX)
        }) {
            return Err(ApplyError::LimitReached {
                limit: "waiters_per_lock_max".into(),
            });
        }
        for name in &names {
            let lock = self.locks.entry(name.clone()).or_insert_with(|| {
                Lock {
                    permits: permits.unwrap_or(1),
                    holders: Vec::new(),
                    queue: Default::default(),
                }
                .into()
            });
            lock.queue.push_back(waiter_id.to_string());
        }
        if let Some(lease) = self.leases.get_mut(&lease_id) {
            lease.tickets.insert(waiter_id.to_string());
        }
        let ticket = Ticket {
            lease_id,
            names,
            mode,
            since_ms: self.sm_time_ms,
            enqueued_index: ctx.index,
        };
        self.tickets.insert(waiter_id.to_string(), ticket);
        Ok(())
    }

    /// Adds holders for `lease_id` on every name, with this entry's index as token.
    fn grant(
        &mut self,
        ctx: &mut Ctx<'_>,
        lease_id: u64,
        names: &[String],
        mode: LockMode,
        permits: Option<u32>,
    ) {
        for name in names {
            let lock = self.locks.entry(name.clone()).or_insert_with(|| {
                Lock {
                    permits: permits.unwrap_or(1),
                    holders: Vec::new(),
                    queue: Default::default(),
                }
                .into()
            });
            let holder = Holder {
                lease_id,
                token: ctx.index,
                term: ctx.term,
                since_ms: self.sm_time_ms,
                mode,
            };
            if lock.holders.is_empty() {
                // A first push would allocate room for 4 holders (160 bytes); most locks are
                // exclusive and never hold more than one.
                lock.holders.reserve_exact(1);
            }
            lock.holders.push(holder);
            if let Some(lease) = self.leases.get_mut(&lease_id) {
                lease.locks.insert(name.clone());
            }
            let event = Event::LockGranted {
                name: name.clone(),
                lease_id,
                token: ctx.index,
                mode,
            };
            self.push_event(ctx.index, event);
            self.granted_hold(ctx, name, lease_id);
        }
    }

    fn granted_outcome(
        &self,
        ctx: &Ctx<'_>,
        names: Vec<String>,
        lease_id: u64,
        mode: LockMode,
    ) -> Outcome {
        Outcome::Granted {
            names,
            token: ctx.index,
            term: ctx.term,
            lease_id,
            mode,
        }
    }

    /// Releases the hold of `lease_id` on `name` with `token`. Returns false if no such hold.
    pub(crate) fn release_hold(
        &mut self,
        ctx: &mut Ctx<'_>,
        name: &str,
        lease_id: u64,
        token: u64,
        cause: ReleaseCause,
    ) -> bool {
        let Some(lock) = self.locks.get_mut(name) else {
            return false;
        };
        let Some(pos) = lock
            .holders
            .iter()
            .position(|h| h.lease_id == lease_id && h.token == token)
        else {
            return false;
        };
        lock.holders.remove(pos);
        if let Some(lease) = self.leases.get_mut(&lease_id) {
            lease.locks.remove(name);
        }
        self.hold_ended(name, lease_id, token);
        self.push_event(
            ctx.index,
            Event::LockReleased {
                name: name.to_string(),
                lease_id,
                token,
                cause,
            },
        );
        self.hold_left(ctx.index, name, lease_id, token, cause);
        self.pump(ctx, [name.to_string()].into());
        true
    }

    /// Removes a queued ticket and answers its waiter with `outcome`. Returns the ticket.
    pub(crate) fn drop_ticket(
        &mut self,
        ctx: &mut Ctx<'_>,
        waiter_id: &str,
        outcome: Result<Outcome, ApplyError>,
    ) -> Option<Ticket> {
        let ticket = self.tickets.remove(waiter_id)?;
        for name in &ticket.names {
            if let Some(lock) = self.locks.get_mut(name) {
                lock.queue.retain(|w| w != waiter_id);
            }
        }
        if let Some(lease) = self.leases.get_mut(&ticket.lease_id) {
            lease.tickets.remove(waiter_id);
        }
        self.ticket_left(&ticket.names, ticket.lease_id);
        self.answer(ctx, waiter_id, outcome);
        Some(ticket)
    }

    /// Sends a waiter its final outcome and makes it the outcome a retry of its request id
    /// returns.
    fn answer(&mut self, ctx: &mut Ctx<'_>, waiter_id: &str, outcome: Result<Outcome, ApplyError>) {
        let response = Response {
            revision: ctx.index,
            term: ctx.term,
            replayed: false,
            outcome,
        };
        self.record_waiter_answer(waiter_id, &response);
        ctx.notices.push(Notice {
            waiter_id: waiter_id.to_string(),
            response,
        });
    }

    /// Grants every ticket that has reached the head of all its queues with room, repeating
    /// until nothing changes; then forgets idle locks among `names`.
    pub(crate) fn pump(&mut self, ctx: &mut Ctx<'_>, mut work: BTreeSet<String>) {
        let mut touched = work.clone();
        while let Some(name) = work.pop_first() {
            while let Some(waiter_id) = self.grantable_head(&name) {
                let Some(ticket) = self.tickets.remove(&waiter_id) else {
                    break;
                };
                for n in &ticket.names {
                    if let Some(lock) = self.locks.get_mut(n) {
                        lock.queue.pop_front();
                    }
                }
                if let Some(lease) = self.leases.get_mut(&ticket.lease_id) {
                    lease.tickets.remove(&waiter_id);
                }
                self.grant(ctx, ticket.lease_id, &ticket.names, ticket.mode, None);
                let outcome =
                    self.granted_outcome(ctx, ticket.names.clone(), ticket.lease_id, ticket.mode);
                self.answer(ctx, &waiter_id, Ok(outcome));
                // New heads may have appeared in the other queues of a multi-lock ticket.
                work.extend(ticket.names.iter().filter(|n| **n != name).cloned());
                touched.extend(ticket.names);
            }
        }
        for name in touched {
            if self
                .locks
                .get(&name)
                .is_some_and(|l| l.holders.is_empty() && l.queue.is_empty())
            {
                self.locks.remove(&name);
            }
        }
    }

    /// The head waiter of `name` if it heads all its queues and has room in each.
    fn grantable_head(&self, name: &str) -> Option<String> {
        let waiter_id = self.locks.get(name)?.queue.front()?;
        let ticket = self.tickets.get(waiter_id)?;
        let ready = ticket.names.iter().all(|n| {
            self.locks
                .get(n)
                .is_some_and(|l| l.queue.front() == Some(waiter_id) && room_for(l, ticket.mode))
        });
        ready.then(|| waiter_id.clone())
    }

    /// `Cancel`: dequeue the waiter, or release its grant if the grant won the race.
    pub(crate) fn cancel(&mut self, ctx: &mut Ctx<'_>, waiter_id: &str) -> Outcome {
        let timeout = || {
            Err(ApplyError::WaitTimeout {
                waiter_id: waiter_id.to_string(),
            })
        };
        if let Some(ticket) = self.drop_ticket(ctx, waiter_id, timeout()) {
            self.pump(ctx, ticket.names.into_iter().collect());
            return Outcome::Cancelled {
                waiter_id: waiter_id.to_string(),
                released: false,
            };
        }
        let granted = self
            .requests
            .get(waiter_id)
            .and_then(|r| match &r.response.outcome {
                Ok(Outcome::Granted {
                    names,
                    token,
                    lease_id,
                    ..
                }) => Some((names.clone(), *token, *lease_id)),
                _ => None,
            });
        let mut released = false;
        if let Some((names, token, lease_id)) = granted {
            for name in &names {
                released |= self.release_hold(ctx, name, lease_id, token, ReleaseCause::Cancelled);
            }
            if released {
                // The client gave up: its acquire's outcome is the timeout, not the grant.
                self.answer(ctx, waiter_id, timeout());
            }
        }
        Outcome::Cancelled {
            waiter_id: waiter_id.to_string(),
            released,
        }
    }

    /// `AbortWaiter`: fail the victim only if it is still deadlocked now.
    pub(crate) fn abort_waiter(
        &mut self,
        ctx: &mut Ctx<'_>,
        waiter_id: &str,
        cycle: &[u64],
    ) -> Outcome {
        let still = self
            .tickets
            .get(waiter_id)
            .is_some_and(|t| self.deadlocked_leases().contains(&t.lease_id));
        if still {
            let err = ApplyError::DeadlockVictim {
                waiter_id: waiter_id.to_string(),
                cycle: cycle.to_vec(),
            };
            if let Some(ticket) = self.drop_ticket(ctx, waiter_id, Err(err)) {
                self.pump(ctx, ticket.names.into_iter().collect());
            }
        }
        Outcome::Aborted {
            waiter_id: waiter_id.to_string(),
            aborted: still,
        }
    }
}
