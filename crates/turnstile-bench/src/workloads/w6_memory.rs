//! W6, memory: resident memory (VmRSS) of each node of a fresh cluster, with its leases granted,
//! before and after taking and holding 50,000 locks (1,000 per lease, 64 clients acquiring
//! concurrently), once every node has applied everything, and again
//! [`crate::plan::W6_SETTLE_S`] seconds later (settled). Turnstile's acquires carry a
//! `request_id` like every other waiting acquire here, so their records are in the growth.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};

use super::{Ctx, Outcome};
use crate::client::Client;
use crate::measure::{Better, Measure};
use crate::plan::{LEASE_TTL_MS_LONG, W6_CLIENTS, W6_LOCKS_PER_LEASE};
use crate::tally::Tally;

/// `wait_ms` of each acquire (every lock is free: granted at once).
const ACQUIRE_WAIT_MS: u64 = 10_000;
/// Bytes per mebibyte, for the table.
const MIB: f64 = 1_048_576.0;

fn mean(v: &[u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<u64>() as f64 / v.len() as f64
}

/// Takes lock `w6-{k}` for every k in 0..locks, W6_CLIENTS at a time.
async fn hold_locks(clients: &[Client], leases: &[i64], locks: usize) -> anyhow::Result<Tally> {
    let results: Vec<Duration> = futures::stream::iter(0..locks)
        .map(|k| {
            let mut c = clients[k % clients.len()].clone();
            let lease = leases[k / W6_LOCKS_PER_LEASE];
            async move {
                let t0 = Instant::now();
                c.lock(
                    &format!("w6-{k}"),
                    lease,
                    ACQUIRE_WAIT_MS,
                    &format!("w6-{k}"),
                )
                .await?;
                anyhow::Ok(t0.elapsed())
            }
        })
        .buffer_unordered(W6_CLIENTS)
        .try_collect()
        .await?;
    let mut t = Tally::new();
    for d in results {
        t.record(d);
    }
    Ok(t)
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w6").await?;
    let leader = cluster.leader().await?;
    let locks = ctx.plan.w6_locks;
    let clients = cluster.clients(leader, W6_CLIENTS).await?;
    let lease_count = locks.div_ceil(W6_LOCKS_PER_LEASE);
    let mut leases = Vec::with_capacity(lease_count);
    for k in 0..lease_count {
        leases.push(
            clients[k % clients.len()]
                .clone()
                .lease_grant(LEASE_TTL_MS_LONG)
                .await?,
        );
    }
    cluster.wait_caught_up().await?;
    let before = cluster.rss_bytes()?;
    let started = Instant::now();
    let taken = hold_locks(&clients, &leases, locks).await?;
    let took = started.elapsed();
    cluster.wait_caught_up().await?;
    let after = cluster.rss_bytes()?;
    // Allocators hand freed pages (the fill's temporaries: request buffers, copied tree
    // nodes) back to the kernel seconds after the frees, so the figure right after the fill
    // holds a transient; the settled one, the same fixed time later on both systems, does not.
    tokio::time::sleep(ctx.plan.w6_settle).await;
    let settled = cluster.rss_bytes()?;
    cluster.check_running()?;
    let growth_of = |after: &[u64]| -> Vec<u64> {
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect()
    };
    let growth = growth_of(&after);
    let growth_settled = growth_of(&settled);
    let point = format!("{locks} locks");
    let mb = |label: &str, v: f64, better| {
        Measure::new("W6", format!("{point}: {label}"), "MiB", better, v / MIB).counts(&taken)
    };
    let mut out = Outcome::default();
    out.measures.push(mb(
        "RSS per node before (mean)",
        mean(&before),
        Better::Info,
    ));
    out.measures
        .push(mb("RSS per node after (mean)", mean(&after), Better::Info));
    out.measures
        .push(mb("growth per node (mean)", mean(&growth), Better::Lower));
    let max_growth = growth.iter().copied().max().unwrap_or(0) as f64;
    out.measures
        .push(mb("growth per node (max)", max_growth, Better::Lower));
    out.measures.push(
        Measure::new(
            "W6",
            format!("{point}: growth per lock (mean node)"),
            "bytes",
            Better::Lower,
            mean(&growth) / locks as f64,
        )
        .counts(&taken),
    );
    let later = format!("{} s later", ctx.plan.w6_settle.as_secs());
    out.measures.push(mb(
        &format!("RSS per node {later} (mean)"),
        mean(&settled),
        Better::Info,
    ));
    out.measures.push(
        Measure::new(
            "W6",
            format!("{point}: growth per lock, {later} (mean node)"),
            "bytes",
            Better::Lower,
            mean(&growth_settled) / locks as f64,
        )
        .counts(&taken),
    );
    out.measures.push(
        Measure::new(
            "W6",
            format!("{point}: acquire rate while filling"),
            "locks/s",
            Better::Info,
            taken.ops as f64 / took.as_secs_f64().max(1e-9),
        )
        .counts(&taken),
    );
    Ok(out)
}
