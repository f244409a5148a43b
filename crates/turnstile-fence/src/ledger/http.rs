//! The ledger's HTTP API (axum). Handlers only parse, call [`Ledger`], and answer; refusals
//! become responses in [`super::error`].
//!
//! ```text
//! POST /accounts/{name}/add   {amount, fence?: {cluster_id, lock, token}} -> {name, balance}
//! PUT  /accounts/{name}       {balance, fence?}                           -> {name, balance}
//! GET  /accounts/{name}[?cluster_id=&lock=&token=]                        -> {name, balance, fenced}
//! GET  /stats                                                             -> LedgerStats
//! ```
//!
//! `PUT` sets a balance: it is the write half of a client-side read-modify-write, the pattern
//! a paused holder breaks. A fenced ledger refuses writes without `fence`; a `GET` with the
//! three query parameters is a fenced read (it records the token), without them a plain read.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Ledger, LedgerError, LedgerStats};
use crate::limits::LEDGER_BODY_BYTES_MAX;
use crate::token::FenceToken;

/// The ledger's routes, served from `ledger`. Serve it on any listener (tests bind port 0).
pub fn router(ledger: Arc<Ledger>) -> Router {
    Router::new()
        .route("/accounts/{name}", get(read).put(set))
        .route("/accounts/{name}/add", post(add))
        .route("/stats", get(stats))
        .fallback(|| async { LedgerError::NotFound })
        .method_not_allowed_fallback(|| async { LedgerError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(LEDGER_BODY_BYTES_MAX))
        .with_state(ledger)
}

/// Body of `POST /accounts/{name}/add`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    /// Added to the balance (may be negative).
    pub amount: i64,
    /// The caller's grant; required by a fenced ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<FenceToken>,
}

/// Body of `PUT /accounts/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRequest {
    /// The new balance.
    pub balance: i64,
    /// The caller's grant; required by a fenced ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<FenceToken>,
}

/// Query of a fenced `GET /accounts/{name}`: all three fields, or none for a plain read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// The grant's cluster.
    pub cluster_id: Option<String>,
    /// The granted lock.
    pub lock: Option<String>,
    /// The grant's token.
    pub token: Option<u64>,
}

/// Answer to every account request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountResponse {
    /// The account.
    pub name: String,
    /// Its balance after the request.
    pub balance: i64,
    /// Whether the access went through the fence.
    pub fenced: bool,
}

impl ReadQuery {
    fn token(self) -> Result<Option<FenceToken>, LedgerError> {
        match (self.cluster_id, self.lock, self.token) {
            (Some(cluster_id), Some(lock), Some(token)) => Ok(Some(FenceToken {
                cluster_id,
                lock,
                token,
            })),
            (None, None, None) => Ok(None),
            _ => Err(LedgerError::BadRequest(
                "a fenced read needs all of cluster_id, lock and token".into(),
            )),
        }
    }
}

async fn read(
    State(ledger): State<Arc<Ledger>>,
    Path(name): Path<String>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<AccountResponse>, LedgerError> {
    let Query(query) = query.map_err(|e| LedgerError::BadRequest(e.body_text()))?;
    let token = query.token()?;
    let balance = ledger.balance(&name, token.as_ref())?;
    Ok(account(&ledger, name, balance, token.is_some()))
}

async fn add(
    State(ledger): State<Arc<Ledger>>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AccountResponse>, LedgerError> {
    let req: AddRequest = parse_json(body)?;
    let balance = ledger.add(&name, req.amount, req.fence.as_ref())?;
    Ok(account(&ledger, name, balance, req.fence.is_some()))
}

async fn set(
    State(ledger): State<Arc<Ledger>>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AccountResponse>, LedgerError> {
    let req: SetRequest = parse_json(body)?;
    let balance = ledger.set(&name, req.balance, req.fence.as_ref())?;
    Ok(account(&ledger, name, balance, req.fence.is_some()))
}

async fn stats(State(ledger): State<Arc<Ledger>>) -> Json<LedgerStats> {
    Json(ledger.stats())
}

fn account(ledger: &Ledger, name: String, balance: i64, has_token: bool) -> Json<AccountResponse> {
    let fenced = has_token && ledger.mode() == super::Mode::Fenced;
    Json(AccountResponse {
        name,
        balance,
        fenced,
    })
}

/// Parses a JSON body whatever its `Content-Type` (as Turnstile does, so plain `curl -d`
/// works), within [`LEDGER_BODY_BYTES_MAX`].
fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, LedgerError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            LedgerError::BodyTooLarge {
                limit_bytes: LEDGER_BODY_BYTES_MAX,
            }
        } else {
            LedgerError::BadRequest(e.body_text())
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| LedgerError::BadRequest(format!("invalid JSON body: {e}")))
}
