//! Growing 3 -> 5 and shrinking 5 -> 3 voters while clients keep acquiring locks: no
//! acknowledged grant is lost (each grant's fenced write goes through), tokens increase in
//! real-time order, every acknowledged write survives, and all members end with the same
//! `state_digest` at the same `applied_index`. Also: a removal that would leave the voters
//! without a reachable quorum is refused with a clear error, and nothing changes.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use anyhow::{anyhow, bail};
use serde_json::{json, Value};
use turnstile_tests::load::{Endpoints, LockLoad};
use turnstile_tests::{wait_for, Cluster};

/// Lock-cycling clients during the membership changes.
const WORKERS: u64 = 4;

fn member_ids(v: &Value, voter: bool) -> Vec<u64> {
    v["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|n| n["voter"] == voter)
                .filter_map(|n| n["id"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// Adds a fresh node as a learner, then promotes it. Returns (id, catch-up ms).
async fn grow(c: &mut Cluster, endpoints: &Endpoints) -> anyhow::Result<(u64, u128)> {
    let id = c.add_node().await?;
    let leader = c.leader().await?;
    let addr = c.addrs[&id].to_string();
    let started = Instant::now();
    let (code, v) = c
        .post(leader, "/v1/members", json!({"id": id, "addr": addr}))
        .await?;
    let catch_up_ms = started.elapsed().as_millis();
    if code != 200 {
        bail!("add {id}: {code} {v}");
    }
    let (code, v) = c
        .post(leader, &format!("/v1/members/{id}/promote"), json!({}))
        .await?;
    if code != 200 || !member_ids(&v, true).contains(&id) {
        bail!("promote {id}: {code} {v}");
    }
    endpoints
        .write()
        .map_err(|_| anyhow!("poisoned"))?
        .push(c.addrs[&id]);
    Ok((id, catch_up_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_to_five_and_shrink_to_three_under_load() -> anyhow::Result<()> {
    // No log kept behind a snapshot: the new nodes must catch up from a snapshot.
    let mut c = Cluster::start_tuned(3, |a| a.snapshot_keep_logs = Some(0)).await?;
    let endpoints: Endpoints = Arc::new(RwLock::new(c.addrs.values().copied().collect()));
    let load = LockLoad::start(endpoints.clone(), WORKERS);
    load.wait_grants(20).await?;

    // Compact every log behind a fresh snapshot (the manual trigger).
    for id in c.running() {
        let (code, v) = c.post(id, "/v1/admin/snapshot", json!({})).await?;
        assert_eq!(code, 200, "{v}");
        // Purging runs after the snapshot, once no follower needs the entries.
        wait_for("the log to be purged behind the snapshot", || async {
            let s = c.status(id).await.ok()?;
            (s["log"]["first_index"].as_u64()? > 1).then_some(())
        })
        .await?;
    }

    // 3 -> 5.
    let (four, catch_up_4) = grow(&mut c, &endpoints).await?;
    let (five, catch_up_5) = grow(&mut c, &endpoints).await?;
    eprintln!("learner catch-up: node {four} {catch_up_4} ms, node {five} {catch_up_5} ms");
    for id in [four, five] {
        // The leader counts the learner caught up when the snapshot is acknowledged; the
        // learner's own metrics name the snapshot a moment later. Its log cannot have come
        // by appends alone: every log was purged behind a snapshot above.
        let started_from_snapshot = wait_for("the learner to report its snapshot", || async {
            let s = c.status(id).await.ok()?;
            s["last_snapshot_index"]
                .as_u64()
                .is_some_and(|i| i > 0)
                .then_some(())
        })
        .await;
        if let Err(e) = started_from_snapshot {
            bail!(
                "node {id} did not start from a snapshot: {e}: {}",
                c.status(id).await?
            );
        }
    }
    let leader = c.leader().await?;
    let (_, v) = c.get(leader, "/v1/members").await?;
    assert_eq!(member_ids(&v, true).len(), 5, "{v}");
    load.wait_grants(20).await?;

    // 5 -> 3: remove two of the original nodes (never the leader: it is refused).
    let originals: Vec<u64> = (1..=3).filter(|&n| n != leader).collect();
    for &gone in &originals {
        endpoints
            .write()
            .map_err(|_| anyhow!("poisoned"))?
            .retain(|a| *a != c.addrs[&gone]);
        let leader = c.leader().await?;
        let (code, v) = c.delete(leader, &format!("/v1/members/{gone}")).await?;
        assert_eq!(code, 200, "remove {gone}: {v}");
        c.stop(gone).await;
    }
    let leader = c.leader().await?;
    let (_, v) = c.get(leader, "/v1/members").await?;
    let mut voters = member_ids(&v, true);
    voters.sort_unstable();
    let mut expected = vec![leader, four, five];
    expected.sort_unstable();
    expected.dedup();
    assert_eq!(voters, expected, "{v}");
    load.wait_grants(20).await?;

    // Stopping checks every acknowledged write (or a later one whose answer was lost).
    let report = load.stop().await?;
    let (index, digest) = c.converged().await?;
    eprintln!(
        "{} grants, answers {:?}; members converged at index {index} ({digest})",
        report.grants, report.answers
    );
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_that_leaves_no_reachable_quorum_is_refused() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let others: Vec<u64> = (1..=3).filter(|&n| n != leader).collect();
    let (down, keep) = (others[0], others[1]);
    c.stop(down).await;
    wait_for(
        "the leader to see the stopped node as unreachable",
        || async {
            let (_, v) = c.get(leader, "/v1/members").await.ok()?;
            let m = v["members"].as_array()?.iter().find(|m| m["id"] == down)?;
            (m["reachable"] == false).then_some(())
        },
    )
    .await?;
    // Removing `keep` would leave voters {leader, down}: one of two answers, two needed.
    let (code, v) = c.delete(leader, &format!("/v1/members/{keep}")).await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("membership_refused")),
        "{v}"
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(message.contains("quorum needs 2"), "{message}");
    let (_, v) = c.get(leader, "/v1/members").await?;
    assert_eq!(member_ids(&v, true).len(), 3, "nothing changed: {v}");
    // Removing the node that is down leaves {leader, keep}, both answering: allowed.
    let (code, v) = c.delete(leader, &format!("/v1/members/{down}")).await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(member_ids(&v, true).len(), 2, "{v}");
    // And the two remaining voters still grant.
    let lease = c.lease(leader, 30_000).await?;
    assert_eq!(c.acquire(leader, "after-shrink", lease).await?.0, 200);
    c.shutdown().await;
    Ok(())
}
