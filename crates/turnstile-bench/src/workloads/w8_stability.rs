//! W8's watch on the cluster's stability between two readings: the leader and term every node
//! reports (both systems), and for Turnstile the leader-change and vote-request counters of each
//! node's `/metrics`, the peer-failure warnings in the node logs, and the snapshots built and
//! log entries purged on every node (`/v1/cluster`), which explain a stall when there is one.
//!
//! Turnstile's `/metrics` has no counter of failed peer RPCs, so a missed heartbeat is read from
//! the logs: the leader's heartbeat worker warns `failed to send a heartbeat` (or `heartbeat
//! stream returned no response`) for each heartbeat RPC a follower did not answer within the
//! heartbeat interval, and a peer RPC (heartbeat or replication) cut off by its deadline says
//! `did not answer in time` (the cluster's log filter keeps those two openraft targets at
//! `warn`; see `turnstile_cluster`). A heartbeat cut off by openraft's own timer rather than
//! the HTTP client's warns without the latter text, so both counts are reported. They count
//! failed RPCs, not heartbeat intervals: a worker sends the next heartbeat only after the last
//! one ends. A leader that stalls itself (a pause longer than the election timeout) logs
//! nothing; that shows as vote requests and a term change instead.

use anyhow::Context;

use crate::cluster::{Cluster, Leadership};
use crate::measure::{Better, Measure};
use crate::turnstile_api::{metric_sum, NodeView};
use crate::turnstile_cluster::TurnstileCluster;

/// Leaders a node has seen take office (`/metrics` counter).
const LEADER_CHANGES: &str = "turnstile_raft_leader_changes";
/// Vote requests a node received: a follower that stopped hearing heartbeats campaigns.
const VOTE_REQUESTS: &str = "turnstile_raft_vote_requests";
/// Log lines of a heartbeat the leader could not deliver.
const HEARTBEAT_FAILED: [&str; 2] = [
    "failed to send a heartbeat",
    "heartbeat stream returned no response",
];
/// Log lines of a peer RPC (heartbeat, append, vote) cut off by its deadline
/// (`turnstile_raft::network::PeerError::Timeout`).
const PEER_TIMEOUT: &str = "did not answer in time";

/// What one Turnstile node shows at one reading.
#[derive(Clone, Copy, Debug, Default)]
struct NodeFigures {
    leader_changes: f64,
    vote_requests: f64,
    snapshots_built: u64,
    log_first_index: u64,
}

/// Turnstile's `/metrics` counters of each live node (cheap to read).
async fn metrics(tc: &TurnstileCluster) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for node in tc.live() {
        let text = tc.api(node).metrics_text().await?;
        let read = |name: &str| {
            metric_sum(&text, name).with_context(|| format!("node {node}'s /metrics has no {name}"))
        };
        out.push((read(LEADER_CHANGES)?, read(VOTE_REQUESTS)?));
    }
    Ok(out)
}

/// One reading of the cluster.
pub struct Reading {
    leadership: Vec<Leadership>,
    /// Per node (Turnstile).
    nodes: Option<Vec<NodeFigures>>,
    /// Each node's log size (Turnstile).
    log_lens: Option<Vec<u64>>,
}

impl Reading {
    /// A reading that opens a span: `/v1/cluster` first (each read encodes and hashes the
    /// node's whole state, which must not weigh on the span), then the counters and the logs'
    /// sizes.
    pub async fn opening(cluster: &mut Cluster) -> anyhow::Result<Reading> {
        let Some(tc) = cluster.as_turnstile() else {
            return Reading::etcd(cluster).await;
        };
        let views = tc.views().await?;
        let counters = metrics(tc).await?;
        Reading::turnstile(&views, &counters, tc.log_lens())
    }

    /// A reading that closes a span: the logs' sizes and the counters first, `/v1/cluster`
    /// last, so that its reads fall after the span.
    pub async fn closing(cluster: &mut Cluster) -> anyhow::Result<Reading> {
        let Some(tc) = cluster.as_turnstile() else {
            return Reading::etcd(cluster).await;
        };
        let log_lens = tc.log_lens();
        let counters = metrics(tc).await?;
        let views = tc.views().await?;
        Reading::turnstile(&views, &counters, log_lens)
    }

    async fn etcd(cluster: &mut Cluster) -> anyhow::Result<Reading> {
        Ok(Reading {
            leadership: cluster.leadership().await?,
            nodes: None,
            log_lens: None,
        })
    }

    fn turnstile(
        views: &[NodeView],
        counters: &[(f64, f64)],
        log_lens: Vec<u64>,
    ) -> anyhow::Result<Reading> {
        let nodes = views
            .iter()
            .zip(counters)
            .map(|(v, &(leader_changes, vote_requests))| NodeFigures {
                leader_changes,
                vote_requests,
                snapshots_built: v.snapshots.map_or(0, |h| h.built),
                log_first_index: v.log_first_index.unwrap_or(0),
            })
            .collect();
        Ok(Reading {
            leadership: views.iter().map(Leadership::of).collect::<Result<_, _>>()?,
            nodes: Some(nodes),
            log_lens: Some(log_lens),
        })
    }

    /// What changed from this reading to `later`, as figures labelled `{span}: ...`; `better`
    /// is `Lower` where the figures are the workload's checks and `Info` where they only
    /// explain.
    pub fn changes(
        &self,
        later: &Reading,
        cluster: &Cluster,
        span: &str,
        better: Better,
    ) -> anyhow::Result<Vec<Measure>> {
        let figure = |label: &str, better, v: f64| {
            Measure::new("W8", format!("{span}: {label}"), "count", better, v)
        };
        let check = |label: &str, v: f64| figure(label, better, v).note("0 expected");
        let pairs = || self.leadership.iter().zip(&later.leadership);
        let term_changes = pairs().map(|(a, b)| b.term.saturating_sub(a.term)).max();
        // etcd: whether the leader moved (its term changes count the elections). Turnstile:
        // the most leader changes any node counted, at least that.
        let leader_moved = pairs().any(|(a, b)| a.leader != b.leader);
        let nodes = self.nodes.as_ref().zip(later.nodes.as_ref());
        let deltas = || nodes.into_iter().flat_map(|(a, b)| a.iter().zip(b));
        let delta = |f: fn(&NodeFigures) -> f64| deltas().map(move |(a, b)| f(b) - f(a));
        let counted = delta(|n| n.leader_changes).fold(0.0, f64::max);
        let mut out = vec![
            check(
                "leader changes",
                counted.max(f64::from(u8::from(leader_moved))),
            ),
            check("term changes", term_changes.unwrap_or(0) as f64),
        ];
        let Some(tc) = cluster.as_turnstile() else {
            return Ok(out);
        };
        out.push(check(
            "vote requests received (metrics)",
            delta(|n| n.vote_requests).sum(),
        ));
        if let (Some(from), Some(to)) = (&self.log_lens, &later.log_lens) {
            let mut needles = HEARTBEAT_FAILED.to_vec();
            needles.push(PEER_TIMEOUT);
            let lines = tc.count_in_logs(from, to, &needles)?;
            let missed: u64 = lines[..HEARTBEAT_FAILED.len()].iter().sum();
            out.push(check("heartbeats not delivered (node logs)", missed as f64));
            out.push(check(
                "peer RPCs that did not answer in time (node logs)",
                lines[HEARTBEAT_FAILED.len()] as f64,
            ));
        }
        out.push(figure(
            "snapshots built (all nodes)",
            Better::Info,
            delta(|n| n.snapshots_built as f64).sum(),
        ));
        out.push(figure(
            "log entries purged (all nodes)",
            Better::Info,
            delta(|n| n.log_first_index as f64).sum(),
        ));
        Ok(out)
    }
}
