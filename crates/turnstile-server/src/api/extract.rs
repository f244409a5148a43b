//! Request extractors whose failures become `ApiError`s (400/408/413 with `{code, message}`),
//! never axum's plain-text rejections. JSON bodies are parsed whatever the content type, so a
//! `curl -d` without `-H content-type` works; an empty body reads as `{}`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

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
        serde_json::from_slice(bytes)
            .map(Body)
            .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
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
