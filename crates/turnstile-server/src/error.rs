//! The one place that maps errors to HTTP status codes and `{"code", "message"}` bodies.
//!
//! Outcome-unknown (`indeterminate`) is its own code, never folded into a failure: a client
//! that treats it as "failed" and retries without its `request_id` could acquire twice.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use turnstile_core::ApplyError;

use crate::proto::RouteError;

/// Every error the client API can answer with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is larger than {limit_bytes} bytes")]
    BodyTooLarge { limit_bytes: usize },
    #[error("request body stalled: nothing arrived within the body timeout")]
    BodyTimeout,
    #[error("{0}")]
    NotFound(String),
    #[error("{what} not found")]
    KeyNotFound { what: String },
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("this node is not serving: {0}")]
    NotMember(String),
    #[error("membership change refused: {0}")]
    MemberRefused(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A server bug (an outcome or answer that cannot follow from the request): `500`, so
    /// that it is never mistaken for the client's fault and is retried or reported.
    #[error("internal error: {0}")]
    Internal(String),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_token: Option<u64>,
    /// For `deadlock_victim`: the leases of the cycle the victim closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    cycle: Option<Vec<u64>>,
}

impl ApiError {
    /// The HTTP status and the stable machine-readable code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            ApiError::BadRequest(_) => (S::BAD_REQUEST, "bad_request"),
            ApiError::BodyTooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyTimeout => (S::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::NotFound(_) => (S::NOT_FOUND, "not_found"),
            ApiError::KeyNotFound { .. } => (S::NOT_FOUND, "key_not_found"),
            ApiError::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Apply(e) => apply_status(e),
            ApiError::Route(RouteError::NoQuorum)
            | ApiError::Route(RouteError::NotLeader { .. }) => {
                (S::SERVICE_UNAVAILABLE, "no_quorum")
            }
            ApiError::Route(RouteError::Indeterminate) => (S::GATEWAY_TIMEOUT, "indeterminate"),
            ApiError::Route(RouteError::Unavailable { .. }) => {
                (S::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::NotMember(_) => (S::SERVICE_UNAVAILABLE, "not_member"),
            ApiError::MemberRefused(_) => (S::CONFLICT, "membership_refused"),
            ApiError::Unavailable(_) => (S::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Unauthenticated(_) => (S::UNAUTHORIZED, "unauthenticated"),
            ApiError::Internal(_) => (S::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl ApiError {
    /// One error of every kind, for the list of codes (`ApiError::every_kind`). A new variant
    /// here or in `ApplyError`/`RouteError` needs a sample: `kind_index` does not compile
    /// without one more arm, and the tests check that the samples cover every index.
    fn samples() -> Vec<ApiError> {
        let s = String::new;
        let apply = [
            ApplyError::LeaseNotFound { lease_id: 0 },
            ApplyError::LockHeld {
                name: s(),
                holder_token: 0,
            },
            ApplyError::NotHolder {
                name: s(),
                lease_id: 0,
                token: 0,
            },
            ApplyError::CompareFailed { key: s() },
            ApplyError::Fenced {
                lock: s(),
                token: 0,
                current_token: None,
            },
            ApplyError::RequestIdReused { request_id: s() },
            ApplyError::CounterOverflow { name: s() },
            ApplyError::LimitReached { limit: s() },
            ApplyError::Invalid { reason: s() },
            ApplyError::WaitTimeout { waiter_id: s() },
            ApplyError::ModeMismatch {
                name: s(),
                reason: s(),
            },
            ApplyError::DeadlockVictim {
                waiter_id: s(),
                cycle: Vec::new(),
            },
            ApplyError::PermissionDenied { reason: s() },
            ApplyError::QuotaExceeded {
                quota: s(),
                limit: 0,
            },
            ApplyError::Unauthenticated { reason: s() },
            ApplyError::AuthNotFound { what: s() },
            ApplyError::NotLeader {
                name: s(),
                token: 0,
            },
        ];
        let route = [
            RouteError::NotLeader { leader_id: None },
            RouteError::NoQuorum,
            RouteError::Indeterminate,
            RouteError::Unavailable { reason: s() },
        ];
        let mut all = vec![
            ApiError::BadRequest(s()),
            ApiError::BodyTooLarge { limit_bytes: 0 },
            ApiError::BodyTimeout,
            ApiError::NotFound(s()),
            ApiError::KeyNotFound { what: s() },
            ApiError::MethodNotAllowed,
            ApiError::NotMember(s()),
            ApiError::MemberRefused(s()),
            ApiError::Unavailable(s()),
            ApiError::Unauthenticated(s()),
            ApiError::Internal(s()),
        ];
        all.extend(apply.into_iter().map(ApiError::Apply));
        all.extend(route.into_iter().map(ApiError::Route));
        all
    }

    /// Every `(status, code)` the client API can answer with, sorted, each once.
    pub fn every_kind() -> Vec<(StatusCode, &'static str)> {
        let mut kinds: Vec<(StatusCode, &'static str)> = ApiError::samples()
            .iter()
            .map(ApiError::status_and_code)
            .collect();
        kinds.sort_by_key(|(status, code)| (status.as_u16(), *code));
        kinds.dedup();
        kinds
    }

    /// A distinct number for every variant (nested ones included), below `KINDS`.
    #[cfg(test)]
    fn kind_index(&self) -> usize {
        use ApplyError as A;
        match self {
            ApiError::BadRequest(_) => 0,
            ApiError::BodyTooLarge { .. } => 1,
            ApiError::BodyTimeout => 2,
            ApiError::NotFound(_) => 3,
            ApiError::KeyNotFound { .. } => 4,
            ApiError::MethodNotAllowed => 5,
            ApiError::NotMember(_) => 6,
            ApiError::MemberRefused(_) => 7,
            ApiError::Unavailable(_) => 8,
            ApiError::Unauthenticated(_) => 9,
            ApiError::Internal(_) => 10,
            ApiError::Route(RouteError::NotLeader { .. }) => 11,
            ApiError::Route(RouteError::NoQuorum) => 12,
            ApiError::Route(RouteError::Indeterminate) => 13,
            ApiError::Route(RouteError::Unavailable { .. }) => 14,
            ApiError::Apply(e) => {
                15 + match e {
                    A::LeaseNotFound { .. } => 0,
                    A::LockHeld { .. } => 1,
                    A::NotHolder { .. } => 2,
                    A::CompareFailed { .. } => 3,
                    A::Fenced { .. } => 4,
                    A::RequestIdReused { .. } => 5,
                    A::CounterOverflow { .. } => 6,
                    A::LimitReached { .. } => 7,
                    A::Invalid { .. } => 8,
                    A::WaitTimeout { .. } => 9,
                    A::ModeMismatch { .. } => 10,
                    A::DeadlockVictim { .. } => 11,
                    A::PermissionDenied { .. } => 12,
                    A::QuotaExceeded { .. } => 13,
                    A::Unauthenticated { .. } => 14,
                    A::AuthNotFound { .. } => 15,
                    A::NotLeader { .. } => 16,
                }
            }
        }
    }

    /// How many `kind_index` values there are.
    #[cfg(test)]
    const KINDS: usize = 15 + 17;
}

fn apply_status(e: &ApplyError) -> (StatusCode, &'static str) {
    use StatusCode as S;
    match e {
        ApplyError::LeaseNotFound { .. } => (S::NOT_FOUND, "lease_not_found"),
        ApplyError::LockHeld { .. } => (S::CONFLICT, "lock_held"),
        ApplyError::NotHolder { .. } => (S::CONFLICT, "not_holder"),
        ApplyError::CompareFailed { .. } => (S::PRECONDITION_FAILED, "compare_failed"),
        ApplyError::Fenced { .. } => (S::CONFLICT, "fenced"),
        ApplyError::RequestIdReused { .. } => (S::CONFLICT, "request_id_reused"),
        ApplyError::CounterOverflow { .. } => (S::CONFLICT, "counter_overflow"),
        ApplyError::LimitReached { .. } => (S::TOO_MANY_REQUESTS, "limit_reached"),
        ApplyError::Invalid { .. } => (S::BAD_REQUEST, "bad_request"),
        ApplyError::WaitTimeout { .. } => (S::CONFLICT, "wait_timeout"),
        ApplyError::ModeMismatch { .. } => (S::CONFLICT, "mode_mismatch"),
        ApplyError::DeadlockVictim { .. } => (S::CONFLICT, "deadlock_victim"),
        ApplyError::PermissionDenied { .. } => (S::FORBIDDEN, "permission_denied"),
        ApplyError::QuotaExceeded { .. } => (S::TOO_MANY_REQUESTS, "quota_exceeded"),
        ApplyError::Unauthenticated { .. } => (S::UNAUTHORIZED, "unauthenticated"),
        ApplyError::AuthNotFound { .. } => (S::NOT_FOUND, "not_found"),
        ApplyError::NotLeader { .. } => (S::CONFLICT, "not_leader"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let current_token = match &self {
            ApiError::Apply(ApplyError::Fenced { current_token, .. }) => *current_token,
            // 0 means the lock had no holder, only waiters ahead.
            ApiError::Apply(ApplyError::LockHeld { holder_token, .. }) => {
                Some(*holder_token).filter(|t| *t > 0)
            }
            _ => None,
        };
        let cycle = match &self {
            ApiError::Apply(ApplyError::DeadlockVictim { cycle, .. }) => Some(cycle.clone()),
            _ => None,
        };
        if status.is_server_error() {
            tracing::debug!(code, error = %self, "request failed");
        }
        // A scoped request id (`<principal> <id>`) is shown as the client sent it.
        let message = match &self {
            ApiError::Apply(ApplyError::RequestIdReused { request_id }) => {
                ApplyError::RequestIdReused {
                    request_id: turnstile_core::auth::unscoped_request_id(request_id).into(),
                }
                .to_string()
            }
            _ => self.to_string(),
        };
        (
            status,
            axum::Json(ErrorBody {
                code,
                message,
                current_token,
                cycle,
            }),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_cover_every_kind() {
        let mut seen: Vec<usize> = ApiError::samples()
            .iter()
            .map(ApiError::kind_index)
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..ApiError::KINDS).collect::<Vec<_>>());
    }
}
