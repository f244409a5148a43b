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

/// Reusing a queued acquire's `request_id` with another `wait_ms` is refused and leaves the
/// first wait alone: it stays queued past the reuser's wait, and gets the lock on release.
/// (Before `wait_ms` was part of the request's identity, the reuse re-attached and its
/// 200 ms timeout cancelled the first client's 30 s wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_with_another_wait_cannot_cancel_a_queued_wait() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let holder = c.lease(1, 60_000).await?;
    let waiter = c.lease(1, 60_000).await?;
    let (code, held) = c.acquire(1, "q", holder).await?;
    assert_eq!(code, 200, "{held}");
    let body =
        |wait_ms: u64| json!({"lease_id": waiter, "wait_ms": wait_ms, "request_id": "wait-1"});
    let url = c.url(2, "/v1/locks/q/acquire");
    let first = tokio::spawn({
        let http = reqwest::Client::new();
        let body = body(30_000);
        async move {
            let resp = http.post(url).json(&body).send().await?;
            let code = resp.status().as_u16();
            anyhow::Ok((code, resp.json::<serde_json::Value>().await?))
        }
    });
    turnstile_tests::wait_for("the first wait to queue", || async {
        let (_, v) = c.get(1, "/v1/locks/q").await.ok()?;
        (v["waiters"].as_array().map_or(0, Vec::len) == 1).then_some(())
    })
    .await?;
    let (code, v) = c.post(3, "/v1/locks/q/acquire", body(200)).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("request_id_reused")),
        "{v}"
    );
    // Well past the reuser's 200 ms: the first wait is still queued.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (_, v) = c.get(1, "/v1/locks/q").await?;
    assert_eq!(v["waiters"].as_array().map_or(0, Vec::len), 1, "{v}");
    c.release(1, "q", holder, token(&held)?).await?;
    let (code, granted) = first.await??;
    assert_eq!(code, 200, "{granted}");
    assert!(token(&granted)? > token(&held)?);
    c.shutdown().await;
    Ok(())
}
