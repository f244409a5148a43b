//! W8's snapshot cost (Turnstile only): the leader is asked for a snapshot with
//! `POST /v1/admin/snapshot`, and once `/v1/cluster`'s `snapshots` shows a new one covering
//! everything applied before the request, its own figures (records, bytes, CPU time of the
//! snapshot thread, wall time) are reported, with the CPU per 1,000 records, so that the rows
//! at successive points show how the cost grows with the state. Beside them, what the whole
//! call cost the leader: its wall time and the leader process's CPU over it. The call also
//! purges the log behind the snapshot, on the node's async runtime rather than the snapshot
//! thread, and with Turnstile's snapshot policy that log holds about as many entries as the
//! state has records, so this is where most of a large snapshot's cost shows.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cluster::Cluster;
use crate::measure::{Better, Measure};
use crate::turnstile_api::{SnapshotHistory, SnapshotStats, TurnstileApi};

/// How long after the admin call answers the new snapshot may take to show in `/v1/cluster`
/// (it shows before the call answers; this bounds the poll should that change).
const SNAPSHOT_SEEN_MS_MAX: u64 = 10_000;
/// Interval of that poll: each `/v1/cluster` read encodes and hashes the whole state.
const POLL_MS: u64 = 250;

/// The node's snapshot history, which a server without it cannot give.
async fn history(api: &TurnstileApi) -> anyhow::Result<(u64, SnapshotHistory)> {
    let v = api.view().await?;
    let h = v
        .snapshots
        .context("/v1/cluster has no `snapshots` (a server older than W8)")?;
    Ok((v.applied_index, h))
}

/// Waits until `api`'s history shows a snapshot built after `before` covering `index`.
async fn newer_snapshot(
    api: &TurnstileApi,
    before: &SnapshotHistory,
    index: u64,
) -> anyhow::Result<SnapshotStats> {
    let deadline = Instant::now() + Duration::from_millis(SNAPSHOT_SEEN_MS_MAX);
    loop {
        let (_, h) = history(api).await?;
        if let Some(last) = h
            .last
            .filter(|l| h.built > before.built && l.index >= index)
        {
            return Ok(last);
        }
        if Instant::now() > deadline {
            bail!("no snapshot at or above index {index} within {SNAPSHOT_SEEN_MS_MAX} ms: {h:?}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Snapshots the leader and reports its cost as figures labelled `snapshot, {point}: ...`;
/// nothing for etcd.
pub async fn measure(cluster: &Cluster, point: &str) -> anyhow::Result<Vec<Measure>> {
    let Some(tc) = cluster.as_turnstile() else {
        return Ok(Vec::new());
    };
    let leader = tc.leader().await?;
    let api = tc.api(leader);
    let (applied, before) = history(&api).await?;
    let cpu_before_ms = tc.cpu_ms(leader)?;
    let called = Instant::now();
    api.admin_snapshot()
        .await
        .with_context(|| format!("snapshot at {point}"))?;
    let call_ms = called.elapsed().as_secs_f64() * 1_000.0;
    let process_cpu_ms = tc.cpu_ms(leader)?.saturating_sub(cpu_before_ms);
    let s = newer_snapshot(&api, &before, applied).await?;
    eprintln!(
        "turnstile-bench: W8 snapshot at {point}: {} records, {} bytes, {} ms CPU, {} ms wall; \
         the call {call_ms:.0} ms, leader CPU {process_cpu_ms} ms",
        s.records, s.bytes, s.cpu_ms, s.wall_ms
    );
    let figure = |what: &str, unit, better, v: f64| {
        Measure::new("W8", format!("snapshot, {point}: {what}"), unit, better, v)
    };
    let cpu_us_per_1k = if s.records > 0 {
        s.cpu_ms as f64 * 1_000.0 * 1_000.0 / s.records as f64
    } else {
        0.0
    };
    Ok(vec![
        figure("records", "records", Better::Info, s.records as f64),
        figure("bytes", "bytes", Better::Info, s.bytes as f64),
        figure(
            "CPU (snapshot thread)",
            "ms",
            Better::Lower,
            s.cpu_ms as f64,
        ),
        figure("wall time", "ms", Better::Lower, s.wall_ms as f64),
        figure("CPU per 1,000 records", "µs", Better::Lower, cpu_us_per_1k),
        figure(
            "admin call wall time (snapshot, log purge)",
            "ms",
            Better::Lower,
            call_ms,
        ),
        figure(
            "leader process CPU over the call",
            "ms",
            Better::Lower,
            process_cpu_ms as f64,
        ),
    ])
}
