//! Sessions against real clusters: keepalives keep a short lease alive; a leader election
//! does not fire `lost`; a client cut off from the cluster (a proxy that stops forwarding)
//! fires `lost` by its local deadline, before the cluster expires the lease.

use super::common;

use std::time::{Duration, Instant};

use common::{Mode, Proxy};
use turnstile_client::{LockOptions, LostReason};
use turnstile_tests::{wait_for, Cluster};

/// A 1.5 s lease outlives 5 s of keepalives (more than three TTLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_keep_a_short_lease_alive() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let client = common::client(vec![c.addrs[&1].to_string()], Duration::from_secs(7))?;
    let session = client.session(Duration::from_millis(1_500)).await?;
    let guard = session.lock("kept", LockOptions::default()).await?;
    let start = Instant::now();
    let mut deadlines = Vec::new();
    // The test is about time passing: poll the lease until 5 s have gone by.
    while start.elapsed() < Duration::from_secs(5) {
        assert!(!guard.lost().is_lost(), "lost after {:?}", start.elapsed());
        let info = client.lease(session.lease_id()).await?;
        assert!(info.remaining_ms > 0, "{info:?}");
        deadlines.push(session.deadline());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let holders = client.locks("kept").await?.holders;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].token, Some(guard.token()));
    deadlines.dedup();
    assert!(
        deadlines.len() >= 5,
        "the deadline moved only {} times",
        deadlines.len()
    );
    guard.release().await?;
    assert!(client.locks("kept").await?.holders.is_empty());
    session.close().await?;
    c.shutdown().await;
    Ok(())
}

/// Stopping the leader under a running 3 s session: keepalives fail while the cluster elects a
/// new leader, then succeed again before the local deadline, so `lost` never fires and the
/// lock keeps its holder and token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_election_does_not_lose_the_session() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let old = c.leader().await?;
    let client = common::client(
        common::endpoints_first(&c.addrs, old),
        Duration::from_secs(7),
    )?;
    let session = client.session(Duration::from_secs(3)).await?;
    let guard = session.lock("survives", LockOptions::default()).await?;
    // Start right after a confirmed keepalive, so the test does not depend on the phase.
    let before = session.deadline();
    wait_for("a keepalive", || async {
        (session.deadline() > before).then_some(())
    })
    .await?;

    let stopped = Instant::now();
    c.stop(old).await;
    let new = c.leader().await?;
    assert_ne!(new, old);
    wait_for("a keepalive confirmed by the new leader", || async {
        (session.deadline() > stopped + Duration::from_secs(3)).then_some(())
    })
    .await?;
    println!(
        "leader stop to first confirmed keepalive: ~{} ms",
        (session.deadline() - stopped - session.ttl() + session.safety_margin()).as_millis()
    );
    assert_eq!(guard.lost().reason(), None, "lost fired across an election");
    let holders = client.locks("survives").await?.holders;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].token, Some(guard.token()));
    guard.release().await?;
    session.close().await?;
    c.shutdown().await;
    Ok(())
}

/// The client reaches the cluster only through a proxy; the proxy stops forwarding. `lost`
/// fires by the local deadline while the cluster still holds the lock; the cluster expires
/// the lease only afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_client_is_lost_before_its_lease_expires() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let proxy = Proxy::start(c.addrs[&leader], Mode::Forward).await?;
    let cut_client = common::client(vec![proxy.endpoint()], Duration::from_secs(7))?;
    let observer = common::client(
        c.addrs.values().map(|a| a.to_string()).collect(),
        Duration::from_secs(7),
    )?;
    let ttl = Duration::from_secs(3);
    let session = cut_client.session(ttl).await?;
    let guard = session.lock("cut", LockOptions::default()).await?;
    let before = session.deadline();
    wait_for("a keepalive", || async {
        (session.deadline() > before).then_some(())
    })
    .await?;

    let cut = Instant::now();
    proxy.set_mode(Mode::Blackhole);
    let lost = guard.lost();
    let reason = tokio::time::timeout(ttl * 2, lost.wait()).await?;
    let lost_at = Instant::now();
    assert_eq!(reason, LostReason::DeadlinePassed);
    // At the moment `lost` fires, the cluster still holds the lock for this session.
    let holders = observer.locks("cut").await?.holders;
    assert_eq!(
        holders.len(),
        1,
        "the lock was already gone when lost fired"
    );
    assert_eq!(holders[0].token, Some(guard.token()));
    assert!(
        lost_at - cut <= ttl,
        "lost fired {:?} after the cut",
        lost_at - cut
    );

    // Later the cluster expires the lease and frees the lock.
    let freed = wait_for("the lease to expire on the cluster", || async {
        observer
            .locks("cut")
            .await
            .ok()
            .filter(|l| l.holders.is_empty())
            .map(|_| Instant::now())
    })
    .await?;
    println!(
        "cut to lost: {} ms; lost to expiry seen: {} ms",
        (lost_at - cut).as_millis(),
        (freed - lost_at).as_millis()
    );
    assert!(freed > lost_at);
    drop(guard);
    drop(session);
    c.shutdown().await;
    Ok(())
}
