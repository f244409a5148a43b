//! What etcd's watch shows of a key's put or delete beyond the replicated [`Event`]: the key's
//! create revision and version after the change, and the key as it was before it (`prev_kv`).
//!
//! Kept beside the watch history (same `(revision, seq)` positions, dropped with their events)
//! but **not replicated**: it is never encoded, so it is not in a snapshot or the state digest,
//! and replicas that applied the same log still encode to the same bytes. A node that starts
//! from a snapshot (a restart, an install from the leader) knows the changes only of the
//! entries it applied since; [`KeyChanges::from_revision`] says from where. The etcd port's
//! watch answers etcd's "compacted" for an older start instead of guessing: an older put's
//! version, or a deleted key's value, cannot be rebuilt from a bounded history.
//!
//! [`Event`]: crate::events::Event

use crate::cow;
use crate::state::{KeyRecord, State};

/// One key event's etcd details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    /// After a put, the key's create revision; 0 after a delete (etcd's tombstone).
    pub create_revision: u64,
    /// After a put, the key's version (1 on creation); 0 after a delete.
    pub version: u64,
    /// The key just before the change; `None` if it did not exist.
    pub prev: Option<cow::Shared<KeyRecord>>,
}

/// A node's [`KeyChange`] of every key event it applied itself, by event position.
#[derive(Debug, Clone, Default)]
pub struct KeyChanges {
    changes: cow::Map<(u64, u32), KeyChange>,
    /// The oldest revision from which every key event has its change here. 0 on a node that
    /// applied the log from the start.
    from_revision: u64,
}

/// Never part of the replicated state: two replicas with equal states may differ here (one
/// restarted from a snapshot), and state equality (codec round trips, replica comparisons)
/// must not see it.
impl PartialEq for KeyChanges {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for KeyChanges {}

impl KeyChanges {
    /// Nothing known before `applied_index + 1`: a state just decoded from a snapshot.
    pub fn known_after(applied_index: u64) -> Self {
        KeyChanges {
            changes: cow::Map::new(),
            from_revision: applied_index.saturating_add(1),
        }
    }

    /// The oldest revision whose key events all have their change here.
    pub fn from_revision(&self) -> u64 {
        self.from_revision
    }

    /// The change of the key event at `position`.
    pub fn get(&self, position: (u64, u32)) -> Option<&KeyChange> {
        self.changes.get(&position)
    }

    pub(crate) fn insert(&mut self, position: (u64, u32), change: KeyChange) {
        self.changes.insert(position, change);
    }

    /// Forgets the change of an event the history dropped.
    pub(crate) fn forget(&mut self, position: (u64, u32)) {
        self.changes.remove(&position);
    }

    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

impl State {
    /// Records the event of a put of `key` (now `record`) that replaced `prev`.
    pub(crate) fn push_put_event(
        &mut self,
        revision: u64,
        key: &str,
        record: &KeyRecord,
        prev: Option<cow::Shared<KeyRecord>>,
    ) {
        let position = self.push_event(
            revision,
            crate::events::Event::Put {
                key: key.to_string(),
                value: record.value.clone(),
                lease_id: record.lease_id,
            },
        );
        let change = KeyChange {
            create_revision: record.create_revision,
            version: record.version,
            prev,
        };
        self.key_changes.insert(position, change);
    }

    /// Records the event of the delete of `key`, which was `prev`.
    pub(crate) fn push_delete_event(
        &mut self,
        revision: u64,
        key: &str,
        prev: cow::Shared<KeyRecord>,
    ) {
        let position = self.push_event(
            revision,
            crate::events::Event::Delete {
                key: key.to_string(),
            },
        );
        let change = KeyChange {
            create_revision: 0,
            version: 0,
            prev: Some(prev),
        };
        self.key_changes.insert(position, change);
    }
}

#[cfg(test)]
#[path = "key_changes_test.rs"]
mod key_changes_test;
