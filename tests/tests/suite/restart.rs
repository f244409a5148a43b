//! Whole-cluster restart from the data dirs: locks, leases (with their remaining time), keys,
//! counters and token order survive, and every node agrees byte for byte.

use serde_json::json;
use turnstile_tests::{token, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_restart_keeps_everything() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let lease = c.lease(1, 120_000).await?;
    let (code, v) = c.acquire(2, "survivor", lease).await?;
    assert_eq!(code, 200, "{v}");
    let t1 = token(&v)?;
    let (code, v) = c
        .call(
            3,
            reqwest::Method::PUT,
            "/v1/kv/config/a",
            Some(json!({"value": "1"})),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    for _ in 0..3 {
        let (code, _) = c.post(1, "/v1/counters/seq/incr", json!({"by": 2})).await?;
        assert_eq!(code, 200);
    }
    let (_, before) = c.get(1, &format!("/v1/leases/{lease}")).await?;
    let remaining_before = before["remaining_ms"].as_u64().expect("remaining_ms");
    let cluster_id = c.status(1).await?["cluster_id"].clone();

    for id in c.running() {
        c.stop(id).await;
    }
    for id in 1..=3 {
        c.restart(id).await?;
    }
    c.leader().await?;
    let (applied, digest) = c.converged().await?;
    println!("restarted cluster converged at {applied} ({digest})");

    assert_eq!(c.status(2).await?["cluster_id"], cluster_id);
    let (code, v) = c.get(3, "/v1/locks/survivor").await?;
    assert_eq!(code, 200);
    assert_eq!(v["holders"][0]["token"], t1, "{v}");
    let (code, v) = c.get(1, &format!("/v1/leases/{lease}")).await?;
    assert_eq!(code, 200, "{v}");
    let remaining_after = v["remaining_ms"].as_u64().expect("remaining_ms");
    // The lease kept its deadline: no TTL reset across the restart.
    assert!(
        remaining_after <= remaining_before,
        "{remaining_after} > {remaining_before}"
    );
    assert!(
        remaining_after > 60_000,
        "lease lost too much time: {remaining_after}"
    );
    let (_, v) = c.get(2, "/v1/kv/config/a").await?;
    assert_eq!(v["value"], "1");
    let (_, v) = c.get(2, "/v1/counters/seq").await?;
    assert_eq!(v["value"], 6);

    let other = c.lease(1, 30_000).await?;
    let (code, v) = c.acquire(1, "after-restart", other).await?;
    assert_eq!(code, 200, "{v}");
    assert!(token(&v)? > t1);
    c.shutdown().await;
    Ok(())
}
