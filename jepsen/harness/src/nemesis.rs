//! The nemesis: a seeded schedule of faults against the cluster's processes and network. Each
//! fault is held for a while, undone, and recorded as a window, with the nodes it left unable
//! to reach a majority (which must grant nothing meanwhile).
//!
//! Faults: SIGKILL + restart (a random node or the leader), SIGSTOP + SIGCONT (a random node
//! or the leader, often longer than the TTL and the election timeout), partitions (isolate one
//! node, isolate the leader, majority/minority split, a bridge, one-way), a jump of a node's
//! wall clock by an hour, and storage faults (`nemesis/storage.rs`): a failing `fdatasync`, and
//! a lost disk replaced through membership changes (remove, add a learner, promote) under a
//! partition and pauses, and a live node removed and replaced while another is down
//! (`nemesis/membership.rs`).

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::cluster::ProcCluster;
use crate::recorder::Recorder;

mod membership;
mod storage;

pub use storage::FDATASYNC;

/// Every fault the nemesis can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Kill,
    KillLeader,
    Pause,
    PauseLeader,
    StallLeader,
    IsolateOne,
    IsolateLeader,
    MajorityMinority,
    Bridge,
    OneWay,
    ClockJump,
    DiskSyncFail,
    WipeReplace,
    MemberChurn,
}

impl Fault {
    /// Every fault a run uses when none are named.
    pub const ALL: [Fault; 14] = [
        Fault::Kill,
        Fault::KillLeader,
        Fault::Pause,
        Fault::PauseLeader,
        Fault::StallLeader,
        Fault::IsolateOne,
        Fault::IsolateLeader,
        Fault::MajorityMinority,
        Fault::Bridge,
        Fault::OneWay,
        Fault::ClockJump,
        Fault::DiskSyncFail,
        Fault::WipeReplace,
        Fault::MemberChurn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::KillLeader => "kill-leader",
            Fault::Pause => "pause",
            Fault::PauseLeader => "pause-leader",
            Fault::StallLeader => "stall-leader",
            Fault::IsolateOne => "isolate",
            Fault::IsolateLeader => "isolate-leader",
            Fault::MajorityMinority => "partition-majority",
            Fault::Bridge => "partition-bridge",
            Fault::OneWay => "partition-one-way",
            Fault::ClockJump => "clock-jump",
            Fault::DiskSyncFail => "disk-sync-fail",
            Fault::WipeReplace => "wipe-replace",
            Fault::MemberChurn => "member-churn",
        }
    }

    /// Parses a name as printed by [`Fault::name`].
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// How the nemesis runs.
#[derive(Debug, Clone)]
pub struct NemesisPlan {
    pub seed: u64,
    pub faults: Vec<Fault>,
    /// Quiet time between faults, ms (drawn uniformly).
    pub quiet_ms: (u64, u64),
    /// How long a fault is held, ms.
    pub hold_ms: (u64, u64),
    pub deadline: Instant,
}

/// How long a leader stall lasts, ms: below the 500 ms minimum election timeout.
const STALL_MS: (u64, u64) = (200, 450);

/// One wall-clock jump: an hour, far past every TTL.
pub const CLOCK_JUMP_MS: i64 = 3_600_000;

/// The node that currently reports itself leader, if one answers quickly.
pub async fn current_leader(cluster: &ProcCluster) -> Option<u64> {
    for id in cluster.live() {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(500), cluster.status(id)).await
        {
            if s["state"] == "Leader" {
                return Some(id);
            }
        }
    }
    None
}

/// Runs the schedule until the deadline; returns the cluster with every fault undone.
pub async fn run(mut cluster: ProcCluster, rec: Recorder, plan: NemesisPlan) -> ProcCluster {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    if plan.faults.is_empty() {
        return cluster;
    }
    // Faults are dealt from a shuffled deck, each once before any repeats: a short run with
    // several kinds gets every kind it has time for, not the same two by chance.
    let mut deck: Vec<Fault> = Vec::with_capacity(plan.faults.len());
    loop {
        let quiet = rng.gen_range(plan.quiet_ms.0..=plan.quiet_ms.1);
        tokio::time::sleep(Duration::from_millis(quiet)).await;
        if Instant::now() >= plan.deadline {
            break;
        }
        if deck.is_empty() {
            deck.extend_from_slice(&plan.faults);
            deck.shuffle(&mut rng);
        }
        let Some(fault) = deck.pop() else {
            break;
        };
        let hold = Duration::from_millis(rng.gen_range(plan.hold_ms.0..=plan.hold_ms.1));
        if let Err(e) = apply(&mut cluster, &rec, &mut rng, fault, hold).await {
            tracing::warn!(fault = fault.name(), error = %e, "nemesis fault failed");
            // A fault that stopped half-way (a re-admission that timed out) can leave the
            // membership changed, and the next fault's minority windows assume every node is a
            // voter: undo everything before going on.
            if let Err(e) = heal_all(&mut cluster).await {
                tracing::warn!(error = %e, "healing after a failed fault failed too");
            }
        }
    }
    cluster
}

/// Applies one fault, holds it, undoes it. The recorded window opens only once the fault is
/// fully in force and closes before it is undone, so "in a minority for the whole window" is
/// true of every instant inside it (the minority check relies on that).
async fn apply(
    cluster: &mut ProcCluster,
    rec: &Recorder,
    rng: &mut StdRng,
    fault: Fault,
    hold: Duration,
) -> anyhow::Result<()> {
    let ids = cluster.ids();
    let majority = ids.len() / 2 + 1;
    let leader = current_leader(cluster).await;
    let random = *ids.choose(rng).ok_or_else(|| anyhow::anyhow!("no nodes"))?;
    let leader_or_random = leader.unwrap_or(random);
    match fault {
        Fault::Kill | Fault::KillLeader => {
            let target = if fault == Fault::Kill {
                random
            } else {
                leader_or_random
            };
            cluster.kill(target)?;
            let w = rec.start_window(fault.name(), vec![target], vec![]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.restart(target)?;
        }
        Fault::Pause | Fault::PauseLeader => {
            let target = if fault == Fault::Pause {
                random
            } else {
                leader_or_random
            };
            // A frozen node can do nothing on its own authority: list it with the minority.
            cluster.pause(target)?;
            let w = rec.start_window(fault.name(), vec![target], vec![target]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.resume(target)?;
        }
        Fault::StallLeader => {
            // A GC-length stall of the leader, shorter than any election timeout: nobody takes
            // over, and on waking the leader's clock has moved on, so every lease that fell
            // due meanwhile expires in its first entry: the same entry that may free their
            // locks, which is where expiry order matters.
            let stall = Duration::from_millis(rng.gen_range(STALL_MS.0..=STALL_MS.1));
            cluster.pause(leader_or_random)?;
            let w = rec.start_window(fault.name(), vec![leader_or_random], vec![leader_or_random]);
            tokio::time::sleep(stall).await;
            rec.end_window(w);
            cluster.resume(leader_or_random)?;
        }
        Fault::IsolateOne | Fault::IsolateLeader => {
            let target = if fault == Fault::IsolateOne {
                random
            } else {
                leader_or_random
            };
            cluster.isolate(target)?;
            let w = rec.start_window(fault.name(), vec![target], vec![target]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.heal()?;
        }
        Fault::MajorityMinority => {
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let (small, big) = shuffled.split_at(ids.len() - majority);
            cluster.partition(&[small.to_vec(), big.to_vec()])?;
            let w = rec.start_window(fault.name(), small.to_vec(), small.to_vec());
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.heal()?;
        }
        Fault::Bridge => {
            // Two halves that cannot hear each other, joined by one node that hears both: the
            // bridge's side has a majority, so nobody is provably in a minority.
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let bridge = shuffled[0];
            let rest = &shuffled[1..];
            let (a, b) = rest.split_at(rest.len() / 2);
            let mut left = a.to_vec();
            left.push(bridge);
            let mut right = b.to_vec();
            right.push(bridge);
            cluster.partition(&[left, right])?;
            let w = rec.start_window(fault.name(), vec![bridge], vec![]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.heal()?;
        }
        Fault::OneWay => {
            // The leader stops hearing one follower (its acks vanish; it still sends).
            let to = leader_or_random;
            let from = *ids
                .iter()
                .filter(|&&i| i != to)
                .collect::<Vec<_>>()
                .choose(rng)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("no second node"))?;
            cluster.drop_one_way(from, to)?;
            let w = rec.start_window(fault.name(), vec![from, to], vec![]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.heal()?;
        }
        Fault::ClockJump => {
            let target = leader_or_random;
            cluster.clock_jump(target, CLOCK_JUMP_MS).await?;
            let w = rec.start_window(fault.name(), vec![target], vec![]);
            tokio::time::sleep(hold).await;
            rec.end_window(w);
            cluster.clock_jump(target, 0).await?;
        }
        Fault::DiskSyncFail => {
            storage::sync_failure(cluster, rec, fault.name(), leader_or_random, hold).await?;
        }
        Fault::WipeReplace => {
            storage::wipe_and_replace(cluster, rec, rng, fault.name(), leader, hold).await?;
        }
        Fault::MemberChurn => {
            membership::remove_and_readd(cluster, rec, rng, fault.name(), leader, hold).await?;
        }
    }
    Ok(())
}

/// The leader (a fault that needs one fails without) and the other nodes in a seeded random
/// order, for faults that pick followers.
fn shuffled_followers(
    cluster: &ProcCluster,
    leader: Option<u64>,
    rng: &mut StdRng,
) -> anyhow::Result<(u64, Vec<u64>)> {
    let leader = leader.ok_or_else(|| anyhow::anyhow!("no leader to keep"))?;
    let mut followers: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    followers.shuffle(rng);
    Ok((leader, followers))
}

/// Undoes everything: heals partitions, resumes paused nodes, restarts killed ones and ones
/// that exited, re-admits a wiped node whose replacement did not finish and replaces a removed
/// one, resets clocks.
pub async fn heal_all(cluster: &mut ProcCluster) -> anyhow::Result<()> {
    cluster.heal()?;
    for id in cluster.ids() {
        if cluster.is_paused(id) {
            cluster.resume(id)?;
        }
        // Only processes can be polled for an exit (the netns backend).
        if let Ok(Some(status)) = cluster.exited(id) {
            tracing::warn!(node = id, %status, "node had exited; restarting it");
        }
        if !cluster.is_running(id) {
            cluster.restart(id)?;
        }
    }
    // Read once: a re-admission below only puts its own node back.
    let members = cluster.members().await.ok();
    for id in cluster.ids() {
        let phase = cluster.status(id).await.map(|s| s["phase"].clone());
        if phase.is_ok_and(|p| p == "awaiting" || p == "learning") {
            cluster.readmit(id).await?;
        } else if members.as_ref().is_some_and(|m| !m.contains(&id)) {
            // Removed while running and never re-added: an operator wipes and re-adds it.
            cluster.replace(id).await?;
        }
    }
    for id in cluster.ids() {
        // A node still starting may refuse; its offset is 0 after a restart anyway.
        let _ = cluster.clock_jump(id, 0).await;
    }
    Ok(())
}
