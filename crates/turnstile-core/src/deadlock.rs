//! Deadlock detection over the wait-for graph between leases.
//!
//! Definition (also in docs/locking.md): a lease *waits* while it has a queued ticket. A
//! ticket on lock X is *blocked by* the holders of X it is incompatible with; on a semaphore
//! it is blocked only while every permit holder is (freeing any one permit would do). A lease
//! is *deadlocked* when none of its tickets can ever be satisfied: computed as the complement
//! of the fixed point of "can make progress" (Holt's graph reduction): leases that wait for
//! nothing can progress; a ticket is satisfiable when, on every lock it names, the holders
//! that cannot progress leave room for it; a lease with a satisfiable ticket can progress.
//! Queue order is ignored, which can only hide a deadlock (a waiter stuck behind a deadlocked
//! waiter), never report one that is not there: no false positives.
//!
//! Detection runs on the leader on an interval (not in apply) so the apply path stays cheap
//! and the victim policy is a per-node setting; the `AbortWaiter` entry re-checks the
//! deadlock at apply time, so a cycle that resolved meanwhile aborts nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::command::LockMode;
use crate::state::{Lock, State, Ticket};

/// Which lease of a cycle loses its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum VictimPolicy {
    /// The most recently granted lease (highest id): it has usually done the least work.
    #[default]
    Youngest,
    /// The oldest lease.
    Oldest,
}

/// One detected deadlock: the waiter to abort and the cycle of leases it closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    pub waiter_id: String,
    pub cycle: Vec<u64>,
}

/// Holders of `lock` that block a ticket of `mode` held by `lease_id`.
fn blockers(lock: &Lock, mode: LockMode, lease_id: u64) -> impl Iterator<Item = u64> + '_ {
    lock.holders
        .iter()
        .filter(move |h| {
            h.lease_id != lease_id
                && (lock.permits > 1
                    || mode == LockMode::Exclusive
                    || h.mode == LockMode::Exclusive)
        })
        .map(|h| h.lease_id)
}

impl State {
    fn ticket_satisfiable(&self, t: &Ticket, progressing: &BTreeSet<u64>) -> bool {
        t.names.iter().all(|n| {
            let Some(lock) = self.locks.get(n) else {
                return true;
            };
            let stuck = blockers(lock, t.mode, t.lease_id)
                .filter(|l| !progressing.contains(l))
                .count();
            if lock.permits > 1 {
                stuck < lock.permits as usize
            } else {
                stuck == 0
            }
        })
    }

    /// Leases that can never be granted what they wait for.
    pub fn deadlocked_leases(&self) -> BTreeSet<u64> {
        let mut waiting: BTreeMap<u64, Vec<&Ticket>> = BTreeMap::new();
        for t in self.tickets.values() {
            waiting.entry(t.lease_id).or_default().push(t);
        }
        let mut progressing: BTreeSet<u64> = self
            .leases
            .keys()
            .filter(|l| !waiting.contains_key(l))
            .copied()
            .collect();
        loop {
            let newly: Vec<u64> = waiting
                .iter()
                .filter(|(l, ts)| {
                    !progressing.contains(l)
                        && ts.iter().any(|t| self.ticket_satisfiable(t, &progressing))
                })
                .map(|(l, _)| *l)
                .collect();
            if newly.is_empty() {
                break;
            }
            progressing.extend(newly);
        }
        waiting
            .into_keys()
            .filter(|l| !progressing.contains(l))
            .collect()
    }

    /// For each cycle among deadlocked leases, the waiter to abort under `policy`.
    pub fn deadlock_victims(&self, policy: VictimPolicy) -> Vec<Victim> {
        let dead = self.deadlocked_leases();
        // Wait-for edges restricted to deadlocked leases.
        let mut edges: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for t in self.tickets.values().filter(|t| dead.contains(&t.lease_id)) {
            for n in &t.names {
                if let Some(lock) = self.locks.get(n) {
                    edges
                        .entry(t.lease_id)
                        .or_default()
                        .extend(blockers(lock, t.mode, t.lease_id).filter(|l| dead.contains(l)));
                }
            }
        }
        let mut victims = Vec::new();
        let mut covered = BTreeSet::new();
        for &start in &dead {
            if covered.contains(&start) {
                continue;
            }
            let Some(cycle) = find_cycle(&edges, start) else {
                continue;
            };
            covered.extend(cycle.iter().copied());
            let victim_lease = match policy {
                VictimPolicy::Youngest => cycle.iter().max(),
                VictimPolicy::Oldest => cycle.iter().min(),
            };
            // Abort the victim's wait that is part of the cycle: a ticket blocked by another
            // lease on the cycle (a lease may wait on several locks at once).
            let on_cycle: BTreeSet<u64> = cycle.iter().copied().collect();
            let waiter = victim_lease.and_then(|vl| {
                self.tickets
                    .iter()
                    .find(|(_, t)| {
                        t.lease_id == *vl
                            && t.names.iter().any(|n| {
                                self.locks.get(n).is_some_and(|l| {
                                    blockers(l, t.mode, t.lease_id).any(|b| on_cycle.contains(&b))
                                })
                            })
                    })
                    .map(|(w, _)| w.clone())
            });
            if let Some(waiter_id) = waiter {
                victims.push(Victim { waiter_id, cycle });
            }
        }
        victims
    }
}

/// A cycle through `start` in `edges`, as the list of leases along it, if any.
fn find_cycle(edges: &BTreeMap<u64, BTreeSet<u64>>, start: u64) -> Option<Vec<u64>> {
    // Iterative DFS keeping the path; the graph is small (deadlocked leases only).
    let mut path = vec![start];
    let mut iters: Vec<Vec<u64>> = vec![edges
        .get(&start)
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default()];
    let mut seen = BTreeSet::from([start]);
    while let Some(next) = iters.last_mut().and_then(|it| it.pop()) {
        if next == start {
            return Some(path);
        }
        if seen.insert(next) {
            path.push(next);
            iters.push(
                edges
                    .get(&next)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
            );
        }
        while iters.last().is_some_and(|it| it.is_empty()) {
            iters.pop();
            path.pop();
            if iters.is_empty() {
                return None;
            }
        }
    }
    None
}
