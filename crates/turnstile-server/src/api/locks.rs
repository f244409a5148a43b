//! `/v1/locks`: try-acquire (returns token, term and cluster id), release by `{token,
//! lease_id}`, a linearizable get, and the fence check diagnostic.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use turnstile_core::{Command, Outcome};

use crate::api::extract::{Body, Param};
use crate::api::ops::unexpected;
use crate::api::validate;
use crate::app::App;
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

/// Refuses what this version cannot do yet, instead of silently doing something else.
fn check_supported(b: &AcquireBody) -> Result<(), ApiError> {
    match b.mode.as_deref() {
        None | Some("exclusive") => {}
        Some("shared") => {
            return Err(ApiError::Unsupported(
                "shared mode is not supported yet".into(),
            ))
        }
        Some(m) => {
            return Err(ApiError::BadRequest(format!(
                "mode must be exclusive or shared, not {m:?}"
            )))
        }
    }
    match b.permits {
        None | Some(1) => {}
        Some(0) => return Err(ApiError::BadRequest("permits must be positive".into())),
        Some(_) => {
            return Err(ApiError::Unsupported(
                "semaphores (permits > 1) are not supported yet".into(),
            ))
        }
    }
    if b.wait_ms > 0 {
        return Err(ApiError::Unsupported(
            "blocking acquire (wait_ms > 0) is not supported yet; use wait_ms 0".into(),
        ));
    }
    Ok(())
}

pub async fn acquire(
    State(app): State<Arc<App>>,
    Param(name): Param<String>,
    Body(b): Body<AcquireBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::request_id(b.request_id.as_deref())?;
    check_supported(&b)?;
    let w = app
        .write(
            b.request_id,
            Command::LockAcquire {
                name,
                lease_id: b.lease_id,
            },
        )
        .await?;
    match w.outcome {
        Outcome::LockGranted {
            name,
            token,
            term,
            lease_id,
        } => Ok(Json(json!({
            "name": name, "token": token, "term": term, "cluster_id": w.cluster_id,
            "lease_id": lease_id, "revision": w.revision,
        }))),
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
    Param(name): Param<String>,
    Body(b): Body<ReleaseBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    validate::positive_id("lease_id", b.lease_id)?;
    validate::positive_id("token", b.token)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(
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
    Param(name): Param<String>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&name)?;
    match app.read(ReadQuery::Lock { name }).await? {
        ReadAnswer::Lock(view) => Ok(Json(serde_json::to_value(view).unwrap_or_default())),
        _ => Err(ApiError::NotFound("unexpected read answer".into())),
    }
}

pub async fn acquire_many() -> ApiError {
    ApiError::Unsupported("acquire-many is not supported yet".into())
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
    Body(b): Body<FenceCheckBody>,
) -> Result<Json<Value>, ApiError> {
    validate::lock_name(&b.name)?;
    match app
        .read(ReadQuery::Fence {
            name: b.name,
            token: b.token,
        })
        .await?
    {
        ReadAnswer::Fence(view) => {
            let same_cluster = view.cluster_id.as_deref() == Some(b.cluster_id.as_str());
            Ok(Json(
                json!({"current": view.current && same_cluster, "current_token": view.current_token}),
            ))
        }
        _ => Err(ApiError::NotFound("unexpected read answer".into())),
    }
}
