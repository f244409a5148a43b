//! W3, lease keepalives: each client owns a lease and renews it back to back. Reports renewals
//! per second and their latency. Turnstile's keepalive is a replicated Raft entry (committed on
//! a quorum and fsynced); etcd's leader renews in memory without a Raft entry. The table says
//! so beside the figure.

use std::time::{Duration, Instant};

use super::common::{
    failed, grant_leases, log_delta, revoke_leases, run_workers, until, Op, Window,
};
use super::{Ctx, Outcome};
use crate::client::Client;
use crate::measure::rate_and_latency;
use crate::plan::LEASE_TTL_MS_LONG;
use crate::tally::{merge_all, Tally};

/// Said beside W3's figures.
const NOTE: &str =
    "Turnstile: each keepalive is a replicated, fsynced Raft entry; etcd: leader renews in memory";

async fn worker(mut c: Client, lease: i64, w: Window) -> Tally {
    let mut t = Tally::new();
    let mut keeper = match until(w.end, c.keeper(lease)).await {
        Op::Done(k) => k,
        Op::Failed(e) => {
            t.error(&e);
            return t;
        }
        Op::Cut => return t,
    };
    while w.open(&t) {
        let t0 = Instant::now();
        match until(w.end, keeper.renew()).await {
            Op::Done(()) => t.record(t0.elapsed()),
            Op::Failed(e) => failed(&mut t, &e).await,
            Op::Cut => break,
        }
    }
    t
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w3").await?;
    let leader = cluster.leader().await?;
    let n = ctx.plan.w3_clients;
    let clients = cluster.clients(leader, n).await?;
    let leases = grant_leases(&clients, LEASE_TTL_MS_LONG).await?;
    let probe_api = cluster.turnstile_leader().await?;
    let w = Window::after(Duration::ZERO, ctx.plan.duration);
    let probe = tokio::spawn(log_delta(probe_api, w));
    let results = run_workers(clients.clone(), |i, c| worker(c, leases[i], w)).await?;
    let delta = probe.await.ok().flatten();
    revoke_leases(&clients, &leases).await?;
    cluster.check_running()?;
    let t = merge_all(&results);
    let point = format!("{n} clients");
    let mut out = Outcome::default();
    out.measures.extend(
        rate_and_latency("W3", &point, "keepalives/s", &t, w.length())
            .into_iter()
            .map(|m| m.note(NOTE)),
    );
    out.log(format!("W3 {point}"), t.ops, delta);
    Ok(out)
}
