//! Leader loss: a new leader is elected, held locks keep holder and token, new grants keep
//! increasing, and a survivor's `recent_leaders` names both terms' leaders. Prints the measured
//! time from leader shutdown to the next grant.

use std::time::Instant;

use turnstile_tests::{token, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_keeps_locks_and_token_order() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let old = c.leader().await?;
    let lease = c.lease(old, 60_000).await?;
    let (code, v) = c.acquire(old, "held", lease).await?;
    assert_eq!(code, 200, "{v}");
    let t_held = token(&v)?;
    let (_, status) = c.get(old, "/v1/cluster").await?;
    let old_term = status["term"].as_u64().expect("term");

    let stopped_at = Instant::now();
    c.stop(old).await;
    let survivor = *c.running().first().expect("two nodes left");
    // Acquire through a survivor until the new leader grants (it forwards to the leader).
    let t_new = turnstile_tests::wait_for("a grant after leader loss", || async {
        let (code, v) = c.acquire(survivor, "fresh", lease).await.ok()?;
        (code == 200).then(|| token(&v).ok()).flatten()
    })
    .await?;
    println!(
        "leader loss to next grant: {} ms",
        stopped_at.elapsed().as_millis()
    );
    assert!(t_new > t_held, "token {t_new} after {t_held}");
    let new = c.leader().await?;
    assert_ne!(new, old);
    let (_, status) = c.get(new, "/v1/cluster").await?;
    let new_term = status["term"].as_u64().expect("term");
    // The old term is over, but the survivor still names who led it.
    let (_, status) = c.get(survivor, "/v1/cluster").await?;
    let known: Vec<(u64, u64)> = status["recent_leaders"]
        .as_array()
        .expect("recent_leaders")
        .iter()
        .filter_map(|l| Some((l["term"].as_u64()?, l["leader_id"].as_u64()?)))
        .collect();
    assert!(
        known.contains(&(old_term, old)) && known.contains(&(new_term, new)),
        "terms {old_term} (node {old}) and {new_term} (node {new}) in {known:?}"
    );
    assert!(known.windows(2).all(|w| w[0].0 < w[1].0), "{known:?}");

    let (code, v) = c.get(survivor, "/v1/locks/held").await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["holders"][0]["token"], t_held, "{v}");
    assert_eq!(v["holders"][0]["lease_id"], lease, "{v}");

    c.restart(old).await?;
    c.converged().await?;
    c.shutdown().await;
    Ok(())
}
