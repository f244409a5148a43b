//! The run's recorder: one monotonic clock for every timestamp, and append-only logs of client
//! events, nemesis windows, leader observations and watch deliveries, shared by every task.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use turnstile_checker::history::{
    Event, EventType, LeaderObservation, NemesisWindow, OpValue, Recorded, TimeNs, WatchDelivery,
    WatchEnd,
};

/// Most client events one run records; past it workers stop invoking (a bound, not a goal).
pub const EVENTS_MAX: usize = 2_000_000;

/// Shared handle to the run's records.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    inner: Arc<Mutex<Recorded>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Arc::new(Mutex::new(Recorded::default())),
        }
    }

    /// Nanoseconds since the run started.
    pub fn now_ns(&self) -> TimeNs {
        self.start.elapsed().as_nanos() as TimeNs
    }

    fn lock(&self) -> MutexGuard<'_, Recorded> {
        // A poisoned lock means a recording task panicked mid-push; the records are still
        // well-formed (each push is one Vec::push), so keep going rather than lose the run.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the event bound is reached.
    pub fn full(&self) -> bool {
        self.lock().events.len() >= EVENTS_MAX
    }

    /// Records an invocation and returns its time.
    pub fn invoke(&self, process: u64, node: u64, op: &OpValue) -> TimeNs {
        self.push(process, node, EventType::Invoke, op.clone(), None)
    }

    /// Records a completion.
    pub fn complete(
        &self,
        process: u64,
        node: u64,
        kind: EventType,
        op: OpValue,
        error: Option<String>,
    ) -> TimeNs {
        self.push(process, node, kind, op, error)
    }

    fn push(
        &self,
        process: u64,
        node: u64,
        kind: EventType,
        op: OpValue,
        error: Option<String>,
    ) -> TimeNs {
        let mut r = self.lock();
        // Stamp under the lock, so event order in the file is time order.
        let time_ns = self.now_ns();
        let index = r.events.len() as u64;
        r.events.push(Event {
            index,
            time_ns,
            process,
            kind,
            node,
            op,
            error,
        });
        time_ns
    }

    /// Opens a nemesis window; returns its position for [`Recorder::end_window`].
    pub fn start_window(&self, kind: &str, targets: Vec<u64>, minority: Vec<u64>) -> usize {
        let mut r = self.lock();
        let start_ns = self.now_ns();
        r.nemesis.push(NemesisWindow {
            kind: kind.to_string(),
            start_ns,
            end_ns: None,
            targets,
            minority,
        });
        r.nemesis.len() - 1
    }

    pub fn end_window(&self, position: usize) {
        let now = self.now_ns();
        if let Some(w) = self.lock().nemesis.get_mut(position) {
            w.end_ns = Some(now);
        }
    }

    /// Records "node led term", once per (node, term).
    pub fn leader(&self, node: u64, term: u64) {
        let mut r = self.lock();
        if !r.leaders.iter().any(|l| l.node == node && l.term == term) {
            let time_ns = self.now_ns();
            r.leaders.push(LeaderObservation {
                time_ns,
                node,
                term,
            });
        }
    }

    pub fn watch(&self, delivery: WatchDelivery) {
        self.lock().watch.push(delivery);
    }

    pub fn watch_end(&self, end: WatchEnd) {
        self.lock().watch_ends.push(end);
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> Recorded {
        self.lock().clone()
    }

    /// Replaces the final node states (after the final heal).
    pub fn set_final(&self, nodes: Vec<turnstile_checker::history::FinalNodeState>) {
        self.lock().final_nodes = nodes;
    }

    /// Faults applied and distinct leader terms seen.
    pub fn counts(&self) -> (usize, usize) {
        let r = self.lock();
        let mut terms: Vec<u64> = r.leaders.iter().map(|l| l.term).collect();
        terms.sort_unstable();
        terms.dedup();
        (r.nemesis.len(), terms.len())
    }
}
