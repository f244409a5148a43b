//! Blocking acquire end to end: FIFO handoff, waiters whose lease expires, dropped
//! connections, timeouts, modes, semaphores, acquire-many and deadlock detection.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_tests::{token, wait_for, Cluster};

async fn waiters_of(c: &Cluster, name: &str) -> anyhow::Result<Vec<u64>> {
    let (_, v) = c.get(1, &format!("/v1/locks/{name}")).await?;
    Ok(v["waiters"]
        .as_array()
        .map(|w| w.iter().filter_map(|x| x["lease_id"].as_u64()).collect())
        .unwrap_or_default())
}

fn acquire_body(lease: u64, wait_ms: u64) -> Value {
    json!({"lease_id": lease, "wait_ms": wait_ms})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_waiter_gets_lease_not_found_and_the_queue_moves_on() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let holder = c.lease(1, 60_000).await?;
    let short = c.lease(1, 1_500).await?;
    let next = c.lease(1, 60_000).await?;
    let (_, v) = c.acquire(1, "q", holder).await?;
    let t = token(&v)?;
    let short_wait = tokio::spawn({
        let url = c.url(2, "/v1/locks/q/acquire");
        async move { post_json(&url, acquire_body(short, 20_000)).await }
    });
    wait_for("short to queue", || async {
        (waiters_of(&c, "q").await.ok()? == vec![short]).then_some(())
    })
    .await?;
    let next_wait = tokio::spawn({
        let url = c.url(3, "/v1/locks/q/acquire");
        async move { post_json(&url, acquire_body(next, 20_000)).await }
    });
    wait_for("next to queue", || async {
        (waiters_of(&c, "q").await.ok()?.len() == 2).then_some(())
    })
    .await?;
    // `short` expires while queued (nobody renews it): it must fail, never hold the lock.
    let (code, v) = short_wait.await??;
    assert_eq!(
        (code, v["code"].as_str()),
        (404, Some("lease_not_found")),
        "{v}"
    );
    c.release(1, "q", holder, t).await?;
    let (code, v) = next_wait.await??;
    assert_eq!(code, 200, "{v}");
    let (_, v) = c.get(1, "/v1/locks/q").await?;
    assert_eq!(v["holders"][0]["lease_id"], next, "{v}");
    c.shutdown().await;
    Ok(())
}

async fn post_json(url: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    let code = resp.status().as_u16();
    Ok((code, resp.json().await.unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connection_leaves_the_queue_and_timeout_ends_released() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let holder = c.lease(1, 60_000).await?;
    let quitter = c.lease(1, 60_000).await?;
    let patient = c.lease(1, 60_000).await?;
    let t = token(&c.acquire(1, "d", holder).await?.1)?;
    // A client that gives up after 300 ms by dropping its connection.
    let url = c.url(2, "/v1/locks/d/acquire");
    let quit = reqwest::Client::new()
        .post(&url)
        .json(&acquire_body(quitter, 60_000))
        .timeout(Duration::from_millis(300))
        .send();
    assert!(quit.await.is_err(), "the client timed out");
    wait_for("the abandoned waiter to leave the queue", || async {
        waiters_of(&c, "d").await.ok()?.is_empty().then_some(())
    })
    .await?;

    // A wait that times out: 409 wait_timeout, and the lock is not held by it afterwards.
    let started = Instant::now();
    let (code, v) = post_json(&c.url(3, "/v1/locks/d/acquire"), acquire_body(patient, 500)).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("wait_timeout")),
        "{v}"
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(waiters_of(&c, "d").await?.is_empty());

    // The next waiter is granted when the holder releases.
    let waiting = tokio::spawn({
        let url = c.url(1, "/v1/locks/d/acquire");
        async move { post_json(&url, acquire_body(patient, 20_000)).await }
    });
    wait_for("patient to queue", || async {
        (waiters_of(&c, "d").await.ok()? == vec![patient]).then_some(())
    })
    .await?;
    let released_at = Instant::now();
    c.release(2, "d", holder, t).await?;
    let (code, v) = waiting.await??;
    assert_eq!(code, 200, "{v}");
    println!(
        "release to next grant: {} ms",
        released_at.elapsed().as_millis()
    );
    assert!(token(&v)? > t);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_semaphores_and_acquire_many_end_to_end() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let l: Vec<u64> = futures::future::try_join_all((0..4).map(|_| c.lease(1, 60_000))).await?;
    let shared = |lease: u64| json!({"lease_id": lease, "wait_ms": 0, "mode": "shared"});
    let p = "/v1/locks/rw/acquire";
    assert_eq!(c.post(1, p, shared(l[0])).await?.0, 200);
    assert_eq!(c.post(2, p, shared(l[1])).await?.0, 200);
    let (code, v) = c
        .post(3, p, json!({"lease_id": l[2], "wait_ms": 0}))
        .await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("lock_held")), "{v}");
    let (_, v) = c.get(1, "/v1/locks/rw").await?;
    assert_eq!(v["holders"].as_array().map(Vec::len), Some(2), "{v}");

    let sem =
        |lease: u64, permits: u32| json!({"lease_id": lease, "wait_ms": 0, "permits": permits});
    assert_eq!(
        c.post(1, "/v1/locks/pool/acquire", sem(l[0], 2)).await?.0,
        200
    );
    assert_eq!(
        c.post(1, "/v1/locks/pool/acquire", sem(l[1], 2)).await?.0,
        200
    );
    let (code, v) = c.post(1, "/v1/locks/pool/acquire", sem(l[2], 3)).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("mode_mismatch")),
        "{v}"
    );
    let (code, v) = c.post(1, "/v1/locks/pool/acquire", shared(l[2])).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("mode_mismatch")),
        "{v}"
    );
    let (code, v) = c.post(1, "/v1/locks/pool/acquire", sem(l[2], 2)).await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("lock_held")), "{v}");

    let (code, v) = c
        .post(
            2,
            "/v1/locks/acquire-many",
            json!({"names": ["m1", "m2", "m3"], "lease_id": l[3], "wait_ms": 0}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let tok = v["token"].as_u64().expect("token");
    for n in ["m1", "m2", "m3"] {
        assert_eq!(v["tokens"][n], tok, "{v}");
    }
    let (code, v) = c
        .post(
            3,
            "/v1/locks/acquire-many",
            json!({"names": ["m3", "free"], "lease_id": l[2], "wait_ms": 0}),
        )
        .await?;
    assert_eq!(code, 409, "{v}");
    let (_, v) = c.get(1, "/v1/locks/free").await?;
    assert!(
        v["holders"].as_array().is_some_and(|h| h.is_empty()),
        "all or nothing: {v}"
    );
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_cycle_gets_one_victim() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let a = c.lease(1, 60_000).await?;
    let b = c.lease(1, 60_000).await?;
    assert_eq!(c.acquire(1, "x", a).await?.0, 200);
    assert_eq!(c.acquire(1, "y", b).await?.0, 200);
    let a_wait = tokio::spawn({
        let url = c.url(2, "/v1/locks/y/acquire");
        async move { post_json(&url, acquire_body(a, 20_000)).await }
    });
    wait_for("a to queue on y", || async {
        (waiters_of(&c, "y").await.ok()? == vec![a]).then_some(())
    })
    .await?;
    let started = Instant::now();
    let (code, v) = post_json(&c.url(3, "/v1/locks/x/acquire"), acquire_body(b, 20_000)).await?;
    println!(
        "deadlock detected after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("deadlock_victim")),
        "{v}"
    );
    let cycle: Vec<u64> = v["cycle"]
        .as_array()
        .expect("cycle")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(cycle.contains(&a) && cycle.contains(&b), "{v}");
    // The survivor still waits (b keeps y); it is granted once b lets go.
    assert!(!a_wait.is_finished());
    c.call(1, reqwest::Method::DELETE, &format!("/v1/leases/{b}"), None)
        .await?;
    let (code, v) = a_wait.await??;
    assert_eq!(code, 200, "{v}");
    c.shutdown().await;
    Ok(())
}

/// The waiters of lock `name` as node `id` reads them (lease ids, queue order).
async fn waiters_via(c: &Cluster, id: u64, name: &str) -> anyhow::Result<Vec<u64>> {
    let (_, v) = c.get(id, &format!("/v1/locks/{name}")).await?;
    Ok(v["waiters"]
        .as_array()
        .map(|w| w.iter().filter_map(|x| x["lease_id"].as_u64()).collect())
        .unwrap_or_default())
}

/// A graceful stop of the node holding a named wait answers it `503 unavailable` and leaves it
/// queued in its place; the same request (same `request_id`, same `wait_ms`) retried on another
/// node re-attaches to it and is granted on the release. (When the stop cancelled the entry,
/// that retry answered `409 wait_timeout`: the control is the message and the queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_wait_keeps_its_place_when_its_node_stops() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let others: Vec<u64> = c.running().into_iter().filter(|&n| n != leader).collect();
    let (stopping, survivor) = (others[0], others[1]);
    let holder = c.lease(leader, 60_000).await?;
    let (code, v) = c.acquire(leader, "drained", holder).await?;
    assert_eq!(code, 200, "{v}");
    let held = token(&v)?;
    let waiter = c.lease(leader, 60_000).await?;
    let body = json!({"lease_id": waiter, "wait_ms": 30_000, "request_id": "drain-wait-1"});
    let http = c.client_builder(None)?.build()?;
    let first = tokio::spawn(
        http.post(c.url(stopping, "/v1/locks/drained/acquire"))
            .json(&body)
            .send(),
    );
    wait_for("the wait to be queued", || async {
        (waiters_via(&c, survivor, "drained").await.ok()? == vec![waiter]).then_some(())
    })
    .await?;

    c.stop(stopping).await;
    let resp = first.await??;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await?;
    assert_eq!(
        (status, v["code"].as_str()),
        (503, Some("unavailable")),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("stays queued")),
        "{v}"
    );
    assert_eq!(
        waiters_via(&c, survivor, "drained").await?,
        vec![waiter],
        "still queued after the stop"
    );

    let retry = tokio::spawn(
        http.post(c.url(survivor, "/v1/locks/drained/acquire"))
            .json(&body)
            .send(),
    );
    // The retry re-attached rather than queueing a second time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiters_via(&c, survivor, "drained").await?, vec![waiter]);
    let (code, v) = c
        .post(
            survivor,
            "/v1/locks/drained/release",
            json!({"lease_id": holder, "token": held}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let resp = retry.await??;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await?;
    assert_eq!(status, 200, "the retried wait is granted: {v}");
    assert!(token(&v)? > held, "{v}");
    c.shutdown().await;
    Ok(())
}
