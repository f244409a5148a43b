//! Watches: events come from applied entries with `revision.seq` ids; resuming with
//! `Last-Event-ID` gives every later event exactly once, across a node restart and when
//! switching nodes; a start older than the retained history gets `compacted`.

use serde_json::json;
use turnstile_tests::{read_sse, token, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_without_gaps_or_duplicates_across_restart_and_node_switch() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let start = c.status(1).await?["applied_index"]
        .as_u64()
        .expect("applied")
        + 1;
    let put = |i: u32| json!({"value": format!("v{i}")});
    for i in 0..10 {
        let (code, _) = c
            .call(
                1,
                reqwest::Method::PUT,
                &format!("/v1/kv/app/k{}", i % 3),
                Some(put(i)),
            )
            .await?;
        assert_eq!(code, 200);
    }
    let lease = c.lease(1, 60_000).await?;
    let t = token(&c.acquire(1, "app.lock", lease).await?.1)?;
    c.release(1, "app.lock", lease, t).await?;
    // 12 events under the prefix: 10 puts, a grant, a release. Read the first 5 from node 2.
    let path = format!("/v1/watch?prefix=app&from_revision={start}");
    let addrs = c.addrs.clone();
    let url = |node: u64| format!("http://{}{path}", addrs[&node]);
    let first = read_sse(&url(2), None, 5).await?;
    assert_eq!(first.len(), 5);
    let last_id = first.last().and_then(|e| e.id.clone()).expect("id");

    // Node 2 restarts; more writes happen meanwhile.
    c.stop(2).await;
    for i in 10..13 {
        c.call(1, reqwest::Method::PUT, "/v1/kv/app/late", Some(put(i)))
            .await?;
    }
    c.restart(2).await?;
    c.converged().await?;
    // Resume on the restarted node, then switch to node 3 halfway.
    let second = read_sse(&url(2), Some(&last_id), 5).await?;
    let mid_id = second.last().and_then(|e| e.id.clone()).expect("id");
    let third = read_sse(&url(3), Some(&mid_id), 5).await?;
    let all: Vec<_> = first.iter().chain(&second).chain(&third).collect();
    let ids: Vec<(u64, u64)> = all
        .iter()
        .map(|e| {
            let id = e.id.as_deref().expect("every event has an id");
            let (r, s) = id.split_once('.').expect("revision.seq");
            (r.parse().expect("revision"), s.parse().expect("seq"))
        })
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids strictly increase, no duplicates: {ids:?}"
    );
    let kinds: Vec<&str> = all.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "put").count(),
        13,
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"lock_granted") && kinds.contains(&"lock_released"),
        "{kinds:?}"
    );
    // The same stream from scratch on node 1 is identical: every node emits the same events.
    let again = read_sse(&url(1), None, 15).await?;
    assert_eq!(
        again.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        all.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    );
    // An open watch must not hold up a node's shutdown: the stream ends, the node stops.
    let open = reqwest::get(url(1)).await?;
    assert!(open.status().is_success());
    tokio::time::timeout(std::time::Duration::from_secs(20), c.shutdown())
        .await
        .expect("shutdown with an open watch");
    drop(open);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_start_gets_compacted() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    // Overflow the retained history cheaply: an acquire-many of 64 locks makes 64 grant
    // events in one entry, and revoking the lease 64 release events.
    let names: Vec<String> = (0..64).map(|i| format!("l{i}")).collect();
    let per_round = 2 * names.len();
    let rounds = turnstile_core::limits::WATCH_HISTORY_EVENTS_MAX / per_round + 2;
    for _ in 0..rounds {
        let lease = c.lease(1, 60_000).await?;
        let (code, v) = c
            .post(
                1,
                "/v1/locks/acquire-many",
                json!({"names": names, "lease_id": lease, "wait_ms": 0}),
            )
            .await?;
        assert_eq!(code, 200, "{v}");
        c.call(
            1,
            reqwest::Method::DELETE,
            &format!("/v1/leases/{lease}"),
            None,
        )
        .await?;
    }
    let events = read_sse(&c.url(1, "/v1/watch?from_revision=1"), None, 1).await?;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event, "compacted");
    let oldest = events[0].data["oldest_revision"]
        .as_u64()
        .expect("oldest_revision");
    assert!(oldest > 1);
    // Starting at the oldest available revision works.
    let events = read_sse(
        &c.url(1, &format!("/v1/watch?from_revision={oldest}")),
        None,
        3,
    )
    .await?;
    assert!(events.iter().all(|e| e.event != "compacted"), "{events:?}");
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_node_ends_its_watch_streams() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    // A cut-off follower, then a cut-off leader (which keeps its role but hears no quorum).
    for pick_leader in [false, true] {
        let leader = c.leader().await?;
        let node = if pick_leader {
            leader
        } else {
            *c.running()
                .iter()
                .find(|&&n| n != leader)
                .expect("a follower")
        };
        let url = c.url(node, "/v1/watch?prefix=");
        let reader = tokio::spawn(async move { read_sse(&url, None, 1_000).await });
        let started = std::time::Instant::now();
        c.isolate(node);
        // The stream ends (read_sse returns with what it got) instead of idling forever.
        let got = tokio::time::timeout(std::time::Duration::from_secs(15), reader).await;
        assert!(
            got.is_ok(),
            "the watch on cut-off node {node} (leader: {pick_leader}) kept running"
        );
        let ms = started.elapsed().as_millis();
        println!("cut-off node {node} (leader: {pick_leader}) ended its watch after {ms} ms");
        c.heal();
        c.converged().await?;
    }
    c.shutdown().await;
    Ok(())
}
