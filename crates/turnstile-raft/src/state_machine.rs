//! The openraft state machine adapter around `turnstile_core::State`.
//!
//! The state lives in memory behind a `std::sync::RwLock` (held only for short, non-async
//! critical sections; never across an await). Durability comes from the log: on restart the
//! newest snapshot file is loaded and openraft re-applies committed entries after it.
//! `applied_state` therefore reports only what the snapshot file holds plus what has been
//! re-applied from the durable log.

use std::io::{self, Cursor};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use futures::{Stream, TryStreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use turnstile_core::{codec, Notice, Outcome, Response, State};

use crate::apply_observer::ApplyObserver;
use crate::snapshot_files::{SnapshotDir, SnapshotFile};
use crate::types::{
    term_of, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};

/// What the adapter keeps besides the core state.
#[derive(Debug, Default)]
pub struct SmInner {
    pub state: State,
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
}

impl SmInner {
    /// A copy of what a snapshot holds, so it can be encoded after the lock is released
    /// (O(1): see [`SharedState::state`]).
    pub fn copy_out(&self) -> (State, Option<LogId>, StoredMembership) {
        (
            self.state.clone(),
            self.last_applied,
            self.last_membership.clone(),
        )
    }
}

/// A read handle to the applied state, shared with the HTTP layer.
#[derive(Debug, Clone, Default)]
pub struct SharedState {
    inner: Arc<RwLock<SmInner>>,
    /// The digest of the state at one applied index, so that callers polling `/v1/cluster`
    /// encode and hash the state once per index, not once per call.
    digest: Arc<Mutex<Option<(u64, String)>>>,
    snapshots: Arc<Mutex<SnapshotHistory>>,
}

impl SharedState {
    /// Read access. A poisoned lock means an apply panicked mid-update; the state can no
    /// longer be trusted, so readers get the poison's inner value only to report it.
    pub fn read(&self) -> RwLockReadGuard<'_, SmInner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, SmInner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The applied state as of now. O(1) under the lock: the state's collections are
    /// copy-on-write (`turnstile_core::cow`), so whatever walks the copy does it beside apply.
    pub fn state(&self) -> State {
        self.read().state.clone()
    }

    /// Snapshots built on this node and what the newest one cost.
    pub fn snapshot_history(&self) -> SnapshotHistory {
        *self.snapshots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn snapshot_built(&self, stats: SnapshotStats) {
        let mut h = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        h.built += 1;
        h.cpu_ms_total = h.cpu_ms_total.saturating_add(stats.cpu_ms);
        h.last = Some(stats);
    }

    /// The applied index and the SHA-256 of the state at it (`codec::state_digest`). The
    /// encode and hash run outside the state lock; the result is kept for that index.
    pub fn digest(&self) -> (u64, String) {
        let state = self.state();
        let index = state.applied_index;
        let mut cached = self.digest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, digest)) = cached.as_ref() {
            if *at == index {
                return (index, digest.clone());
            }
        }
        let digest = codec::state_digest(&state);
        *cached = Some((index, digest.clone()));
        (index, digest)
    }
}

/// Told about every applied batch, after the state lock is released: the node's waiter
/// registry answers the waiters it holds, and watch streams wake up.
pub trait ApplyListener: Send + Sync + 'static {
    /// Final answers for queued waiters decided by the entries just applied, and the new
    /// applied index.
    fn applied(&self, notices: Vec<Notice>, applied_index: u64);
    /// The state was replaced by a snapshot: notices inside it were never produced here, so
    /// the listener re-checks its waiters against the state.
    fn replaced(&self, state: &State);
}

/// openraft's state machine for Turnstile.
pub struct StateMachineStore {
    shared: SharedState,
    listener: Option<Arc<dyn ApplyListener>>,
    /// The node's metrics, if any (see `apply_observer`).
    observer: Option<Arc<dyn ApplyObserver>>,
    snapshots: SnapshotDir,
    /// Run `State::check_invariants` after every applied batch (tests turn this on).
    check_invariants: bool,
}

impl StateMachineStore {
    /// Opens the snapshot directory and loads the newest snapshot, if any.
    pub fn open(snapshot_dir: &Path, check_invariants: bool) -> io::Result<StateMachineStore> {
        let snapshots = SnapshotDir::open(snapshot_dir)?;
        let shared = SharedState::default();
        if let Some((path, bytes)) = snapshots.read_newest_at()? {
            // A snapshot that fails its hash or does not decode is never served from: this
            // node's state cannot be trusted, and only a re-add replaces it.
            let refuse = |e: &dyn std::fmt::Display| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: {e}. This node's state cannot be trusted: move its data dir aside, \
                         start it empty with --initial-cluster-state existing and re-add it \
                         (`turnstile member remove`, `member add`, `member promote`; \
                         docs/operations.md, \"Replacing a node\")",
                        path.display()
                    ),
                )
            };
            let file = SnapshotFile::decode(&bytes).map_err(|e| refuse(&e))?;
            let state = codec::decode_state(&file.state).map_err(|e| refuse(&e))?;
            let mut inner = shared.write();
            inner.state = state;
            inner.last_applied = file.last_log_id;
            inner.last_membership = file.last_membership;
        }
        Ok(StateMachineStore {
            shared,
            listener: None,
            observer: None,
            snapshots,
            check_invariants,
        })
    }

    /// Sets who hears about applied entries (the node's waiter registry and watch hub).
    pub fn set_listener(&mut self, listener: Arc<dyn ApplyListener>) {
        self.listener = Some(listener);
    }

    /// Sets who observes applied entries for metrics, and shows it the state loaded at open.
    pub fn set_observer(&mut self, observer: Arc<dyn ApplyObserver>) {
        observer.state_loaded(&self.shared.read().state);
        self.observer = Some(observer);
    }

    /// The handle the HTTP layer reads through.
    pub fn shared(&self) -> SharedState {
        self.shared.clone()
    }

    fn apply_one(
        &self,
        entry: openraft::alias::EntryOf<TypeConfig>,
    ) -> io::Result<(Response, Vec<Notice>)> {
        let log_id = entry.log_id;
        let index = log_id.index;
        let term = term_of(&log_id);
        let mut inner = self.shared.write();
        let mut notices = Vec::new();
        let response = match entry.payload {
            EntryPayload::Normal(env) => {
                let applied = inner.state.apply_full(index, term, &env);
                if let Some(observer) = &self.observer {
                    observer.entry_applied(&inner.state, index, &env, &applied);
                }
                notices = applied.notices;
                applied.response
            }
            EntryPayload::Blank => {
                inner.state.apply_blank(index);
                applied(index, term)
            }
            EntryPayload::Membership(m) => {
                inner.state.apply_blank(index);
                inner.last_membership = StoredMembership::new(Some(log_id), m);
                applied(index, term)
            }
        };
        inner.last_applied = Some(log_id);
        Ok((response, notices))
    }

    /// `State::check_invariants` on the state as it stands (tests turn this on).
    fn check_invariants(&self) -> io::Result<()> {
        let inner = self.shared.read();
        inner.state.check_invariants().map_err(|e| {
            let index = inner.state.applied_index;
            tracing::error!(index, error = %e, "state machine invariant violated");
            io::Error::other(e)
        })
    }

    /// Answers an applied entry's client and tells the listener what it changed.
    fn deliver(&self, applied: Applied) {
        let Applied {
            index,
            responder,
            response,
            notices,
        } = applied;
        if let Some(responder) = responder {
            responder.send(response);
        }
        if let Some(listener) = &self.listener {
            listener.applied(notices, index);
        }
    }
}

/// An entry applied whose client and listener have not been told yet.
struct Applied {
    index: u64,
    responder: Option<ApplyResponder<TypeConfig>>,
    response: Response,
    notices: Vec<Notice>,
}

fn applied(revision: u64, term: u64) -> Response {
    Response {
        revision,
        term,
        replayed: false,
        outcome: Ok(Outcome::Applied),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let inner = self.shared.read();
        Ok((inner.last_applied, inner.last_membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + openraft::OptionalSend,
    {
        // With invariant checks on, the state is checked once per batch, before anyone hears of
        // the batch: a check after every entry costs O(state) per entry, which made a restart
        // that replays 10,000 entries take a minute. A violation is still caught before its
        // entry is answered; one that a later entry of the same batch undoes is not.
        let mut held = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            let index = entry.log_id.index;
            let (response, notices) = self.apply_one(entry)?;
            let applied = Applied {
                index,
                responder,
                response,
                notices,
            };
            if self.check_invariants {
                held.push(applied);
            } else {
                self.deliver(applied);
            }
        }
        if !held.is_empty() {
            self.check_invariants()?;
            for applied in held {
                self.deliver(applied);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> io::Result<()> {
        let bytes = snapshot.into_inner();
        let file = SnapshotFile::decode(&bytes)?;
        let state = codec::decode_state(&file.state)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let index = meta.last_log_id.as_ref().map_or(0, |l| l.index);
        let dir = self.snapshots.clone();
        tokio::task::spawn_blocking(move || dir.write(index, &bytes))
            .await
            .map_err(io::Error::other)??;
        let mut inner = self.shared.write();
        inner.state = state;
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        drop(inner);
        if let Some(observer) = &self.observer {
            observer.state_loaded(&self.shared.read().state);
        }
        if let Some(listener) = &self.listener {
            listener.replaced(&self.shared.read().state);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        let Some(bytes) = self.snapshots.read_newest()? else {
            return Ok(None);
        };
        let file = SnapshotFile::decode(&bytes)?;
        let meta = SnapshotMeta {
            last_log_id: file.last_log_id,
            last_membership: file.last_membership,
        };
        Ok(Some(Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        }))
    }
}

/// Builds a snapshot from a copy of the state taken in O(1) under the state lock.
pub struct SnapshotBuilder {
    shared: SharedState,
    snapshots: SnapshotDir,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let (state, last_log_id, last_membership) = self.shared.read().copy_out();
        let index = last_log_id.as_ref().map_or(0, |l| l.index);
        let job = SnapshotJob {
            state,
            last_log_id,
            last_membership: last_membership.clone(),
            dir: self.snapshots.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let _ = tx.send(job.run());
            })?;
        let (bytes, stats) = rx
            .await
            .map_err(|_| io::Error::other("the snapshot thread ended without an answer"))??;
        tracing::info!(
            index,
            bytes = stats.bytes,
            records = stats.records,
            cpu_ms = stats.cpu_ms,
            wall_ms = stats.wall_ms,
            "snapshot written"
        );
        self.shared.snapshot_built(stats);
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
        };
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        })
    }
}

/// Nice value of the thread that encodes and writes a snapshot. Under CPU contention it gets
/// a small share beside apply, replication and the HTTP tasks (nice 0), so a snapshot of a
/// large state costs latency little; on an idle machine it takes all it needs.
pub const SNAPSHOT_THREAD_NICE: i32 = 10;

/// One snapshot's encode and write, on its own thread.
struct SnapshotJob {
    state: State,
    last_log_id: Option<LogId>,
    last_membership: StoredMembership,
    dir: SnapshotDir,
}

impl SnapshotJob {
    fn run(self) -> io::Result<(Vec<u8>, SnapshotStats)> {
        lower_thread_priority();
        let started = std::time::Instant::now();
        let cpu_started = thread_cpu_ms();
        let index = self.last_log_id.as_ref().map_or(0, |l| l.index);
        let records = self.state.records_count();
        let file = SnapshotFile::of(&self.state, self.last_log_id, self.last_membership)?;
        // Each copy lives only as long as it must: the allocator keeps a transient peak as
        // resident memory.
        drop(self.state);
        let bytes = file.encode()?;
        drop(file);
        self.dir.write(index, &bytes)?;
        let stats = SnapshotStats {
            index,
            records,
            bytes: bytes.len() as u64,
            cpu_ms: thread_cpu_ms().saturating_sub(cpu_started),
            wall_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        Ok((bytes, stats))
    }
}

/// What the newest snapshot built here cost (`/v1/cluster` shows it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotStats {
    /// Last log index it covers.
    pub index: u64,
    /// Records in the state it holds (`State::records_count`).
    pub records: u64,
    pub bytes: u64,
    /// CPU time of the snapshot thread: copy walk, encode, checksum and write.
    pub cpu_ms: u64,
    pub wall_ms: u64,
}

/// Snapshots built here since start, and the newest one's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotHistory {
    pub built: u64,
    pub cpu_ms_total: u64,
    pub last: Option<SnapshotStats>,
}

/// Lowers the calling thread's priority to [`SNAPSHOT_THREAD_NICE`]. Best effort: a failure
/// leaves the thread at the process's priority, which is only slower for others.
fn lower_thread_priority() {
    // SAFETY: setpriority takes plain integers and touches no memory of ours. On Linux,
    // PRIO_PROCESS with who = 0 changes the calling thread only (nice is per thread there).
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SNAPSHOT_THREAD_NICE) };
    if rc != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "cannot lower the snapshot thread's priority");
    }
}

/// CPU time the calling thread has used, in ms (0 if the clock cannot be read).
fn thread_cpu_ms() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        let ms = i128::from(t.tv_sec()) * 1_000 + i128::from(t.tv_nsec()) / 1_000_000;
        u64::try_from(ms).unwrap_or(0)
    })
}
