//! Minority refusal: a node (or two of five) cut off from the majority answers `no_quorum`,
//! grants nothing and serves no stale holder, while the majority moves the lock on. Its
//! `/readyz` turns `503 no_quorum` (a cut-off leader's too), while the majority's stays 200.
//! After healing, every node is ready again and reports the same state digest at the same
//! applied index.

use std::time::{Duration, Instant};

use serde_json::json;
use turnstile_tests::{token, wait_for, Cluster};

/// Waits until node `id`'s `/readyz` answers `code` (and, for 503, `reason`); the ms it took.
async fn readyz_becomes(
    c: &Cluster,
    id: u64,
    code: u16,
    reason: Option<&str>,
) -> anyhow::Result<u128> {
    let started = Instant::now();
    wait_for(
        &format!("node {id}'s /readyz to answer {code} {reason:?}"),
        || async {
            let (got, v) = c.get(id, "/readyz").await.ok()?;
            let matches = got == code && v["reason"].as_str() == reason;
            matches.then_some(())
        },
    )
    .await?;
    Ok(started.elapsed().as_millis())
}

/// Cuts `minority` off, checks it refuses, and that the majority (through `majority_node`)
/// moves the lock on. Returns the ms the minority took to refuse a write.
async fn cut_and_check(
    c: &Cluster,
    minority: &[u64],
    majority_node: u64,
    round: u32,
) -> anyhow::Result<u128> {
    let contested = format!("contested-{round}");
    let minority_lock = format!("minority-{round}");
    let lease = c.lease(majority_node, 60_000).await?;
    let (code, v) = c.acquire(majority_node, &contested, lease).await?;
    assert_eq!(code, 200, "{v}");
    let t_before = token(&v)?;
    // Control: every node is ready before the cut.
    for id in c.running() {
        readyz_becomes(c, id, 200, None).await?;
    }

    c.partition(minority);
    // Writes on the minority side: after the old leader lease runs out, 503 no_quorum; never a
    // grant. (While a cut-off leader's lease is still valid it may append and answer 504.)
    let minority_lease = lease;
    let mut refusal_ms = 0;
    for &m in minority {
        let started = Instant::now();
        let (code, v) = loop {
            let (code, v) = c.acquire(m, &minority_lock, minority_lease).await?;
            assert_ne!(code, 200, "minority node {m} granted a lock: {v}");
            if code == 503 || started.elapsed() > Duration::from_secs(15) {
                break (code, v);
            }
        };
        assert_eq!(
            (code, v["code"].as_str()),
            (503, Some("no_quorum")),
            "node {m}: {v}"
        );
        refusal_ms = refusal_ms.max(started.elapsed().as_millis());
        // Reads refuse too: no stale holder.
        let (code, v) = c.get(m, &format!("/v1/locks/{contested}")).await?;
        assert_eq!(
            (code, v["code"].as_str()),
            (503, Some("no_quorum")),
            "read on node {m}: {v}"
        );
    }

    // Not ready where nothing can be served; the majority stays ready.
    for &m in minority {
        let ms = readyz_becomes(c, m, 503, Some("no_quorum")).await?;
        println!("node {m} cut off: /readyz 503 no_quorum after {ms} ms more");
    }
    readyz_becomes(c, majority_node, 200, None).await?;

    // The majority moves the lock on.
    let (code, v) = c
        .post(
            majority_node,
            &format!("/v1/locks/{contested}/release"),
            json!({"lease_id": lease, "token": t_before}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let other = c.lease(majority_node, 60_000).await?;
    let (code, v) = c.acquire(majority_node, &contested, other).await?;
    assert_eq!(code, 200, "{v}");
    let t_after = token(&v)?;
    assert!(t_after > t_before);

    c.heal();
    let (applied, digest) = c.converged().await?;
    for id in c.running() {
        readyz_becomes(c, id, 200, None).await?;
    }
    println!(
        "minority {minority:?} refused after {refusal_ms} ms; converged at {applied} ({digest})"
    );
    for &m in minority {
        let (code, v) = c.get(m, &format!("/v1/locks/{contested}")).await?;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["holders"][0]["token"], t_after, "{v}");
        let (code, v) = c.get(m, &format!("/v1/locks/{minority_lock}")).await?;
        assert!(
            code == 200 && v["holders"].as_array().is_some_and(|h| h.is_empty()),
            "minority granted: {v}"
        );
    }
    Ok(refusal_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_cut_off_refuses() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let follower = *c
        .running()
        .iter()
        .find(|&&n| n != leader)
        .expect("a follower");
    cut_and_check(&c, &[follower], leader, 1).await?;
    // Now cut off the leader itself.
    let leader = c.leader().await?;
    let other = *c
        .running()
        .iter()
        .find(|&&n| n != leader)
        .expect("another node");
    cut_and_check(&c, &[leader], other, 2).await?;
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_cut_off_refuse() -> anyhow::Result<()> {
    let c = Cluster::start(5).await?;
    let leader = c.leader().await?;
    let followers: Vec<u64> = c
        .running()
        .into_iter()
        .filter(|&n| n != leader)
        .take(2)
        .collect();
    cut_and_check(&c, &followers, leader, 1).await?;
    c.shutdown().await;
    Ok(())
}
