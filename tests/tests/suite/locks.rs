//! Try-acquire, release and tokens through a real 3-node cluster.

use serde_json::json;
use turnstile_tests::{token, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_conflict_release_reacquire_and_stale_release() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let a = c.lease(1, 30_000).await?;
    let b = c.lease(2, 30_000).await?;

    let (code, v) = c.acquire(3, "jobs", a).await?;
    assert_eq!(code, 200, "{v}");
    let t1 = token(&v)?;
    assert!(
        v["term"].as_u64().is_some() && v["cluster_id"].is_string(),
        "{v}"
    );
    assert_eq!(v["lease_id"], a);

    let (code, v) = c.acquire(1, "jobs", b).await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("lock_held")), "{v}");

    let (code, v) = c.release(2, "jobs", a, t1).await?;
    assert_eq!(code, 200, "{v}");
    let (code, v) = c.acquire(2, "jobs", b).await?;
    assert_eq!(code, 200, "{v}");
    let t2 = token(&v)?;
    assert!(t2 > t1, "token {t2} not above {t1}");

    // A stale release (the old acquisition's token) frees nothing: etcd #22082.
    for (lease, tok) in [(a, t1), (b, t1)] {
        let (code, v) = c.release(1, "jobs", lease, tok).await?;
        assert_eq!((code, v["code"].as_str()), (409, Some("not_holder")), "{v}");
    }
    let (code, v) = c.get(3, "/v1/locks/jobs").await?;
    assert_eq!(code, 200);
    assert_eq!(v["holders"][0]["token"], t2, "{v}");
    assert_eq!(v["holders"][0]["lease_id"], b);

    // Fenced writes in the store: only the current grant's token applies.
    let put = |tok: u64| json!({"value": "x", "fence": {"lock": "jobs", "token": tok}});
    let (code, v) = c
        .call(1, reqwest::Method::PUT, "/v1/kv/guarded", Some(put(t1)))
        .await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("fenced")), "{v}");
    let (code, v) = c
        .call(1, reqwest::Method::PUT, "/v1/kv/guarded", Some(put(t2)))
        .await?;
    assert_eq!(code, 200, "{v}");
    c.converged().await?;
    c.shutdown().await;
    Ok(())
}
