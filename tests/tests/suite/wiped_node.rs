//! A node restarted with a wiped data dir neither votes nor serves until it is re-added
//! through membership (remove, add as learner, promote), then catches up and serves. Also: a
//! data dir of another cluster is refused at start.

use turnstile_tests::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_node_waits_to_be_readded() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let wiped = *c
        .running()
        .iter()
        .find(|&&n| n != leader)
        .expect("a follower");
    let other = *c
        .running()
        .iter()
        .find(|&&n| n != leader && n != wiped)
        .expect("third node");
    let lease = c.lease(leader, 60_000).await?;
    assert_eq!(c.acquire(leader, "before-wipe", lease).await?.0, 200);

    c.restart_empty(wiped).await?;
    // It does not serve.
    let (code, v) = c.get(wiped, "/v1/locks/before-wipe").await?;
    assert_eq!((code, v["code"].as_str()), (503, Some("not_member")), "{v}");
    assert_eq!(c.get(wiped, "/readyz").await?.0, 503);

    // It does not vote: with the leader gone, `other` alone cannot win an election, because
    // the wiped node refuses its vote.
    c.stop(leader).await;
    let (code, v) = c.acquire(other, "during-outage", lease).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (503, Some("no_quorum")),
        "a leader was elected with an empty voter: {v}"
    );
    assert_ne!(c.status(other).await?["state"], "Leader");

    // Bring the old leader back and re-add the wiped node.
    c.restart(leader).await?;
    let leader = c.leader().await?;
    let (code, v) = c.delete(leader, &format!("/v1/members/{wiped}")).await?;
    assert_eq!(code, 200, "remove: {v}");
    let v = c.admit(leader, wiped).await?;
    assert!(
        v["members"]
            .as_array()
            .is_some_and(|m| m.iter().any(|n| n["id"] == wiped && n["voter"] == true)),
        "{v}"
    );

    c.converged().await?;
    let (code, v) = c.get(wiped, "/v1/locks/before-wipe").await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["holders"][0]["lease_id"], lease);
    assert_eq!(c.get(wiped, "/readyz").await?.0, 200);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_dir_of_another_cluster_is_refused() -> anyhow::Result<()> {
    let mut a = Cluster::start(3).await?;
    let b = Cluster::start(3).await?;
    // Node 3 of B must have recorded B's cluster id before its data dir is moved.
    let identity = b.data_dir(3).join("identity.json");
    turnstile_tests::wait_for("node 3 of B to record its cluster id", || async {
        let text = std::fs::read_to_string(&identity).ok()?;
        text.contains("\"cluster_id\": \"").then_some(())
    })
    .await?;
    // Move one of B's data dirs into A's node 3 slot: its identity names the same node id but
    // another cluster.
    a.stop(3).await;
    let mut b = b;
    b.stop(3).await;
    std::fs::remove_dir_all(a.data_dir(3))?;
    copy_dir(&b.data_dir(3), &a.data_dir(3))?;
    let err = a
        .try_restart(3)
        .await
        .expect_err("a foreign data dir must be refused");
    assert!(err.contains("belongs to cluster"), "{err}");
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
