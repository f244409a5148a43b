//! `run`: measures the limit, then runs each workload on each transport and each system in
//! turn (one cluster at a time, never two at once; interleaved so slow drift on the machine
//! touches every row of a workload alike), and collects everything into a `Report`.

use std::time::Instant;

use crate::cluster::RunDirs;
use crate::limit;
use crate::machine::Machine;
use crate::plan::{Plan, System};
use crate::report::Report;
use crate::workloads::{self, Ctx};

/// Runs the plan. A workload that fails on one system is recorded in the report and the run
/// goes on; the caller decides the exit status from `report.failures`.
pub async fn run(plan: &Plan) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut dirs = RunDirs::create(&plan.work_dir, &plan.out, plan.keep_logs)?;
    let etcd = plan
        .systems
        .contains(&System::Etcd)
        .then_some(plan.etcd_bin.as_path());
    let machine = Machine::read(dirs.root(), etcd);
    eprintln!("turnstile-bench: measuring the limit (fdatasync, loopback round trip)");
    let limit = limit::measure(dirs.root(), plan.fsync_samples, plan.rtt_samples).await?;
    let mut report = Report::new(plan, machine, limit);
    for &w in &plan.workloads {
        for &transport in &plan.transports {
            for &system in plan.systems.iter().filter(|s| s.runs(w.name())) {
                let t0 = Instant::now();
                let what = format!("{} on {} ({})", w.name(), system.name(), transport.name());
                eprintln!("turnstile-bench: {what}");
                let mut ctx = Ctx {
                    plan,
                    dirs: &mut dirs,
                    system,
                    transport,
                };
                match workloads::run(w, &mut ctx).await {
                    Ok(outcome) => report.add(system, transport, outcome),
                    Err(e) => {
                        eprintln!("turnstile-bench: {what} failed: {e:#}");
                        report.fail(system, transport, w.name(), &e);
                    }
                }
                eprintln!(
                    "turnstile-bench: {what} took {:.1} s",
                    t0.elapsed().as_secs_f64()
                );
            }
        }
    }
    report.wall_s = started.elapsed().as_secs_f64();
    report.loadavg_end = crate::machine::loadavg();
    Ok(report)
}
