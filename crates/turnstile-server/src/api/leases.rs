//! `/v1/leases`: grant, keepalive (a replicated entry), revoke, and a linearizable get.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::{Command, Outcome};
use utoipa::ToSchema;

use crate::api::answers::{GrantAnswer, KeepaliveAnswer, RevisionAnswer};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::views::LeaseView;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    /// Time to live, renewed by each keepalive.
    ttl_ms: u64,
    /// Makes a retry return the first outcome instead of granting again.
    request_id: Option<String>,
}

/// Grants a lease owned by the caller.
#[utoipa::path(post, path = "/v1/leases", tag = "leases", request_body = GrantBody,
    responses((status = 200, description = "The lease", body = GrantAnswer)))]
pub async fn grant(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<GrantBody>,
) -> Result<Json<GrantAnswer>, ApiError> {
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
        Outcome::LeaseGranted { lease_id, ttl_ms } => Ok(Json(GrantAnswer {
            lease_id,
            ttl_ms,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// Renews a lease for its full TTL (a replicated entry).
#[utoipa::path(post, path = "/v1/leases/{id}/keepalive", tag = "leases",
    params(("id" = u64, Path, description = "The lease id")),
    responses((status = 200, description = "The renewed lease", body = KeepaliveAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer)))]
pub async fn keepalive(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<KeepaliveAnswer>, ApiError> {
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
            Some(remaining_ms) => Ok(Json(KeepaliveAnswer {
                lease_id: id,
                ttl_ms: r.ttl_ms,
                remaining_ms,
                revision: w.revision,
            })),
            None => Err(turnstile_core::ApplyError::LeaseNotFound { lease_id: id }.into()),
        },
        _ => Err(unexpected(&w.outcome)),
    }
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    request_id: Option<String>,
}

/// Revokes a lease: its locks are released and its keys deleted.
#[utoipa::path(delete, path = "/v1/leases/{id}", tag = "leases",
    params(("id" = u64, Path, description = "The lease id")),
    request_body(content = Option<RevokeBody>, description = "Optional; an empty body is `{}`"),
    responses((status = 200, description = "Revoked", body = RevisionAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer)))]
pub async fn revoke(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
    Body(b): Body<RevokeBody>,
) -> Result<Json<RevisionAnswer>, ApiError> {
    validate::positive_id("lease id", id)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(&caller, b.request_id, Command::LeaseRevoke { lease_id: id })
        .await?;
    Ok(Json(RevisionAnswer {
        revision: w.revision,
    }))
}

/// A linearizable read of one of the caller's leases.
#[utoipa::path(get, path = "/v1/leases/{id}", tag = "leases",
    params(("id" = u64, Path, description = "The lease id")),
    responses((status = 200, description = "The lease", body = LeaseView),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer)))]
pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param<u64>,
) -> Result<Json<LeaseView>, ApiError> {
    validate::positive_id("lease id", id)?;
    match app.read(&caller, ReadQuery::Lease { lease_id: id }).await? {
        ReadAnswer::Lease(Some(view)) => Ok(Json(view)),
        ReadAnswer::Lease(None) => {
            Err(turnstile_core::ApplyError::LeaseNotFound { lease_id: id }.into())
        }
        other => Err(unexpected_answer(&other)),
    }
}
