//! The newest log entries, kept decoded in memory, so replication and apply read them without
//! going back to sled.
//!
//! Every entry the leader appends is read back at least three times soon after: once by the
//! replication task of each follower and once by the state machine worker (openraft re-reads
//! the log; it does not hand the appended entries on). Each sled read walks the tree and
//! decodes the entry again. The tail serves those reads from the entries `append` was given.
//!
//! It is a mirror, not a second source of truth: every write to the log store's tree passes
//! through it in the same order, under the store's write-order lock, and it answers a read only
//! when it holds the whole answer. Its invariant: for every index at or above
//! [`Tail::first_index`], the tail holds exactly the entry the tree holds, and the tree holds
//! nothing past the tail's last entry. A read that starts below `first_index` goes to sled.
//!
//! Bounded by [`TAIL_ENTRIES_MAX`] entries and [`TAIL_BYTES_MAX`] encoded bytes; the oldest go
//! first.

use std::collections::VecDeque;

use openraft::entry::RaftEntry;

/// Most entries the tail keeps. Replication and apply trail the newest entry by a few group
/// commits in normal operation; a follower further behind reads from sled.
pub const TAIL_ENTRIES_MAX: usize = 4_096;
/// Most encoded bytes the tail keeps (its entries take more than this in memory, by a small
/// factor: the encoded size is what we know without walking each entry).
pub const TAIL_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The newest log entries, each with its encoded length.
#[derive(Debug)]
pub(super) struct Tail<E> {
    entries: VecDeque<(E, usize)>,
    /// Index of `entries[0]`, or, when empty, the lowest index the tail may start at.
    first: u64,
    bytes: usize,
    entries_max: usize,
    bytes_max: usize,
}

impl<E: RaftEntry> Tail<E> {
    /// An empty tail over a log whose next entry will be `next_index` (the tree holds nothing at
    /// or above it).
    pub(super) fn new(next_index: u64) -> Self {
        Self::with_limits(next_index, TAIL_ENTRIES_MAX, TAIL_BYTES_MAX)
    }

    pub(super) fn with_limits(next_index: u64, entries_max: usize, bytes_max: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            first: next_index,
            bytes: 0,
            entries_max,
            bytes_max,
        }
    }

    /// Lowest index this tail answers for.
    #[cfg(test)]
    pub(super) fn first_index(&self) -> u64 {
        self.first
    }

    /// One past the last entry held.
    fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    /// Records entries just written to the tree (each with its encoded length), in index order.
    pub(super) fn written(&mut self, batch: impl IntoIterator<Item = (E, usize)>) {
        for (entry, len) in batch {
            let index = entry.index();
            if index < self.first {
                // The tree changed below what the tail covers: nothing of ours to update.
                continue;
            }
            if index < self.end() {
                let slot = &mut self.entries[(index - self.first) as usize];
                self.bytes = self.bytes - slot.1 + len;
                *slot = (entry, len);
            } else {
                if index > self.end() {
                    // A gap (never made by openraft, which appends at the end). The tree holds
                    // nothing at or past `end`, so a tail starting here is still exact.
                    self.entries.clear();
                    self.bytes = 0;
                    self.first = index;
                }
                self.entries.push_back((entry, len));
                self.bytes += len;
            }
        }
        self.evict();
    }

    /// Mirrors the deletion of every entry above `last` (all of them for `None`).
    pub(super) fn truncated_after(&mut self, last: Option<u64>) {
        let keep_end = last.map_or(0, |l| l + 1);
        if keep_end <= self.first {
            self.entries.clear();
            self.bytes = 0;
            self.first = keep_end;
            return;
        }
        while self.end() > keep_end {
            if let Some((_, len)) = self.entries.pop_back() {
                self.bytes -= len;
            }
        }
    }

    /// Forgets every entry at or below `through`: they are purged, and nothing reads them again.
    pub(super) fn purged_through(&mut self, through: u64) {
        while self.first <= through {
            match self.entries.pop_front() {
                Some((_, len)) => {
                    self.bytes -= len;
                    self.first += 1;
                }
                None => {
                    self.first = through + 1;
                    break;
                }
            }
        }
    }

    fn evict(&mut self) {
        while self.entries.len() > self.entries_max || self.bytes > self.bytes_max {
            match self.entries.pop_front() {
                Some((_, len)) => {
                    self.bytes -= len;
                    self.first += 1;
                }
                None => break,
            }
        }
    }
}

impl<E: RaftEntry + Clone> Tail<E> {
    /// The entries in `[start, end)` as the tree would return them (stopping once `bytes_max`
    /// encoded bytes are read, after at least one entry), or `None` if `start` is below what
    /// the tail covers.
    pub(super) fn read(&self, start: u64, end: u64, bytes_max: usize) -> Option<Vec<E>> {
        if start < self.first {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes_read = 0usize;
        let skip = (start - self.first).min(self.entries.len() as u64) as usize;
        for (entry, len) in self.entries.iter().skip(skip) {
            if entry.index() >= end {
                break;
            }
            out.push(entry.clone());
            bytes_read += len;
            if bytes_read >= bytes_max {
                break;
            }
        }
        Some(out)
    }
}
