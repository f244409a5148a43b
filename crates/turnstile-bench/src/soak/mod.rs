//! `turnstile-bench soak`: one local 3-node Turnstile cluster under a steady load for a long
//! time (30 minutes by default), judged on what a long-lived client population needs: no
//! refusals, per-node memory flat after warm-up, and throughput at the end within 80% of the
//! start. Each client has one lease, renewed by keepalives, and one lock of its own, and loops
//! try-acquire + release with a fresh `request_id` on every call, acknowledging answered ids
//! as the Rust client does (or not, with `--no-ack`). See docs/benchmarks.md, "Soak".
//!
//! Module map:
//! - acknowledgments use the Rust client's own queue (`turnstile_client::PendingAcks`);
//! - `session`: one client's counted calls; `counters`: the counts all clients share;
//! - `load`: the acquire/release loop and the keepalive loop;
//! - `sample`: what is read every interval; `verdict`: the per-minute table and verdicts;
//! - `report`: Markdown and JSON.

mod counters;
mod load;
mod report;
mod sample;
mod session;
mod verdict;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::watch;

use self::counters::Counters;
use self::load::Load;
use self::sample::{Sample, Sampler};
use self::session::Session;
use crate::cluster::RunDirs;
use crate::machine::Machine;
use crate::plan::{SoakPlan, SETUP_CONCURRENCY, SOAK_LEASE_TTL_MS};
use crate::turnstile_cluster::TurnstileCluster;

use self::report::Gathered;
pub use self::report::SoakReport;

/// Runs the soak and judges it. Errors only when the cluster cannot be set up; a node dying
/// during the load ends sampling and fails the run's last verdict instead, so the figures
/// gathered until then are still written.
pub async fn run(plan: &SoakPlan) -> anyhow::Result<SoakReport> {
    let started = Instant::now();
    let mut dirs = RunDirs::create(&plan.work_dir, &plan.out, plan.keep_logs)?;
    let machine = Machine::read(dirs.root(), None);
    let mut cluster = TurnstileCluster::start(
        &plan.turnstile_bin,
        dirs.next("turnstile-soak")?,
        None,
        false,
    )
    .await?;
    let api = cluster.api(cluster.leader().await?);
    let leases: Vec<u64> = futures::stream::iter(0..plan.clients)
        .map(|_| api.lease_grant(SOAK_LEASE_TTL_MS))
        .buffered(SETUP_CONCURRENCY)
        .try_collect()
        .await
        .context("granting the clients' leases")?;
    cluster.wait_caught_up().await?;

    let counters = Arc::new(Counters::default());
    let (stop_tx, stop) = watch::channel(false);
    eprintln!(
        "turnstile-bench: soak: {} clients for {:.1} min, acknowledgments {}",
        plan.clients,
        plan.duration.as_secs_f64() / 60.0,
        if plan.ack { "on" } else { "off" }
    );
    let mut sampler = Sampler::start(&cluster, &counters).await;
    let start = Instant::now();
    let end = start + plan.duration;
    let mut tasks = Vec::with_capacity(2 * plan.clients);
    for (client, lease) in leases.into_iter().enumerate() {
        let load = Load {
            session: Arc::new(Session::new(api.clone(), plan.ack, counters.clone())),
            counters: counters.clone(),
            client,
            lease,
            end,
            stop: stop.clone(),
        };
        tasks.push(tokio::spawn(load::keepalives(load.clone())));
        tasks.push(tokio::spawn(load::cycles(load)));
    }
    let (samples, stopped_early) =
        sample_until_end(&mut sampler, &mut cluster, &counters, plan, start).await;
    // Ends the loops now if sampling stopped early; at the end they have stopped already.
    let _ = stop_tx.send(true);
    for t in tasks {
        t.await.context("a soak client panicked")?;
    }
    let gathered = Gathered {
        samples,
        totals: counters.counts(),
        failures_by_label: counters.by_label(),
        first_failure: counters.first_failure(),
        stopped_early,
    };
    let mut report = SoakReport::new(plan, machine, gathered);
    report.wall_s = started.elapsed().as_secs_f64();
    report.loadavg_end = crate::machine::loadavg();
    Ok(report)
}

/// Samples at every multiple of the interval after `start`, and at the end, until the end or
/// until a sample fails (returned as the reason it stopped early).
async fn sample_until_end(
    sampler: &mut Sampler,
    cluster: &mut TurnstileCluster,
    counters: &Counters,
    plan: &SoakPlan,
    start: Instant,
) -> (Vec<Sample>, Option<String>) {
    let run_s = plan.duration.as_secs_f64();
    let every_s = plan.sample.as_secs_f64();
    // The `f64 -> u64` cast saturates; both are bounded by the plan (a day, half a second).
    let count = (run_s / every_s).ceil() as u64;
    let mut samples = Vec::new();
    for k in 1..=count {
        let at_s = (k as f64 * every_s).min(run_s);
        let due = start + Duration::from_secs_f64(at_s);
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        match sampler.read(cluster, counters, at_s).await {
            Ok(s) => {
                progress(&s);
                samples.push(s);
            }
            Err(e) => return (samples, Some(format!("at {at_s:.0} s: {e:#}"))),
        }
    }
    (samples, None)
}

/// One line on stderr per sample, so a long soak shows it is alive.
fn progress(s: &Sample) {
    let rss: Vec<String> = s
        .rss_bytes
        .iter()
        .map(|b| format!("{:.0}", *b as f64 / verdict::MIB))
        .collect();
    eprintln!(
        "turnstile-bench: soak {:>6.0} s: {:>6.0} cycles/s, {:>6} entries/s, {} failed, RSS MiB {}, records {}, read in {:.0} ms",
        s.at_s,
        s.cycles_per_s,
        s.entries_per_s.map_or_else(|| "n/a".into(), |e| format!("{e:.0}")),
        s.counts.refusals + s.counts.unanswered,
        rss.join("/"),
        s.records.map_or_else(|| "n/a".into(), |r| format!("{} ({} windowed)", r.total, r.windowed)),
        s.read_ms,
    );
}
