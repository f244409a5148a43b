//! `Sample`: what the soak reads at the end of each interval (the clients' counts, each node's
//! VmRSS, the leader's applied index and request-id records), and `Sampler`, which reads one
//! and keeps the previous readings to turn counts into rates.
//!
//! `/v1/cluster` encodes and hashes the node's whole state for its `state_digest`, under the
//! state machine's read lock, so each call costs in proportion to the state (hundreds of
//! milliseconds of CPU at half a million records). A sample therefore asks only the leader it
//! found last time, once, and looks for the leader across the cluster only when that node no
//! longer says it leads.

use std::time::Instant;

use super::counters::{Counters, Counts};
use crate::turnstile_api::{NodeView, RequestRecords};
use crate::turnstile_cluster::TurnstileCluster;

/// One interval of the soak.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sample {
    /// Scheduled end of the interval, in seconds since the load started; the minutes and
    /// verdict windows are cut on it.
    pub at_s: f64,
    /// Measured length of the interval, in seconds; rates divide by it.
    pub interval_s: f64,
    /// What the clients did in the interval.
    pub counts: Counts,
    pub cycles_per_s: f64,
    /// Entries the leader applied in the interval (its applied index moved by this much).
    pub entries: Option<u64>,
    pub entries_per_s: Option<f64>,
    /// Node id (1-based) of the leader the cluster figures were read from.
    pub leader: Option<usize>,
    pub applied_index: Option<u64>,
    /// The leader's request-id records at the end of the interval.
    pub records: Option<RequestRecords>,
    /// Acknowledged ids the leader dropped since it started (its queue was full).
    pub acks_dropped: Option<u64>,
    /// VmRSS of node 1, 2, 3, in bytes.
    pub rss_bytes: Vec<u64>,
    /// How long reading the nodes took, in milliseconds: a slow `/v1/cluster` shows here.
    pub read_ms: f64,
}

/// Reads samples; remembers the last counts and applied index read, and when.
pub struct Sampler {
    last_counts: Counts,
    last_at: Instant,
    last_applied: Option<(u64, Instant)>,
    /// Index (0-based) of the node that last said it leads.
    leader: Option<usize>,
}

impl Sampler {
    /// Starts the first interval now.
    pub async fn start(cluster: &TurnstileCluster, counters: &Counters) -> Sampler {
        let mut sampler = Sampler {
            last_counts: counters.counts(),
            last_at: Instant::now(),
            last_applied: None,
            leader: None,
        };
        let view = sampler.leader_view(cluster).await;
        sampler.last_applied = view.map(|v| (v.applied_index, Instant::now()));
        sampler.last_counts = counters.counts();
        sampler.last_at = Instant::now();
        sampler
    }

    /// The leader's `/v1/cluster` view, if it could be read (module docs).
    async fn leader_view(&mut self, cluster: &TurnstileCluster) -> Option<NodeView> {
        if let Some(i) = self.leader {
            if let Ok(v) = cluster.api(i).view().await {
                if v.leader_id == Some(i as u64 + 1) {
                    return Some(v);
                }
            }
        }
        self.leader = cluster.leader().await.ok();
        cluster.api(self.leader?).view().await.ok()
    }

    /// Reads the sample of the interval ending now (scheduled at `at_s`). Fails if a node has
    /// died or its memory cannot be read; a cluster view that cannot be read (no leader for a
    /// moment) leaves the leader's figures empty instead.
    pub async fn read(
        &mut self,
        cluster: &mut TurnstileCluster,
        counters: &Counters,
        at_s: f64,
    ) -> anyhow::Result<Sample> {
        let now = Instant::now();
        let counts_now = counters.counts();
        let interval_s = (now - self.last_at).as_secs_f64().max(1e-9);
        let counts = counts_now.since(self.last_counts);
        self.last_counts = counts_now;
        self.last_at = now;
        cluster.check_running()?;
        let rss_bytes = cluster.rss_bytes()?;
        let view = self.leader_view(cluster).await;
        let read_at = Instant::now();
        let applied_index = view.map(|v| v.applied_index);
        // Over the time since the last index read, which spans several intervals if a read
        // failed in between.
        let (entries, entries_per_s) = match (applied_index, self.last_applied) {
            (Some(now), Some((before, then))) => {
                let e = now.saturating_sub(before);
                let s = (read_at - then).as_secs_f64().max(1e-9);
                (Some(e), Some(e as f64 / s))
            }
            _ => (None, None),
        };
        if let Some(i) = applied_index {
            self.last_applied = Some((i, read_at));
        }
        Ok(Sample {
            at_s,
            interval_s,
            counts,
            cycles_per_s: counts.cycles as f64 / interval_s,
            entries,
            entries_per_s,
            leader: self.leader.filter(|_| view.is_some()).map(|i| i + 1),
            applied_index,
            records: view.and_then(|v| v.request_records),
            acks_dropped: view.and_then(|v| v.acks_dropped),
            rss_bytes,
            read_ms: (read_at - now).as_secs_f64() * 1_000.0,
        })
    }
}
