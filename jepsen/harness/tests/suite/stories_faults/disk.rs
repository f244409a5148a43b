//! Story 12, disk faults: `fdatasync` fails on the leader (libfiu's
//! `posix/io/sync/fdatasync`, switched on in the running node process). The node must stop,
//! exit with `SYNC_FAILED_EXIT_CODE` and acknowledge nothing more, the survivors must elect a
//! leader and go on, and after a restart on a healthy disk the node must catch up with no
//! acknowledged write lost. The negative control runs the same story with the
//! `ignore-sync-failure` switch ("retry and carry on", the fsyncgate mistake) and shows the
//! story's checks catch it: the node neither exits nor stops acknowledging on a failing disk.
//!
//!
//! Story 12b: `fsync` fails under a snapshot on a follower (the snapshot writer's sync; the log
//! uses `fdatasync`). Raft's core stops on the storage error; the node must exit with the same
//! status instead of staying up without Raft, and catch up after a restart. Its control runs
//! the `survive-raft-failure` switch: the node stays up, unready, and the exit check catches it.
//!
//! What it cannot show: libfiu fails the call before the kernel sees it, so the page cache
//! still holds the data and nothing is really dropped; the story proves what the node *does*
//! on a failed sync, not what a kernel that dropped pages would lose.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;
use turnstile_server::SYNC_FAILED_EXIT_CODE;

/// The failure point of `fdatasync(2)` in libfiu's POSIX preload.
const FDATASYNC: &str = "posix/io/sync/fdatasync";
/// Keys written before the fault, and by the survivors after it.
const WRITES_PER_PHASE: u64 = 20;
/// Writes sent to the faulty node after the fault.
const WRITES_TO_FAULTY: u64 = 5;
/// How long the faulty node has to exit.
const EXIT_MS_MAX: u64 = 10_000;
/// How long one write may be retried (same request_id) across the live nodes.
const WRITE_RETRY_MS_MAX: u64 = 20_000;

/// What one run of the story saw.
struct Seen {
    /// The faulty node's exit status, if it exited within `EXIT_MS_MAX`.
    exit_code: Option<Option<i32>>,
    /// Writes the faulty node answered 200 after its disk failed.
    acked_by_faulty: u64,
    /// Acknowledged writes: key -> value.
    acked: BTreeMap<String, String>,
}

/// Puts `key` = `value` with one request_id, retried across the live nodes until acknowledged.
async fn put_acked(tc: &TestCluster, key: &str, value: &str) -> anyhow::Result<()> {
    let rid = format!("disk-{key}");
    let deadline = Instant::now() + Duration::from_millis(WRITE_RETRY_MS_MAX);
    loop {
        for id in tc.live() {
            let body = json!({ "value": value, "request_id": rid });
            if let Ok((200, _)) = tc.put_on(id, key, body).await {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            anyhow::bail!("{key} was not acknowledged within {WRITE_RETRY_MS_MAX} ms");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The exit status of node `faulty` if it exits within `EXIT_MS_MAX` (`None` if it does not).
async fn exit_within(tc: &mut TestCluster, faulty: u64) -> anyhow::Result<Option<Option<i32>>> {
    let started = Instant::now();
    loop {
        if let Some(status) = tc.exited(faulty)? {
            return Ok(Some(status.code()));
        }
        if started.elapsed() > Duration::from_millis(EXIT_MS_MAX) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The acknowledged writes that node `id` does not read back as written.
async fn lost_on(
    tc: &TestCluster,
    id: u64,
    acked: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let mut lost = Vec::new();
    for (key, value) in acked {
        let (code, v) = tc.get(id, &format!("/v1/kv/{key}")).await?;
        if code != 200 || v["value"] != value.as_str() {
            lost.push(format!("{key}: {code} {v}"));
        }
    }
    Ok(lost)
}

/// Writes keys `{prefix}-0` .. `{prefix}-{WRITES_PER_PHASE - 1}`, each retried until
/// acknowledged, and adds them to `acked`.
async fn put_phase(
    tc: &TestCluster,
    prefix: &str,
    acked: &mut BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for i in 0..WRITES_PER_PHASE {
        let (key, value) = (format!("{prefix}-{i}"), format!("v{i}"));
        put_acked(tc, &key, &value).await?;
        acked.insert(key, value);
    }
    Ok(())
}

/// The story up to the faulty node's exit (or not): writes, the fault on the leader, writes to
/// it. Returns the cluster, the faulty node and what was seen.
async fn fail_the_leaders_disk(bugs: &str) -> anyhow::Result<(TestCluster, u64, Seen)> {
    let mut tc = start_disk_fault_cluster(3, bugs).await?;
    let mut acked = BTreeMap::new();
    put_phase(&tc, "before", &mut acked).await?;
    let (faulty, _) = tc.leader().await?;
    tc.disk_fault(faulty, FDATASYNC, true)?;
    eprintln!("fdatasync now fails on node {faulty}, the leader");
    let mut acked_by_faulty = 0;
    for i in 0..WRITES_TO_FAULTY {
        let (key, value) = (format!("faulty-{i}"), format!("v{i}"));
        let body = json!({ "value": value, "request_id": format!("disk-{key}") });
        if let Ok((200, _)) = tc.put_on(faulty, &key, body).await {
            acked_by_faulty += 1;
            acked.insert(key, value);
        }
    }
    let exit_code = exit_within(&mut tc, faulty).await?;
    let seen = Seen {
        exit_code,
        acked_by_faulty,
        acked,
    };
    Ok((tc, faulty, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fdatasync_stops_the_node_and_loses_no_acknowledged_write() -> anyhow::Result<()> {
    let (mut tc, faulty, mut seen) = fail_the_leaders_disk("").await?;
    assert_eq!(
        seen.exit_code,
        Some(Some(SYNC_FAILED_EXIT_CODE)),
        "node {faulty} must exit with {SYNC_FAILED_EXIT_CODE} after a failed fdatasync"
    );
    assert!(
        tc.log_contains(
            faulty,
            "log sync (fdatasync) failed: stopping this node now"
        ),
        "node {faulty}'s log must say why it stopped:\n{}",
        tc.log_tail(faulty, 20)
    );
    // The survivors elect a leader and take writes.
    let failed_at = Instant::now();
    put_phase(&tc, "after", &mut seen.acked).await?;
    let survivors_ms = ms(failed_at.elapsed());
    // A restart on a healthy disk (a new process: no failure point is on) catches up.
    let restarted_at = Instant::now();
    tc.restart(faulty)?;
    let converged = tc.converged().await?;
    let catch_up_ms = ms(restarted_at.elapsed());
    assert!(converged.iter().any(|(id, _, _)| *id == faulty));
    let lost = lost_on(&tc, faulty, &seen.acked).await?;
    eprintln!(
        "story 12: node {faulty} exited {:?}; it acknowledged {} writes after the fault; \
         survivors took {WRITES_PER_PHASE} writes in {survivors_ms} ms; restart to converged \
         {catch_up_ms} ms; {} acknowledged writes checked, {} lost",
        seen.exit_code,
        seen.acked_by_faulty,
        seen.acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    Ok(())
}

/// Negative control: a node that ignores the failed sync is caught by the same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_node_that_ignores_a_failed_fdatasync_is_caught() -> anyhow::Result<()> {
    let (tc, faulty, seen) = fail_the_leaders_disk("ignore-sync-failure").await?;
    eprintln!(
        "story 12 control: node {faulty} exited {:?}; it acknowledged {} of {WRITES_TO_FAULTY} \
         writes on a failing disk",
        seen.exit_code, seen.acked_by_faulty
    );
    assert_eq!(
        seen.exit_code, None,
        "with ignore-sync-failure the node must carry on, which the story's exit check catches"
    );
    assert_eq!(
        seen.acked_by_faulty, WRITES_TO_FAULTY,
        "with ignore-sync-failure the node acknowledges every write on a failing disk"
    );
    assert!(tc.log_contains(
        faulty,
        "BUG INJECTION: log sync failed; acknowledging anyway"
    ));
    Ok(())
}

/// The failure point of `fsync(2)`: the snapshot writer's (the log syncs with `fdatasync`).
const FSYNC: &str = "posix/io/sync/fsync";

/// Story 12b up to the faulty node's exit (or not): writes, `fsync` failing on a follower, a
/// snapshot asked of it. Returns the cluster, the faulty node and its exit status, if it
/// exited within `EXIT_MS_MAX`, and the acknowledged writes.
async fn fail_a_snapshot_sync(
    bugs: &str,
) -> anyhow::Result<(
    TestCluster,
    u64,
    Option<Option<i32>>,
    BTreeMap<String, String>,
)> {
    let mut tc = start_disk_fault_cluster(3, bugs).await?;
    let mut acked = BTreeMap::new();
    put_phase(&tc, "before", &mut acked).await?;
    let (leader, _) = tc.leader().await?;
    let faulty = tc
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");
    tc.disk_fault(faulty, FSYNC, true)?;
    // The node may exit before it answers: the answer is only printed.
    let asked = tc.post(faulty, "/v1/admin/snapshot", json!({})).await;
    eprintln!("fsync now fails on node {faulty}, a follower; a snapshot asked of it: {asked:?}");
    let exit_code = exit_within(&mut tc, faulty).await?;
    Ok((tc, faulty, exit_code, acked))
}

/// Story 12b: a snapshot's `fsync` fails. Raft's core stops on that storage error; the node
/// must exit with `SYNC_FAILED_EXIT_CODE` rather than stay up without Raft, and after a restart
/// on a healthy disk catch up with no acknowledged write lost and take a snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_snapshot_fsync_stops_the_node_and_loses_nothing() -> anyhow::Result<()> {
    let (mut tc, faulty, exit_code, mut acked) = fail_a_snapshot_sync("").await?;
    assert_eq!(
        exit_code,
        Some(Some(SYNC_FAILED_EXIT_CODE)),
        "node {faulty} must exit with {SYNC_FAILED_EXIT_CODE} after a failed snapshot fsync:\n{}",
        tc.log_tail(faulty, 20)
    );
    assert!(
        tc.log_contains(faulty, "Raft stopped on an error: stopping this node now"),
        "node {faulty}'s log must say why it stopped:\n{}",
        tc.log_tail(faulty, 20)
    );
    put_phase(&tc, "after", &mut acked).await?;
    let restarted_at = Instant::now();
    tc.restart(faulty)?;
    tc.converged().await?;
    let catch_up_ms = ms(restarted_at.elapsed());
    let lost = lost_on(&tc, faulty, &acked).await?;
    let (code, v) = tc.post(faulty, "/v1/admin/snapshot", json!({})).await?;
    eprintln!(
        "story 12b: node {faulty} exited {exit_code:?} after a failed snapshot fsync; restart to \
         converged {catch_up_ms} ms; {} acknowledged writes checked, {} lost; a snapshot after \
         the restart: {code} {v}",
        acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert_eq!(code, 200, "a snapshot on the healthy disk: {v}");
    Ok(())
}

/// Negative control of 12b: a node that stays up when Raft's core stops is caught by the same
/// exit check, and is of no use meanwhile (`/readyz` 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_node_that_survives_raft_failing_is_caught() -> anyhow::Result<()> {
    let (tc, faulty, exit_code, _) = fail_a_snapshot_sync("survive-raft-failure").await?;
    let (ready, v) = tc.get(faulty, "/readyz").await?;
    eprintln!("story 12b control: node {faulty} exited {exit_code:?}; its /readyz: {ready} {v}");
    assert_eq!(
        exit_code, None,
        "with survive-raft-failure the node must stay up, which the story's exit check catches"
    );
    assert_eq!(ready, 503, "a node without Raft is not ready: {v}");
    assert!(tc.log_contains(
        faulty,
        "BUG INJECTION: Raft stopped on an error; staying up"
    ));
    Ok(())
}
