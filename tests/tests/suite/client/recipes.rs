//! The client's recipes against a real in-process cluster: a striped lock serialises keys of
//! one stripe and not of two; a barrier holds waiters until it is lowered (by a delete, or by
//! the end of its lease); an acquire-many guard holds its set under one token and releases
//! it as one.

use super::common;

use std::time::Duration;

use turnstile_client::{Barrier, Error, LockOptions, PutOptions, StripedLock};
use turnstile_tests::{wait_for, Cluster};

fn all_endpoints(c: &Cluster) -> Vec<String> {
    c.addrs.values().map(|a| a.to_string()).collect()
}

/// Two keys that land on one stripe, and one that lands on another.
fn keys_by_stripe(striped: &StripedLock) -> (String, String, String) {
    let first = "account:0".to_string();
    let stripe = striped.lock_name(&first);
    let same = (1..10_000)
        .map(|i| format!("account:{i}"))
        .find(|k| striped.lock_name(k) == stripe)
        .expect("some key shares a stripe among 10,000");
    let other = (1..10_000)
        .map(|i| format!("account:{i}"))
        .find(|k| striped.lock_name(k) != stripe)
        .expect("some key is on another stripe");
    (first, same, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_striped_lock_excludes_within_a_stripe_only() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let client = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let striped = StripedLock::new("lock:account:", 8)?;
    let (first, same, other) = keys_by_stripe(&striped);
    let a = client.session(Duration::from_secs(10)).await?;
    let b = client.session(Duration::from_secs(10)).await?;
    let held = striped.lock(&a, &first, LockOptions::default()).await?;
    assert_eq!(held.name(), striped.lock_name(&first));

    // Same stripe: a try-acquire is refused (false contention, the stated trade-off).
    let try_now = LockOptions {
        wait: Duration::ZERO,
        ..LockOptions::default()
    };
    let refused = striped.lock(&b, &same, try_now.clone()).await;
    assert!(
        matches!(refused, Err(Error::LockHeld { .. })),
        "{refused:?}"
    );
    // Another stripe: granted at once.
    let elsewhere = striped.lock(&b, &other, try_now.clone()).await?;
    assert_ne!(elsewhere.name(), held.name());

    held.release().await?;
    let after = striped.lock(&b, &same, try_now).await?;
    assert_eq!(after.name(), striped.lock_name(&first));
    drop((after, elsewhere));
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_holds_waiters_until_lowered() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let client = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let barrier = Barrier::new(&client, "barriers/deploy");
    // Not raised: wait returns at once.
    assert_eq!(barrier.wait().await?, 0);

    let raised = barrier.hold(None).await?;
    // Up: a wait that reads it now does not return.
    let reader = tokio::spawn({
        let barrier = barrier.clone();
        async move { barrier.wait().await }
    });
    // Waits past the hold's revision: deterministic whether it starts before or after the
    // release below (the watch replays history from that revision).
    let waiter = tokio::spawn({
        let barrier = barrier.clone();
        async move { barrier.wait_past(raised.revision).await }
    });
    // Other writes, to other keys and to the barrier itself, must not let anyone go.
    client
        .put("barriers/other", "x", PutOptions::default())
        .await?;
    client
        .put("barriers/deploy", "again", PutOptions::default())
        .await?;
    let up = client.get("barriers/deploy").await?.expect("still up");
    assert!(
        !waiter.is_finished(),
        "the waiter left while the barrier was up"
    );
    let lowered = barrier.release().await?;
    let seen = waiter.await??;
    assert_eq!(seen, lowered.revision, "not the release's revision");
    // The reader either watched that delete or read the barrier down; never an earlier write.
    let read = reader.await??;
    assert!(read == 0 || read == lowered.revision, "{read}");
    assert!(lowered.revision > up.mod_revision);

    // Bound to a lease: the end of the lease lowers it.
    let session = client.session(Duration::from_secs(2)).await?;
    barrier.hold(Some(session.lease_id())).await?;
    let waiter = tokio::spawn({
        let barrier = barrier.clone();
        async move { barrier.wait().await }
    });
    session.close().await?;
    // The waiter either watched the delete (a revision) or, if it read after the revoke,
    // found the barrier down (0); both are correct. What the lease's end must do is lower it.
    tokio::time::timeout(Duration::from_secs(10), waiter).await???;
    assert!(
        client.get("barriers/deploy").await?.is_none(),
        "the barrier outlived its lease"
    );
    assert_eq!(barrier.wait().await?, 0);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_many_guard_holds_and_releases_its_set() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let client = common::client(all_endpoints(&c), Duration::from_secs(7))?;
    let a = client.session(Duration::from_secs(10)).await?;
    let b = client.session(Duration::from_secs(10)).await?;
    let set = vec!["acct.1".to_string(), "acct.2".to_string()];
    let guard = a.lock_many(&set, Duration::ZERO).await?;
    assert_eq!(guard.names().collect::<Vec<_>>(), vec!["acct.1", "acct.2"]);
    for name in &set {
        let info = client.locks(name).await?;
        assert_eq!(info.holders.len(), 1, "{name} not held");
        assert_eq!(
            info.holders[0].token,
            Some(guard.token()),
            "{name}: one token for the set"
        );
    }
    let fence = guard.fence("acct.2").expect("in the set");
    client
        .put(
            "acct/2/balance",
            "10",
            PutOptions {
                fence: Some(fence.clone()),
                ..PutOptions::default()
            },
        )
        .await?;
    assert!(guard.fence("acct.3").is_none());

    // An overlapping set waits for the whole of it.
    let overlapping = vec!["acct.2".to_string(), "acct.3".to_string()];
    let waiting = tokio::spawn({
        let b = b.clone();
        let overlapping = overlapping.clone();
        async move { b.lock_many(&overlapping, Duration::from_secs(15)).await }
    });
    wait_for("the overlapping set to queue", || async {
        let info = client.locks("acct.2").await.ok()?;
        (info.waiters.len() == 1).then_some(())
    })
    .await?;
    guard.release().await?;
    let second = waiting.await??;
    assert!(second.token() > fence.token);
    // The old fence no longer writes.
    let stale = client
        .put(
            "acct/2/balance",
            "11",
            PutOptions {
                fence: Some(fence),
                ..PutOptions::default()
            },
        )
        .await;
    assert!(matches!(stale, Err(Error::Fenced { .. })), "{stale:?}");
    for name in &set[..1] {
        assert!(client.locks(name).await?.holders.is_empty(), "{name} kept");
    }
    drop(second);
    c.shutdown().await;
    Ok(())
}
