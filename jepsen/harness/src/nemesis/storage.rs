//! The nemesis's faults of a node's storage: a disk whose `fdatasync` fails (libfiu), and a
//! disk that is lost and replaced through membership changes, under a partition and a pause
//! that make an empty voter dangerous.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use rand::rngs::StdRng;

use crate::cluster::ProcCluster;
use crate::recorder::Recorder;

/// libfiu's failure point of `fdatasync(2)`, the call behind every log append and vote.
pub const FDATASYNC: &str = "posix/io/sync/fdatasync";
/// How long a node whose `fdatasync` fails has to exit (it exits at its next sync: under the
/// workload, within milliseconds).
const SYNC_FAIL_EXIT_MS_MAX: u64 = 10_000;
/// How often the nemesis looks for that exit.
const EXIT_POLL_MS: u64 = 20;

/// `fdatasync` starts failing on `target`. The node must exit with `EX_IOERR` at its next
/// sync (docs/operations.md, "Disk faults") instead of retrying and carrying on; it is then
/// restarted on its (healthy again) disk and must catch up. Not listed as a minority: a leader
/// whose own sync fails can still see an entry committed by three followers before it exits,
/// which is safe.
pub async fn sync_failure(
    cluster: &mut ProcCluster,
    rec: &Recorder,
    name: &str,
    target: u64,
    hold: Duration,
) -> anyhow::Result<()> {
    cluster.disk_fault(target, FDATASYNC, true)?;
    let w = rec.start_window(name, vec![target], vec![]);
    let started = Instant::now();
    let code = loop {
        if let Some(status) = cluster.exited(target)? {
            break Some((status.code(), started.elapsed()));
        }
        if started.elapsed() > Duration::from_millis(SYNC_FAIL_EXIT_MS_MAX) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(EXIT_POLL_MS)).await;
    };
    tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
    rec.end_window(w);
    match code {
        Some((code, exit_after)) => {
            let exit_ms = exit_after.as_millis() as u64;
            tracing::info!(
                node = target,
                ?code,
                exit_ms,
                "node exited on a failed fdatasync"
            );
            cluster.restart(target)
        }
        None => {
            cluster.disk_fault(target, FDATASYNC, false)?;
            bail!(
                "node {target} did not exit within {SYNC_FAIL_EXIT_MS_MAX} ms of fdatasync failing"
            )
        }
    }
}

/// A node's disk is lost while an empty voter could do harm, and the node is replaced.
///
/// 1. Nodes `lagging` (as many as may fail) are cut off, so what commits next commits on the
///    leader, the `keepers` and `wiped`; `lagging` fall behind.
/// 2. The leader and `keepers` freeze; `wiped` is killed, its data dir emptied, and it starts
///    again; the partition heals. Now `lagging` and `wiped` are a majority by count, but
///    `lagging` lack committed entries, so a leader from them would lose acknowledged writes:
///    only `wiped` refusing to vote until re-admitted keeps them from electing one (the
///    `wiped-node-votes` switch breaks exactly that). Every node is listed in the minority.
/// 3. The leader and `keepers` resume, and `wiped` is re-admitted: removed, added as a
///    learner (it catches up, from a snapshot if the log was compacted), promoted.
///
/// The checkers judge the rest: digests converge with the re-added node, and no acknowledged
/// write or grant is lost.
pub async fn wipe_and_replace(
    cluster: &mut ProcCluster,
    rec: &Recorder,
    rng: &mut StdRng,
    name: &str,
    leader: Option<u64>,
    hold: Duration,
) -> anyhow::Result<()> {
    let ids = cluster.ids();
    let majority = ids.len() / 2 + 1;
    let (leader, mut others) = super::shuffled_followers(cluster, leader, rng)?;
    let wiped = others.pop().ok_or_else(|| anyhow!("no follower to wipe"))?;
    let (lagging, rest) = others.split_at(ids.len() - majority);
    let keepers: Vec<u64> = std::iter::once(leader)
        .chain(rest.iter().copied())
        .collect();
    let mut majority_side = keepers.clone();
    majority_side.push(wiped);

    cluster.partition(&[lagging.to_vec(), majority_side])?;
    let w = rec.start_window(name, vec![wiped], lagging.to_vec());
    tokio::time::sleep(hold / 2).await;
    for &k in &keepers {
        cluster.pause(k)?;
    }
    rec.end_window(w);

    cluster.restart_empty(wiped)?;
    cluster.heal()?;
    let w = rec.start_window(name, vec![wiped], ids.clone());
    tokio::time::sleep(hold).await;
    rec.end_window(w);
    for &k in &keepers {
        cluster.resume(k)?;
    }

    // Not a minority: once promoted, the node may lead before this window closes.
    let w = rec.start_window(name, vec![wiped], vec![]);
    let readmitted = cluster.readmit(wiped).await;
    rec.end_window(w);
    let took = readmitted?;
    tracing::info!(
        node = wiped,
        took_ms = took.as_millis() as u64,
        "wiped node re-admitted"
    );
    Ok(())
}
