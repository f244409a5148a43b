//! W8, large state: does a lock service slow down, or lose its leader, once it holds a lot?
//! On one fresh cluster: W1's loop at 64 clients on the empty state; then a preload of 50,000
//! held locks (1,000 per lease on hour-long leases, each acquire with a `request_id`, so one
//! pinned request record per hold) and 200,000 keys of 64-byte values, 64 requests at a time;
//! then the same W1 loop again on the loaded state. Reported: both runs' cycles/s and
//! p50/p99/max, the ratio loaded / empty (the issue asks at least 0.8), and over the loaded run
//! and over the whole workload the leader and term changes every node reports (0 expected).
//! `--quick` preloads 1,000 locks and 4,000 keys.
//!
//! Turnstile only: over the same spans, the vote requests the nodes received (`/metrics`) and
//! the heartbeats the leader could not deliver and peer RPCs that timed out (node logs; see
//! `w8_stability`); the request records the leader holds before the loaded run (pinned by the
//! holds, and on their retry window from the empty run); and the cost of a snapshot of the
//! leader at three points, empty, after the locks and after the keys (`w8_snapshot_cost`).
//! etcd exposes neither in the same terms (its snapshots are its own, taken every 100,000
//! entries by default), so its rows are the runs, the preload and the leader and term checks;
//! for etcd "leader changes" is whether the leader moved (its term changes count elections).
//!
//! The runs' lock names and request ids differ (`w8-empty-*`, `w8-loaded-*`): the empty run's
//! records are still on their retry window during the loaded run, and a repeated id would be
//! answered from its record. The log-counter probe of W1 is off here, since each read of
//! `/v1/cluster` costs in proportion to the state and would weigh on the loaded run alone.

use super::w1_uncontended::{measure_cycles, CycleRun};
use super::w8_stability::Reading;
use super::{w8_preload, w8_snapshot_cost, Ctx, Outcome};
use crate::cluster::Cluster;
use crate::measure::{rate, rate_and_latency, Better, Measure};
use crate::plan::{SETUP_CONCURRENCY, W8_CLIENTS};
use crate::report::count;

/// The figures of one W1 run, labelled `{state}, 64 clients: ...`.
fn run_measures(state: &str, r: &CycleRun) -> Vec<Measure> {
    let point = format!("{state}, {W8_CLIENTS} clients");
    rate_and_latency("W8", &point, "cycles/s", &r.cycle, r.window.length())
}

/// W1 at [`W8_CLIENTS`] clients, with a line on stderr.
async fn cycles(ctx: &Ctx<'_>, cluster: &mut Cluster, state: &str) -> anyhow::Result<CycleRun> {
    let prefix = format!("w8-{state}");
    let r = measure_cycles(cluster, W8_CLIENTS, &prefix, ctx.plan.duration, false).await?;
    eprintln!(
        "turnstile-bench: W8 {state} state: {:.0} cycles/s, p99 {:.1} ms, {} errors",
        rate(&r.cycle, r.window.length()),
        r.cycle.percentiles().p99_ms,
        r.cycle.errors
    );
    Ok(r)
}

/// The leader's request records before the loaded run (Turnstile).
async fn records(cluster: &Cluster) -> anyhow::Result<Vec<Measure>> {
    let Some(tc) = cluster.as_turnstile() else {
        return Ok(Vec::new());
    };
    let Some(r) = tc.api(tc.leader().await?).view().await?.request_records else {
        return Ok(Vec::new());
    };
    let figure = |what: &str, v: u64| {
        Measure::new(
            "W8",
            format!("loaded state: request records, {what}"),
            "records",
            Better::Info,
            v as f64,
        )
    };
    Ok(vec![
        figure("pinned", r.pinned),
        figure("windowed", r.windowed),
    ])
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let plan = ctx.plan;
    let mut cluster = ctx.start_cluster("w8").await?;
    let start = Reading::opening(&mut cluster).await?;
    let mut snapshots = w8_snapshot_cost::measure(&cluster, "empty state").await?;
    let empty = cycles(ctx, &mut cluster, "empty").await?;

    let leader = cluster.leader().await?;
    let clients = cluster.clients(leader, SETUP_CONCURRENCY).await?;
    let locks = w8_preload::hold_locks(&clients, plan.w8_locks).await?;
    let with_locks = format!("{} locks", count(plan.w8_locks as u64));
    snapshots.extend(w8_snapshot_cost::measure(&cluster, &with_locks).await?);
    let keys = w8_preload::put_keys(&clients, plan.w8_keys).await?;
    let just_keys = format!("{} keys", count(plan.w8_keys as u64));
    let with_keys = format!("{with_locks} + {just_keys}");
    snapshots.extend(w8_snapshot_cost::measure(&cluster, &with_keys).await?);
    drop(clients);
    // Followers apply what the leader committed before the loaded run starts, not during it.
    cluster.wait_caught_up().await?;
    let state = records(&cluster).await?;

    let before = Reading::opening(&mut cluster).await?;
    let loaded = cycles(ctx, &mut cluster, "loaded").await?;
    let after = Reading::closing(&mut cluster).await?;
    cluster.check_running()?;

    let mut out = Outcome::default();
    out.measures.extend(run_measures("empty state", &empty));
    out.measures.extend(run_measures("loaded state", &loaded));
    let (e, l) = (
        rate(&empty.cycle, empty.window.length()),
        rate(&loaded.cycle, loaded.window.length()),
    );
    out.measures.push(
        Measure::new(
            "W8",
            "loaded / empty state: throughput",
            "ratio",
            Better::Higher,
            if e > 0.0 { l / e } else { 0.0 },
        )
        .counts(&loaded.cycle)
        .note("issue: at least 0.8"),
    );
    out.measures
        .extend(before.changes(&after, &cluster, "loaded run", Better::Lower)?);
    out.measures
        .extend(start.changes(&after, &cluster, "whole workload", Better::Info)?);
    out.measures.extend(locks.measures(&with_locks, "locks/s"));
    out.measures.extend(keys.measures(&just_keys, "keys/s"));
    out.measures.extend(state);
    out.measures.extend(snapshots);
    Ok(out)
}
