//! The Raft log store: `SledLogStore<C>` keeps openraft's log entries and its metadata (vote,
//! committed and last-purged log ids) in ONE sled `Db`, and acknowledges appends and votes only
//! after a real `fdatasync`, group-committed by the thread in `log_store/flusher.rs`.
//!
//! Why one `Db`: sled writes every tree of a `Db` to one sequential log and recovers a prefix of
//! it after a crash, so a vote, a truncation or a committed id can never survive while a write
//! made before it is lost. That ordering is what openraft asks of vote and log IO.

mod codec;
mod disk;
mod flusher;
pub mod histogram;
pub mod mark;
mod purger;
mod tail;
#[cfg(test)]
mod tail_test;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::time::Instant;

use openraft::alias::LogIdOf;
use openraft::alias::VoteOf;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::type_config::TypeConfigExt;
use openraft::LogState;
use openraft::OptionalSend;
use openraft::RaftLogReader;
use openraft::RaftTypeConfig;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::disk::check_blobs_empty;
pub use self::disk::open_db;
pub use self::flusher::SyncFailure;
pub use self::flusher::SYNC_FAILED_EXIT_CODE;

use self::codec::decode;
use self::codec::encode;
use self::codec::encode_entries;
use self::codec::invalid_data;
use self::codec::key_index;
use self::codec::key_range;
use self::disk::sync_store_files;
use self::flusher::Flusher;
use self::flusher::MarkSource;
use self::flusher::SyncCounters;
use self::flusher::WaitKind;
use self::flusher::Waiter;
use self::tail::Tail;

/// sled's segment (io buffer) size, fixed when a store is created (sled refuses to reopen a `Db`
/// with another value). sled moves any single log item larger than about a quarter segment to
/// `<dir>/blobs/`, which it never syncs. An item is not one value: when sled consolidates a leaf
/// page it writes the WHOLE leaf as one item, so the threshold must hold a full leaf of the
/// largest entries. With the default 512 KiB segment, leaves of ~16 KB entries already spill
/// (measured on sled 0.34.7); 16 MiB, sled's maximum, lifts the threshold to ~4 MiB.
/// `Config::segment_size` is `#[doc(hidden)]` in sled; the exact `=0.34.7` pin keeps it stable.
pub const SLED_SEGMENT_BYTES: usize = 16 * 1024 * 1024;

/// Smallest item sled writes to `blobs/`: a quarter segment, less a segment header we round up.
const SLED_ITEM_BYTES_BLOB_MIN: usize = SLED_SEGMENT_BYTES / 4 - 1024;

/// Entries one sled leaf holds in the worst case we allow for: sled splits a leaf past 16
/// items, a merge adds fewer than 4, and we double that for concurrent writers.
const LEAF_ENTRIES_MAX: usize = 40;

/// Largest encoded log entry `append` accepts. A leaf full of them stays below sled's blob
/// threshold (checked at compile time below), so no acknowledged entry can sit in unsynced
/// `blobs/`. An oversized entry is refused with `InvalidInput` instead of being written, and
/// openraft treats that as fatal, so the API layer must reject commands well below it.
pub const ENTRY_BYTES_MAX: usize = 96 * 1024;

const _: () = assert!(ENTRY_BYTES_MAX * LEAF_ENTRIES_MAX < SLED_ITEM_BYTES_BLOB_MIN);

/// Upper bound on the bytes one `limited_get_log_entries` call returns (at least one entry is
/// always returned), so a far-behind follower is fed in pieces, not with the whole log.
const READ_BYTES_MAX: usize = 8 * 1024 * 1024;

const LOG_TREE: &str = "log";
const META_TREE: &str = "meta";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// Why a log store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// sled has written items to `blobs/`, which it never fsyncs: data there may not survive a
    /// power loss, and a store that once needed it cannot be trusted.
    #[error("sled blob directory {path} is not empty; its items are never synced, refusing to use this store")]
    BlobsNotEmpty { path: PathBuf },
    /// The blob directory exists but cannot be listed.
    #[error("cannot list sled blob directory {path}: {source}")]
    ReadBlobs { path: PathBuf, source: io::Error },
    /// Another open store (in this or another process) still holds sled's lock on `<dir>/db`.
    #[error("sled database at {path} is locked by another open store")]
    Locked { path: PathBuf },
    /// sled failed to open or recover the database.
    #[error("cannot open sled database at {path}: {source}")]
    OpenDb { path: PathBuf, source: sled::Error },
    /// sled failed to open one of the store's trees.
    #[error("cannot open sled tree {tree:?}: {source}")]
    OpenTree {
        tree: &'static str,
        source: sled::Error,
    },
    /// A file or directory of the store could not be opened or fsynced at open.
    #[error("cannot open or sync {path}: {source}")]
    SyncFile { path: PathBuf, source: io::Error },
    /// The store reopened with its committed index below the sync mark (`mark.rs`): sled
    /// dropped writes that had been synced, which a crash cannot do and a damaged byte can.
    #[error(
        "log store at {path} lost writes it had synced: its committed index is {committed}, but \
         {marked} was synced (a damaged byte in the log: sled drops everything written after \
         it). This node's log cannot be trusted: move its data dir aside, start it empty with \
         --initial-cluster-state existing and re-add it (`turnstile member remove`, `member \
         add`, `member promote`; docs/operations.md, \"Replacing a node\")"
    )]
    LostSynced {
        path: PathBuf,
        committed: u64,
        marked: u64,
    },
    /// Stored metadata or entries could not be read back at open.
    #[error("log store at {path} is unreadable: {source}")]
    Corrupt { path: PathBuf, source: io::Error },
    /// The flusher thread could not be started.
    #[error("cannot start the log flusher thread: {source}")]
    SpawnFlusher { source: io::Error },
    /// The purge thread could not be started.
    #[error("cannot start the log purge thread: {source}")]
    SpawnPurger { source: io::Error },
}

/// Durability counters of one store, shared by all its clones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// `append` calls that wrote their entries.
    pub append_batches: u64,
    /// Entries written by those calls.
    pub entries_appended: u64,
    /// `fdatasync` calls on `<dir>/db`, votes and purges included.
    pub fdatasyncs: u64,
    /// `append` callbacks completed with `Ok` (entries durable).
    pub acked_batches: u64,
    /// Entries read back from the in-memory tail of the newest entries (`log_store/tail.rs`).
    pub entries_read_from_tail: u64,
    /// Entries read back from sled (older than the tail covers).
    pub entries_read_from_tree: u64,
}

impl SyncStats {
    fn of(c: &SyncCounters) -> Self {
        Self {
            append_batches: SyncCounters::get(&c.append_batches),
            entries_appended: SyncCounters::get(&c.entries_appended),
            fdatasyncs: SyncCounters::get(&c.fdatasyncs),
            acked_batches: SyncCounters::get(&c.acked_batches),
            entries_read_from_tail: SyncCounters::get(&c.entries_read_from_tail),
            entries_read_from_tree: SyncCounters::get(&c.entries_read_from_tree),
        }
    }
}

/// openraft log storage on sled with fdatasync'd, group-committed appends. Cloning is cheap
/// (one `Arc`); all clones share the `Db`, the flusher thread and the counters. Dropping the last
/// clone blocks for at most one final sync while the flusher drains its queue and exits.
pub struct SledLogStore<C: RaftTypeConfig> {
    shared: Arc<Shared<C>>,
}

struct Shared<C: RaftTypeConfig> {
    /// Deletes purged entries beside the log (`purger.rs`); dropped first, which stops it.
    purger: purger::Purger,
    /// Dropping it (with the last clone) runs a final sync of anything queued and joins the
    /// thread, so a clean shutdown acknowledges every append it accepted.
    flusher: Flusher<C>,
    log: sled::Tree,
    meta: sled::Tree,
    /// Held (never across an await) while a write reaches sled and its waiter is queued, so the
    /// flusher's queue order is the order writes hit the log. A std mutex suffices: the section
    /// is short and synchronous.
    write_order: Arc<Mutex<()>>,
    /// The newest entries, decoded, mirroring the tree (`tail.rs`). Changed only while
    /// `write_order` is held, right after the tree, so both see writes in one order; readers
    /// take only this lock.
    tail: Mutex<Tail<C::Entry>>,
    counters: Arc<SyncCounters>,
}

impl<C: RaftTypeConfig> Clone for SledLogStore<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: RaftTypeConfig> fmt::Debug for SledLogStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledLogStore")
            .field("stats", &self.sync_stats())
            .finish()
    }
}

impl<C: RaftTypeConfig> SledLogStore<C> {
    /// Opens (or creates) the store in `dir` and starts its flusher thread. Refuses a `dir` whose
    /// `blobs/` holds anything, fsyncs sled's files and directory once, and deletes entries left
    /// at or below `last_purged` by an interrupted purge. Open each `dir` once per process: sled
    /// locks it. A failed sync fails every waiter from then on ([`SyncFailure::FailWaiters`]).
    pub fn open(dir: &Path) -> Result<Self, LogStoreError> {
        Self::open_with(dir, SyncFailure::FailWaiters)
    }

    /// [`SledLogStore::open`] with what a failed sync does (the server exits).
    pub fn open_with(dir: &Path, on_sync_failure: SyncFailure) -> Result<Self, LogStoreError> {
        check_blobs_empty(dir)?;
        let db = open_db(dir)?;
        let open_tree = |tree: &'static str| {
            db.open_tree(tree)
                .map_err(|source| LogStoreError::OpenTree { tree, source })
        };
        let log = open_tree(LOG_TREE)?;
        let meta = open_tree(META_TREE)?;
        let next_index = match log.last() {
            Ok(Some((key, _))) => key_index(&key).map(|i| i + 1),
            Ok(None) => Ok(0),
            Err(e) => Err(e.into()),
        }
        .map_err(|source| LogStoreError::Corrupt {
            path: dir.to_path_buf(),
            source,
        })?;
        let db_file = sync_store_files(dir)?;
        let counters = Arc::new(SyncCounters::default());
        let marked = mark::read(dir).map_err(|source| LogStoreError::Corrupt {
            path: dir.join(mark::MARK_FILE),
            source,
        })?;
        let mark_source = MarkSource {
            dir: dir.to_path_buf(),
            meta: meta.clone(),
        };
        let flusher = Flusher::spawn(
            db,
            db_file,
            mark_source,
            Arc::clone(&counters),
            on_sync_failure,
        )
        .map_err(|source| LogStoreError::SpawnFlusher { source })?;
        let write_order = Arc::new(Mutex::new(()));
        let purger = purger::Purger::spawn(log.clone(), Arc::clone(&write_order))
            .map_err(|source| LogStoreError::SpawnPurger { source })?;
        let shared = Shared {
            purger,
            flusher,
            log,
            meta,
            write_order,
            tail: Mutex::new(Tail::new(next_index)),
            counters,
        };
        let store = Self {
            shared: Arc::new(shared),
        };
        store
            .recover_at_open()
            .map_err(|source| LogStoreError::Corrupt {
                path: dir.to_path_buf(),
                source,
            })?;
        if let Some(marked) = marked {
            let committed = store
                .read_meta::<Option<LogIdOf<C>>>(KEY_COMMITTED)
                .map_err(|source| LogStoreError::Corrupt {
                    path: dir.to_path_buf(),
                    source,
                })?
                .flatten()
                .map_or(0, |l| l.index());
            if committed < marked {
                return Err(LogStoreError::LostSynced {
                    path: dir.to_path_buf(),
                    committed,
                    marked,
                });
            }
        }
        Ok(store)
    }

    /// A snapshot of the durability counters.
    pub fn sync_stats(&self) -> SyncStats {
        SyncStats::of(&self.shared.counters)
    }

    /// `purge` syncs `last_purged` before deleting, so a crash can leave entries at or below it.
    /// Deleting them here restores "every stored entry is above `last_purged`". Decoding all the
    /// metadata here turns a layout mismatch into an open error instead of a fatal Raft error.
    fn recover_at_open(&self) -> io::Result<()> {
        let _vote: Option<VoteOf<C>> = self.read_meta(KEY_VOTE)?;
        let _committed: Option<Option<LogIdOf<C>>> = self.read_meta(KEY_COMMITTED)?;
        if let Some(last_purged) = self.read_meta::<LogIdOf<C>>(KEY_LAST_PURGED)? {
            drop(self.delete_range(..=last_purged.index())?);
        }
        Ok(())
    }

    fn lock_tail(&self) -> MutexGuard<'_, Tail<C::Entry>> {
        // Every update leaves the tail consistent before the next one starts (no early return
        // between the tree write and the tail's), and a panic in one cannot leave it torn.
        self.shared
            .tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_write_order(&self) -> MutexGuard<'_, ()> {
        // The guarded data is `()`: a panic while holding the lock cannot corrupt it.
        self.shared
            .write_order
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.shared.meta.get(key)? {
            None => Ok(None),
            Some(bytes) => decode(&bytes).map(Some),
        }
    }

    /// Writes a metadata value without waiting for it to be durable.
    fn insert_meta<T: Serialize>(&self, key: &[u8], value: &T) -> io::Result<()> {
        let bytes = encode(value)?;
        let _order = self.lock_write_order();
        self.shared.meta.insert(key, bytes)?;
        Ok(())
    }

    /// Writes a metadata value and waits until it, and every write before it, is on disk.
    async fn insert_meta_durable<T: Serialize>(&self, key: &[u8], value: &T) -> io::Result<()> {
        let bytes = encode(value)?;
        let (tx, rx) = C::oneshot();
        {
            let _order = self.lock_write_order();
            self.shared.meta.insert(key, bytes)?;
            let waiter = Waiter {
                callback: IOFlushed::signal(tx),
                kind: WaitKind::Barrier,
                entries: 0,
                queued_at: Instant::now(),
            };
            self.shared.flusher.enqueue(waiter);
        }
        match rx.await {
            Ok(synced) => synced,
            Err(err) => Err(io::Error::other(format!(
                "log flusher dropped a sync request: {err}"
            ))),
        }
    }

    /// Deletes every entry with an index in `range`, in one atomic sled batch. Returns the
    /// write-order lock, still held, so the caller can bring the tail along before any other
    /// write.
    fn delete_range<R: RangeBounds<u64>>(&self, range: R) -> io::Result<MutexGuard<'_, ()>> {
        let mut batch = sled::Batch::default();
        for key in self.shared.log.range(key_range(&range)).keys() {
            batch.remove(key?);
        }
        let order = self.lock_write_order();
        self.shared.log.apply_batch(batch)?;
        Ok(order)
    }

    /// Reads entries in `range` in index order. Stops early once `bytes_max` is reached (after at
    /// least one entry); fails on a gap, since openraft must never see a hole.
    fn read_entries<R: RangeBounds<u64>>(
        &self,
        range: &R,
        bytes_max: usize,
    ) -> io::Result<Vec<C::Entry>>
    where
        C::Entry: Clone,
    {
        let (start, end) = index_span(range);
        if let Some(entries) = self.lock_tail().read(start, end, bytes_max) {
            SyncCounters::add(
                &self.shared.counters.entries_read_from_tail,
                entries.len() as u64,
            );
            return Ok(entries);
        }
        let mut entries: Vec<C::Entry> = Vec::new();
        let mut bytes_read = 0usize;
        for item in self.shared.log.range(key_range(range)) {
            let (key, value) = item?;
            let index = key_index(&key)?;
            let entry: C::Entry = decode(&value)?;
            if entry.index() != index {
                return Err(invalid_data(format!(
                    "log key {index} holds entry {}",
                    entry.index()
                )));
            }
            if let Some(prev) = entries.last() {
                if prev.index() + 1 != index {
                    return Err(invalid_data(format!(
                        "log hole between {} and {index}",
                        prev.index()
                    )));
                }
            }
            entries.push(entry);
            bytes_read += value.len();
            if bytes_read >= bytes_max {
                break;
            }
        }
        SyncCounters::add(
            &self.shared.counters.entries_read_from_tree,
            entries.len() as u64,
        );
        Ok(entries)
    }
}

/// The first index of `range` and one past its last (`u64::MAX` for no end).
fn index_span<R: RangeBounds<u64>>(range: &R) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl<C: RaftTypeConfig> RaftLogReader<C> for SledLogStore<C>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        self.read_entries(&range, usize::MAX)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        self.read_meta(KEY_VOTE)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, io::Error> {
        self.read_entries(&(start..end), READ_BYTES_MAX)
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for SledLogStore<C>
where
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let last_purged_log_id: Option<LogIdOf<C>> = self.read_meta(KEY_LAST_PURGED)?;
        let last_entry = match self.shared.log.last()? {
            Some((_key, value)) => Some(decode::<C::Entry>(&value)?.log_id()),
            None => None,
        };
        // The purge thread may not have deleted everything at or below `last_purged` yet.
        let last_log_id = match (last_entry, last_purged_log_id.clone()) {
            (Some(entry), Some(purged)) if purged.index() > entry.index() => Some(purged),
            (Some(entry), _) => Some(entry),
            (None, purged) => purged,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Durable before it returns: the vote is inserted, then the flusher's next group commit
    /// (sled flush + fdatasync) covers it.
    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        self.insert_meta_durable(KEY_VOTE, vote).await
    }

    /// Written without a sync: `committed` is an optimization that openraft re-derives from the
    /// cluster after a restart. Losing the latest value only means re-applying fewer entries at
    /// startup, and sled's prefix recovery means a surviving value never points past entries
    /// written before it.
    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        self.insert_meta(KEY_COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        Ok(self
            .read_meta::<Option<LogIdOf<C>>>(KEY_COMMITTED)?
            .flatten())
    }

    /// Entries are in sled (readable) when this returns; `callback` fires from the flusher
    /// thread once a group commit has made them durable.
    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let called_at = Instant::now();
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        let encoded = encode_entries::<C, _>(&entries)?;
        let count = encoded.len() as u64;
        let lens: Vec<usize> = encoded.iter().map(|(_, value)| value.len()).collect();
        let counters = &self.shared.counters;
        let _order = self.lock_write_order();
        // Plain inserts in index order, not a `sled::Batch`: sled writes its io buffer out
        // (pwrite + a waiting `sync_file_range`) before AND after every batch, and the next
        // group commit waits for all those writes (mean sync 0.60 ms with batches, 0.42 ms
        // without, docs/benchmarks.md). Atomicity is not needed: sled recovers a prefix of its
        // log, so a crash mid-append leaves the first k entries of the append, still without a
        // hole, and nothing of it was acknowledged (the callback waits for the flusher's sync).
        for (key, value) in encoded {
            self.shared.log.insert(key, value)?;
        }
        // The entries go to the tail as they are: replication and apply read them back soon.
        self.lock_tail().written(entries.into_iter().zip(lens));
        SyncCounters::add(&counters.append_batches, 1);
        SyncCounters::add(&counters.entries_appended, count);
        let waiter = Waiter {
            callback,
            kind: WaitKind::Append,
            entries: count,
            queued_at: called_at,
        };
        self.shared.flusher.enqueue(waiter);
        Ok(())
    }

    /// Deletes (last_log_id, ∞) without a sync. If a crash loses the deletion, sled's prefix
    /// recovery also loses every write after it, which leaves the state of a crash just before
    /// the truncation; openraft truncates again.
    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        tracing::debug!(last_log_id = ?last_log_id, "log truncate_after");
        let last = last_log_id.map(|l| l.index());
        let _order = match last {
            None => self.delete_range(..)?,
            Some(index) => self.delete_range((Bound::Excluded(index), Bound::Unbounded))?,
        };
        self.lock_tail().truncated_after(last);
        Ok(())
    }

    /// Makes `last_purged` durable FIRST, then has [0, log_id.index] deleted. The other order
    /// could leave, after a crash, a log whose first entries are gone while nothing says they
    /// were purged: a hole to openraft. The deletion runs on the purge thread (`purger.rs`), so
    /// a large purge does not stall openraft's core; one lost in a crash is finished by `open`.
    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        tracing::debug!(log_id = %log_id, "log purge");
        self.insert_meta_durable(KEY_LAST_PURGED, &log_id).await?;
        {
            let _order = self.lock_write_order();
            self.lock_tail().purged_through(log_id.index());
        }
        self.shared.purger.purge_through(log_id.index());
        Ok(())
    }
}

/// Reads a store's counters without keeping the store (and sled's lock on its directory)
/// alive, so a node can report them and still release its data dir on shutdown.
#[derive(Debug, Clone)]
pub struct SyncStatsHandle {
    counters: Arc<SyncCounters>,
}

impl SyncStatsHandle {
    /// A snapshot of the durability counters.
    pub fn get(&self) -> SyncStats {
        SyncStats::of(&self.counters)
    }

    /// A snapshot of the sync-latency and batch-size histograms.
    pub fn histograms(&self) -> histogram::SyncHistogramsSnapshot {
        self.counters.histograms.snapshot()
    }
}

impl<C: RaftTypeConfig> SledLogStore<C> {
    /// A counters handle that does not keep the store open.
    pub fn stats_handle(&self) -> SyncStatsHandle {
        SyncStatsHandle {
            counters: Arc::clone(&self.shared.counters),
        }
    }
}
