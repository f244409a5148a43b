//! `GET /v1/kv`, `GET /v1/locks`, `GET /v1/leases`: paged, linearizable range reads
//! (`crate::ranges`). Each takes exactly its own query parameters; an unknown one, a bad
//! `limit` or a prefix no name could have is `400 bad_request`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use turnstile_core::limits;

use crate::api::ops::unexpected_answer;
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::ranges::{Range, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX};

/// `?prefix=&after=&limit=` of `GET /v1/kv` and `GET /v1/locks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamesQuery {
    prefix: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// `?after=&limit=` of `GET /v1/leases`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasesQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

fn parsed<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| ApiError::BadRequest(format!("invalid query: {}", e.body_text())))
}

fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if !(1..=LIST_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be within 1..={LIST_LIMIT_MAX}"
        )));
    }
    Ok(limit)
}

/// A prefix may be empty (everything); otherwise it must be the start of a valid name.
fn prefix(
    what: &str,
    prefix: Option<String>,
    check: fn(&str) -> Result<(), ApiError>,
) -> Result<String, ApiError> {
    let prefix = prefix.unwrap_or_default();
    if !prefix.is_empty() {
        check(&prefix).map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))?;
    }
    Ok(prefix)
}

fn lock_name_part(s: &str) -> Result<(), ApiError> {
    validate::name("lock name", s, limits::LOCK_NAME_BYTES_MAX)
}

pub async fn keys(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = parsed(query)?;
    let range = Range {
        prefix: prefix("prefix", q.prefix, validate::key)?,
        after: q.after.map(|a| validate::key(&a).map(|()| a)).transpose()?,
        limit: limit(q.limit)?,
    };
    match app.read(&caller, ReadQuery::Keys(range)).await? {
        ReadAnswer::Keys(page) => Ok(Json(serde_json::to_value(page).unwrap_or_default())),
        other => Err(unexpected_answer(&other)),
    }
}

pub async fn locks(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = parsed(query)?;
    let range = Range {
        prefix: prefix("prefix", q.prefix, lock_name_part)?,
        after: q
            .after
            .map(|a| lock_name_part(&a).map(|()| a))
            .transpose()?,
        limit: limit(q.limit)?,
    };
    match app.read(&caller, ReadQuery::Locks(range)).await? {
        ReadAnswer::Locks(page) => Ok(Json(serde_json::to_value(page).unwrap_or_default())),
        other => Err(unexpected_answer(&other)),
    }
}

pub async fn leases(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<LeasesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = parsed(query)?;
    let range = Range {
        prefix: String::new(),
        after: q.after,
        limit: limit(q.limit)?,
    };
    match app.read(&caller, ReadQuery::Leases(range)).await? {
        ReadAnswer::Leases(page) => Ok(Json(serde_json::to_value(page).unwrap_or_default())),
        other => Err(unexpected_answer(&other)),
    }
}
