//! `/v1/locks`: acquire (try or wait; exclusive, shared or semaphore), acquire-many, release
//! by `{token, lease_id}`, a linearizable get, and the fence check diagnostic.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use turnstile_core::{limits, Command, LockMode, Outcome};

use crate::api::acquire::{self, AcquireArgs, WAIT_MS_MAX};
use crate::api::extract::{Body, Param};
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    lease_id: u64,
    #[serde(default)]
    wait_ms: u64,
    request_id: Option<String>,
    mode: Option<String>,
    permits: Option<u32>,
}

fn mode(m: Option<&str>) -> Result<LockMode, ApiError> {
    match m {
        None | Some("exclusive") => Ok(LockMode::Exclusive),
        Some("shared") => Ok(LockMode::Shared),
        Some(m) => Err(ApiError::BadRequest(format!(
            "mode must be exclusive or shared, not {m:?}"
        ))),
    }
}

fn check_wait(wait_ms: u64) -> Result<(), ApiError> {
    if wait_ms > WAIT_MS_MAX {
        return Err(ApiError::BadRequest(format!(
            "wait_ms must be at most {WAIT_MS_MAX}"
        )));
    }
    Ok(())
}

pub async fn acquire(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<AcquireBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::request_id(b.request_id.as_deref())?;
    check_wait(b.wait_ms)?;
    if b.permits.is_some_and(|p| p == 0 || p > limits::PERMITS_MAX) {
        return Err(ApiError::BadRequest(format!(
            "permits must be 1..={}",
            limits::PERMITS_MAX
        )));
    }
    let args = AcquireArgs {
        names: vec![name],
        lease_id: b.lease_id,
        mode: mode(b.mode.as_deref())?,
        permits: b.permits,
        wait_ms: b.wait_ms,
        request_id: b.request_id,
    };
    let w = acquire::run(app, caller, args).await?;
    match w.outcome {
        Outcome::Granted {
            names,
            token,
            term,
            lease_id,
            mode,
        } => Ok(Json(json!({
            "name": names.first(), "token": token, "term": term, "cluster_id": w.cluster_id,
            "lease_id": lease_id, "mode": mode.as_str(), "revision": w.revision,
        }))),
        other => Err(unexpected(&other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireManyBody {
    names: Vec<String>,
    lease_id: u64,
    #[serde(default)]
    wait_ms: u64,
    request_id: Option<String>,
}

/// Grants every named lock in one entry (all sharing one token), or none.
pub async fn acquire_many(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<AcquireManyBody>,
) -> Result<Json<Value>, ApiError> {
    if b.names.is_empty() || b.names.len() > limits::LOCKS_PER_ACQUIRE_MAX {
        return Err(ApiError::BadRequest(format!(
            "names must list 1..={} locks",
            limits::LOCKS_PER_ACQUIRE_MAX
        )));
    }
    for n in &b.names {
        validate::lock_name(n)?;
    }
    validate::positive_id("lease_id", b.lease_id)?;
    validate::request_id(b.request_id.as_deref())?;
    check_wait(b.wait_ms)?;
    let args = AcquireArgs {
        names: b.names,
        lease_id: b.lease_id,
        mode: LockMode::Exclusive,
        permits: None,
        wait_ms: b.wait_ms,
        request_id: b.request_id,
    };
    let w = acquire::run(app, caller, args).await?;
    match w.outcome {
        Outcome::Granted {
            names,
            token,
            term,
            lease_id,
            ..
        } => {
            let tokens: serde_json::Map<String, Value> =
                names.into_iter().map(|n| (n, json!(token))).collect();
            Ok(Json(json!({
                "tokens": tokens, "token": token, "term": term, "cluster_id": w.cluster_id,
                "lease_id": lease_id, "revision": w.revision,
            })))
        }
        other => Err(unexpected(&other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    token: u64,
    lease_id: u64,
    request_id: Option<String>,
}

pub async fn release(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<ReleaseBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::positive_id("token", b.token)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(
            &caller,
            b.request_id,
            Command::LockRelease {
                name,
                lease_id: b.lease_id,
                token: b.token,
            },
        )
        .await?;
    Ok(Json(json!({"revision": w.revision})))
}

pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    match app.read(&caller, ReadQuery::Lock { name }).await? {
        ReadAnswer::Lock(view) => Ok(Json(serde_json::to_value(view).unwrap_or_default())),
        other => Err(unexpected_answer(&other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceCheckBody {
    name: String,
    token: u64,
    cluster_id: String,
}

/// A diagnostic only: check-then-act has exactly the gap fencing closes. Real fencing is a
/// fenced write here, or a resource that enforces tokens itself.
pub async fn fence_check(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<FenceCheckBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&b.name)?;
    match app
        .read(
            &caller,
            ReadQuery::Fence {
                name: b.name,
                token: b.token,
            },
        )
        .await?
    {
        ReadAnswer::Fence(view) => {
            let same_cluster = view.cluster_id.as_deref() == Some(b.cluster_id.as_str());
            Ok(Json(
                json!({"current": view.current && same_cluster, "current_token": view.current_token}),
            ))
        }
        other => Err(unexpected_answer(&other)),
    }
}
