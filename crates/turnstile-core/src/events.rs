//! Watch events: derived from applied entries and kept, bounded, in the replicated state, so
//! every node emits the same stream with the same `(revision, seq)` ids, and a watcher can
//! resume on any node, across restarts, for as long as the history retains its position.

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::command::LockMode;
use crate::limits;
use crate::state::State;

/// Why a lock hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseCause {
    /// Released by its holder.
    Released,
    /// Its lease expired.
    Expired,
    /// Its lease was revoked.
    Revoked,
    /// The waiter's grant was withdrawn by a `Cancel` that lost the race.
    Cancelled,
}

impl ReleaseCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCause::Released => "released",
            ReleaseCause::Expired => "expired",
            ReleaseCause::Revoked => "revoked",
            ReleaseCause::Cancelled => "cancelled",
        }
    }
}

/// One watch event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Put {
        key: String,
        value: String,
        lease_id: Option<u64>,
    },
    Delete {
        key: String,
    },
    LockGranted {
        name: String,
        lease_id: u64,
        token: u64,
        mode: LockMode,
    },
    LockReleased {
        name: String,
        lease_id: u64,
        token: u64,
        cause: ReleaseCause,
    },
    LeaseExpired {
        lease_id: u64,
    },
    /// A candidate became leader of election `name`, or the leader proclaimed a new value.
    ElectionLeader {
        name: String,
        lease_id: u64,
        token: u64,
        value: String,
    },
    /// The leader of election `name` stopped leading (resigned, its lease ended, or its
    /// grant was withdrawn by a lost-race cancel).
    ElectionResigned {
        name: String,
        lease_id: u64,
        token: u64,
        cause: ReleaseCause,
    },
}

impl Event {
    /// The SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Put { .. } => "put",
            Event::Delete { .. } => "delete",
            Event::LockGranted { .. } => "lock_granted",
            Event::LockReleased { .. } => "lock_released",
            Event::LeaseExpired { .. } => "lease_expired",
            Event::ElectionLeader { .. } => "election_leader",
            Event::ElectionResigned { .. } => "election_resigned",
        }
    }

    /// The key or lock name a watch filter matches against; `None` for lease events, which
    /// only an unfiltered watch sees.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Event::Put { key, .. } | Event::Delete { key } => Some(key),
            Event::LockGranted { name, .. }
            | Event::LockReleased { name, .. }
            | Event::ElectionLeader { name, .. }
            | Event::ElectionResigned { name, .. } => Some(name),
            Event::LeaseExpired { .. } => None,
        }
    }
}

impl State {
    /// Records an event of the entry at `revision`, dropping the oldest past the bound, and
    /// returns its position.
    pub(crate) fn push_event(&mut self, revision: u64, event: Event) -> (u64, u32) {
        let seq = match self.events.last_key_value() {
            Some((&(r, s), _)) if r == revision => s + 1,
            _ => 0,
        };
        self.events.insert((revision, seq), event.into());
        while self.events.len() > limits::WATCH_HISTORY_EVENTS_MAX {
            if let Some((pos, _)) = self.events.pop_first() {
                self.events_dropped_through = Some(pos);
                self.key_changes.forget(pos);
            }
        }
        (revision, seq)
    }

    /// Events strictly after position `after`, or `Err(oldest_revision)` when some of them
    /// were already dropped from the history (the watcher must be told `compacted`).
    pub fn events_after(
        &self,
        after: (u64, u32),
    ) -> Result<impl Iterator<Item = (&(u64, u32), &Event)>, u64> {
        if self
            .events_dropped_through
            .is_some_and(|dropped| dropped > after)
        {
            return Err(self.oldest_event_revision());
        }
        Ok(self
            .events
            .range((Bound::Excluded(after), Bound::Unbounded))
            .map(|(position, event)| (position, &**event)))
    }

    /// The position just before the first event of `revision`, for an inclusive start.
    pub fn position_before(revision: u64) -> (u64, u32) {
        match revision.checked_sub(1) {
            Some(r) => (r, u32::MAX),
            None => (0, 0),
        }
    }

    /// The oldest revision whose events are all retained (a watch may start there).
    pub fn oldest_event_revision(&self) -> u64 {
        let first = self
            .events
            .first_key_value()
            .map_or(self.applied_index + 1, |(&(r, _), _)| r);
        // Some events of that revision may be gone: then the next one is the oldest complete.
        match self.events_dropped_through {
            Some((dropped, _)) if dropped == first => first + 1,
            _ => first,
        }
    }
}
