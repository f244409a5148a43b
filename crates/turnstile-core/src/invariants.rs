//! Cross-record invariants of [`State`]. Tests run `check_invariants` after every apply; a
//! violation names the first broken rule so a failing property test points at the bug.

use std::collections::HashSet;

use crate::response::Outcome;
use crate::state::{RequestRecord, State};

/// A broken invariant, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);

fn fail<T>(msg: String) -> Result<T, InvariantViolation> {
    Err(InvariantViolation(msg))
}

/// What the rules look up once per record, gathered once per check so that the whole check
/// stays linear in the state. (Scanning a lock's queue once per ticket made each check
/// quadratic: with 1,000 waiters on one lock every apply on every test node cost about a
/// million string compares, and the 1,000-waiter tests took 15 to 40 s just to queue.)
#[derive(Default)]
struct Index<'a> {
    /// (lock, waiter id) of every queue entry.
    queued: HashSet<(&'a str, &'a str)>,
    /// (lock, lease id) of every holder.
    holding: HashSet<(&'a str, u64)>,
    /// (lock, lease id, token) of every holder.
    held: HashSet<(&'a str, u64, u64)>,
    /// (lock, lease id) of every exclusive ticket queued on that lock.
    waiting_exclusive: HashSet<(&'a str, u64)>,
}

impl State {
    /// Checks every cross-record rule. Cost is linear in the state (hash lookups); meant for
    /// tests, which run it after every apply.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let ix = self.index();
        self.check_leases(&ix)?;
        self.check_locks(&ix)?;
        self.check_keys()?;
        self.check_auth()?;
        self.check_campaigns(&ix)?;
        self.check_requests(&ix)
    }

    fn index(&self) -> Index<'_> {
        let mut ix = Index::default();
        for (name, lock) in &self.locks {
            for h in &lock.holders {
                ix.holding.insert((name, h.lease_id));
                ix.held.insert((name, h.lease_id, h.token));
            }
            for w in &lock.queue {
                ix.queued.insert((name, w));
                if let Some(t) = self.tickets.get(w) {
                    if t.mode == crate::LockMode::Exclusive {
                        ix.waiting_exclusive.insert((name, t.lease_id));
                    }
                }
            }
        }
        ix
    }

    fn check_leases(&self, ix: &Index<'_>) -> Result<(), InvariantViolation> {
        if self.lease_deadlines.len() != self.leases.len() {
            return fail(format!(
                "{} deadlines for {} leases",
                self.lease_deadlines.len(),
                self.leases.len()
            ));
        }
        for (&id, lease) in &self.leases {
            if !self.lease_deadlines.contains(&(lease.deadline_ms, id)) {
                return fail(format!("lease {id} missing from the deadline index"));
            }
            // After every apply, due leases have been expired.
            if lease.deadline_ms <= self.sm_time_ms {
                return fail(format!(
                    "lease {id} is due ({} <= {}) but still present",
                    lease.deadline_ms, self.sm_time_ms
                ));
            }
            if id > self.applied_index {
                return fail(format!(
                    "lease {id} is newer than applied index {}",
                    self.applied_index
                ));
            }
            for name in &lease.locks {
                if !ix.holding.contains(&(name.as_str(), id)) {
                    return fail(format!("lease {id} lists lock {name} it does not hold"));
                }
            }
            for w in &lease.tickets {
                if self.tickets.get(w).map(|t| t.lease_id) != Some(id) {
                    return fail(format!(
                        "lease {id} lists waiter {w} that is not its ticket"
                    ));
                }
            }
            for key in &lease.keys {
                if self.keys.get(key).and_then(|k| k.lease_id) != Some(id) {
                    return fail(format!("lease {id} lists key {key} not bound to it"));
                }
            }
            for rid in &lease.request_ids {
                if self.requests.get(rid).and_then(|r| r.lease_id) != Some(id) {
                    return fail(format!("lease {id} lists request {rid} not bound to it"));
                }
            }
        }
        Ok(())
    }

    fn check_locks(&self, ix: &Index<'_>) -> Result<(), InvariantViolation> {
        for (name, lock) in &self.locks {
            if lock.holders.is_empty() && lock.queue.is_empty() {
                return fail(format!("idle lock {name} is stored"));
            }
            let exclusive = lock
                .holders
                .iter()
                .filter(|h| h.mode == crate::LockMode::Exclusive)
                .count();
            let over = if lock.permits > 1 {
                lock.holders.len() > lock.permits as usize || exclusive != lock.holders.len()
            } else {
                exclusive > 1 || (exclusive == 1 && lock.holders.len() > 1)
            };
            if over {
                return fail(format!(
                    "lock {name} has incompatible holders {:?}",
                    lock.holders
                ));
            }
            let mut leases = std::collections::BTreeSet::new();
            for h in &lock.holders {
                if !leases.insert(h.lease_id) {
                    return fail(format!("lock {name} held twice by lease {}", h.lease_id));
                }
                if !self
                    .leases
                    .get(&h.lease_id)
                    .is_some_and(|l| l.locks.contains(name))
                {
                    return fail(format!(
                        "lock {name} held by lease {} that does not list it",
                        h.lease_id
                    ));
                }
                if h.token > self.applied_index
                    || h.token < h.lease_id
                    || h.since_ms > self.sm_time_ms
                {
                    return fail(format!("lock {name} holder {h:?} out of range"));
                }
            }
            for w in &lock.queue {
                if !self
                    .tickets
                    .get(w)
                    .is_some_and(|t| t.names.iter().any(|n| n == name))
                {
                    return fail(format!(
                        "lock {name} queues {w} whose ticket does not name it"
                    ));
                }
            }
            // A head that could be granted must have been granted by the entry that made room.
            if let Some(w) = lock.queue.front() {
                if let Some(t) = self.tickets.get(w) {
                    let ready = t.names.iter().all(|n| {
                        self.locks.get(n).is_some_and(|l| {
                            l.queue.front() == Some(w) && crate::locks::room_for(l, t.mode)
                        })
                    });
                    if ready {
                        return fail(format!(
                            "waiter {w} heads every queue with room but was not granted"
                        ));
                    }
                }
            }
        }
        for (w, t) in &self.tickets {
            if !self
                .leases
                .get(&t.lease_id)
                .is_some_and(|l| l.tickets.contains(w))
            {
                return fail(format!(
                    "ticket {w} of missing or unlisting lease {}",
                    t.lease_id
                ));
            }
            for n in &t.names {
                if !ix.queued.contains(&(n.as_str(), w.as_str())) {
                    return fail(format!("ticket {w} not queued on {n}"));
                }
            }
        }
        if let Some((&(r, _), _)) = self.events.last_key_value() {
            if r > self.applied_index {
                return fail(format!(
                    "event at revision {r} after applied index {}",
                    self.applied_index
                ));
            }
        }
        Ok(())
    }

    fn check_keys(&self) -> Result<(), InvariantViolation> {
        for (key, rec) in &self.keys {
            if rec.create_revision > rec.mod_revision
                || rec.mod_revision > self.applied_index
                || rec.version == 0
            {
                return fail(format!("key {key} has inconsistent revisions {rec:?}"));
            }
            // One entry writes a key at most once (a transaction refuses a branch that writes
            // a key twice), so a key cannot have more versions than entries since creation.
            if rec.version > rec.mod_revision - rec.create_revision + 1 {
                return fail(format!(
                    "key {key} has more versions than entries since its creation {rec:?}"
                ));
            }
            if let Some(id) = rec.lease_id {
                if !self.leases.get(&id).is_some_and(|l| l.keys.contains(key)) {
                    return fail(format!(
                        "key {key} bound to lease {id} that does not list it"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Owners name only live leases and keys, and the derived auth indexes match a rebuild.
    fn check_auth(&self) -> Result<(), InvariantViolation> {
        if let Some(id) = self
            .auth
            .lease_owners
            .keys()
            .find(|id| !self.leases.contains_key(id))
        {
            return fail(format!("lease {id} has an owner but does not exist"));
        }
        if let Some(k) = self
            .auth
            .key_owners
            .keys()
            .find(|k| !self.keys.contains_key(*k))
        {
            return fail(format!("key {k} has an owner but does not exist"));
        }
        let (leases_by_owner, usage) = self.derived_auth();
        if leases_by_owner != self.auth.leases_by_owner || usage != self.auth.usage {
            return fail(format!(
                "auth indexes {:?} / {:?} differ from a rebuild {leases_by_owner:?} / {usage:?}",
                self.auth.leases_by_owner, self.auth.usage,
            ));
        }
        Ok(())
    }

    /// A campaign stands for a hold or a queued ticket of its lease on a one-permit lock.
    fn check_campaigns(&self, ix: &Index<'_>) -> Result<(), InvariantViolation> {
        if self.campaigns.len() > crate::limits::CAMPAIGNS_MAX {
            return fail(format!("{} campaigns stored", self.campaigns.len()));
        }
        for ((name, lease_id), c) in &self.campaigns {
            if c.value.len() > crate::limits::ELECTION_VALUE_BYTES_MAX {
                return fail(format!("election {name} value of {} bytes", c.value.len()));
            }
            let Some(lock) = self.locks.get(name) else {
                return fail(format!(
                    "campaign of lease {lease_id} in idle election {name}"
                ));
            };
            if lock.permits != 1 {
                return fail(format!("election {name} on a {}-permit lock", lock.permits));
            }
            let holds = lock
                .holders
                .iter()
                .any(|h| h.lease_id == *lease_id && h.mode == crate::LockMode::Exclusive);
            let waits = ix.waiting_exclusive.contains(&(name.as_str(), *lease_id));
            if !holds && !waits {
                return fail(format!(
                    "campaign of lease {lease_id} in election {name} neither leads nor waits"
                ));
            }
        }
        Ok(())
    }

    fn check_requests(&self, ix: &Index<'_>) -> Result<(), InvariantViolation> {
        let windowed = self
            .requests
            .values()
            .filter(|r| r.expires_ms.is_some())
            .count();
        if windowed != self.request_expiries.len() {
            return fail(format!(
                "{windowed} windowed records, {} in the expiry index",
                self.request_expiries.len()
            ));
        }
        let derived = self.derived_grant_requests();
        if derived != self.grant_requests {
            return fail(format!(
                "grant index {:?} differs from the records' {derived:?}",
                self.grant_requests
            ));
        }
        for (rid, rec) in &self.requests {
            match (rec.lease_id, rec.expires_ms) {
                (Some(id), None) => {
                    if !self
                        .leases
                        .get(&id)
                        .is_some_and(|l| l.request_ids.contains(rid))
                    {
                        return fail(format!(
                            "request {rid} bound to lease {id} that does not list it"
                        ));
                    }
                    // Bounded by design: a pinned record stands for something live.
                    if !self.pinned_record_is_live(ix, rid, id, rec) {
                        return fail(format!(
                            "request {rid} is pinned to lease {id} but neither waits, holds nor granted it: {:?}",
                            rec.response.outcome
                        ));
                    }
                }
                (None, Some(exp)) => {
                    if exp <= self.sm_time_ms
                        || !self.request_expiries.contains(&(exp, rid.clone()))
                    {
                        return fail(format!("request {rid} expiry {exp} not indexed or overdue"));
                    }
                }
                _ => {
                    return fail(format!(
                        "request {rid} must have exactly one of lease or expiry"
                    ))
                }
            }
        }
        Ok(())
    }

    /// A pinned record is the lease's own grant, a queued wait, or a grant still held.
    fn pinned_record_is_live(
        &self,
        ix: &Index<'_>,
        rid: &str,
        lease_id: u64,
        rec: &RequestRecord,
    ) -> bool {
        match &rec.response.outcome {
            Ok(Outcome::LeaseGranted { lease_id: l, .. }) => *l == lease_id,
            Ok(Outcome::Queued { .. }) => self.tickets.contains_key(rid),
            Ok(Outcome::Granted {
                names,
                token,
                lease_id: l,
                ..
            }) => {
                *l == lease_id
                    && names
                        .iter()
                        .any(|n| ix.held.contains(&(n.as_str(), lease_id, *token)))
            }
            _ => false,
        }
    }
}
