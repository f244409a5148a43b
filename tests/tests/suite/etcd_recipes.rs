//! etcd's client-side `concurrency` recipes, which clientv3 builds on KV, Lease and Watch
//! (not on etcd's Lock and Election services), driven by Debian's `etcdctl` (3.4) against a
//! 3-node cluster's etcd port: two `etcdctl lock` processes exclude each other and a killed
//! holder's lock passes on once its session lease expires; `etcdctl elect` hands leadership
//! on in campaign order and `etcdctl elect -l` observes each leader. They need a `Range`
//! inside a `Txn` (the mutex's "oldest waiter" read), `create_revision` compares, sorted and
//! filtered ranges, and watches from a revision.
//!
//! Skipped, saying so, where `etcdctl` is not installed (`.ci/run` installs it).

use anyhow::{ensure, Context};

use super::etcd_port::{etcdctl_cluster, Etcdctl};
use super::etcd_watch::Watching;

/// Keys under `prefix`, in key order.
async fn keys(ctl: &Etcdctl, prefix: &str) -> anyhow::Result<Vec<String>> {
    let out = ctl.ok(&["get", "--prefix", prefix, "--keys-only"]).await?;
    Ok(out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_locks_exclude_and_a_killed_holder_hands_on_after_its_ttl() -> anyhow::Result<()> {
    let Some((binary, _cluster, addrs)) = etcdctl_cluster().await? else {
        return Ok(());
    };
    let ctl = Etcdctl::new(binary.clone(), &addrs[2..3]);

    let first = Watching::start(&binary, addrs[0], &["lock", "--ttl=2", "job"])?;
    let first_key = first.lines(1).await?.remove(0);
    ensure!(first_key.starts_with("job/"), "{first_key}");
    // The second, through another node, queues behind the first: its key is there, and it
    // prints nothing while the first holds.
    let second = Watching::start(&binary, addrs[1], &["lock", "--ttl=2", "job"])?;
    turnstile_tests::wait_for("the second locker queued", || async {
        (keys(&ctl, "job/").await.ok()?.len() == 2).then_some(())
    })
    .await?;
    ensure!(
        second.printed().is_empty(),
        "locked while the first held: {:?}",
        second.printed()
    );

    // SIGKILL: the first cannot revoke its session; its lease runs out after 2 s unrenewed,
    // its key goes with it, and the second holds the lock.
    first.signal("KILL").await?;
    let killed = std::time::Instant::now();
    let second_key = second.lines(1).await?.remove(0);
    ensure!(
        second_key.starts_with("job/") && second_key != first_key,
        "{second_key}"
    );
    assert_eq!(keys(&ctl, "job/").await?, vec![second_key.clone()]);
    eprintln!(
        "the second locker held the lock {} ms after the holder was killed (TTL 2 s)",
        killed.elapsed().as_millis()
    );
    // The queue order is the create revision order (etcd's mutex fencing token).
    let revision = |key: String| {
        let ctl = &ctl;
        async move {
            let v = ctl.json(&["get", &key]).await?;
            v["kvs"][0]["create_revision"]
                .as_u64()
                .with_context(|| format!("{key}: {v}"))
        }
    };
    let second_rev = revision(second_key).await?;

    // Released by its holder (SIGINT closes the session): the next locker gets it at once.
    second.signal("INT").await?;
    let third = Watching::start(&binary, addrs[2], &["lock", "--ttl=2", "job"])?;
    let third_key = third.lines(1).await?.remove(0);
    ensure!(revision(third_key).await? > second_rev, "queue order");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_hands_over_in_order_and_listeners_see_each_leader() -> anyhow::Result<()> {
    let Some((binary, _cluster, addrs)) = etcdctl_cluster().await? else {
        return Ok(());
    };
    let ctl = Etcdctl::new(binary.clone(), &addrs[..1]);

    let alpha = Watching::start(&binary, addrs[0], &["elect", "svc", "alpha"])?;
    let led = alpha.lines(2).await?;
    ensure!(led[0].starts_with("svc/") && led[1] == "alpha", "{led:?}");
    let listener = Watching::start(&binary, addrs[2], &["elect", "-l", "svc"])?;
    ensure!(listener.lines(2).await?[1] == "alpha");
    let beta = Watching::start(&binary, addrs[1], &["elect", "svc", "beta"])?;
    turnstile_tests::wait_for("the second candidate queued", || async {
        (keys(&ctl, "svc/").await.ok()?.len() == 2).then_some(())
    })
    .await?;
    ensure!(
        beta.printed().is_empty(),
        "led while alpha did: {:?}",
        beta.printed()
    );
    // alpha resigns (SIGINT closes its session): beta leads, and the listener sees it.
    alpha.signal("INT").await?;
    let led = beta.lines(2).await?;
    ensure!(led[0].starts_with("svc/") && led[1] == "beta", "{led:?}");
    let seen = listener.lines(4).await?;
    assert_eq!((seen[1].as_str(), seen[3].as_str()), ("alpha", "beta"));
    Ok(())
}
