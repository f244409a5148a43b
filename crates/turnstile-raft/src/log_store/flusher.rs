//! The log store's flusher thread: group commit for `SledLogStore`. Writers queue `IOFlushed`
//! callbacks here; the thread takes every queued callback, makes them durable with ONE
//! `db.flush()` + ONE `fdatasync`, and completes them in queue order. After a sync it writes
//! the sync mark (`mark.rs`) when one is due.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use openraft::alias::LogIdOf;
use openraft::storage::IOFlushed;
use openraft::RaftTypeConfig;

use super::histogram::micros;
use super::histogram::SyncHistograms;
use super::mark;

/// Name of the flusher thread, as shown by `top -H` and in panics.
const THREAD_NAME: &str = "turnstile-log-flusher";

/// The process's exit status after a failed log sync ([`SyncFailure::ExitProcess`]): 74 is
/// `EX_IOERR` in sysexits.h.
pub const SYNC_FAILED_EXIT_CODE: i32 = 74;

/// What the flusher does when `db.flush()` or `fdatasync` fails.
///
/// On Linux a failed `fdatasync` may drop the dirty pages it could not write and report success
/// next time ("fsyncgate", PostgreSQL 2018), so a later success would not cover the earlier
/// writes: the store never syncs again after a failure, whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncFailure {
    /// Fail the batch and every later waiter; the process carries on without a log (its Raft
    /// core stops on the storage error). For tests of the store itself.
    FailWaiters,
    /// Log the failure and exit the process at once with [`SYNC_FAILED_EXIT_CODE`], before any
    /// waiter of the failed batch is completed: nothing this node could not sync is
    /// acknowledged, peers see it gone rather than half-alive, and a restart on a healthy disk
    /// recovers from what is on disk and from the peers. The server's policy (etcd's too).
    ExitProcess,
    /// BUG, for the disk-fault story's negative control only: treat the failed sync as a
    /// success and acknowledge the batch ("retry and carry on").
    #[cfg(feature = "bug-injection")]
    Ignore,
}

/// Counters shared by every clone of a store and its flusher thread. Relaxed atomics suffice:
/// each counter is monotonic on its own, and a reader that waited for a callback is ordered
/// after the increments by the channel the callback completed.
#[derive(Debug, Default)]
pub(super) struct SyncCounters {
    pub(super) append_batches: AtomicU64,
    pub(super) entries_appended: AtomicU64,
    pub(super) fdatasyncs: AtomicU64,
    pub(super) acked_batches: AtomicU64,
    pub(super) entries_read_from_tail: AtomicU64,
    pub(super) entries_read_from_tree: AtomicU64,
    pub(super) histograms: SyncHistograms,
}

impl SyncCounters {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Why a caller waits for a sync: an `append` (counted in `acked_batches`) or an internal
/// barrier (`save_vote`, `purge`) that must be durable before its caller goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WaitKind {
    Append,
    Barrier,
}

/// One caller waiting for everything written before it to be on disk.
pub(super) struct Waiter<C: RaftTypeConfig> {
    pub(super) callback: IOFlushed<C>,
    pub(super) kind: WaitKind,
    /// Log entries the write carried (0 for a barrier), for the entries-per-sync histogram.
    pub(super) entries: u64,
    /// When the write was asked for (`append` called), for the append latency histogram.
    pub(super) queued_at: Instant,
}

/// The queue between writers and the flusher thread. Its length is bounded by the number of
/// writes that arrive during one `fdatasync`, because every sync drains it completely.
struct Queue<C: RaftTypeConfig> {
    state: Mutex<QueueState<C>>,
    ready: Condvar,
}

struct QueueState<C: RaftTypeConfig> {
    waiters: Vec<Waiter<C>>,
    /// Set by the last store handle: drain what is queued, then exit.
    stopping: bool,
    /// Set by the thread as it exits, normally or by panic: nobody will sync any more, so new
    /// waiters fail at once instead of waiting forever.
    closed: bool,
}

impl<C: RaftTypeConfig> Queue<C> {
    /// Poisoning is ignored: the lock only guards a `Vec::push`, a `mem::take` and a bool store,
    /// none of which can leave the state half-updated if a thread panics.
    fn lock(&self) -> MutexGuard<'_, QueueState<C>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until there is work, then takes all of it; with `sleep_max`, returns an empty
    /// batch once that has passed with no work. `None` means "stop": the store is gone and
    /// every waiter queued before that has been handed out.
    fn take_all(&self, sleep_max: Option<Duration>) -> Option<Vec<Waiter<C>>> {
        let deadline = sleep_max.map(|d| Instant::now() + d);
        let mut state = self.lock();
        while state.waiters.is_empty() && !state.stopping {
            state = match deadline {
                None => self
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Some(Vec::new());
                    }
                    self.ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        if state.waiters.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut state.waiters))
    }
}

/// Where the flusher writes the sync mark, and the tree it reads the committed index from.
pub(super) struct MarkSource {
    pub(super) dir: PathBuf,
    pub(super) meta: sled::Tree,
}

/// Owner of the flusher thread. Dropping it (with the last store handle) stops the thread after
/// a final sync of whatever is still queued, so a clean shutdown loses no acknowledged write.
pub(super) struct Flusher<C: RaftTypeConfig> {
    queue: Arc<Queue<C>>,
    thread: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Flusher<C> {
    /// Starts the thread. It keeps its own `Db` clone and the `<dir>/db` handle it fdatasyncs.
    pub(super) fn spawn(
        db: sled::Db,
        db_file: File,
        mark: MarkSource,
        counters: Arc<SyncCounters>,
        on_failure: SyncFailure,
    ) -> io::Result<Self> {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                waiters: Vec::new(),
                stopping: false,
                closed: false,
            }),
            ready: Condvar::new(),
        });
        let thread_queue = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || run(&thread_queue, &db, &db_file, &mark, &counters, on_failure))?;
        Ok(Self {
            queue,
            thread: Some(thread),
        })
    }

    /// Queues a waiter. The caller holds the store's write-order lock, so queue order is the
    /// order in which the writes reached sled, and callbacks complete in append order.
    pub(super) fn enqueue(&self, waiter: Waiter<C>) {
        let mut state = self.queue.lock();
        if state.closed {
            drop(state);
            waiter.callback.io_completed(Err(closed_error()));
            return;
        }
        state.waiters.push(waiter);
        drop(state);
        self.queue.ready.notify_one();
    }
}

impl<C: RaftTypeConfig> Drop for Flusher<C> {
    fn drop(&mut self) {
        self.queue.lock().stopping = true;
        self.queue.ready.notify_one();
        let Some(thread) = self.thread.take() else {
            return;
        };
        // Joining from the flusher thread itself would deadlock. It cannot hold a store handle
        // today (callbacks only send on channels), but a future callback might.
        if thread.thread().id() == std::thread::current().id() {
            return;
        }
        if thread.join().is_err() {
            tracing::error!("log flusher thread panicked");
        }
    }
}

/// The thread body: sync, complete, repeat. What a failed sync does is `on_failure`'s; after
/// one, no later sync is tried (see [`SyncFailure`]).
fn run<C: RaftTypeConfig>(
    queue: &Queue<C>,
    db: &sled::Db,
    db_file: &File,
    mark: &MarkSource,
    counters: &SyncCounters,
    on_failure: SyncFailure,
) {
    let _close = CloseOnExit(queue);
    let mut failure: Option<(io::ErrorKind, String)> = None;
    let mut marks = MarkState::default();
    while let Some(waiters) = queue.take_all(marks.sleep_max()) {
        if failure.is_some() {
            complete(waiters, failure.as_ref(), counters);
            continue;
        }
        let due = marks.due();
        // Read before the sync, so that the mark claims only what this sync covers.
        let committed = due.then(|| committed_index::<C>(&mark.meta)).flatten();
        if waiters.is_empty() && !marks.is_news(committed) {
            // Woken for a mark with nothing new to mark: no sync needed.
            marks.marked(None);
            continue;
        }
        let started = Instant::now();
        if let Err(err) = sync(db, db_file, counters) {
            failure = judge_failure(&err, waiters.len(), on_failure);
        }
        if !waiters.is_empty() {
            let h = &counters.histograms;
            h.sync_us.observe(micros(started.elapsed()));
            h.sync_batch_entries
                .observe(waiters.iter().map(|w| w.entries).sum());
        }
        complete(waiters, failure.as_ref(), counters);
        // After the callbacks: the mark's own fsync delays no acknowledgement.
        if failure.is_none() {
            marks.synced();
            if due {
                let to_write = committed.filter(|&c| marks.is_news(Some(c)));
                if let Some(c) = to_write {
                    if let Err(e) = mark::write(&mark.dir, c) {
                        tracing::warn!(error = %e, "cannot write the log's sync mark; damage to the synced log may go unnoticed at the next start");
                    }
                }
                marks.marked(to_write);
            }
        }
    }
}

/// When the flusher last wrote the sync mark, what it said, and whether a sync since then is
/// not covered by it. A pending sync wakes the flusher when the next mark is due even if no
/// write comes, so the mark catches up with the last writes before a quiet spell.
#[derive(Default)]
struct MarkState {
    at: Option<Instant>,
    committed: u64,
    unmarked_sync: bool,
}

impl MarkState {
    const INTERVAL: Duration = Duration::from_millis(mark::MARK_INTERVAL_MS);

    fn due(&self) -> bool {
        self.at.is_none_or(|t| t.elapsed() >= Self::INTERVAL)
    }

    /// How long the flusher may sleep with nothing queued.
    fn sleep_max(&self) -> Option<Duration> {
        self.unmarked_sync.then(|| {
            self.at.map_or(Duration::ZERO, |t| {
                Self::INTERVAL.saturating_sub(t.elapsed())
            })
        })
    }

    fn is_news(&self, committed: Option<u64>) -> bool {
        committed.is_some_and(|c| c > self.committed)
    }

    fn synced(&mut self) {
        self.unmarked_sync = true;
    }

    fn marked(&mut self, committed: Option<u64>) {
        self.at = Some(Instant::now());
        self.unmarked_sync = false;
        if let Some(c) = committed {
            self.committed = c;
        }
    }
}

/// The committed index as sled holds it now, if any.
fn committed_index<C: RaftTypeConfig>(meta: &sled::Tree) -> Option<u64> {
    let bytes = meta.get(super::KEY_COMMITTED).ok()??;
    let committed: Option<LogIdOf<C>> = super::codec::decode(&bytes).ok()?;
    committed.map(|l| l.index())
}

/// Acts on a failed sync by `on_failure`; returns the failure every later waiter gets, if any.
fn judge_failure(
    err: &io::Error,
    waiters: usize,
    on_failure: SyncFailure,
) -> Option<(io::ErrorKind, String)> {
    match on_failure {
        SyncFailure::FailWaiters => {
            tracing::error!(error = %err, waiters, "log sync failed; this store acknowledges nothing more");
            Some((err.kind(), err.to_string()))
        }
        SyncFailure::ExitProcess => {
            // The tracing subscriber writes synchronously, so this line is out before exit.
            tracing::error!(
                error = %err,
                waiters,
                exit_code = SYNC_FAILED_EXIT_CODE,
                "log sync (fdatasync) failed: stopping this node now, without acknowledging \
                 anything it could not sync. Check the disk, then restart the node on the same \
                 data dir: it recovers what it synced and catches up from its peers \
                 (docs/operations.md, \"Disk faults\")"
            );
            std::process::exit(SYNC_FAILED_EXIT_CODE);
        }
        #[cfg(feature = "bug-injection")]
        SyncFailure::Ignore => {
            tracing::error!(error = %err, waiters, "BUG INJECTION: log sync failed; acknowledging anyway");
            None
        }
    }
}

/// Marks the queue closed when the thread exits, and fails whatever is still queued. It runs
/// during unwinding too, so a panicking flusher cannot leave `save_vote` waiting forever.
struct CloseOnExit<'a, C: RaftTypeConfig>(&'a Queue<C>);

impl<C: RaftTypeConfig> Drop for CloseOnExit<'_, C> {
    fn drop(&mut self) {
        let orphans = {
            let mut state = self.0.lock();
            state.closed = true;
            std::mem::take(&mut state.waiters)
        };
        for waiter in orphans {
            waiter.callback.io_completed(Err(closed_error()));
        }
    }
}

fn closed_error() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "log flusher thread has stopped")
}

/// One group commit: sled writes its buffers to `<dir>/db` (with `sync_file_range`, which is not
/// durable), then `fdatasync` makes the file's data and size durable.
fn sync(db: &sled::Db, db_file: &File, counters: &SyncCounters) -> io::Result<()> {
    db.flush().map_err(io::Error::from)?;
    let synced = db_file.sync_data();
    SyncCounters::add(&counters.fdatasyncs, 1);
    synced
}

/// Completes waiters in queue order. Counters move before the callback fires, so whoever
/// observes a callback also observes its count.
fn complete<C: RaftTypeConfig>(
    waiters: Vec<Waiter<C>>,
    failure: Option<&(io::ErrorKind, String)>,
    counters: &SyncCounters,
) {
    for waiter in waiters {
        let result = match failure {
            None => {
                if waiter.kind == WaitKind::Append {
                    SyncCounters::add(&counters.acked_batches, 1);
                    let latency_us = micros(waiter.queued_at.elapsed());
                    counters.histograms.append_durable_us.observe(latency_us);
                }
                Ok(())
            }
            Some((kind, reason)) => Err(io::Error::new(
                *kind,
                format!("log store sync failed: {reason}"),
            )),
        };
        waiter.callback.io_completed(result);
    }
}
