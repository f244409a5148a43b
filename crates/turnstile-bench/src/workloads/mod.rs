//! The workloads of issue 5, each written once against `Client`/`Cluster` and run on one
//! system at a time, each on fresh clusters it starts itself:
//!
//! - `w1_uncontended`: acquire + release of distinct locks at 1, 16, 64 clients;
//! - `w2_handoff`: one hot lock, 16/100/1,000 waiters that re-queue after each grant;
//! - `w3_keepalive`: lease keepalives per second;
//! - `w4_cas`: compare-and-set writes on distinct keys;
//! - `w5_watch`: write-to-delivery latency at 1/100/1,000 watchers;
//! - `w6_memory`: resident memory before and after holding 50,000 locks;
//! - `w7_recovery`: leader killed → next grant, holder killed → waiter's grant;
//! - `w8_large_state`: W1 at 64 clients on an empty state and again after preloading 50,000
//!   held locks and 200,000 keys; leader stability, and (Turnstile) the cost of a snapshot as
//!   the state grows. Its parts: `w8_preload`, `w8_stability`, `w8_snapshot_cost`.

pub mod common;
mod w1_uncontended;
mod w2_handoff;
mod w3_keepalive;
mod w4_cas;
mod w5_watch;
mod w6_memory;
mod w7_recovery;
mod w8_large_state;
mod w8_preload;
mod w8_snapshot_cost;
mod w8_stability;

use crate::cluster::{Cluster, RunDirs};
use crate::measure::Measure;
use crate::plan::{Plan, System, Transport, Workload};
use crate::turnstile_api::LogCounters;

/// Turnstile's leader log counters over one measurement window.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogRow {
    pub measurement: String,
    /// Operations completed in the window (cycles, handoffs, keepalives, writes).
    pub ops: u64,
    pub delta: LogCounters,
}

/// What one workload measured on one system.
#[derive(Default)]
pub struct Outcome {
    pub measures: Vec<Measure>,
    pub log_rows: Vec<LogRow>,
}

impl Outcome {
    /// Adds a log row when the counters were read (Turnstile).
    pub fn log(&mut self, measurement: String, ops: u64, delta: Option<LogCounters>) {
        if let Some(delta) = delta {
            self.log_rows.push(LogRow {
                measurement,
                ops,
                delta,
            });
        }
    }
}

/// What a workload needs from the run.
pub struct Ctx<'a> {
    pub plan: &'a Plan,
    pub dirs: &'a mut RunDirs,
    pub system: System,
    pub transport: Transport,
}

impl Ctx<'_> {
    /// A fresh cluster of this run's system on this run's transport, named after `tag`.
    pub async fn start_cluster(&mut self, tag: &str) -> anyhow::Result<Cluster> {
        Cluster::start(self.system, self.transport, self.plan, self.dirs, tag).await
    }
}

/// Runs workload `w` on `ctx.system`.
pub async fn run(w: Workload, ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    match w {
        Workload::W1 => w1_uncontended::run(ctx).await,
        Workload::W2 => w2_handoff::run(ctx).await,
        Workload::W3 => w3_keepalive::run(ctx).await,
        Workload::W4 => w4_cas::run(ctx).await,
        Workload::W5 => w5_watch::run(ctx).await,
        Workload::W6 => w6_memory::run(ctx).await,
        Workload::W7 => w7_recovery::run(ctx).await,
        Workload::W8 => w8_large_state::run(ctx).await,
    }
}
