//! `/raft/*`: the peer API. Every call must carry a valid HMAC keyed by the cluster secret
//! (`turnstile_raft::peer_auth`); a call without one, from another cluster, or across a
//! fault-injected cut, is refused before any handler runs, and every reply to an
//! authenticated call is signed back. Bodies are read up to [`PEER_BODY_BYTES_MAX`] and
//! decoded with bounded allocation (`turnstile_core::codec::decode`). A node that may not vote
//! (empty or awaiting re-admission) refuses vote requests.
//!
//! With TLS on, the gate also requires a node certificate of the HMAC-proven sender that is a
//! member of the membership this node knows (`crate::tls::peer_check`); it is judged from the
//! connection's certificate and the headers, before any body byte is read. The MAC covers the
//! sender header, so once the MAC verifies, the certificate was checked against the proven
//! sender. A node that is behind may know a membership older than its leader's; a "not a
//! member" refusal makes it ask its members for theirs (`/raft/membership`,
//! `crate::tls::member_vouch`), so a node removed and re-added since is let back in.

use std::io::Cursor;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use turnstile_core::codec;
use turnstile_raft::network::{
    SnapshotRequest, BINCODE_CONTENT_TYPE, CLUSTER_ID_HEADER, FROM_HEADER,
};
use turnstile_raft::peer_auth::{RequestHead, AUTH_HEADER, REPLY_AUTH_HEADER};
use turnstile_raft::types::{Snapshot, TypeConfig};

use crate::app::App;
use crate::identity::Phase;
use crate::membership::{ADMIT_PATH, PREPARE_JOIN_PATH};
use crate::proto::{MemberOp, ProposeRequest, ReadQuery, MEMBER_PATH, PROPOSE_PATH, READ_PATH};
use crate::tls::member_vouch::{self, MembershipView, MEMBERSHIP_PATH};
use crate::tls::peer_check::{self, KnownMembers, PeerCertDenial};
use crate::tls::ClientCert;
use turnstile_raft::network::{PRE_VOTE_PATH, TRANSFER_LEADER_PATH};

/// Path answering who this node is; used by cluster formation and start-up checks.
pub const IDENTITY_PATH: &str = "/raft/identity";

/// What `/raft/identity` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerStatus {
    pub node_id: u64,
    pub cluster_id: Option<String>,
    pub phase: Phase,
}

/// Largest peer request body: a whole snapshot must fit, or a lagging follower could never
/// catch up. Only `/raft/snapshot` may send this much.
pub const PEER_BODY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Largest body of every other peer route: an append batch is read from the log in at most
/// 8 MiB (the log store's read budget), so this leaves room and no more.
pub const PEER_MESSAGE_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Snapshot bodies buffered at once. The MAC covers the body, so a body is read before it can
/// be judged; this keeps a caller without the secret from making the node buffer many of them.
const SNAPSHOT_BODIES_IN_FLIGHT_MAX: usize = 1;

static SNAPSHOT_BODIES: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(SNAPSHOT_BODIES_IN_FLIGHT_MAX);

/// The `/raft` router.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route(PRE_VOTE_PATH, post(pre_vote))
        .route(TRANSFER_LEADER_PATH, post(transfer_leader))
        .route("/raft/snapshot", post(snapshot))
        .route(PROPOSE_PATH, post(propose))
        .route(READ_PATH, post(read))
        .route(MEMBER_PATH, post(member))
        .route(ADMIT_PATH, post(admit))
        .route(PREPARE_JOIN_PATH, post(prepare_join))
        .route(IDENTITY_PATH, post(identity))
        .route(MEMBERSHIP_PATH, post(membership))
        .layer(middleware::from_fn_with_state(app.clone(), gate))
        .layer(axum::extract::DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .with_state(app)
}

/// Largest reply the gate signs; a reply is buffered whole to be signed. Our replies are small
/// (the largest is a lock view with its waiters).
const PEER_REPLY_SIGN_BYTES_MAX: usize = 64 * 1024 * 1024;

fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, message).into_response()
}

/// Refuses calls without a valid MAC (401), from another cluster (409), or across a cut
/// (503); signs the reply of every call it lets through.
async fn gate(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let path = parts.uri.path().to_owned();
    let from = header(FROM_HEADER).and_then(|v| v.parse::<u64>().ok());
    let theirs = header(CLUSTER_ID_HEADER).unwrap_or("");
    // Refused before any body byte is read: no MAC, or no sender.
    let (Some(mac), Some(sender)) = (header(AUTH_HEADER).map(str::to_owned), from) else {
        app.denials.peer(&path, from, "no peer MAC or sender");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "peer call without a MAC or a sender",
        );
    };
    if app.cfg.tls_enabled() {
        let cert = parts.extensions.get::<ClientCert>();
        let exempt = path == IDENTITY_PATH;
        if let Err(denial) = peer_check::judge(cert, sender, exempt, &known_members(&app)) {
            if denial == PeerCertDenial::NotAMember {
                // Perhaps this node is behind and the sender was (re)added since.
                member_vouch::ask_members_if_due(&app);
            }
            let reason = denial.to_string();
            app.denials.peer(&path, from, &reason);
            let status = StatusCode::from_u16(denial.status()).unwrap_or(StatusCode::FORBIDDEN);
            return (status, reason).into_response();
        }
    }
    // Only a snapshot may be large, and only one is buffered at a time.
    let snapshot = path == "/raft/snapshot";
    let _snapshot_permit = if snapshot {
        SNAPSHOT_BODIES.acquire().await.ok()
    } else {
        None
    };
    let limit = if snapshot {
        PEER_BODY_BYTES_MAX
    } else {
        PEER_MESSAGE_BYTES_MAX
    };
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "peer body too large or cut off",
            )
        }
    };
    let identity = app.peers.identity();
    let head = RequestHead {
        method: parts.method.as_str(),
        path: &path,
        from: from.unwrap_or(0),
        cluster_id: theirs,
    };
    if !identity.key.verify_request(&head, &body, &mac) {
        app.denials.peer(&path, from, "wrong peer MAC");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "peer MAC does not verify: wrong cluster secret",
        );
    }
    // `/raft/identity` answers anyone with the secret, so a node of another cluster can learn
    // that it is foreign and refuse to start. A sender that names another cluster is refused.
    // A sender that names none yet (forming, or re-added from an empty data dir and still
    // catching up) is let through: the header is covered by the MAC, so nobody on the path can
    // strip it from a foreign node's call.
    if path != IDENTITY_PATH && !theirs.is_empty() {
        if let Some(ours) = identity.cluster_id() {
            if theirs != ours {
                tracing::warn!(theirs, ours, "peer RPC from another cluster refused");
                return sign(
                    &app,
                    &mac,
                    refuse(StatusCode::CONFLICT, "peer belongs to another cluster"),
                )
                .await;
            }
        }
    }
    if (path == "/raft/append" || path == "/raft/snapshot")
        && !app.phase().may_replicate()
        && !app.cfg.bugs.wiped_node_votes()
    {
        let refused = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "not accepting log entries: node awaits re-admission",
        );
        return sign(&app, &mac, refused).await;
    }
    if from.is_some_and(|f| app.peers.faults().is_blocked(f)) {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "link cut by fault injection",
        );
    }
    // An authenticated call from `sender` shows it reaches us: a follower, which calls no one
    // in steady state, learns its peers are back from the leader's appends.
    app.peers.heard_from(sender);
    let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
    sign(&app, &mac, resp).await
}

/// Voters and learners of the membership this node knows (its own, or a newer one a member
/// vouched for); `None` before it knows any.
fn known_members(app: &App) -> KnownMembers {
    let view = app.member_vouch.newest(MembershipView::of(app));
    if view.members.is_empty() {
        KnownMembers::None
    } else {
        KnownMembers::Members(view.members)
    }
}

/// Adds the reply MAC: proof to the caller that this answer comes from a holder of the secret.
async fn sign(app: &App, request_mac: &str, resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, PEER_REPLY_SIGN_BYTES_MAX).await else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "reply too large to sign");
    };
    let mac = app
        .peers
        .identity()
        .key
        .sign_reply(request_mac, parts.status.as_u16(), &bytes);
    if let Ok(value) = HeaderValue::from_str(&mac) {
        parts.headers.insert(REPLY_AUTH_HEADER, value);
    }
    Response::from_parts(parts, Body::from(bytes))
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
    match decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(&body) {
        Ok(req) => {
            // New entries on a nearly full disk are refused (the leader retries with backoff
            // and logs why once); heartbeats still pass, so this node keeps its leader.
            if !req.entries.is_empty() {
                if let Err(e) = app.disk.check() {
                    return reply::<openraft::raft::AppendEntriesResponse<TypeConfig>, _>(Err(e));
                }
            }
            let result = app.raft.append_entries(req).await;
            // Accepted from the current leader (a stale one gets `HigherVote`).
            if matches!(
                result,
                Ok(ref r) if !matches!(r, openraft::raft::AppendEntriesResponse::HigherVote(_))
            ) {
                app.note_leader_contact();
            }
            reply(result)
        }
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

/// The refusal a node that may not vote gives `/raft/vote` and `/raft/pre-vote`: an empty
/// node's vote (or pre-vote grant) could elect a leader that lacks committed entries.
fn refuse_unless_voter(app: &App, what: &str) -> Option<Response> {
    if app.phase().may_vote() || app.cfg.bugs.wiped_node_votes() {
        return None;
    }
    tracing::warn!(phase = ?app.phase(), "{what} refused: this node has not been (re)admitted");
    Some(
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not voting: node awaits (re)admission",
        )
            .into_response(),
    )
}

async fn vote(State(app): State<Arc<App>>, body: Bytes) -> Response {
    if let Some(refused) = refuse_unless_voter(&app, "vote request") {
        return refused;
    }
    match decode(&body) {
        Ok(req) => reply(app.raft.vote(req).await),
        Err(r) => *r,
    }
}

/// A PreVote request: answered by the same rules as a vote, persisting nothing, and refused
/// by a node that may not vote, as a vote is.
async fn pre_vote(State(app): State<Arc<App>>, body: Bytes) -> Response {
    if let Some(refused) = refuse_unless_voter(&app, "pre-vote request") {
        return refused;
    }
    match decode(&body) {
        Ok(req) => reply(app.raft.pre_vote(req).await),
        Err(r) => *r,
    }
}

async fn snapshot(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let (vote, meta, data): SnapshotRequest = match decode(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    // Damaged on the way: refused here, so the leader sends it again. Handed to openraft, a
    // snapshot that fails to install stops this node's Raft.
    if let Err(e) = turnstile_raft::snapshot_files::SnapshotFile::verify(&data) {
        return reply::<(), String>(Err(format!("snapshot refused: {e}")));
    }
    let snapshot = Snapshot {
        meta,
        snapshot: Cursor::new(data),
    };
    let result = app.raft.install_full_snapshot(vote, snapshot).await;
    // Accepted from the current leader, like an append (see `append`).
    if matches!(result, Ok(ref r) if r.vote == vote) {
        app.note_leader_contact();
    }
    reply(result)
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

async fn identity(State(app): State<Arc<App>>) -> Response {
    reply::<_, String>(Ok(PeerStatus {
        node_id: app.node_id(),
        cluster_id: app.peers.identity().cluster_id(),
        phase: app.phase(),
    }))
}

/// This node's own membership, for a member that is behind (`crate::tls::member_vouch`).
async fn membership(State(app): State<Arc<App>>) -> Response {
    reply::<_, String>(Ok(MembershipView::of(&app)))
}
