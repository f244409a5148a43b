//! Cross-record invariants of [`State`]. Tests run `check_invariants` after every apply; a
//! violation names the first broken rule so a failing property test points at the bug.

use crate::state::State;

/// A broken invariant, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);

fn fail<T>(msg: String) -> Result<T, InvariantViolation> {
    Err(InvariantViolation(msg))
}

impl State {
    /// Checks every cross-record rule. Cost is linear in the state; meant for tests.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_leases()?;
        self.check_locks()?;
        self.check_keys()?;
        self.check_requests()
    }

    fn check_leases(&self) -> Result<(), InvariantViolation> {
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
                if self.locks.get(name).map(|l| l.holder.lease_id) != Some(id) {
                    return fail(format!("lease {id} lists lock {name} it does not hold"));
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

    fn check_locks(&self) -> Result<(), InvariantViolation> {
        for (name, lock) in &self.locks {
            let h = &lock.holder;
            let Some(lease) = self.leases.get(&h.lease_id) else {
                return fail(format!("lock {name} held by missing lease {}", h.lease_id));
            };
            if !lease.locks.contains(name) {
                return fail(format!(
                    "lock {name} not listed by its lease {}",
                    h.lease_id
                ));
            }
            if h.token > self.applied_index || h.token < h.lease_id {
                return fail(format!(
                    "lock {name} token {} outside [lease {}, applied {}]",
                    h.token, h.lease_id, self.applied_index
                ));
            }
            if h.since_ms > self.sm_time_ms {
                return fail(format!("lock {name} granted in the future"));
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

    fn check_requests(&self) -> Result<(), InvariantViolation> {
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
}
