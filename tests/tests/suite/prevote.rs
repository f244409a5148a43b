//! A node coming back from a partition does not depose a healthy leader. With PreVote on (the
//! default), a follower cut off for ten election timeouts asks the others before it campaigns,
//! learns nothing (or that they still hear their leader), and never raises its term; healed,
//! it rejoins under the same leader at the same term.
//!
//! Control: the same cut with PreVote switched off on that node (openraft's runtime switch)
//! raises its term at every election timeout, and healing it makes the leader step down, which
//! is the disruption this test is for.

use std::time::Duration;

use turnstile_server::config::ServeArgs;
use turnstile_tests::{wait_for, Cluster};

/// Short timeouts, so ten election timeouts take seconds.
const HEARTBEAT_MS: u64 = 50;
const ELECTION_TIMEOUT_MS_MIN: u64 = 300;
const ELECTION_TIMEOUT_MS_MAX: u64 = 600;
/// How long the follower stays cut off: ten election timeouts.
const ISOLATION_MS: u64 = 10 * ELECTION_TIMEOUT_MS_MAX;

fn fast_elections(a: &mut ServeArgs) {
    a.heartbeat_ms = Some(HEARTBEAT_MS);
    a.election_timeout_ms_min = Some(ELECTION_TIMEOUT_MS_MIN);
    a.election_timeout_ms_max = Some(ELECTION_TIMEOUT_MS_MAX);
}

/// The value of metric `name` (no labels) in node `id`'s `/metrics`.
async fn metric(c: &Cluster, id: u64, name: &str) -> anyhow::Result<u64> {
    let (code, body) = c.get_bytes(id, "/metrics").await?;
    anyhow::ensure!(code == 200, "/metrics answered {code}");
    let text = String::from_utf8(body)?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {name} in /metrics"))
}

/// `(leader_id, term)` as node `id` reports them.
async fn view(c: &Cluster, id: u64) -> anyhow::Result<(Option<u64>, u64)> {
    let v = c.status(id).await?;
    Ok((v["leader_id"].as_u64(), v["term"].as_u64().unwrap_or(0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_follower_does_not_depose_the_leader() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(3, fast_elections).await?;
    let leader = c.leader().await?;
    let (_, term) = view(&c, leader).await?;
    let follower = *c
        .running()
        .iter()
        .find(|&&n| n != leader)
        .expect("a follower");

    c.isolate(follower);
    tokio::time::sleep(Duration::from_millis(ISOLATION_MS)).await;
    let (_, cut_term) = view(&c, follower).await?;
    assert_eq!(
        cut_term, term,
        "PreVote: the cut-off node never raised its term"
    );
    c.heal();
    // Back under the same leader, and it stays so for three more election timeouts.
    wait_for("the healed follower to hear the leader", || async {
        (view(&c, follower).await.ok()? == (Some(leader), term)).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(3 * ELECTION_TIMEOUT_MS_MAX)).await;
    for id in c.running() {
        assert_eq!(
            view(&c, id).await?,
            (Some(leader), term),
            "node {id} after the heal"
        );
    }
    // The leader calls every peer: it sees them all again. (A follower calls only the leader in
    // steady state, so its figure for the other follower waits for its next call there.)
    assert_eq!(metric(&c, leader, "turnstile_peers_unreachable").await?, 0);
    println!("cut off for {ISOLATION_MS} ms with PreVote: leader {leader} kept term {term}");

    // Control: without PreVote on the cut-off node, its term climbs and the heal costs the
    // leader its term.
    c.app(follower)
        .expect("the follower runs")
        .raft
        .runtime_config()
        .pre_vote(false);
    c.isolate(follower);
    tokio::time::sleep(Duration::from_millis(ISOLATION_MS)).await;
    let (_, inflated) = view(&c, follower).await?;
    assert!(
        inflated > term,
        "without PreVote the cut-off node campaigns: term {inflated} after {term}"
    );
    c.heal();
    let new_term = wait_for("the old leader's term to end", || async {
        let (_, t) = view(&c, leader).await.ok()?;
        (t > term).then_some(t)
    })
    .await?;
    println!("control without PreVote: cut-off node reached term {inflated}; the leader's term {term} ended (now {new_term})");
    c.shutdown().await;
    Ok(())
}
