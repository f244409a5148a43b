//! The client on the server's queueing and watch features: a blocking acquire handed over on
//! release, acquire-many, shared holders, and a watch that resumes on another node, without
//! gaps or repeats, when the node it streams from stops.

use super::common;

use std::time::Duration;

use common::{Mode as ProxyMode, Proxy};
use futures::StreamExt;
use turnstile_client::{
    Error, EventKind, LockOptions, Mode, PutOptions, Watch, WatchEvent, WatchOptions,
};
use turnstile_tests::{wait_for, Cluster};

fn all_endpoints(c: &Cluster) -> Vec<String> {
    c.addrs.values().map(|a| a.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_acquire_is_granted_on_release() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let client = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let first = client.session(Duration::from_secs(10)).await?;
    let second = client.session(Duration::from_secs(10)).await?;
    let held = first.lock("queue", LockOptions::default()).await?;
    let waiting = tokio::spawn({
        let second = second.clone();
        async move {
            let opts = LockOptions {
                wait: Duration::from_secs(15),
                ..LockOptions::default()
            };
            second.lock("queue", opts).await
        }
    });
    let queued = wait_for("the second session to queue", || async {
        let info = client.locks("queue").await.ok()?;
        (info.waiters.len() == 1).then_some(info)
    })
    .await?;
    assert_eq!(queued.waiters[0].lease_id, Some(second.lease_id()));
    let held_token = held.token();
    held.release().await?;
    let granted = waiting.await??;
    assert!(granted.token() > held_token);
    assert_eq!(granted.lease_id(), second.lease_id());

    // A short wait on the now-held lock ends with the typed timeout.
    let short = LockOptions {
        wait: Duration::from_millis(300),
        ..LockOptions::default()
    };
    let timed_out = first.lock("queue", short).await;
    assert!(
        matches!(timed_out, Err(Error::WaitTimeout { .. })),
        "{timed_out:?}"
    );
    drop(granted);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_and_shared_holders() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let client = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let lease = client.grant_lease(Duration::from_secs(60)).await?;
    let names = vec!["m1".to_string(), "m2".to_string()];
    let multi = client
        .acquire_many(&names, lease.lease_id, Duration::ZERO)
        .await?;
    assert_eq!(multi.tokens.len(), 2);
    let token = multi.tokens["m1"];
    assert_eq!(multi.tokens["m2"], token, "one entry grants both");
    assert_eq!(client.locks("m2").await?.holders[0].token, Some(token));

    let shared = LockOptions {
        mode: Mode::Shared,
        ..LockOptions::default()
    };
    let a = client.session(Duration::from_secs(10)).await?;
    let b = client.session(Duration::from_secs(10)).await?;
    let ga = a.lock("rw", shared.clone()).await?;
    let gb = b.lock("rw", shared).await?;
    let holders = client.locks("rw").await?.holders;
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h.mode == Mode::Shared));
    let exclusive = a.lock("rw", LockOptions::default()).await;
    assert!(
        matches!(exclusive, Err(Error::LockHeld { .. })),
        "{exclusive:?}"
    );
    drop((ga, gb));
    c.shutdown().await;
    Ok(())
}

async fn next_event(w: &mut Watch) -> anyhow::Result<WatchEvent> {
    let ev = tokio::time::timeout(Duration::from_secs(20), w.next()).await?;
    Ok(ev.ok_or_else(|| anyhow::anyhow!("watch ended"))??)
}

/// The watch streams from a follower through a proxy; the proxy goes away (connections
/// closed, port refused), the stream resumes on the next endpoint from where it left off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_node_without_gaps_or_repeats() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let follower = *c.addrs.keys().find(|&&id| id != leader).expect("3 nodes");
    let proxy = Proxy::start(c.addrs[&follower], ProxyMode::Forward).await?;
    let writer = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let mut endpoints = vec![proxy.endpoint()];
    endpoints.extend(all_endpoints(&c));
    let watcher = common::client(endpoints, Duration::from_secs(7))?;

    let first = writer.put("w/0", "v0", PutOptions::default()).await?;
    let mut watch = watcher.watch(WatchOptions::prefix("w/").from_revision(first.revision));
    let mut seen = Vec::new();
    for i in 1..=3 {
        writer
            .put(&format!("w/{i}"), "v", PutOptions::default())
            .await?;
    }
    writer
        .put("other", "not watched", PutOptions::default())
        .await?;
    for _ in 0..4 {
        seen.push(next_event(&mut watch).await?);
    }
    // Cut the stream, write more, and read on: the watch reconnects elsewhere.
    drop(proxy);
    for i in 4..=6 {
        writer
            .put(&format!("w/{i}"), "v", PutOptions::default())
            .await?;
    }
    for _ in 0..3 {
        seen.push(next_event(&mut watch).await?);
    }
    let keys: Vec<&str> = seen.iter().filter_map(WatchEvent::key).collect();
    assert_eq!(keys, ["w/0", "w/1", "w/2", "w/3", "w/4", "w/5", "w/6"]);
    assert!(seen.iter().all(|e| e.kind == EventKind::Put));
    assert!(seen
        .windows(2)
        .all(|w| (w[0].revision, w[0].seq) < (w[1].revision, w[1].seq)));
    assert_eq!(seen[0].revision, first.revision);

    // Lock events carry the lock name and token; a key watch sees only its key.
    let mut lock_watch = watcher.watch(WatchOptions::key("wl").from_revision(first.revision));
    let session = writer.session(Duration::from_secs(10)).await?;
    let guard = session.lock("wl", LockOptions::default()).await?;
    let granted = next_event(&mut lock_watch).await?;
    assert_eq!(granted.kind, EventKind::LockGranted);
    assert_eq!(
        (granted.lock(), granted.token()),
        (Some("wl"), Some(guard.token()))
    );
    guard.release().await?;
    let released = next_event(&mut lock_watch).await?;
    assert_eq!(released.kind, EventKind::LockReleased);
    drop((watch, lock_watch, session));
    c.shutdown().await;
    Ok(())
}
