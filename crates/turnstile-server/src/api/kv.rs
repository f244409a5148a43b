//! `/v1/kv/{key}`: linearizable get, put and delete with `if` conditions and `fence` guards.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::{Command, Condition, Fence, Outcome};
use utoipa::ToSchema;

use crate::api::answers::{KvDeleteAnswer, RevisionAnswer};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::unexpected_answer;
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::views::KeyView;

/// `if`: exactly one of `{absent: true}`, `{mod_revision}`, `{value}`.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IfBody {
    absent: Option<bool>,
    mod_revision: Option<u64>,
    value: Option<String>,
}

/// `fence`: the write applies only while `token` is the lock's current exclusive grant.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FenceBody {
    lock: String,
    token: u64,
}

fn condition(c: Option<IfBody>) -> Result<Option<Condition>, ApiError> {
    let Some(c) = c else { return Ok(None) };
    match (c.absent, c.mod_revision, c.value) {
        (Some(true), None, None) => Ok(Some(Condition::Absent)),
        (None, Some(r), None) => Ok(Some(Condition::ModRevision(r))),
        (None, None, Some(v)) => {
            validate::value(&v)?;
            Ok(Some(Condition::Value(v)))
        }
        _ => Err(ApiError::BadRequest(
            "`if` must be exactly one of {absent: true}, {mod_revision: n}, {value: s}".into(),
        )),
    }
}

fn fence(f: Option<FenceBody>) -> Result<Option<Fence>, ApiError> {
    let Some(f) = f else { return Ok(None) };
    validate::lock_name(&f.lock)?;
    validate::positive_id("fence token", f.token)?;
    Ok(Some(Fence {
        lock: f.lock,
        token: f.token,
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    value: String,
    lease_id: Option<u64>,
    #[serde(rename = "if")]
    condition: Option<IfBody>,
    fence: Option<FenceBody>,
    request_id: Option<String>,
}

/// Writes a key, optionally bound to a lease, conditional (`if`) or fenced (`fence`).
#[utoipa::path(put, path = "/v1/kv/{key}", tag = "kv",
    params(("key" = String, Path, description = "The key (may contain `/`)")),
    request_body = PutBody,
    responses((status = 200, description = "Written", body = RevisionAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`fenced`, `request_id_reused`", body = ErrorAnswer),
        (status = 412, description = "`compare_failed`", body = ErrorAnswer)))]
pub async fn put(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(key): Param<String>,
    Body(b): Body<PutBody>,
) -> Result<Json<RevisionAnswer>, ApiError> {
    validate::key(&key)?;
    validate::value(&b.value)?;
    validate::request_id(b.request_id.as_deref())?;
    if let Some(id) = b.lease_id {
        validate::positive_id("lease_id", id)?;
    }
    let command = Command::KvPut {
        key,
        value: b.value,
        lease_id: b.lease_id,
        condition: condition(b.condition)?,
        fence: fence(b.fence)?,
    };
    let w = app.write(&caller, b.request_id, command).await?;
    Ok(Json(RevisionAnswer {
        revision: w.revision,
    }))
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteBody {
    #[serde(rename = "if")]
    condition: Option<IfBody>,
    fence: Option<FenceBody>,
    request_id: Option<String>,
}

/// Deletes a key, optionally conditional (`if`) or fenced (`fence`).
#[utoipa::path(delete, path = "/v1/kv/{key}", tag = "kv",
    params(("key" = String, Path, description = "The key (may contain `/`)")),
    request_body(content = Option<DeleteBody>, description = "Optional; an empty body is `{}`"),
    responses((status = 200, description = "Deleted (or there was no such key)", body = KvDeleteAnswer),
        (status = 409, description = "`fenced`, `request_id_reused`", body = ErrorAnswer),
        (status = 412, description = "`compare_failed`", body = ErrorAnswer)))]
pub async fn delete(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(key): Param<String>,
    Body(b): Body<DeleteBody>,
) -> Result<Json<KvDeleteAnswer>, ApiError> {
    validate::key(&key)?;
    validate::request_id(b.request_id.as_deref())?;
    let command = Command::KvDelete {
        key,
        condition: condition(b.condition)?,
        fence: fence(b.fence)?,
    };
    let w = app.write(&caller, b.request_id, command).await?;
    let deleted = matches!(w.outcome, Outcome::KvDeleted { existed: true, .. });
    Ok(Json(KvDeleteAnswer {
        revision: w.revision,
        deleted,
    }))
}

/// A linearizable read of one key.
#[utoipa::path(get, path = "/v1/kv/{key}", tag = "kv",
    params(("key" = String, Path, description = "The key (may contain `/`)")),
    responses((status = 200, description = "The key", body = KeyView),
        (status = 404, description = "`key_not_found`", body = ErrorAnswer)))]
pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(key): Param<String>,
) -> Result<Json<KeyView>, ApiError> {
    validate::key(&key)?;
    match app
        .read(&caller, ReadQuery::Key { key: key.clone() })
        .await?
    {
        ReadAnswer::Key(Some(view)) => Ok(Json(view)),
        ReadAnswer::Key(None) => Err(ApiError::KeyNotFound {
            what: format!("key {key:?}"),
        }),
        other => Err(unexpected_answer(&other)),
    }
}
