//! W2, hot lock handoff: one lock, N waiters (16, 100, 1,000), each with its own lease, each
//! looping "wait for the lock, release it at once, queue again", so the queue stays N long and
//! every grant is a handoff from a release. Reports handoffs per second, the wait time, and
//! handoffs as a fraction of the sequential-commit limit, measured again just before each
//! point. For Turnstile also whether each grant
//! was made by the entry that released the previous hold (its token is that release's
//! revision), and the leader's log entries per handoff. Each waiter count runs on a fresh
//! cluster.

use std::time::Instant;

use super::common::{
    failed, grant_leases, log_delta, revoke_leases, run_workers, until, Op, Window,
};
use super::{Ctx, Outcome};
use crate::client::Client;
use crate::limit;
use crate::measure::{latency, rate, Better, Measure};
use crate::plan::{System, LEASE_TTL_MS_LONG};
use crate::tally::{merge_all, Tally};
use crate::turnstile_api::LogCounters;

/// `wait_ms` of each acquire: longer than any queue wait in a window, below Turnstile's
/// 300,000 ms cap; a wait still queued when the window closes is abandoned (cancelled).
const ACQUIRE_WAIT_MS: u64 = 120_000;

/// One waiter's counts: waits that ended in the window, and its grants as
/// (token, revision of the release that ended the hold).
#[derive(Default)]
struct Waiter {
    wait: Tally,
    grants: Vec<(u64, u64)>,
}

async fn worker(mut c: Client, i: usize, lease: i64, name: String, w: Window) -> Waiter {
    let mut t = Waiter::default();
    let mut seq = 0u64;
    while w.open(&t.wait) {
        seq += 1;
        let rid = format!("{name}-{i}-{seq}");
        let t0 = Instant::now();
        let held = match until(w.end, c.lock(&name, lease, ACQUIRE_WAIT_MS, &rid)).await {
            Op::Done(h) => h,
            Op::Failed(e) => {
                failed(&mut t.wait, &e).await;
                continue;
            }
            Op::Cut => break,
        };
        let granted = Instant::now();
        let released = until(w.end, c.unlock(&held)).await;
        if w.contains(granted) {
            t.wait.record(granted - t0);
            let rev = if let Op::Done(r) = &released { *r } else { 0 };
            t.grants.push((held.token(), rev));
        }
        match released {
            Op::Done(_) => {}
            Op::Failed(e) => failed(&mut t.wait, &e).await,
            Op::Cut => break,
        }
    }
    t
}

/// Of consecutive grants (by token), how many were made by the previous hold's release entry:
/// (matching pairs, pairs).
pub fn grants_by_release(mut grants: Vec<(u64, u64)>) -> (usize, usize) {
    grants.sort_unstable();
    let pairs = grants.len().saturating_sub(1);
    let matched = grants.windows(2).filter(|p| p[1].0 == p[0].1).count();
    (matched, pairs)
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    for &n in &ctx.plan.w2_waiters {
        run_point(ctx, n, &mut out).await?;
    }
    Ok(out)
}

/// One waiter count, on a fresh cluster: etcd 3.4.23 that had served the smaller counts (their
/// waits cancelled at the window's end, leases revoked) stalled at 1,000 waiters (owner keys
/// present, no grant returned); see docs/benchmarks.md.
async fn run_point(ctx: &mut Ctx<'_>, n: usize, out: &mut Outcome) -> anyhow::Result<()> {
    let plan = ctx.plan;
    // The limit again, just before this point and with no cluster running: other work on the
    // machine moves fdatasync latency, and the fraction should use the disk as it is now.
    let limit = limit::measure(ctx.dirs.root(), plan.fsync_samples, plan.rtt_samples).await?;
    let mut cluster = ctx.start_cluster(&format!("w2-{n}")).await?;
    let leader = cluster.leader().await?;
    let clients = cluster.clients(leader, n).await?;
    let leases = grant_leases(&clients, LEASE_TTL_MS_LONG).await?;
    let name = format!("w2-hot-{n}");
    let probe_api = cluster.turnstile_leader().await?;
    let w = Window::after(plan.w2_warmup, plan.duration);
    let probe = tokio::spawn(log_delta(probe_api, w));
    let results = run_workers(clients.clone(), |i, c| {
        worker(c, i, leases[i], name.clone(), w)
    })
    .await?;
    let delta = probe.await.ok().flatten();
    revoke_leases(&clients, &leases).await?;
    cluster.check_running()?;
    let wait = merge_all(results.iter().map(|r| &r.wait));
    let point = format!("{n} waiters");
    let handoffs_per_s = rate(&wait, w.length());
    out.measures.push(
        Measure::new(
            "W2",
            format!("{point}: handoffs"),
            "handoffs/s",
            Better::Higher,
            handoffs_per_s,
        )
        .counts(&wait),
    );
    out.measures.extend(latency("W2", &point, "wait", &wait));
    out.measures.push(
        Measure::new(
            "W2",
            format!("{point}: handoffs / limit"),
            "fraction",
            Better::Higher,
            handoffs_per_s / limit.commits_per_s,
        )
        .note("handoffs/s over the limit measured just before this point"),
    );
    out.measures.push(
        Measure::new(
            "W2",
            format!("{point}: the limit just before"),
            "commits/s",
            Better::Info,
            limit.commits_per_s,
        )
        .note("1 / (2 x fdatasync p50 + loopback RTT p50): see The limit"),
    );
    if ctx.system == System::Turnstile {
        let grants: Vec<(u64, u64)> = results.into_iter().flat_map(|r| r.grants).collect();
        out.measures
            .extend(one_entry_measures(&point, grants, wait.ops, delta));
    }
    out.log(format!("W2 {point}"), wait.ops, delta);
    Ok(())
}

/// Turnstile only: the share of grants made by the previous hold's release entry, and the
/// leader's log entries per handoff.
fn one_entry_measures(
    point: &str,
    grants: Vec<(u64, u64)>,
    handoffs: u64,
    delta: Option<LogCounters>,
) -> Vec<Measure> {
    let (matched, pairs) = grants_by_release(grants);
    let share = if pairs > 0 {
        matched as f64 / pairs as f64
    } else {
        0.0
    };
    let mut out = vec![Measure::new(
        "W2",
        format!("{point}: grants made by the release entry"),
        "fraction",
        Better::Info,
        share,
    )
    .note("token of grant k+1 == revision of release k: one entry per handoff")];
    if let Some(d) = delta.filter(|_| handoffs > 0) {
        out.push(
            Measure::new(
                "W2",
                format!("{point}: leader log entries per handoff"),
                "entries",
                Better::Info,
                d.entries_appended as f64 / handoffs as f64,
            )
            .note("every entry: the handoff (release) plus the re-queued acquire, ticks"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_made_by_the_previous_release_are_counted() {
        // token 10 released at 12 → next grant token 12 (made by that release): a match;
        // 12 released at 15 → next grant 16: not made by the release.
        let grants = vec![(16, 20), (10, 12), (12, 15)];
        assert_eq!(grants_by_release(grants), (1, 2));
        assert_eq!(grants_by_release(vec![]), (0, 0));
        assert_eq!(grants_by_release(vec![(3, 4)]), (0, 0));
    }
}
