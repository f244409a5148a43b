//! `Command::Many` and `Command::KeyWrites`: several client commands in one log entry.
//!
//! Why: most of what a write costs on each node is paid per log entry, not per command (the
//! entry's encoding and its sled record on every node, its place in each append, its apply
//! bookkeeping and its answer). The leader's proposer (`turnstile-server/src/proposer.rs`)
//! puts concurrent acquires and releases into one `Many` entry, and concurrent key writes
//! into one `KeyWrites` entry, so those costs are paid once for all of them.
//!
//! The rule that keeps fencing exact. A token is the index of the entry that granted it, so
//! everything granted by one entry shares one number; that is safe as long as one entry never
//! grants the same exclusive lock twice. An item of a `Many` entry may be:
//! - only an acquire or a release (`admits`), each possibly inside `Command::As`. These touch
//!   the locks they name and their lease, and a release may hand its lock (with every other
//!   lock of the waiter's ticket) to waiters; no lease ends, no ticket is cancelled;
//! - naming no lock that an earlier item of the entry names (`Batch::try_add` on the leader;
//!   checked again at apply, `check`), so no two items acquire or release the same lock;
//! - not releasing a hold made by this same entry (token equal to the entry's index): no
//!   honest client can know that token before the entry is applied, and such a release
//!   would let the lock be granted again within the entry with the same token.
//!
//! A lock is then granted at most once per entry as exclusive: a grant by an item names it
//! (no later item names it again) or hands it to a waiter after a release (the waiter then
//! holds it, and only a release of that hold could free it within the entry, which the third
//! rule refuses). The same holds for the grants the entry's opening expiry makes.
//!
//! An item of a `KeyWrites` entry is a `KvPut` or `KvDelete` (possibly inside `Command::As`)
//! of a key no earlier item of the entry names. Such writes grant nothing; each one's
//! condition is about its own key, and its fence reads a lock that no item of the entry
//! changes, so each sees what it would see alone. What they share is the `revision`: two keys
//! written by one entry have the same `mod_revision` (and `create_revision`, if both were
//! created), as two keys of one transaction have. The etcd port, whose clients rank keys by
//! `create_revision` (etcd's lock and election recipes), proposes its puts as transactions,
//! which never share an entry.
//!
//! Items are applied in order with the entry's `sm_time`, each exactly as it would be alone
//! (request-id records, quotas and permissions per item), and each gets its own `Response`
//! with the entry's index as its `revision`.

use std::collections::BTreeSet;

use crate::command::{Command, Condition, Fence, Item};
use crate::response::{ApplyError, Outcome, Response};

/// Items one entry carries at most.
pub const ITEMS_MAX: usize = 256;

/// Bytes of strings (names, keys, values, request ids) one entry's items carry at most (an
/// estimate of its encoded size, well below the log's 96 KiB entry limit: an acquire names at
/// most 64 locks of at most 256 bytes, 16 KiB). A key write with a larger value goes alone.
pub const ITEM_BYTES_MAX: usize = 32 * 1024;

/// Bytes an item costs besides its strings, in `ITEM_BYTES_MAX`'s estimate: the variant
/// tags, lease, token, mode and wait (or a key write's lease, condition revision and fence
/// token), each at most a 10-byte varint, rounded up.
const ITEM_OVERHEAD_BYTES: usize = 64;

/// Which multi-item entry a command may be an item of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Command::Many`: lock acquires and releases.
    Locks,
    /// `Command::KeyWrites`: key puts and deletes.
    Keys,
}

impl Kind {
    /// The entry's `Command::kind`, for refusals.
    fn entry_name(self) -> &'static str {
        match self {
            Kind::Locks => "many",
            Kind::Keys => "key_writes",
        }
    }

    /// The entry's command for `items` of this kind.
    pub fn command(self, items: Vec<Item>) -> Command {
        match self {
            Kind::Locks => Command::Many { items },
            Kind::Keys => Command::KeyWrites { items },
        }
    }
}

/// The entry kind that admits `command` as an item, and the names (locks, or the key) no
/// other item of that entry may name; `None` if no multi-item entry admits it.
pub fn admits(command: &Command) -> Option<(Kind, &[String])> {
    match command {
        Command::LockAcquire { name, .. } | Command::LockRelease { name, .. } => {
            Some((Kind::Locks, std::slice::from_ref(name)))
        }
        Command::Acquire { names, .. } | Command::AcquireFor { names, .. } => {
            Some((Kind::Locks, names))
        }
        Command::KvPut { key, .. } | Command::KvDelete { key, .. } => {
            Some((Kind::Keys, std::slice::from_ref(key)))
        }
        Command::As { command, .. } => admits(command),
        _ => None,
    }
}

/// The estimate `ITEM_BYTES_MAX` bounds: every string the item carries, with its length
/// prefix, plus `ITEM_OVERHEAD_BYTES`.
fn item_bytes(item: &Item) -> usize {
    let string = |s: &str| s.len() + 8;
    let mut bytes = ITEM_OVERHEAD_BYTES + item.request_id.as_deref().map_or(0, string);
    // Every `As` level `admits` looks through (apply refuses a nested one, but the estimate
    // must not be the part that trusts it).
    let mut command = &item.command;
    while let Command::As {
        principal,
        token_id,
        command: inner,
    } = command
    {
        bytes += string(principal) + token_id.as_deref().map_or(0, string);
        command = inner;
    }
    bytes += match command {
        Command::LockAcquire { name, .. } | Command::LockRelease { name, .. } => string(name),
        Command::Acquire { names, .. } | Command::AcquireFor { names, .. } => {
            names.iter().map(|n| string(n)).sum()
        }
        Command::KvPut {
            key,
            value,
            condition,
            fence,
            ..
        } => string(key) + string(value) + key_guards_bytes(condition, fence),
        Command::KvDelete {
            key,
            condition,
            fence,
        } => string(key) + key_guards_bytes(condition, fence),
        _ => 0,
    };
    bytes
}

/// The strings of a key write's condition and fence, with their length prefixes.
fn key_guards_bytes(condition: &Option<Condition>, fence: &Option<Fence>) -> usize {
    let condition = match condition {
        Some(Condition::Value(v)) => v.len() + 8,
        _ => 0,
    };
    condition + fence.as_ref().map_or(0, |f| f.lock.len() + 8)
}

/// An entry's items as the leader gathers them: all of one `Kind`, set by the first.
#[derive(Debug, Default)]
pub struct Batch {
    kind: Option<Kind>,
    items: Vec<Item>,
    names: BTreeSet<String>,
    bytes: usize,
}

impl Batch {
    /// Adds the command if an entry of the batch's kind admits it and it fits: nothing named
    /// twice, at most `ITEMS_MAX` items and `ITEM_BYTES_MAX` bytes. Gives it back otherwise
    /// (boxed: a command is large, and a refusal is the rarer path).
    pub fn try_add(&mut self, item: Item) -> Result<(), Box<Item>> {
        let Some((kind, names)) = admits(&item.command) else {
            return Err(Box::new(item));
        };
        let bytes = item_bytes(&item);
        let fits = self.kind.is_none_or(|k| k == kind)
            && self.items.len() < ITEMS_MAX
            && self.bytes + bytes <= ITEM_BYTES_MAX
            && names.iter().all(|n| !self.names.contains(n));
        if !fits {
            return Err(Box::new(item));
        }
        self.kind = Some(kind);
        self.names.extend(names.iter().cloned());
        self.bytes += bytes;
        self.items.push(item);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The kind of entry the items go in, and the items in the order they were added; `None`
    /// for an empty batch.
    pub fn into_entry(self) -> Option<(Kind, Vec<Item>)> {
        Some((self.kind?, self.items))
    }
}

/// What apply checks of item `position` of an entry of `kind` before running it, with
/// `named` what the earlier items named (extended here). The leader never proposes an item
/// this refuses; a log written by another leader is still judged by the same rule on every
/// node.
pub(crate) fn check(
    kind: Kind,
    position: usize,
    item: &Item,
    index: u64,
    named: &mut BTreeSet<String>,
) -> Result<(), ApplyError> {
    let invalid = |reason: String| Err(ApplyError::Invalid { reason });
    let entry = kind.entry_name();
    if position >= ITEMS_MAX {
        return invalid(format!("a {entry} entry carries at most {ITEMS_MAX} items"));
    }
    let names = match admits(&item.command) {
        Some((k, names)) if k == kind => names,
        _ => {
            return invalid(format!(
                "a {entry} entry cannot carry {}",
                item.command.kind()
            ))
        }
    };
    if let Some(name) = names.iter().find(|n| named.contains(*n)) {
        return invalid(format!("{name} is named twice in one {entry} entry"));
    }
    named.extend(names.iter().cloned());
    if let Command::LockRelease {
        name,
        lease_id,
        token,
    } = item.command.inner()
    {
        // A hold granted by this very entry: its token was not yet known to anyone.
        if *token == index {
            return Err(ApplyError::NotHolder {
                name: name.clone(),
                lease_id: *lease_id,
                token: *token,
            });
        }
    }
    Ok(())
}

/// The commands an applied entry answered, each with its response: every item of a
/// `Command::Many` or `Command::KeyWrites` entry, or the entry's own command. For observers (metrics) that count
/// per command.
pub fn answered<'a>(
    command: &'a Command,
    response: &'a Response,
) -> Vec<(&'a Command, &'a Response)> {
    match (command, &response.outcome) {
        (
            Command::Many { items } | Command::KeyWrites { items },
            Ok(Outcome::Many { responses }),
        ) => items
            .iter()
            .map(|item| &item.command)
            .zip(responses)
            .collect(),
        _ => vec![(command, response)],
    }
}

#[cfg(test)]
#[path = "many_test.rs"]
mod tests;
