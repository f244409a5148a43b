//! `/v1/locks`: acquire (try or wait; exclusive, shared or semaphore), acquire-many, release
//! by `{token, lease_id}`, a linearizable get, and the fence check diagnostic.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::{limits, Command, LockMode, Outcome};
use utoipa::ToSchema;

use crate::api::acquire::{self, AcquireArgs, WAIT_MS_MAX};
use crate::api::answers::{AcquireAnswer, AcquireManyAnswer, FenceCheckAnswer, RevisionAnswer};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::views::LockView;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// The caller's lease that will hold the lock.
    lease_id: u64,
    /// How long to wait in the queue; 0 (the default) answers `409 lock_held` at once.
    #[serde(default)]
    wait_ms: u64,
    /// Makes a retry return the first outcome (or re-attach to the queued wait).
    request_id: Option<String>,
    /// `exclusive` (the default) or `shared`.
    #[schema(pattern = "^(exclusive|shared)$")]
    mode: Option<String>,
    /// Makes the lock a semaphore of this many permits (fixed by its first acquire).
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

/// Acquires a lock (exclusive, shared, or a semaphore permit), waiting up to `wait_ms`.
#[utoipa::path(post, path = "/v1/locks/{name}/acquire", tag = "locks",
    params(("name" = String, Path, description = "The lock name")),
    request_body = AcquireBody,
    responses((status = 200, description = "Granted", body = AcquireAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`lock_held` (`wait_ms` = 0), `wait_timeout`, `mode_mismatch`, \
            `deadlock_victim`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn acquire(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<AcquireBody>,
) -> Result<Json<AcquireAnswer>, ApiError> {
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
        } => Ok(Json(AcquireAnswer {
            name: names.into_iter().next().unwrap_or_default(),
            token,
            term,
            cluster_id: w.cluster_id,
            lease_id,
            mode: mode.as_str().into(),
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireManyBody {
    /// The locks to take together, all or none.
    names: Vec<String>,
    lease_id: u64,
    #[serde(default)]
    wait_ms: u64,
    request_id: Option<String>,
}

/// Grants every named lock in one entry (all sharing one token), or none.
#[utoipa::path(post, path = "/v1/locks/acquire-many", tag = "locks",
    request_body = AcquireManyBody,
    responses((status = 200, description = "Every lock granted", body = AcquireManyAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`lock_held`, `wait_timeout`, `mode_mismatch`, \
            `deadlock_victim`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn acquire_many(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<AcquireManyBody>,
) -> Result<Json<AcquireManyAnswer>, ApiError> {
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
        } => Ok(Json(AcquireManyAnswer {
            tokens: names.into_iter().map(|n| (n, token)).collect(),
            token,
            term,
            cluster_id: w.cluster_id,
            lease_id,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    token: u64,
    lease_id: u64,
    request_id: Option<String>,
}

/// Releases the grant `{token, lease_id}`.
#[utoipa::path(post, path = "/v1/locks/{name}/release", tag = "locks",
    params(("name" = String, Path, description = "The lock name")),
    request_body = ReleaseBody,
    responses((status = 200, description = "Released", body = RevisionAnswer),
        (status = 404, description = "`lease_not_found`", body = ErrorAnswer),
        (status = 409, description = "`not_holder`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn release(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<ReleaseBody>,
) -> Result<Json<RevisionAnswer>, ApiError> {
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
    Ok(Json(RevisionAnswer {
        revision: w.revision,
    }))
}

/// A linearizable read of a lock's holders and waiters (empty if idle).
#[utoipa::path(get, path = "/v1/locks/{name}", tag = "locks",
    params(("name" = String, Path, description = "The lock name")),
    responses((status = 200, description = "The lock", body = LockView)))]
pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
) -> Result<Json<LockView>, ApiError> {
    validate::lock_name(&name)?;
    match app.read(&caller, ReadQuery::Lock { name }).await? {
        ReadAnswer::Lock(view) => Ok(Json(view)),
        other => Err(unexpected_answer(&other)),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FenceCheckBody {
    name: String,
    token: u64,
    cluster_id: String,
}

/// A diagnostic only: check-then-act has exactly the gap fencing closes. Real fencing is a
/// fenced write here, or a resource that enforces tokens itself.
#[utoipa::path(post, path = "/v1/fence/check", tag = "locks",
    request_body = FenceCheckBody,
    responses((status = 200, description = "Whether the token is current", body = FenceCheckAnswer)))]
pub async fn fence_check(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<FenceCheckBody>,
) -> Result<Json<FenceCheckAnswer>, ApiError> {
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
            Ok(Json(FenceCheckAnswer {
                current: view.current && same_cluster,
                current_token: view.current_token,
            }))
        }
        other => Err(unexpected_answer(&other)),
    }
}
