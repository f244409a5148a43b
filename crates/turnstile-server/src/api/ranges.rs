//! `GET /v1/kv`, `GET /v1/locks`, `GET /v1/elections`, `GET /v1/leases`: paged, linearizable range reads
//! (`crate::ranges`). Each takes exactly its own query parameters; an unknown one, a bad
//! `limit` or a prefix no name could have is `400 bad_request`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use turnstile_core::limits;
use utoipa::IntoParams;

use crate::api::ops::unexpected_answer;
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::election_views::ElectionView;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::ranges::{LeaseItem, Page, Range, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX};
use crate::views::{KeyView, LockView};

/// `?prefix=&after=&limit=` of `GET /v1/kv`, `GET /v1/locks` and `GET /v1/elections`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NamesQuery {
    /// Only names starting with this (empty or absent: every name).
    prefix: Option<String>,
    /// Start strictly after this name: the previous page's last item.
    after: Option<String>,
    /// Items per page (default `LIST_LIMIT_DEFAULT`).
    limit: Option<usize>,
}

/// `?after=&limit=` of `GET /v1/leases`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LeasesQuery {
    /// Start strictly after this lease id: the previous page's last item.
    after: Option<u64>,
    /// Items per page (default `LIST_LIMIT_DEFAULT`).
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

/// Parses `?prefix=&after=&limit=` into a range over names that `check` accepts, reads it
/// with `query`, and unwraps the page `answer` expects.
async fn names_page<T>(
    app: &App,
    caller: &Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
    check: fn(&str) -> Result<(), ApiError>,
    read: fn(Range<String>) -> ReadQuery,
    answer: fn(ReadAnswer) -> Result<Page<T>, Box<ReadAnswer>>,
) -> Result<Json<Page<T>>, ApiError> {
    let q = parsed(query)?;
    let range = Range {
        prefix: prefix("prefix", q.prefix, check)?,
        after: q.after.map(|a| check(&a).map(|()| a)).transpose()?,
        limit: limit(q.limit)?,
    };
    answer(app.read(caller, read(range)).await?)
        .map(Json)
        .map_err(|other| unexpected_answer(&other))
}

/// A page of keys under a prefix, in key order, with their values.
#[utoipa::path(get, path = "/v1/kv", tag = "kv", params(NamesQuery),
    responses((status = 200, description = "One page of keys", body = Page<KeyView>)))]
pub async fn keys(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
) -> Result<Json<Page<KeyView>>, ApiError> {
    names_page(
        &app,
        &caller,
        query,
        validate::key,
        ReadQuery::Keys,
        |a| match a {
            ReadAnswer::Keys(page) => Ok(page),
            other => Err(Box::new(other)),
        },
    )
    .await
}

/// A page of locks under a prefix, in name order, with their holders and waiters.
#[utoipa::path(get, path = "/v1/locks", tag = "locks", params(NamesQuery),
    responses((status = 200, description = "One page of locks", body = Page<LockView>)))]
pub async fn locks(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
) -> Result<Json<Page<LockView>>, ApiError> {
    names_page(
        &app,
        &caller,
        query,
        lock_name_part,
        ReadQuery::Locks,
        |a| match a {
            ReadAnswer::Locks(page) => Ok(page),
            other => Err(Box::new(other)),
        },
    )
    .await
}

/// A page of elections (names with at least one candidate) under a prefix, in name order,
/// with their leaders.
#[utoipa::path(get, path = "/v1/elections", tag = "elections", params(NamesQuery),
    responses((status = 200, description = "One page of elections", body = Page<ElectionView>)))]
pub async fn elections(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<NamesQuery>, QueryRejection>,
) -> Result<Json<Page<ElectionView>>, ApiError> {
    names_page(
        &app,
        &caller,
        query,
        lock_name_part,
        ReadQuery::Elections,
        |a| match a {
            ReadAnswer::Elections(page) => Ok(page),
            other => Err(Box::new(other)),
        },
    )
    .await
}

/// The caller's own leases (root: every lease), in id order.
#[utoipa::path(get, path = "/v1/leases", tag = "leases", params(LeasesQuery),
    responses((status = 200, description = "One page of leases", body = Page<LeaseItem>)))]
pub async fn leases(
    State(app): State<Arc<App>>,
    caller: Caller,
    query: Result<Query<LeasesQuery>, QueryRejection>,
) -> Result<Json<Page<LeaseItem>>, ApiError> {
    let q = parsed(query)?;
    let range = Range {
        prefix: String::new(),
        after: q.after,
        limit: limit(q.limit)?,
    };
    match app.read(&caller, ReadQuery::Leases(range)).await? {
        ReadAnswer::Leases(page) => Ok(Json(page)),
        other => Err(unexpected_answer(&other)),
    }
}
