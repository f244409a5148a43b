//! Request ids: a retried request acts once and returns the first outcome; a different
//! request under a used id is refused.

use serde_json::json;
use turnstile_tests::{token, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_act_once() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let lease = c.lease(1, 60_000).await?;
    let acquire = json!({"lease_id": lease, "wait_ms": 0, "request_id": "acq-1"});
    let (code, first) = c.post(1, "/v1/locks/job/acquire", acquire.clone()).await?;
    assert_eq!(code, 200, "{first}");
    // The retry goes to another node (as a client would after a timeout) and gets the same
    // grant, not lock_held and not a second grant.
    let (code, retry) = c.post(2, "/v1/locks/job/acquire", acquire).await?;
    assert_eq!(code, 200, "{retry}");
    assert_eq!(token(&retry)?, token(&first)?);
    assert_eq!(retry["revision"], first["revision"]);

    for node in [1, 3, 2] {
        let (code, v) = c
            .post(
                node,
                "/v1/counters/c/incr",
                json!({"by": 5, "request_id": "inc-1"}),
            )
            .await?;
        assert_eq!((code, v["value"].as_i64()), (200, Some(5)), "{v}");
    }
    let (_, v) = c.get(1, "/v1/counters/c").await?;
    assert_eq!(v["value"], 5);

    let (code, v) = c
        .post(
            1,
            "/v1/counters/c/incr",
            json!({"by": 6, "request_id": "inc-1"}),
        )
        .await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("request_id_reused")),
        "{v}"
    );
    let (code, v) = c
        .post(
            3,
            "/v1/leases",
            json!({"ttl_ms": 5_000, "request_id": "acq-1"}),
        )
        .await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("request_id_reused")),
        "{v}"
    );

    // A retried lease grant returns the same lease.
    let (_, l1) = c
        .post(
            1,
            "/v1/leases",
            json!({"ttl_ms": 5_000, "request_id": "grant-1"}),
        )
        .await?;
    let (_, l2) = c
        .post(
            2,
            "/v1/leases",
            json!({"ttl_ms": 5_000, "request_id": "grant-1"}),
        )
        .await?;
    assert_eq!(l1["lease_id"], l2["lease_id"]);
    c.shutdown().await;
    Ok(())
}
