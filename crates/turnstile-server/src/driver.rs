//! Background work of a node, one loop per heartbeat interval:
//! - as leader: choose the replicated `cluster_id` if none exists yet; propose `Expire` for
//!   leases its clock says are due; propose a `Tick` every `tick_ms` while anything depends on
//!   time moving, so `sm_time` advances even when the cluster is idle;
//! - on every node: record the cluster id in the identity file, and move from `Forming` to
//!   `Member` once the node appears in the replicated membership.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use turnstile_core::{limits, Command};

use crate::app::App;
use crate::identity::Phase;
use crate::proto::ProposeRequest;

/// Runs until `stop` flips to true.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(app.cfg.heartbeat_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_entry = Instant::now();
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.changed() => return,
        }
        housekeeping(&app);
        if app.is_leader() {
            if let Some(proposed) = leader_step(&app, last_entry).await {
                if proposed {
                    last_entry = Instant::now();
                }
            }
        }
    }
}

fn housekeeping(app: &App) {
    let cluster_id = app.sm.read().state.cluster_id.clone();
    if let Some(cid) = cluster_id {
        if let Err(e) = app.learn_cluster_id(&cid) {
            tracing::error!(error = %e, "cannot record the cluster id");
        }
    }
    if app.phase() == Phase::Forming {
        let in_membership = app.node_addr(app.node_id()).is_some();
        if in_membership {
            if let Err(e) = app.set_phase(Phase::Member) {
                tracing::error!(error = %e, "cannot record membership");
            }
        }
    }
}

/// One leader iteration. Returns `Some(true)` if an entry was proposed.
async fn leader_step(app: &App, last_entry: Instant) -> Option<bool> {
    let (sm_time_ms, has_cluster_id, needs_time) = {
        let inner = app.sm.read();
        let s = &inner.state;
        (s.sm_time_ms, s.cluster_id.is_some(), s.needs_time())
    };
    let now_ms = app.clock.now_ms(app.term(), sm_time_ms);
    let command = if !has_cluster_id {
        Command::InitCluster {
            cluster_id: crate::backup::new_cluster_id(),
        }
    } else {
        let due = app
            .sm
            .read()
            .state
            .leases_due_at(now_ms, limits::EXPIRE_LEASES_PER_ENTRY_MAX);
        if !due.is_empty() {
            Command::Expire { lease_ids: due }
        } else if needs_time && last_entry.elapsed() >= Duration::from_millis(app.cfg.tick_ms) {
            Command::Tick
        } else {
            return Some(false);
        }
    };
    let kind = command.kind();
    let req = ProposeRequest {
        request_id: None,
        command,
        timeout_ms: app.cfg.request_timeout_ms,
    };
    match app.propose_local(&req).await {
        Ok(p) => {
            if let Ok(turnstile_core::Outcome::Expired { lease_ids }) = &p.response.outcome {
                if !lease_ids.is_empty() {
                    tracing::info!(?lease_ids, "leases expired");
                }
            }
            Some(true)
        }
        Err(e) => {
            tracing::debug!(kind, error = %e, "leader driver proposal failed");
            None
        }
    }
}

/// The leader's deadlock check, every `deadlock_check_ms` while anyone waits: finds the
/// cycles in the wait-for graph and proposes an `AbortWaiter` for each cycle's victim (by the
/// configured policy). The entry re-checks the deadlock when it applies, so a cycle that
/// resolved in between aborts nothing.
pub async fn run_deadlock_checks(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(app.cfg.deadlock_check_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.changed() => return,
        }
        if !app.is_leader() {
            continue;
        }
        let victims = {
            let inner = app.sm.read();
            if inner.state.tickets.len() < 2 {
                continue;
            }
            inner.state.deadlock_victims(app.cfg.deadlock_victim.into())
        };
        for v in victims {
            tracing::warn!(waiter_id = %v.waiter_id, cycle = ?v.cycle, "deadlock found; aborting the victim's wait");
            let command = Command::AbortWaiter {
                waiter_id: v.waiter_id,
                cycle: v.cycle,
            };
            let req = ProposeRequest {
                request_id: None,
                command,
                timeout_ms: app.cfg.request_timeout_ms,
            };
            if let Err(e) = app.propose_local(&req).await {
                tracing::debug!(error = %e, "deadlock abort proposal failed");
            }
        }
    }
}
