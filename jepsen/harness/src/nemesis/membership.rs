//! The nemesis's membership fault: a live follower is removed from the membership, then
//! replaced (wiped, added as a learner, promoted) while another follower is killed, so the
//! membership changes commit on the smallest quorum the cluster has.

use std::time::Duration;

use anyhow::anyhow;
use rand::rngs::StdRng;

use crate::cluster::ProcCluster;
use crate::recorder::Recorder;

/// 1. A random follower, `gone`, is removed while it runs; for `hold / 2` it is out of the
///    membership (listed as a minority: it can grant nothing).
/// 2. If the remaining voters can spare one, another follower is SIGKILLed; `gone` is stopped,
///    its data dir emptied, and it is re-admitted (remove is done; add as a learner, promote)
///    while that node is down. Then the killed node restarts.
///
/// The checkers judge it as any other fault, and the final digests must converge with `gone`
/// back in.
pub async fn remove_and_readd(
    cluster: &mut ProcCluster,
    rec: &Recorder,
    rng: &mut StdRng,
    name: &str,
    leader: Option<u64>,
    hold: Duration,
) -> anyhow::Result<()> {
    let ids = cluster.ids();
    let (_, mut followers) = super::shuffled_followers(cluster, leader, rng)?;
    let gone = followers
        .pop()
        .ok_or_else(|| anyhow!("no follower to remove"))?;

    cluster.remove_member(gone).await?;
    let w = rec.start_window(name, vec![gone], vec![gone]);
    tokio::time::sleep(hold / 2).await;
    rec.end_window(w);

    // Voters left after the removal, and how many of them may be down with a quorum kept.
    let voters = ids.len() - 1;
    let spare = voters - (voters / 2 + 1);
    let victim = if spare > 0 { followers.pop() } else { None };
    if let Some(v) = victim {
        cluster.kill(v)?;
    }
    let targets: Vec<u64> = std::iter::once(gone).chain(victim).collect();
    let w = rec.start_window(name, targets, vec![]);
    let replaced = cluster.replace(gone).await;
    rec.end_window(w);
    if let Some(v) = victim {
        cluster.restart(v)?;
    }
    let took = replaced?;
    tracing::info!(
        node = gone,
        killed = ?victim,
        took_ms = took.as_millis() as u64,
        "removed node re-admitted"
    );
    Ok(())
}
