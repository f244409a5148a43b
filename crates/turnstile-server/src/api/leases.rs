//! `/v1/leases`: grant, keepalive (a replicated entry), revoke, and a linearizable get.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use turnstile_core::{Command, Outcome};

use crate::api::extract::{Body, Param};
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    ttl_ms: u64,
    request_id: Option<String>,
}

pub async fn grant(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<GrantBody>,
) -> Result<Json<Value>, ApiError> {
    validate::ttl_ms(b.ttl_ms)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(
            &caller,
            b.request_id,
            Command::LeaseGrant { ttl_ms: b.ttl_ms },
        )
        .await?;
    match w.outcome {
        Outcome::LeaseGranted { lease_id, ttl_ms } => Ok(Json(
            json!({"lease_id": lease_id, "ttl_ms": ttl_ms, "revision": w.revision}),
        )),
        other => Err(unexpected(&other)),
    }
}

pub async fn keepalive(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<Value>, ApiError> {
    validate::positive_id("lease id", id)?;
    let w = app
        .write(
            &caller,
            None,
            Command::LeaseKeepalive {
                lease_ids: vec![id],
            },
        )
        .await?;
    let Outcome::LeasesKept { results } = &w.outcome else {
        return Err(unexpected(&w.outcome));
    };
    match results.first() {
        Some(r) if r.lease_id == id => match r.remaining_ms {
            Some(remaining_ms) => Ok(Json(
                json!({"lease_id": id, "ttl_ms": r.ttl_ms, "remaining_ms": remaining_ms, "revision": w.revision}),
            )),
            None => Err(turnstile_core::ApplyError::LeaseNotFound { lease_id: id }.into()),
        },
        _ => Err(unexpected(&w.outcome)),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    request_id: Option<String>,
}

pub async fn revoke(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
    Body(b): Body<RevokeBody>,
) -> Result<Json<Value>, ApiError> {
    validate::positive_id("lease id", id)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(&caller, b.request_id, Command::LeaseRevoke { lease_id: id })
        .await?;
    Ok(Json(json!({"revision": w.revision})))
}

pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<Value>, ApiError> {
    validate::positive_id("lease id", id)?;
    match app.read(&caller, ReadQuery::Lease { lease_id: id }).await? {
        ReadAnswer::Lease(Some(view)) => Ok(Json(serde_json::to_value(view).unwrap_or_default())),
        ReadAnswer::Lease(None) => {
            Err(turnstile_core::ApplyError::LeaseNotFound { lease_id: id }.into())
        }
        other => Err(unexpected_answer(&other)),
    }
}
