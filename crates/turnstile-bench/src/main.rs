//! `turnstile-bench`: starts local 3-node clusters of Turnstile and of etcd on loopback, runs
//! the same workloads with the same client concurrency against each in turn, and prints a
//! side-by-side table with ratios (also written as Markdown and JSON). `turnstile-bench soak`
//! instead runs one Turnstile cluster under a steady load for a long time and judges it. See
//! docs/benchmarks.md.
//!
//! Module map:
//! - `plan`: command line, `Plan`, `SoakPlan`, every named limit of the harness;
//! - `node_process`, `scratch_dir`: server processes and directories cleaned up on drop;
//! - `turnstile_cluster`, `etcd_cluster`, `cluster`: starting, inspecting and killing nodes;
//! - `cluster_certs`: the CA and certificates of a TLS cluster (`--transport tls`);
//! - `turnstile_api`, `etcd_api`, `client`, `sse`: the requests the workloads make;
//! - `workloads`: W1..W8 (W8: W1 on an empty state, then again after preloading 50,000 held
//!   locks and 200,000 keys, with leader checks and Turnstile's snapshot cost); `tally`,
//!   `measure`: histograms and figures;
//! - `limit`: the sequential-commit limit (fdatasync and loopback round trip);
//! - `machine`, `report`, `runner`: machine facts, the table, the run;
//! - `soak`: the soak, its samples, verdicts and report.

mod client;
mod cluster;
mod cluster_certs;
mod etcd_api;
mod etcd_cluster;
mod limit;
mod machine;
mod measure;
mod node_process;
mod plan;
mod report;
mod runner;
mod scratch_dir;
mod soak;
mod sse;
mod tally;
mod turnstile_api;
mod turnstile_cluster;
mod workloads;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::plan::{Args, Command, Plan, SoakPlan};

/// Prints the Markdown, writes it to `out` and the JSON beside it.
fn write_outputs(out: &Path, md: &str, json: &str) -> anyhow::Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    println!("{md}");
    std::fs::write(out, md).with_context(|| format!("cannot write {}", out.display()))?;
    let json_path = out.with_extension("json");
    std::fs::write(&json_path, json)
        .with_context(|| format!("cannot write {}", json_path.display()))?;
    eprintln!(
        "turnstile-bench: wrote {} and {}",
        out.display(),
        json_path.display()
    );
    Ok(())
}

/// What the command line asks for.
enum Mode {
    /// Boxed: a `Plan` is several times a `SoakPlan`'s size.
    Compare(Box<Plan>),
    Soak(SoakPlan),
}

impl Mode {
    fn from_args(mut args: Args) -> anyhow::Result<Mode> {
        match args.command.take() {
            Some(Command::Soak(soak)) => Ok(Mode::Soak(SoakPlan::from_args(soak)?)),
            None => Ok(Mode::Compare(Box::new(Plan::from_args(args)?))),
        }
    }
}

/// Resolves when the process is asked to stop (Ctrl-C, SIGTERM, SIGHUP).
async fn stop_requested() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => { r?; Ok("interrupted") }
        _ = term.recv() => Ok("terminated"),
        _ = hup.recv() => Ok("hung up"),
    }
}

/// Runs the mode; `Ok(false)` when a workload failed or a soak verdict failed.
async fn main_async(mode: Mode) -> anyhow::Result<bool> {
    // Dropping the run future on a signal drops every cluster: nodes are killed and their
    // directories removed before the process exits.
    match mode {
        Mode::Compare(plan) => {
            let report = tokio::select! {
                r = runner::run(&plan) => r?,
                why = stop_requested() => anyhow::bail!("{}; clusters stopped, data dirs removed", why?),
            };
            write_outputs(&plan.out, &report.to_markdown(), &report.to_json()?)?;
            Ok(report.failures.is_empty())
        }
        Mode::Soak(plan) => {
            let report = tokio::select! {
                r = soak::run(&plan) => r?,
                why = stop_requested() => anyhow::bail!("{}; cluster stopped, data dirs removed", why?),
            };
            write_outputs(&plan.out, &report.to_markdown(), &report.to_json()?)?;
            Ok(report.passed())
        }
    }
}

fn main() -> ExitCode {
    let mode = match Mode::from_args(Args::parse()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("turnstile-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("turnstile-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(mode)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("turnstile-bench: some workloads or soak verdicts failed (see the report)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("turnstile-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
