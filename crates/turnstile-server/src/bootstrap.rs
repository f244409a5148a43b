//! Forming a new cluster exactly once, and refusing to let an empty node vote in an existing
//! one.
//!
//! An empty node started with `--initial-cluster-state new` asks every initial peer where it
//! stands (`/raft/identity`):
//! - if any peer already belongs to a cluster, this node's disk was lost: it becomes
//!   `Awaiting` (never votes or serves) and logs how to re-add it;
//! - once every peer is reachable and none belongs to a cluster, it commits to `Forming`
//!   (written to disk before it may vote);
//! - the lowest-id node then waits until every peer is `Forming` and calls `initialize`.
//!   Because it waits for all of them, no peer can see a formed cluster before deciding to
//!   form it, so a freshly formed node is never mistaken for a wiped one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::sync::watch;
use turnstile_raft::network::PeerClient;

use crate::app::App;
use crate::identity::Phase;
use crate::peer_api::{PeerStatus, IDENTITY_PATH};

/// How often an undecided node asks its peers again.
const PROBE_INTERVAL_MS: u64 = 200;

/// Asks one peer where it stands; `None` if it cannot be reached or does not prove it holds
/// the cluster secret.
pub async fn probe(peers: &PeerClient, peer: u64, addr: &str) -> Option<PeerStatus> {
    peers
        .rpc::<(), PeerStatus>(peer, addr, IDENTITY_PATH, &(), Duration::from_millis(1_000))
        .await
        .ok()
}

/// Drives an `Empty` or `Forming` node until the cluster is formed (or it must wait to be
/// re-added). Returns when there is nothing left to do or `stop` flips.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    loop {
        let finished = match app.phase() {
            // Decided this round: go straight on to the next phase's step.
            Phase::Empty => {
                decide(&app).await;
                false
            }
            Phase::Forming => try_initialize(&app).await,
            Phase::Member | Phase::Awaiting | Phase::Learning => true,
        };
        if finished {
            return;
        }
        if app.phase() != Phase::Empty && app.phase() != Phase::Forming {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn statuses(app: &App) -> BTreeMap<u64, Option<PeerStatus>> {
    let mut out = BTreeMap::new();
    for (id, addr) in app.cfg.peers() {
        out.insert(id, probe(&app.peers, id, &addr.to_string()).await);
    }
    out
}

/// Empty node: join the formation, or wait to be re-added. Returns true once decided.
async fn decide(app: &App) -> bool {
    let peers = statuses(app).await;
    if let Some((id, st)) = peers.iter().find_map(|(id, s)| {
        s.as_ref()
            .filter(|s| matches!(s.phase, Phase::Member | Phase::Awaiting | Phase::Learning))
            .map(|s| (id, s))
    }) {
        tracing::error!(
            peer = id, cluster_id = ?st.cluster_id,
            "this node's data dir is empty but peer {id} already belongs to a cluster; this node will not vote or serve \
             until it is re-added through the leader (any node forwards): `DELETE /v1/members/{me}`, then \
             `POST /v1/members {{\"id\": {me}, \"addr\": \"<ip:port>\"}}`, then `POST /v1/members/{me}/promote`",
            me = app.node_id()
        );
        return set(app, Phase::Awaiting);
    }
    if peers.values().all(Option::is_some) {
        return set(app, Phase::Forming);
    }
    tracing::info!("waiting for every initial peer to answer before forming the cluster");
    false
}

/// Forming node: the lowest id initializes once every peer has committed to forming.
async fn try_initialize(app: &App) -> bool {
    let lowest = app.cfg.initial_cluster.keys().next().copied();
    if lowest != Some(app.node_id()) {
        return true;
    }
    match app.raft.is_initialized().await {
        Ok(true) => return true,
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "raft stopped");
            return true;
        }
    }
    let peers = statuses(app).await;
    let ready = peers.values().all(|s| {
        s.as_ref()
            .is_some_and(|s| matches!(s.phase, Phase::Forming | Phase::Member))
    });
    if !ready {
        return false;
    }
    let members: BTreeMap<u64, BasicNode> = app
        .cfg
        .initial_cluster
        .iter()
        .map(|(id, addr)| {
            (
                *id,
                BasicNode {
                    addr: addr.to_string(),
                },
            )
        })
        .collect();
    match app.raft.initialize(members).await {
        Ok(()) => {
            tracing::info!(members = ?app.cfg.initial_cluster, "cluster formed");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "initialize failed; will retry");
            false
        }
    }
}

fn set(app: &App, phase: Phase) -> bool {
    match app.set_phase(phase) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "cannot record the node phase");
            false
        }
    }
}
