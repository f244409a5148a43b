//! [`LedgerError`] and the one place that maps it to an HTTP status and a
//! `{"code", "message"}` body (plus `highest` when a stale token was refused).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::error::FenceError;

/// Every refusal of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The fence refused the access.
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// A write to a fenced ledger carried no token.
    #[error("this ledger is fenced: a write must carry \"fence\": {{cluster_id, lock, token}}")]
    FenceRequired,
    /// An amount or the resulting balance is outside the allowed range.
    #[error("amount or balance out of range (at most 2^53 in absolute value)")]
    OutOfRange,
    /// The ledger has as many accounts as it may.
    #[error("the ledger already has {max} accounts")]
    TooManyAccounts {
        /// The limit.
        max: usize,
    },
    /// The request body is too large.
    #[error("request body is larger than {limit_bytes} bytes")]
    BodyTooLarge {
        /// The limit.
        limit_bytes: usize,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// No such route.
    #[error("no such route")]
    NotFound,
    /// The route exists, not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
}

#[derive(Serialize)]
struct ErrorBody {
    code: &'static str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    highest: Option<u64>,
}

impl LedgerError {
    /// The HTTP status and the stable machine-readable code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            LedgerError::Fence(FenceError::Stale { .. }) => (S::CONFLICT, "fenced"),
            LedgerError::Fence(FenceError::ForeignCluster { .. }) => {
                (S::CONFLICT, "foreign_cluster")
            }
            LedgerError::Fence(FenceError::WrongLock { .. }) => (S::CONFLICT, "wrong_lock"),
            LedgerError::Fence(FenceError::TooManyResources { .. })
            | LedgerError::TooManyAccounts { .. } => (S::CONFLICT, "limit_reached"),
            LedgerError::Fence(FenceError::Invalid { .. }) | LedgerError::BadRequest(_) => {
                (S::BAD_REQUEST, "bad_request")
            }
            LedgerError::FenceRequired => (S::BAD_REQUEST, "fence_required"),
            LedgerError::OutOfRange => (S::UNPROCESSABLE_ENTITY, "out_of_range"),
            LedgerError::BodyTooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "body_too_large"),
            LedgerError::NotFound => (S::NOT_FOUND, "not_found"),
            LedgerError::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, "method_not_allowed"),
        }
    }
}

impl IntoResponse for LedgerError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let highest = match &self {
            LedgerError::Fence(FenceError::Stale { highest, .. }) => Some(*highest),
            _ => None,
        };
        let body = ErrorBody {
            code,
            message: self.to_string(),
            highest,
        };
        (status, Json(body)).into_response()
    }
}
