//! `/v1/members`: list, add as learner (waits for catch-up), promote to voter (admits the
//! node so it may vote), remove. Changes run on the leader.

use openraft::async_runtime::WatchReceiver;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::api::answers::{MemberItem, MembersAnswer};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{MemberOp, MEMBER_PATH};
use turnstile_raft::types::RaftMetrics;

/// Every member of the current membership as `{id, addr, voter, reachable}`. `reachable`
/// (acknowledged the leader within a few heartbeats) is known only on the leader; elsewhere
/// it is `null`.
pub fn members(app: &App, m: &RaftMetrics) -> Vec<MemberItem> {
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let reachable = app.reachable_nodes();
    // The leader's own log is on it by definition; the rest comes from its replication view.
    let matched = |id: u64| match &m.replication {
        Some(_) if id == app.node_id() => m.last_log_index,
        Some(r) => r.get(&id).and_then(|l| l.as_ref()).map(|l| l.index),
        None => None,
    };
    membership
        .nodes()
        .map(|(id, node)| MemberItem {
            id: *id,
            addr: node.addr.clone(),
            voter: voters.contains(id),
            reachable: reachable.as_ref().map(|r| r.contains(id)),
            matched_index: matched(*id),
        })
        .collect()
}

/// The membership (root only).
#[utoipa::path(get, path = "/v1/members", tag = "members",
    responses((status = 200, description = "The members", body = MembersAnswer)))]
pub async fn list(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<MembersAnswer>, ApiError> {
    caller.require_root("membership")?;
    Ok(listing(&app))
}

fn listing(app: &App) -> Json<MembersAnswer> {
    let m = app.raft.metrics().borrow_watched().clone();
    Json(MembersAnswer {
        leader_id: m.current_leader,
        members: members(app, &m),
    })
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddBody {
    id: u64,
    addr: String,
}

async fn run(app: Arc<App>, op: MemberOp) -> Result<Json<MembersAnswer>, ApiError> {
    // Adding a learner waits for it to catch up; give it more than a client write.
    let timeout_ms = app.cfg.request_timeout_ms * 6;
    let result: Result<(), String> = app
        .on_leader(MEMBER_PATH, &op, timeout_ms, || {
            app.member_bounded(&op, timeout_ms)
        })
        .await?;
    result.map_err(ApiError::MemberRefused)?;
    Ok(listing(&app))
}

/// Adds a node as a learner; answers once it has caught up (root only).
#[utoipa::path(post, path = "/v1/members", tag = "members", request_body = AddBody,
    responses((status = 200, description = "The membership after the change", body = MembersAnswer),
        (status = 409, description = "`membership_refused`, with the reason", body = ErrorAnswer)))]
pub async fn add(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<AddBody>,
) -> Result<Json<MembersAnswer>, ApiError> {
    caller.require_root("membership")?;
    validate::positive_id("id", b.id)?;
    let addr: std::net::SocketAddr = b
        .addr
        .parse()
        .map_err(|_| ApiError::BadRequest("addr must be ip:port".into()))?;
    run(
        app,
        MemberOp::AddLearner {
            node_id: b.id,
            addr: addr.to_string(),
        },
    )
    .await
}

/// Promotes a learner to voter (root only).
#[utoipa::path(post, path = "/v1/members/{id}/promote", tag = "members",
    params(("id" = u64, Path, description = "The node id")),
    responses((status = 200, description = "The membership after the change", body = MembersAnswer),
        (status = 409, description = "`membership_refused`, with the reason", body = ErrorAnswer)))]
pub async fn promote(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<MembersAnswer>, ApiError> {
    caller.require_root("membership")?;
    validate::positive_id("id", id)?;
    run(app, MemberOp::Promote { node_id: id }).await
}

/// Removes a node; refused if the voters left would have no reachable quorum (root only).
#[utoipa::path(delete, path = "/v1/members/{id}", tag = "members",
    params(("id" = u64, Path, description = "The node id")),
    responses((status = 200, description = "The membership after the change", body = MembersAnswer),
        (status = 409, description = "`membership_refused`, with the reason", body = ErrorAnswer)))]
pub async fn remove(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<MembersAnswer>, ApiError> {
    caller.require_root("membership")?;
    validate::positive_id("id", id)?;
    run(app, MemberOp::Remove { node_id: id }).await
}
