//! Figures sampled at scrape time, into a registry built for that one scrape: Raft's view
//! (term, leader, indexes, state, membership, replication), the lock state (holders, waiters,
//! longest queue), the log store's counters and histograms, and this node's API counters.
//! Sampling reads each source under its own short lock and holds none across an await.

use std::iter;

use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use turnstile_core::State;
use turnstile_raft::log_store::histogram::HistogramSnapshot;
use turnstile_raft::log_store::SyncStatsHandle;
use turnstile_raft::types::{LogId, RaftMetrics};

use super::books::LockKind;
use crate::app::App;

type U64Gauge = Gauge<u64, AtomicU64>;
type OneLabel = [(&'static str, String); 1];

/// Microseconds per second, to export the log store's µs histograms in seconds.
const US_PER_S: f64 = 1_000_000.0;

/// Every sampled figure of `app` as it is now.
pub fn sampled(app: &App, log: &SyncStatsHandle) -> Registry {
    let mut r = Registry::with_prefix(super::PREFIX);
    let raft = app.raft.metrics().borrow_watched().clone();
    raft_figures(&mut r, &raft);
    // An O(1) copy: the walk over every lock runs beside apply, not under its lock.
    state_figures(&mut r, &app.sm.state());
    log_figures(&mut r, log);
    let fenced = app.stats.fenced_rejections.load(Ordering::Relaxed);
    r.register(
        "fenced_rejections",
        "Fenced writes this node answered 409 fenced (their token was not the lock's current exclusive grant); node-local",
        ConstCounter::new(fenced),
    );
    r.register(
        "auth_denials",
        "Calls this node refused for missing or wrong credentials (peer calls without a valid MAC); node-local",
        ConstCounter::new(app.denials.total()),
    );
    r.register(
        "peer_calls_failed",
        "Calls to peers (appends, heartbeats, votes, forwarded requests) that did not reach the peer or got no answer in time; node-local",
        ConstCounter::new(app.peers.failed_calls_total()),
    );
    gauge(
        &mut r,
        "peers_unreachable",
        "Peers whose last call from this node failed to reach them or got no answer, and that have not called this node since; node-local",
        app.peers.peers_down().len() as u64,
    );
    r.register(
        "waiting_requests",
        "Queued acquires whose HTTP request this node holds open; node-local",
        ConstGauge::new(app.waiters.len() as u64),
    );
    let counts = app.proposer.counts();
    r.register(
        "proposer_batches",
        "Messages to Raft carrying client writes this node proposed as leader; node-local",
        ConstCounter::new(counts.batches),
    );
    r.register(
        "proposer_writes",
        "Client writes this node proposed as leader (writes / batches is the mean batch); node-local",
        ConstCounter::new(counts.writes),
    );
    r.register(
        "proposer_entries",
        "Log entries the proposed client writes went out as (writes / entries is the mean number of lock commands per entry); node-local",
        ConstCounter::new(counts.entries),
    );
    r
}

fn gauge(r: &mut Registry, name: &str, help: &str, value: u64) {
    r.register(name, help, ConstGauge::new(value));
}

fn index_of(log_id: Option<&LogId>) -> u64 {
    log_id.map_or(0, |l| l.index)
}

fn raft_figures(r: &mut Registry, m: &RaftMetrics) {
    let commit = index_of(m.local_committed.as_ref());
    let applied = index_of(m.last_applied.as_ref());
    let last_log = m.last_log_index.unwrap_or(0);
    gauge(r, "raft_term", "Current Raft term", m.current_term);
    gauge(
        r,
        "raft_has_leader",
        "1 if this node knows a current leader, else 0",
        u64::from(m.current_leader.is_some()),
    );
    gauge(
        r,
        "raft_leader_id",
        "Node id of the leader this node knows (0: none)",
        m.current_leader.unwrap_or(0),
    );
    let state = Family::<[(&'static str, &'static str); 1], U64Gauge>::default();
    for s in ["leader", "follower", "candidate", "learner", "shutdown"] {
        let _ = state.get_or_create(&[("state", s)]);
    }
    state
        .get_or_create(&[("state", state_name(m.state))])
        .set(1);
    r.register(
        "raft_server_state",
        "1 for this node's current Raft role, 0 for the others",
        state,
    );
    gauge(
        r,
        "raft_last_log_index",
        "Index of the last entry in this node's log",
        last_log,
    );
    gauge(
        r,
        "raft_commit_index",
        "Index of the last entry this node knows committed",
        commit,
    );
    gauge(
        r,
        "raft_applied_index",
        "Index of the last entry applied to this node's state machine",
        applied,
    );
    gauge(
        r,
        "raft_apply_lag_entries",
        "Committed entries not yet applied here (commit index minus applied index)",
        commit.saturating_sub(applied),
    );
    gauge(
        r,
        "raft_snapshot_index",
        "Last index covered by this node's newest snapshot (0: none)",
        index_of(m.snapshot.as_ref()),
    );
    gauge(
        r,
        "raft_purged_index",
        "Last log index purged from this node's log (0: none)",
        index_of(m.purged.as_ref()),
    );
    membership_figures(r, m, last_log);
}

fn membership_figures(r: &mut Registry, m: &RaftMetrics, last_log: u64) {
    let membership = m.membership_config.membership();
    gauge(
        r,
        "raft_voters",
        "Voters in the membership this node uses",
        membership.voter_ids().count() as u64,
    );
    gauge(
        r,
        "raft_learners",
        "Learners in the membership this node uses",
        membership.learner_ids().count() as u64,
    );
    let Some(replication) = &m.replication else {
        return;
    };
    let lag = Family::<OneLabel, U64Gauge>::default();
    for (peer, matched) in replication {
        let behind = last_log.saturating_sub(index_of(matched.as_ref()));
        lag.get_or_create(&[("peer", peer.to_string())]).set(behind);
    }
    r.register(
        "raft_replication_lag_entries",
        "Leader only: entries of the leader's log each member has not yet acknowledged",
        lag,
    );
}

fn state_name(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// Holders and waiters by kind, the longest queue, and record counts. One pass over the
/// locks under the state's read lock: O(locks + waiters), both bounded by the core's limits.
fn state_figures(r: &mut Registry, state: &State) {
    let mut holders = [0u64; LockKind::ALL.len()];
    let mut waiters = [0u64; LockKind::ALL.len()];
    let mut queue_max = 0usize;
    for lock in state.locks.values() {
        for h in &lock.holders {
            holders[LockKind::of(lock.permits, h.mode) as usize] += 1;
        }
        queue_max = queue_max.max(lock.queue.len());
        for ticket in lock.queue.iter().filter_map(|w| state.tickets.get(w)) {
            waiters[LockKind::of(lock.permits, ticket.mode) as usize] += 1;
        }
    }
    let by_kind = |counts: [u64; 3]| {
        let family = Family::<[(&'static str, &'static str); 1], U64Gauge>::default();
        for kind in LockKind::ALL {
            family
                .get_or_create(&[("kind", kind.as_str())])
                .set(counts[kind as usize]);
        }
        family
    };
    let same = "; the same on every node at the same applied index";
    r.register(
        "lock_holders",
        format!("Current lock holds by kind{same}"),
        by_kind(holders),
    );
    r.register(
        "lock_waiters",
        format!("Queued waits by kind, one per lock a waiting acquire is queued on{same}"),
        by_kind(waiters),
    );
    gauge(
        r,
        "lock_queue_length_max",
        &format!("Longest waiter queue of any lock{same}"),
        queue_max as u64,
    );
    gauge(
        r,
        "locks",
        &format!("Locks with a holder or a waiter{same}"),
        state.locks.len() as u64,
    );
    gauge(
        r,
        "leases",
        &format!("Live leases{same}"),
        state.leases.len() as u64,
    );
    let windowed = state.request_expiries.len();
    let records = Family::<[(&'static str, &'static str); 1], U64Gauge>::default();
    records
        .get_or_create(&[("place", "pinned")])
        .set(state.requests.len().saturating_sub(windowed) as u64);
    records
        .get_or_create(&[("place", "windowed")])
        .set(windowed as u64);
    r.register(
        "request_records",
        format!("Request-id records kept: pinned by a live hold, wait or lease, or on the retry window{same}"),
        records,
    );
}

fn log_figures(r: &mut Registry, log: &SyncStatsHandle) {
    let stats = log.get();
    let counters = [
        (
            "log_append_batches",
            "Log store appends (openraft batches) written",
            stats.append_batches,
        ),
        (
            "log_entries_appended",
            "Log entries written to the log store",
            stats.entries_appended,
        ),
        (
            "log_fdatasyncs",
            "fdatasync calls on the log store (group commits, votes and purges included)",
            stats.fdatasyncs,
        ),
    ];
    for (name, help, value) in counters {
        r.register(name, help, ConstCounter::new(value));
    }
    let h = log.histograms();
    r.register(
        "log_sync_duration_seconds",
        "One log group commit: sled flush plus fdatasync",
        SampledHistogram::of(&h.sync_us, US_PER_S),
    );
    r.register(
        "log_append_duration_seconds",
        "From openraft's append call to its entries being durable (queueing plus group commit)",
        SampledHistogram::of(&h.append_durable_us, US_PER_S),
    );
    r.register(
        "log_sync_batch_entries",
        "Log entries made durable by one group commit (0 for a vote- or purge-only sync)",
        SampledHistogram::of(&h.sync_batch_entries, 1.0),
    );
}

/// A histogram recorded elsewhere (the log store's lock-free buckets), exported as is.
#[derive(Debug)]
struct SampledHistogram {
    sum: f64,
    count: u64,
    /// Upper bound and count per bucket, NOT cumulative; the last bound is `+Inf`.
    buckets: Vec<(f64, u64)>,
}

impl SampledHistogram {
    /// `s` with its values divided by `divisor` (µs to s: 1e6).
    fn of(s: &HistogramSnapshot, divisor: f64) -> SampledHistogram {
        let bounds = s
            .bounds
            .iter()
            .map(|&b| b as f64 / divisor)
            .chain(iter::once(f64::INFINITY));
        SampledHistogram {
            sum: s.sum as f64 / divisor,
            count: s.count(),
            buckets: bounds.zip(s.counts.iter().copied()).collect(),
        }
    }
}

impl TypedMetric for SampledHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SampledHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_histogram_encodes_cumulative_buckets_in_seconds() {
        let snapshot = HistogramSnapshot {
            bounds: &[50, 1_000],
            counts: vec![2, 1, 1],
            sum: 2_000_100,
        };
        let mut r = Registry::default();
        r.register(
            "sync_seconds",
            "help",
            SampledHistogram::of(&snapshot, US_PER_S),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).expect("encodes");
        for line in [
            "sync_seconds_sum 2.0001\n",
            "sync_seconds_count 4\n",
            "sync_seconds_bucket{le=\"0.00005\"} 2\n",
            "sync_seconds_bucket{le=\"0.001\"} 3\n",
            "sync_seconds_bucket{le=\"+Inf\"} 4\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from {text}");
        }
    }
}
