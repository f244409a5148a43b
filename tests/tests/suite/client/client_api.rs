//! The client against a real in-process cluster: leases, try-acquire and release with typed
//! refusals, keys with conditions and fences, counters, and retries that reuse the request id
//! so a retried acquire (or increment) acts once.

use super::common;

use std::time::Duration;

use common::{Mode, Proxy};
use turnstile_client::{AcquireOptions, Condition, DeleteOptions, Error, PutOptions};
use turnstile_tests::Cluster;

fn try_acquire(lease_id: u64) -> AcquireOptions {
    AcquireOptions {
        lease_id,
        ..AcquireOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_typed_refusals() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let client = common::client(
        c.addrs.values().map(|a| a.to_string()).collect(),
        Duration::from_secs(7),
    )?;
    let a = client.grant_lease(Duration::from_secs(60)).await?;
    let b = client.grant_lease(Duration::from_secs(60)).await?;
    assert_eq!(a.ttl_ms, 60_000);

    let g = client.acquire("job", try_acquire(a.lease_id)).await?;
    assert_eq!((g.name.as_str(), g.lease_id), ("job", a.lease_id));
    assert!(g.cluster_id.is_some(), "{g:?}");
    let info = client.locks("job").await?;
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].token, Some(g.token));

    match client.acquire("job", try_acquire(b.lease_id)).await {
        Err(Error::LockHeld { current_token, .. }) => assert_eq!(current_token, Some(g.token)),
        other => panic!("expected lock_held, got {other:?}"),
    }
    let wrong = client.release("job", g.token + 1000, a.lease_id).await;
    assert!(matches!(wrong, Err(Error::NotHolder { .. })), "{wrong:?}");
    client.release("job", g.token, a.lease_id).await?;
    let g2 = client.acquire("job", try_acquire(b.lease_id)).await?;
    assert!(g2.token > g.token);

    // Keys: conditions, fences and lease binding.
    let put = |v: &str, opts: PutOptions| {
        let client = client.clone();
        let v = v.to_string();
        async move { client.put("cfg/a b", &v, opts).await }
    };
    let absent = PutOptions {
        condition: Some(Condition::Absent),
        ..Default::default()
    };
    let w1 = put("v1", absent.clone()).await?;
    assert!(matches!(
        put("v1", absent).await,
        Err(Error::CompareFailed { .. })
    ));
    let kv = client
        .get("cfg/a b")
        .await?
        .expect("the key was just written");
    assert_eq!((kv.value.as_str(), kv.mod_revision), ("v1", w1.revision));
    let stale = turnstile_client::Fence {
        lock: "job".into(),
        token: g.token,
    };
    let fenced = PutOptions {
        fence: Some(stale),
        ..Default::default()
    };
    match put("v2", fenced).await {
        Err(Error::Fenced { current_token, .. }) => assert_eq!(current_token, Some(g2.token)),
        other => panic!("expected fenced, got {other:?}"),
    }
    let d = client.delete("cfg/a b", DeleteOptions::default()).await?;
    assert!(d.deleted);
    assert_eq!(client.get("cfg/a b").await?, None);

    // Counters and leases.
    assert_eq!(client.incr("jobs", 5).await?.value, 5);
    assert_eq!(client.counter("jobs").await?, 5);
    let ka = client.keepalive(b.lease_id).await?;
    assert_eq!(ka.lease_id, b.lease_id);
    let info = client.lease(b.lease_id).await?;
    assert_eq!(info.locks, vec!["job".to_string()]);
    client.revoke_lease(b.lease_id).await?;
    assert!(matches!(
        client.keepalive(b.lease_id).await,
        Err(Error::LeaseNotFound { .. })
    ));
    assert!(client.locks("job").await?.holders.is_empty());
    assert!(matches!(
        client.acquire("bad name!", try_acquire(a.lease_id)).await,
        Err(Error::BadRequest { .. })
    ));
    let cluster = client.cluster().await?;
    assert_eq!(cluster.members.len(), 3);
    c.shutdown().await;
    Ok(())
}

/// The same prepared request sent twice is applied once: the second send returns the first
/// grant instead of `lock_held`, and a new request (new id) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resending_the_same_request_acquires_once() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let client = common::client(vec![c.addrs[&1].to_string()], Duration::from_secs(7))?;
    let lease = client.grant_lease(Duration::from_secs(60)).await?;
    let req = client.prepare_acquire("once", &try_acquire(lease.lease_id));
    let first = client.send(&req).await?;
    let again = client.send(&req).await?;
    assert_eq!(first, again, "a resend must return the first outcome");
    let info = client.locks("once").await?;
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].token, Some(first.token));
    match client.acquire("once", try_acquire(lease.lease_id)).await {
        Err(Error::LockHeld { current_token, .. }) => assert_eq!(current_token, Some(first.token)),
        other => panic!("a fresh request must be refused, got {other:?}"),
    }
    c.shutdown().await;
    Ok(())
}

/// A write whose answer is lost (a proxy delivers the request and swallows the answer) is
/// `Indeterminate`, carrying its request id; it was applied, and resending the same prepared
/// request on another path returns the first outcome without applying it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_indeterminate_and_resolved_by_resending() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let node = c.addrs[&1];
    let proxy = Proxy::start(node, Mode::SwallowAnswers).await?;
    let direct = common::client(vec![node.to_string()], Duration::from_secs(7))?;
    let lease = direct.grant_lease(Duration::from_secs(60)).await?;
    let through = common::client(vec![proxy.endpoint()], Duration::from_millis(1_000))?
        .with_retry_budget(Duration::from_millis(2_500));

    let incr = through.prepare_incr("exactly-once", 1);
    match through.send(&incr).await {
        Err(Error::Indeterminate { request_id, .. }) => {
            assert_eq!(request_id.as_deref(), incr.request_id())
        }
        other => panic!("expected indeterminate, got {other:?}"),
    }
    assert_eq!(direct.counter("exactly-once").await?, 1, "applied once");
    assert_eq!(direct.send(&incr).await?.value, 1);
    assert_eq!(
        direct.counter("exactly-once").await?,
        1,
        "not applied again"
    );

    let acquire = through.prepare_acquire("retried", &try_acquire(lease.lease_id));
    let unknown = through.send(&acquire).await;
    assert!(
        matches!(unknown, Err(Error::Indeterminate { .. })),
        "{unknown:?}"
    );
    let holder = direct.locks("retried").await?.holders;
    assert_eq!(holder.len(), 1, "the lost-answer acquire was applied");
    let grant = direct.send(&acquire).await?;
    assert_eq!(
        Some(grant.token),
        holder[0].token,
        "the resend returns the first grant"
    );

    // The retry loop does the same by itself: the first attempt's answer is swallowed, the
    // client moves to the next endpoint and resends with the same id.
    let rotating = common::client(
        vec![proxy.endpoint(), node.to_string()],
        Duration::from_millis(1_000),
    )?;
    assert_eq!(rotating.incr("rotated", 1).await?.value, 1);
    assert_eq!(direct.counter("rotated").await?, 1);
    c.shutdown().await;
    Ok(())
}

/// Request records stay bounded for a client that runs for ever: the client acknowledges every
/// answered request id, so after 300 acquire/release cycles on one long-lived lease the
/// cluster keeps no record of them. The negative control is the same loop sent without
/// acknowledgments (plain HTTP with request ids): its 600 records stay, on the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_answers_leave_no_records_behind() -> anyhow::Result<()> {
    const CYCLES: usize = 300;
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let client = common::client(
        c.addrs.values().map(|a| a.to_string()).collect(),
        Duration::from_secs(7),
    )?;
    let records = |v: &serde_json::Value, place: &str| {
        v["request_records"][place].as_u64().unwrap_or(u64::MAX)
    };
    let lease = client.grant_lease(Duration::from_secs(600)).await?;
    for _ in 0..CYCLES {
        let g = client.acquire("acked", try_acquire(lease.lease_id)).await?;
        client.release("acked", g.token, lease.lease_id).await?;
    }
    // The last answers' ids go out with the next request; any read carries them.
    client.locks("acked").await?;
    let v = turnstile_tests::wait_for("the acknowledged records to go", || async {
        let v = c.status(leader).await.ok()?;
        (records(&v, "total") <= 2).then_some(v)
    })
    .await?;
    assert_eq!(records(&v, "pinned"), 0, "{}", v["request_records"]);

    // Control: the same loop without acknowledgments keeps every record for its window.
    let http = reqwest::Client::new();
    for i in 0..CYCLES {
        let (code, g) = c
            .post(
                leader,
                "/v1/locks/unacked/acquire",
                serde_json::json!({"lease_id": lease.lease_id, "wait_ms": 0, "request_id": format!("u-acq-{i}")}),
            )
            .await?;
        assert_eq!(code, 200, "{g}");
        let resp = http
            .post(c.url(leader, "/v1/locks/unacked/release"))
            .json(&serde_json::json!({"lease_id": lease.lease_id, "token": g["token"], "request_id": format!("u-rel-{i}")}))
            .send()
            .await?;
        assert_eq!(resp.status().as_u16(), 200);
    }
    let v = c.status(leader).await?;
    assert!(
        records(&v, "windowed") >= 2 * CYCLES as u64,
        "{}",
        v["request_records"]
    );
    c.shutdown().await;
    Ok(())
}
