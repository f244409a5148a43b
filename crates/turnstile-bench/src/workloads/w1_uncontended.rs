//! W1, uncontended lock cycles: each client owns a lease (taken up front) and a lock of its own,
//! and loops acquire + release on it. At 1, 16 and 64 clients: cycles per second and cycle
//! latency; with 1 client also the latency of each operation. [`measure_cycles`] is the loop
//! itself on a given cluster, which W8 also runs (on an empty and on a loaded state).

use std::time::{Duration, Instant};

use super::common::{
    failed, grant_leases, log_delta, revoke_leases, run_workers, until, Op, Window,
};
use super::{Ctx, Outcome};
use crate::client::Client;
use crate::cluster::Cluster;
use crate::measure::{latency, rate_and_latency};
use crate::plan::LEASE_TTL_MS_LONG;
use crate::tally::{merge_all, Tally};
use crate::turnstile_api::LogCounters;

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

/// One measurement's counts, merged over its clients.
pub struct CycleRun {
    pub window: Window,
    pub cycle: Tally,
    pub acquire: Tally,
    pub release: Tally,
    /// The leader's log counters over the window (Turnstile, when asked for).
    pub log: Option<LogCounters>,
}

/// Loops acquire + release on the lock `name` until the window closes.
async fn worker(mut c: Client, name: String, lease: i64, w: Window) -> Cycles {
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

/// W1's loop on `cluster`'s leader for `duration`: `n` clients, each with a lease taken up front
/// (revoked after) and its own lock `{prefix}-{n}-{i}`. Request ids are `{lock}-{seq}`, so a
/// prefix used once per cluster never meets a record of an earlier run (records outlive their
/// run by the retry window, and a repeated id would be answered from its record). With
/// `probe_log`, the leader's log counters are read at the window's start and end.
pub async fn measure_cycles(
    cluster: &mut Cluster,
    n: usize,
    prefix: &str,
    duration: Duration,
    probe_log: bool,
) -> anyhow::Result<CycleRun> {
    let leader = cluster.leader().await?;
    let clients = cluster.clients(leader, n).await?;
    let leases = grant_leases(&clients, LEASE_TTL_MS_LONG).await?;
    let probe_api = if probe_log {
        cluster.turnstile_leader().await?
    } else {
        None
    };
    let w = Window::after(Duration::ZERO, duration);
    let probe = tokio::spawn(log_delta(probe_api, w));
    let results = run_workers(clients.clone(), |i, c| {
        worker(c, format!("{prefix}-{n}-{i}"), leases[i], w)
    })
    .await?;
    let log = probe.await.ok().flatten();
    revoke_leases(&clients, &leases).await?;
    cluster.check_running()?;
    Ok(CycleRun {
        window: w,
        cycle: merge_all(results.iter().map(|r| &r.cycle)),
        acquire: merge_all(results.iter().map(|r| &r.acquire)),
        release: merge_all(results.iter().map(|r| &r.release)),
        log,
    })
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w1").await?;
    let mut out = Outcome::default();
    for &n in &ctx.plan.w1_clients {
        let r = measure_cycles(&mut cluster, n, "w1", ctx.plan.duration, true).await?;
        let point = format!("{n} client{}", if n == 1 { "" } else { "s" });
        out.measures.extend(rate_and_latency(
            "W1",
            &point,
            "cycles/s",
            &r.cycle,
            r.window.length(),
        ));
        if n == 1 {
            out.measures
                .extend(latency("W1", &point, "acquire", &r.acquire));
            out.measures
                .extend(latency("W1", &point, "release", &r.release));
        }
        out.log(format!("W1 {point}"), r.cycle.ops, r.log);
    }
    Ok(out)
}
