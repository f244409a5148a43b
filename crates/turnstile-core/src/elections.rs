//! Elections: a lock whose holder publishes a value.
//!
//! An election named `X` is the lock `X` (one permit, exclusive) plus the value each
//! candidate publishes, kept in [`State::campaigns`] under `(X, lease_id)`. So everything the
//! lock engine guarantees holds for leadership as it is: campaigns queue FIFO with the lock's
//! waiters, the leader is the lock's holder, its token is the index of the entry that granted
//! it (and so fences writes with `fence: {lock: X, token}` by the one fencing rule), and
//! leadership ends whenever the hold ends (resign, lease expiry or revoke, a cancel that lost
//! the race) and passes to the next in the queue in that same entry.
//!
//! Rules:
//! - A campaign record exists exactly while its lease holds or waits for the lock (checked in
//!   `invariants.rs`): it is written before the acquire (so a grant in the same entry sees the
//!   value) and removed by every path that ends a hold or a ticket (`hold_left`,
//!   `ticket_left`), which the lock engine calls.
//! - `election_leader` is pushed right after the `lock_granted` of a campaigner's grant and on
//!   every proclaim; `election_resigned` right after the `lock_released` of a leader's hold.
//! - A plain lock acquire of `X` competes in the same queue; such a holder leads with an
//!   empty value until it proclaims.

use serde::{Deserialize, Serialize};

use crate::command::LockMode;
use crate::events::{Event, ReleaseCause};
use crate::limits;
use crate::locks::{AcquireReq, Ctx};
use crate::response::{ApplyError, Outcome};
use crate::state::{Holder, State};

type ApplyResult = Result<Outcome, ApplyError>;

/// What one candidate (leader or queued) of an election publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaign {
    pub value: String,
}

/// The current leader of an election, as read from the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader<'a> {
    pub holder: &'a Holder,
    /// Empty when the holder took the lock with a plain acquire and never proclaimed.
    pub value: &'a str,
}

fn check_value(value: &str) -> Result<(), ApplyError> {
    if value.len() > limits::ELECTION_VALUE_BYTES_MAX {
        let reason = format!(
            "value must be at most {} bytes",
            limits::ELECTION_VALUE_BYTES_MAX
        );
        return Err(ApplyError::Invalid { reason });
    }
    Ok(())
}

fn not_leader(name: &str, token: u64) -> ApplyError {
    ApplyError::NotLeader {
        name: name.to_string(),
        token,
    }
}

impl State {
    /// The leader of election `name`: the lock's single exclusive holder, with its value.
    pub fn election_leader(&self, name: &str) -> Option<Leader<'_>> {
        let token = self.exclusive_token(name)?;
        let holder = self
            .locks
            .get(name)?
            .holders
            .iter()
            .find(|h| h.token == token)?;
        let value = self
            .campaigns
            .get(&(name.to_string(), holder.lease_id))
            .map_or("", |c| c.value.as_str());
        Some(Leader { holder, value })
    }

    /// `Command::Campaign`: an exclusive acquire of lock `name` that publishes `value`.
    pub(crate) fn campaign(
        &mut self,
        ctx: &mut Ctx<'_>,
        name: &str,
        lease_id: u64,
        value: &str,
        wait_ms: u64,
        waiter_id: Option<&str>,
    ) -> ApplyResult {
        crate::apply::check_len("election name", name, limits::ELECTION_NAME_BYTES_MAX)?;
        check_value(value)?;
        if let Some(lock) = self.locks.get(name).filter(|l| l.permits != 1) {
            return Err(ApplyError::ModeMismatch {
                name: name.to_string(),
                reason: format!(
                    "lock is a {}-permit lock; an election needs 1",
                    lock.permits
                ),
            });
        }
        let key = (name.to_string(), lease_id);
        // A lease that campaigns already keeps its record: the acquire below refuses it.
        let fresh = !self.campaigns.contains_key(&key);
        if fresh && self.campaigns.len() >= limits::CAMPAIGNS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "campaigns_max".into(),
            });
        }
        if fresh {
            let campaign = Campaign {
                value: value.to_string(),
            };
            self.campaigns.insert(key.clone(), campaign);
        }
        let names = [name.to_string()];
        let req = AcquireReq {
            names: &names,
            lease_id,
            mode: LockMode::Exclusive,
            permits: None,
            wait: wait_ms > 0,
            waiter_id,
        };
        let result = self.acquire(ctx, req);
        if fresh && result.is_err() {
            self.campaigns.remove(&key);
        }
        result
    }

    /// The leader `{lease_id, token}` of `name`, or `not_leader`. A lease that is gone
    /// answers `lease_not_found`, as for a release.
    fn check_leader(&self, name: &str, lease_id: u64, token: u64) -> Result<(), ApplyError> {
        crate::apply::check_len("election name", name, limits::ELECTION_NAME_BYTES_MAX)?;
        if !self.lease_is_live(lease_id) {
            return Err(ApplyError::LeaseNotFound { lease_id });
        }
        match self.election_leader(name) {
            Some(l) if l.holder.lease_id == lease_id && l.holder.token == token => Ok(()),
            _ => Err(not_leader(name, token)),
        }
    }

    /// `Command::Proclaim`: the leader publishes a new value.
    pub(crate) fn proclaim(
        &mut self,
        ctx: &mut Ctx<'_>,
        name: &str,
        lease_id: u64,
        token: u64,
        value: &str,
    ) -> ApplyResult {
        check_value(value)?;
        self.check_leader(name, lease_id, token)?;
        let key = (name.to_string(), lease_id);
        if !self.campaigns.contains_key(&key) && self.campaigns.len() >= limits::CAMPAIGNS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "campaigns_max".into(),
            });
        }
        let campaign = Campaign {
            value: value.to_string(),
        };
        self.campaigns.insert(key, campaign);
        let event = Event::ElectionLeader {
            name: name.to_string(),
            lease_id,
            token,
            value: value.to_string(),
        };
        self.push_event(ctx.index, event);
        Ok(Outcome::Proclaimed {
            name: name.to_string(),
            token,
        })
    }

    /// `Command::Resign`: the leader releases the lock; the next candidate leads at once.
    pub(crate) fn resign(
        &mut self,
        ctx: &mut Ctx<'_>,
        name: &str,
        lease_id: u64,
        token: u64,
    ) -> ApplyResult {
        self.check_leader(name, lease_id, token)?;
        if !self.release_hold(ctx, name, lease_id, token, ReleaseCause::Released) {
            // check_leader found this very hold; failing to release it is a bug, refused.
            return Err(not_leader(name, token));
        }
        Ok(Outcome::LockReleased {
            name: name.to_string(),
        })
    }

    /// Called by the lock engine after a grant's `lock_granted`: a campaigner now leads.
    pub(crate) fn granted_hold(&mut self, ctx: &Ctx<'_>, name: &str, lease_id: u64) {
        let Some(c) = self.campaigns.get(&(name.to_string(), lease_id)) else {
            return;
        };
        let event = Event::ElectionLeader {
            name: name.to_string(),
            lease_id,
            token: ctx.index,
            value: c.value.clone(),
        };
        self.push_event(ctx.index, event);
    }

    /// Called by the lock engine after a hold's `lock_released`: a leader stepped down.
    pub(crate) fn hold_left(
        &mut self,
        index: u64,
        name: &str,
        lease_id: u64,
        token: u64,
        cause: ReleaseCause,
    ) {
        if self
            .campaigns
            .remove(&(name.to_string(), lease_id))
            .is_none()
        {
            return;
        }
        let event = Event::ElectionResigned {
            name: name.to_string(),
            lease_id,
            token,
            cause,
        };
        self.push_event(index, event);
    }

    /// Called by the lock engine when a queued ticket leaves without a grant.
    pub(crate) fn ticket_left(&mut self, names: &[String], lease_id: u64) {
        for name in names {
            self.campaigns.remove(&(name.clone(), lease_id));
        }
    }
}

#[cfg(test)]
#[path = "elections_test.rs"]
mod elections_test;
