//! `/v1/elections`: campaign (waits FIFO like a lock acquire, through `api::acquire`),
//! proclaim, resign, and a linearizable read of the leader. An election is the lock of its
//! name plus a published value (`turnstile_core::elections`), so its leader's token fences
//! writes like any lock token.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::{limits, Command, Outcome};
use utoipa::ToSchema;

use crate::api::acquire::{self, WAIT_MS_MAX};
use crate::api::answers::{CampaignAnswer, RevisionAnswer};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::election_views::ElectionView;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CampaignBody {
    lease_id: u64,
    value: String,
    #[serde(default)]
    wait_ms: u64,
    request_id: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProclaimBody {
    lease_id: u64,
    token: u64,
    value: String,
    request_id: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResignBody {
    lease_id: u64,
    token: u64,
    request_id: Option<String>,
}

fn election_name(name: &str) -> Result<(), ApiError> {
    validate::name("election name", name, limits::ELECTION_NAME_BYTES_MAX)
}

fn election_value(value: &str) -> Result<(), ApiError> {
    if value.len() > limits::ELECTION_VALUE_BYTES_MAX {
        return Err(ApiError::BadRequest(format!(
            "value must be at most {} bytes",
            limits::ELECTION_VALUE_BYTES_MAX
        )));
    }
    Ok(())
}

/// Waits up to `wait_ms` to lead; answers once leader, or `409 wait_timeout`.
#[utoipa::path(post, path = "/v1/elections/{name}/campaign", tag = "elections",
    params(("name" = String, Path, description = "The election name")),
    request_body = CampaignBody,
    responses((status = 200, description = "The caller leads", body = CampaignAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`lock_held` (`wait_ms` = 0), `wait_timeout`, `mode_mismatch`, \
            `deadlock_victim`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn campaign(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<CampaignBody>,
) -> Result<Json<CampaignAnswer>, ApiError> {
    election_name(&name)?;
    election_value(&b.value)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::request_id(b.request_id.as_deref())?;
    if b.wait_ms > WAIT_MS_MAX {
        return Err(ApiError::BadRequest(format!(
            "wait_ms must be at most {WAIT_MS_MAX}"
        )));
    }
    let command = Command::Campaign {
        name: name.clone(),
        lease_id: b.lease_id,
        value: b.value.clone(),
        wait_ms: b.wait_ms,
    };
    let w = acquire::run_queued(app, caller, b.request_id, b.wait_ms, command).await?;
    match w.outcome {
        Outcome::Granted {
            token,
            term,
            lease_id,
            ..
        } => Ok(Json(CampaignAnswer {
            name,
            lease_id,
            value: b.value,
            token,
            term,
            cluster_id: w.cluster_id,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// The leader `{lease_id, token}` publishes a new value; anyone else gets `409 not_leader`.
#[utoipa::path(post, path = "/v1/elections/{name}/proclaim", tag = "elections",
    params(("name" = String, Path, description = "The election name")),
    request_body = ProclaimBody,
    responses((status = 200, description = "Published", body = RevisionAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`not_leader`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn proclaim(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<ProclaimBody>,
) -> Result<Json<RevisionAnswer>, ApiError> {
    election_name(&name)?;
    election_value(&b.value)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::positive_id("token", b.token)?;
    validate::request_id(b.request_id.as_deref())?;
    let command = Command::Proclaim {
        name,
        lease_id: b.lease_id,
        token: b.token,
        value: b.value,
    };
    let w = app.write(&caller, b.request_id, command).await?;
    Ok(Json(RevisionAnswer {
        revision: w.revision,
    }))
}

/// The leader `{lease_id, token}` steps down; the next campaigner leads from this entry.
#[utoipa::path(post, path = "/v1/elections/{name}/resign", tag = "elections",
    params(("name" = String, Path, description = "The election name")),
    request_body = ResignBody,
    responses((status = 200, description = "Resigned", body = RevisionAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`not_leader`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn resign(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<ResignBody>,
) -> Result<Json<RevisionAnswer>, ApiError> {
    election_name(&name)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::positive_id("token", b.token)?;
    validate::request_id(b.request_id.as_deref())?;
    let command = Command::Resign {
        name,
        lease_id: b.lease_id,
        token: b.token,
    };
    let w = app.write(&caller, b.request_id, command).await?;
    Ok(Json(RevisionAnswer {
        revision: w.revision,
    }))
}

/// A linearizable read: `{name, leader: {lease_id, value, token, since_ms} | null}`.
#[utoipa::path(get, path = "/v1/elections/{name}", tag = "elections",
    params(("name" = String, Path, description = "The election name")),
    responses((status = 200, description = "The election", body = ElectionView)))]
pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
) -> Result<Json<ElectionView>, ApiError> {
    election_name(&name)?;
    match app.read(&caller, ReadQuery::Election { name }).await? {
        ReadAnswer::Election(view) => Ok(Json(view)),
        other => Err(unexpected_answer(&other)),
    }
}
