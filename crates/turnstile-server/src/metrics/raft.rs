//! Raft metrics that need watching rather than sampling: openraft's `MetricsRecorder` hook
//! reports what only its core sees (entries per client-write, append and apply batch; vote and
//! append-entries requests; heartbeats), and a task watching `Raft::server_metrics()` counts
//! leader changes, which a scrape every 15 s would miss, and records who led each term
//! (`crate::term_leaders`). Point-in-time figures (term, indexes, state,
//! membership) are read at scrape time in `scrape.rs`.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::metrics::MetricsRecorder;
use openraft::vote::RaftLeaderId;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use turnstile_raft::types::Raft;

use crate::term_leaders::TermLeaders;

/// Entries-per-batch buckets: powers of two up to 4096.
const BATCH_ENTRIES_BUCKETS: [f64; 13] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1_024.0, 2_048.0, 4_096.0,
];

fn batch_histogram() -> Histogram {
    Histogram::new(BATCH_ENTRIES_BUCKETS)
}

/// Counters and histograms fed by openraft's core and the leader watcher.
#[derive(Debug)]
pub struct RaftRecorder {
    write_batch_entries: Histogram,
    append_batch_entries: Histogram,
    apply_batch_entries: Histogram,
    vote_requests: Counter,
    append_entries_requests: Counter,
    heartbeats: Counter,
    leader_changes: Counter,
}

impl RaftRecorder {
    pub fn new() -> RaftRecorder {
        RaftRecorder {
            write_batch_entries: batch_histogram(),
            append_batch_entries: batch_histogram(),
            apply_batch_entries: batch_histogram(),
            vote_requests: Counter::default(),
            append_entries_requests: Counter::default(),
            heartbeats: Counter::default(),
            leader_changes: Counter::default(),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "raft_write_batch_entries",
            "Client writes merged into one proposal batch by the leader",
            self.write_batch_entries.clone(),
        );
        r.register(
            "raft_append_batch_entries",
            "Entries per log append openraft submitted to the log store",
            self.append_batch_entries.clone(),
        );
        r.register(
            "raft_apply_batch_entries",
            "Committed entries per batch applied to the state machine",
            self.apply_batch_entries.clone(),
        );
        r.register(
            "raft_vote_requests",
            "Vote requests this node received",
            self.vote_requests.clone(),
        );
        r.register(
            "raft_append_entries_requests",
            "AppendEntries requests (heartbeats included) this node received as a follower",
            self.append_entries_requests.clone(),
        );
        r.register(
            "raft_heartbeats",
            "Heartbeat rounds this node sent as leader",
            self.heartbeats.clone(),
        );
        r.register(
            "raft_leader_changes",
            "Leaders this node has seen take office: each new (term, leader) it observed, the first one after start included",
            self.leader_changes.clone(),
        );
    }
}

impl Default for RaftRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// openraft calls these from its core task; each is one atomic or one short lock.
impl MetricsRecorder for RaftRecorder {
    fn record_apply_batch(&self, entry_count: u64) {
        self.apply_batch_entries.observe(entry_count as f64);
    }

    fn record_append_batch(&self, entry_count: u64) {
        self.append_batch_entries.observe(entry_count as f64);
    }

    fn record_write_batch(&self, entry_count: u64) {
        self.write_batch_entries.observe(entry_count as f64);
    }

    // Gauges are sampled from `Raft::metrics()` at scrape time instead.
    fn set_current_term(&self, _term: u64) {}
    fn set_last_log_index(&self, _index: u64) {}
    fn set_committed_index(&self, _index: u64) {}
    fn set_applied_index(&self, _index: u64) {}
    fn set_snapshot_index(&self, _index: u64) {}
    fn set_purged_index(&self, _index: u64) {}
    fn set_server_state(&self, _state: u8) {}

    fn increment_vote(&self) {
        self.vote_requests.inc();
    }

    fn increment_heartbeat(&self) {
        self.heartbeats.inc();
    }

    fn increment_append(&self) {
        self.append_entries_requests.inc();
    }
}

/// Installs `recorder` in Raft, then counts leader changes and records each `(term, leader)`
/// in `leaders` until Raft stops or `stop` fires. Keeps only the metrics receiver, not the
/// `Raft` handle, so it never holds Raft open.
pub async fn watch_leaders(
    raft: Raft,
    recorder: Arc<RaftRecorder>,
    leaders: TermLeaders,
    mut stop: watch::Receiver<bool>,
) {
    // The server metrics (vote, role, leader, membership) are sent only when they change;
    // `metrics()` is sent on every turn of the core's loop, several times per commit.
    let mut rx = raft.server_metrics();
    let hook: Arc<dyn MetricsRecorder> = recorder.clone();
    if let Err(e) = raft.set_metrics_recorder(Some(hook)).await {
        tracing::warn!(error = %e, "cannot install the raft metrics recorder");
    }
    drop(raft);
    let mut last: Option<(u64, u64)> = None;
    loop {
        // The pair comes from one vote, the flushed one: a committed vote names its term's
        // one leader (`current_leader` is read from the unflushed vote, so pairing it with
        // this vote's term could name a leader for the term before).
        let seen = {
            let m = rx.borrow_watched();
            let leader = m.vote.leader_id();
            m.vote
                .is_committed()
                .then(|| (leader.term(), *leader.node_id()))
        };
        if let (Some((term, leader)), true) = (seen, seen != last) {
            recorder.leader_changes.inc();
            leaders.record(term, leader);
            last = seen;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}
