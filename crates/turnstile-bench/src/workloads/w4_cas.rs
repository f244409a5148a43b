//! W4, compare-and-set writes on distinct keys: each client owns a key, creates it (if absent),
//! then loops "put if the key's mod_revision is the one I last wrote". Turnstile: `PUT
//! /v1/kv/{key}` with `if: {mod_revision}`; etcd: a txn comparing mod_revision, then put.

use std::time::{Duration, Instant};

use super::common::{failed, log_delta, run_workers, until, Op, Window};
use super::{Ctx, Outcome};
use crate::client::Client;
use crate::measure::rate_and_latency;
use crate::plan::W4_VALUE_BYTES;
use crate::tally::{merge_all, Tally};

async fn worker(mut c: Client, i: usize, w: Window) -> Tally {
    let key = format!("w4-{i}");
    let value = "v".repeat(W4_VALUE_BYTES);
    let mut t = Tally::new();
    let mut expect = None;
    while w.open(&t) {
        let t0 = Instant::now();
        match until(w.end, c.put_if(&key, &value, expect)).await {
            Op::Done(rev) => {
                t.record(t0.elapsed());
                expect = Some(rev);
            }
            // A failed compare leaves `expect` stale for good: stop rather than fail forever.
            Op::Failed(e) => {
                failed(&mut t, &e).await;
                break;
            }
            Op::Cut => break,
        }
    }
    t
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w4").await?;
    let leader = cluster.leader().await?;
    let n = ctx.plan.w4_clients;
    let clients = cluster.clients(leader, n).await?;
    let probe_api = cluster.turnstile_leader().await?;
    let w = Window::after(Duration::ZERO, ctx.plan.duration);
    let probe = tokio::spawn(log_delta(probe_api, w));
    let results = run_workers(clients, |i, c| worker(c, i, w)).await?;
    let delta = probe.await.ok().flatten();
    cluster.check_running()?;
    let t = merge_all(&results);
    let point = format!("{n} clients");
    let mut out = Outcome::default();
    out.measures
        .extend(rate_and_latency("W4", &point, "writes/s", &t, w.length()));
    out.log(format!("W4 {point}"), t.ops, delta);
    Ok(out)
}
