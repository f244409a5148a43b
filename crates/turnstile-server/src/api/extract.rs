//! Request extractors whose failures become `ApiError`s (400/413 with `{code, message}`),
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
    } else {
        ApiError::BadRequest(format!("cannot read body: {r}"))
    }
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
