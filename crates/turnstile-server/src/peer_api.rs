//! `/raft/*`: the peer API. Every call must carry the cluster secret; a call from another
//! cluster, or across a fault-injected cut, is refused before any handler runs. A node that
//! may not vote (empty or awaiting re-admission) refuses vote requests.

use std::io::Cursor;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use turnstile_core::codec;
use turnstile_raft::network::{
    SnapshotRequest, BINCODE_CONTENT_TYPE, CLUSTER_ID_HEADER, FROM_HEADER, SECRET_HEADER,
};
use turnstile_raft::types::Snapshot;

use crate::app::App;
use crate::identity::Phase;
use crate::membership::{ADMIT_PATH, PREPARE_JOIN_PATH};
use crate::proto::{MemberOp, ProposeRequest, ReadQuery, MEMBER_PATH, PROPOSE_PATH, READ_PATH};
use turnstile_raft::network::TRANSFER_LEADER_PATH;

/// Path answering who this node is; used by cluster formation and start-up checks.
pub const IDENTITY_PATH: &str = "/raft/identity";

/// What `/raft/identity` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerStatus {
    pub node_id: u64,
    pub cluster_id: Option<String>,
    pub phase: Phase,
}

/// Largest peer request body: replication batches (up to 8 MiB) and whole snapshots must
/// fit, or a lagging follower could never catch up.
pub const PEER_BODY_BYTES_MAX: usize = 256 * 1024 * 1024;

/// The `/raft` router.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route(TRANSFER_LEADER_PATH, post(transfer_leader))
        .route("/raft/snapshot", post(snapshot))
        .route(PROPOSE_PATH, post(propose))
        .route(READ_PATH, post(read))
        .route(MEMBER_PATH, post(member))
        .route(ADMIT_PATH, post(admit))
        .route(PREPARE_JOIN_PATH, post(prepare_join))
        .route(IDENTITY_PATH, get(identity))
        .layer(middleware::from_fn_with_state(app.clone(), gate))
        .layer(axum::extract::DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .with_state(app)
}

/// Refuses calls without the secret (401), from another cluster (409), or across a cut (503).
async fn gate(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header(SECRET_HEADER) != Some(&*app.peers.identity().secret) {
        tracing::warn!(path = %req.uri().path(), "peer RPC without the cluster secret refused");
        return (StatusCode::UNAUTHORIZED, "missing or wrong cluster secret").into_response();
    }
    // `/raft/identity` answers anyone with the secret, so a node of another cluster can learn
    // that it is foreign and refuse to start.
    let is_identity = req.uri().path() == IDENTITY_PATH;
    if let (Some(theirs), Some(ours), false) = (
        header(CLUSTER_ID_HEADER),
        app.peers.identity().cluster_id(),
        is_identity,
    ) {
        if theirs != ours {
            tracing::warn!(theirs, ours, "peer RPC from another cluster refused");
            return (StatusCode::CONFLICT, "peer belongs to another cluster").into_response();
        }
    }
    let path = req.uri().path();
    if (path == "/raft/append" || path == "/raft/snapshot") && !app.phase().may_replicate() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not accepting log entries: node awaits re-admission",
        )
            .into_response();
    }
    let from = header(FROM_HEADER).and_then(|v| v.parse::<u64>().ok());
    if from.is_some_and(|f| app.peers.faults().is_blocked(f)) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "link cut by fault injection",
        )
            .into_response();
    }
    next.run(req).await
}

fn decode<T: DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    codec::decode(body).map_err(|e| {
        Box::new((StatusCode::BAD_REQUEST, format!("undecodable body: {e}")).into_response())
    })
}

/// Encodes `Result<T, String>` the way `PeerClient::rpc` expects.
fn reply<T: Serialize, E: ToString>(result: Result<T, E>) -> Response {
    let result = result.map_err(|e| e.to_string());
    match codec::encode(&result) {
        Ok(bytes) => (
            [(axum::http::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE)],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn append(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match decode(&body) {
        Ok(req) => reply(app.raft.append_entries(req).await),
        Err(r) => *r,
    }
}

/// A leader that is stepping down asks this node to campaign now. Only a node that may vote
/// may lead; any other refuses, and the old leader's term simply runs out.
async fn transfer_leader(State(app): State<Arc<App>>, body: Bytes) -> Response {
    if !app.phase().may_vote() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not taking leadership: node awaits (re)admission",
        )
            .into_response();
    }
    match decode(&body) {
        Ok(req) => reply(app.raft.handle_transfer_leader(req).await),
        Err(r) => *r,
    }
}

async fn vote(State(app): State<Arc<App>>, body: Bytes) -> Response {
    if !app.phase().may_vote() {
        // An empty node's vote could elect a leader that lacks committed entries.
        tracing::warn!(phase = ?app.phase(), "vote request refused: this node has not been (re)admitted");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not voting: node awaits (re)admission",
        )
            .into_response();
    }
    match decode(&body) {
        Ok(req) => reply(app.raft.vote(req).await),
        Err(r) => *r,
    }
}

async fn snapshot(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let (vote, meta, data): SnapshotRequest = match decode(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let snapshot = Snapshot {
        meta,
        snapshot: Cursor::new(data),
    };
    reply(app.raft.install_full_snapshot(vote, snapshot).await)
}

async fn propose(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match decode::<ProposeRequest>(&body) {
        Ok(req) => reply::<_, String>(Ok(app.propose_local(&req).await)),
        Err(r) => *r,
    }
}

async fn read(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match decode::<ReadQuery>(&body) {
        Ok(q) => reply::<_, String>(Ok(app.read_local(&q).await)),
        Err(r) => *r,
    }
}

async fn member(State(app): State<Arc<App>>, body: Bytes) -> Response {
    match decode::<MemberOp>(&body) {
        Ok(op) => {
            let timeout_ms = app.cfg.request_timeout_ms * 6;
            reply::<_, String>(Ok(app.member_bounded(&op, timeout_ms).await))
        }
        Err(r) => *r,
    }
}

/// The leader admits this node during promotion: from now on it may vote.
async fn admit(State(app): State<Arc<App>>) -> Response {
    let result = match app.phase() {
        Phase::Member | Phase::Forming => Ok(()),
        Phase::Learning => app.set_phase(Phase::Member).map_err(|e| e.to_string()),
        Phase::Empty | Phase::Awaiting => {
            Err("not caught up: add this node as a learner first".to_string())
        }
    };
    reply(result)
}

/// The leader is about to add this node as a learner: accept log entries from now on.
async fn prepare_join(State(app): State<Arc<App>>) -> Response {
    let result = match app.phase() {
        Phase::Awaiting | Phase::Learning => {
            app.set_phase(Phase::Learning).map_err(|e| e.to_string())
        }
        phase => Err(format!(
            "node is {phase:?}; only an empty node waiting to join can be added"
        )),
    };
    reply(result)
}

async fn identity(State(app): State<Arc<App>>) -> Json<PeerStatus> {
    Json(PeerStatus {
        node_id: app.node_id(),
        cluster_id: app.peers.identity().cluster_id(),
        phase: app.phase(),
    })
}
