//! Request extractors whose failures become `ApiError`s (400/408/413 with `{code, message}`),
//! never axum's plain-text rejections. JSON bodies are parsed whatever the content type, so a
//! `curl -d` without `-H content-type` works; an empty body reads as `{}`.
//!
//! JSON has one number type, and JSON Schema counts `5.0` as an integer: a number with no
//! fractional part whose integer is exactly representable (|n| <= 2^53) is read as that integer
//! wherever the body wants one. Larger ones stay floats and are refused (`400`), since their
//! digits may already have been rounded. (Found by Schemathesis: the document's `integer`
//! admits `5.0`.)

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::BODY_BYTES_MAX;
use crate::error::ApiError;

/// A JSON body.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        let e = match serde_json::from_slice(bytes) {
            Ok(t) => return Ok(Body(t)),
            Err(e) => e,
        };
        // Only a body that does not parse as it is gets a second reading, with its integral
        // floats as integers; if that fails too, the first error is the one to show.
        serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| serde_json::from_value(integral(v)).ok())
            .map(Body)
            .ok_or_else(|| ApiError::BadRequest(format!("invalid JSON body: {e}")))
    }
}

/// Largest integer a JSON float carries exactly.
const EXACT_INTEGER_MAX: f64 = (1u64 << 53) as f64;

/// `value` with every float that is an exactly representable integer turned into it.
fn integral(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= EXACT_INTEGER_MAX => {
                // In range and integral, so the casts are exact.
                if f < 0.0 {
                    Value::from(f as i64)
                } else {
                    Value::from(f as u64)
                }
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect())
        }
        other => other,
    }
}

fn bytes_rejection(r: BytesRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::BodyTooLarge {
            limit_bytes: BODY_BYTES_MAX,
        }
    } else if is_body_timeout(&r) {
        ApiError::BodyTimeout
    } else {
        ApiError::BadRequest(format!("cannot read body: {r}"))
    }
}

/// True if the body failed because the server's body timeout (`crate::http_server`) passed;
/// the timeout error sits a few `source()`s down, under axum's wrappers.
fn is_body_timeout(r: &BytesRejection) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(r);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A path parameter.
pub struct Param<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Param<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Param(t))
            .map_err(|e| ApiError::BadRequest(format!("invalid path: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Numbers {
        id: u64,
        by: i64,
        permits: Option<u32>,
    }

    async fn numbers(body: &'static str) -> Result<Numbers, ApiError> {
        let req = Request::new(axum::body::Body::from(body));
        Body::<Numbers>::from_request(req, &())
            .await
            .map(|Body(b)| b)
    }

    /// `5.0` is an integer to JSON Schema (and to the OpenAPI document): read as one, while
    /// a fraction, or a float too large to hold its integer exactly, is still refused.
    #[tokio::test]
    async fn integral_floats_are_integers() {
        let n = numbers(r#"{"id": 16099.0, "by": -3.0, "permits": 1e2}"#).await;
        assert_eq!(
            n.expect("integral floats"),
            Numbers {
                id: 16099,
                by: -3,
                permits: Some(100)
            }
        );
        for body in [
            r#"{"id": 1.5, "by": 0}"#,
            r#"{"id": 1e300, "by": 0}"#,
            r#"{"id": 18446744073709551616.0, "by": 0}"#,
            r#"{"id": -1.0, "by": 0}"#,
        ] {
            let err = numbers(body).await.expect_err(body);
            assert!(matches!(err, ApiError::BadRequest(_)), "{body}: {err:?}");
        }
    }

    /// A body that stalls under the server's body timeout is `408 body_timeout`, not a
    /// `400 bad_request` that blames the client's JSON.
    #[tokio::test]
    async fn a_stalled_body_is_a_body_timeout() {
        let stalled = axum::body::Body::from_stream(futures::stream::pending::<
            Result<Bytes, std::io::Error>,
        >());
        let timed = tower_http::timeout::TimeoutBody::new(Duration::from_millis(10), stalled);
        let req = Request::new(axum::body::Body::new(timed));
        let err = Body::<serde_json::Value>::from_request(req, &())
            .await
            .err()
            .expect("a stalled body cannot be read");
        assert!(matches!(err, ApiError::BodyTimeout), "{err:?}");
        assert_eq!(err.status_and_code().0, StatusCode::REQUEST_TIMEOUT);
    }
}
