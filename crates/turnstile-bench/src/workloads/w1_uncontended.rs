//! W1, uncontended lock cycles: each client owns a lease (taken up front) and a lock of its own,
//! and loops acquire + release on it. At 1, 16 and 64 clients: cycles per second and cycle
//! latency; with 1 client also the latency of each operation.

use std::time::{Duration, Instant};

use super::common::{
    failed, grant_leases, log_delta, revoke_leases, run_workers, until, Op, Window,
};
use super::{Ctx, Outcome};
use crate::client::Client;
use crate::measure::{latency, rate_and_latency};
use crate::plan::LEASE_TTL_MS_LONG;
use crate::tally::{merge_all, Tally};

/// `wait_ms` of each acquire: uncontended, so it is granted at once; waiting acquires are what
/// etcd's `Lock` is, and they carry a `request_id` as docs/api.md asks.
const ACQUIRE_WAIT_MS: u64 = 5_000;

/// One worker's counts: whole cycles, and each half.
#[derive(Default)]
struct Cycles {
    cycle: Tally,
    acquire: Tally,
    release: Tally,
}

async fn worker(mut c: Client, n: usize, i: usize, lease: i64, w: Window) -> Cycles {
    let name = format!("w1-{n}-{i}");
    let mut t = Cycles::default();
    let mut seq = 0u64;
    while w.open(&t.cycle) {
        seq += 1;
        let rid = format!("{name}-{seq}");
        let t0 = Instant::now();
        let held = match until(w.end, c.lock(&name, lease, ACQUIRE_WAIT_MS, &rid)).await {
            Op::Done(h) => h,
            Op::Failed(e) => {
                failed(&mut t.cycle, &e).await;
                continue;
            }
            Op::Cut => break,
        };
        let t1 = Instant::now();
        match until(w.end, c.unlock(&held)).await {
            Op::Done(_) => {}
            Op::Failed(e) => {
                failed(&mut t.cycle, &e).await;
                continue;
            }
            Op::Cut => break,
        }
        let t2 = Instant::now();
        t.acquire.record(t1 - t0);
        t.release.record(t2 - t1);
        t.cycle.record(t2 - t0);
    }
    t
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w1").await?;
    let leader = cluster.leader().await?;
    let mut out = Outcome::default();
    for &n in &ctx.plan.w1_clients {
        let clients = cluster.clients(leader, n).await?;
        let leases = grant_leases(&clients, LEASE_TTL_MS_LONG).await?;
        let probe_api = cluster.turnstile_leader().await?;
        let w = Window::after(Duration::ZERO, ctx.plan.duration);
        let probe = tokio::spawn(log_delta(probe_api, w));
        let results = run_workers(clients.clone(), |i, c| worker(c, n, i, leases[i], w)).await?;
        let delta = probe.await.ok().flatten();
        revoke_leases(&clients, &leases).await?;
        cluster.check_running()?;
        let cycle = merge_all(results.iter().map(|r| &r.cycle));
        let point = format!("{n} client{}", if n == 1 { "" } else { "s" });
        out.measures.extend(rate_and_latency(
            "W1",
            &point,
            "cycles/s",
            &cycle,
            w.length(),
        ));
        if n == 1 {
            let acquire = merge_all(results.iter().map(|r| &r.acquire));
            let release = merge_all(results.iter().map(|r| &r.release));
            out.measures
                .extend(latency("W1", &point, "acquire", &acquire));
            out.measures
                .extend(latency("W1", &point, "release", &release));
        }
        out.log(format!("W1 {point}"), cycle.ops, delta);
    }
    Ok(out)
}
