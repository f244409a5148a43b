//! What every etcd RPC shares: who is calling, the response header, etcd's keys and values as
//! Turnstile's strings, and Turnstile's errors as the gRPC statuses etcd's clients expect.

use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};
use tonic::{Code, Status};
use turnstile_core::{ApplyError, State};
use turnstile_etcd_proto::etcdserverpb::ResponseHeader;
use turnstile_etcd_proto::mvccpb::KeyValue;

use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::RouteError;
use crate::tls::ClientCert;
use crate::views::KeyView;

/// The metadata key etcd's clients put their auth token under.
pub const TOKEN_METADATA: &str = "token";

/// What the listener knows about a connection: the client's verified certificate, if any
/// (`crate::etcd::listener`).
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub cert: Option<ClientCert>,
}

/// The caller of `req`, authenticated as the client API does (`crate::auth::authenticate`):
/// the `token` metadata (a Turnstile token, as `Authenticate` hands out) as a bearer token,
/// else the connection's client certificate.
pub async fn caller<T>(app: &App, req: &tonic::Request<T>) -> Result<Caller, Status> {
    let headers = match req.metadata().get(TOKEN_METADATA) {
        Some(token) => token
            .to_str()
            .ok()
            .and_then(bearer_headers)
            .ok_or_else(|| Status::unauthenticated("etcdserver: invalid auth token"))?,
        None => axum::http::HeaderMap::new(),
    };
    let mut extensions = axum::http::Extensions::new();
    if let Some(cert) = req
        .extensions()
        .get::<ConnInfo>()
        .and_then(|c| c.cert.clone())
    {
        extensions.insert(cert);
    }
    crate::auth::authenticate(app, &headers, &extensions)
        .await
        .map_err(|e| status(&e))
}

/// Headers carrying `token` as the HTTP API's bearer token, for `crate::auth::authenticate`;
/// `None` if it cannot be a header value.
pub fn bearer_headers(token: &str) -> Option<axum::http::HeaderMap> {
    let value = axum::http::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(axum::http::header::AUTHORIZATION, value);
    Some(headers)
}

/// etcd's response header: the cluster (a number made from Turnstile's cluster id), this
/// member, the revision the answer reflects (the log index) and the current term.
pub fn header(app: &App, revision: u64) -> Option<ResponseHeader> {
    header_in(app, &app.sm.read().state, revision)
}

/// [`header`] for a caller that already holds the state lock (`state` is what it reads):
/// taking the lock again from the same thread could deadlock behind a waiting apply.
pub fn header_in(app: &App, state: &State, revision: u64) -> Option<ResponseHeader> {
    let cluster_id = state.cluster_id.as_deref().unwrap_or_default();
    Some(ResponseHeader {
        cluster_id: cluster_number(cluster_id),
        member_id: app.node_id(),
        revision: signed(revision),
        raft_term: app.term(),
    })
}

/// etcd's cluster id is a number; Turnstile's is a string. The first 8 bytes of its SHA-256.
pub fn cluster_number(cluster_id: &str) -> u64 {
    let digest = Sha256::digest(cluster_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A revision, index or id as etcd's `int64` (Turnstile's never reach 2^63).
pub fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An `int64` field that must not be negative, as Turnstile's `u64`.
pub fn unsigned(what: &str, v: i64) -> Result<u64, Status> {
    u64::try_from(v).map_err(|_| Status::invalid_argument(format!("{what} must not be negative")))
}

/// An etcd key as a Turnstile key: UTF-8, 1..=512 bytes, no control characters (keys are
/// names: `/v1/kv/{key}` paths, permission prefixes).
pub fn key(bytes: &[u8]) -> Result<String, Status> {
    if bytes.is_empty() {
        return Err(Status::invalid_argument("etcdserver: key is not provided"));
    }
    let key = utf8("key", bytes)?;
    validate::key(&key).map_err(|e| status(&e))?;
    Ok(key)
}

/// The first character of a stored value that holds etcd bytes which are not plain text:
/// base64 of the bytes follows it.
pub const BYTES_MARK: char = '\u{0}';

/// An etcd value as a Turnstile value (a string of at most 64 KiB). Text is stored as it is,
/// so `/v1/kv` and the etcd port read the same value; bytes that are not UTF-8 (or text that
/// starts with [`BYTES_MARK`]) are stored as the mark and their base64, which the etcd port
/// turns back into the same bytes ([`value_bytes`]). The mapping is one-to-one, so compares
/// on values keep their meaning.
pub fn value(bytes: &[u8]) -> Result<String, Status> {
    use base64::Engine;
    let stored = match std::str::from_utf8(bytes) {
        Ok(text) if !text.starts_with(BYTES_MARK) => text.to_string(),
        _ => format!(
            "{BYTES_MARK}{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
    };
    validate::value(&stored).map_err(|e| status(&e))?;
    Ok(stored)
}

/// A stored value as the etcd bytes it was written from ([`value`]).
pub fn value_bytes(stored: String) -> Vec<u8> {
    use base64::Engine;
    match stored.strip_prefix(BYTES_MARK) {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap_or_else(|_| stored.into_bytes()),
        None => stored.into_bytes(),
    }
}

/// `bytes` as UTF-8, or an `InvalidArgument` naming `what`: Turnstile stores text.
pub fn utf8(what: &str, bytes: &[u8]) -> Result<String, Status> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        Status::invalid_argument(format!(
            "{what} is not UTF-8: Turnstile's etcd port stores text keys and values only \
             (docs/etcd-compat.md)"
        ))
    })
}

/// A lease field (`0`: no lease).
pub fn lease(id: i64) -> Result<Option<u64>, Status> {
    Ok(Some(unsigned("lease", id)?).filter(|&id| id != 0))
}

/// A Turnstile key as etcd's `KeyValue`.
pub fn key_value(v: KeyView) -> KeyValue {
    KeyValue {
        key: v.key.into_bytes(),
        create_revision: signed(v.create_revision),
        mod_revision: signed(v.mod_revision),
        version: signed(v.version),
        value: value_bytes(v.value),
        lease: v.lease_id.map_or(0, signed),
    }
}

/// A Turnstile error as the status etcd answers for the same condition, with etcd's own
/// message where its clients match on it (a lease not found, a timeout).
pub fn status(e: &ApiError) -> Status {
    match e {
        ApiError::Apply(ApplyError::LeaseNotFound { .. }) => {
            Status::not_found("etcdserver: requested lease not found")
        }
        ApiError::Route(RouteError::Indeterminate) => Status::deadline_exceeded(
            "etcdserver: request timed out: the write may or may not have committed",
        ),
        ApiError::Route(RouteError::NoQuorum) | ApiError::Route(RouteError::NotLeader { .. }) => {
            Status::unavailable(format!("etcdserver: no leader ({e})"))
        }
        e => {
            let (http, code) = e.status_and_code();
            let grpc = match http.as_u16() {
                400 | 413 => Code::InvalidArgument,
                401 => Code::Unauthenticated,
                403 => Code::PermissionDenied,
                404 => Code::NotFound,
                408 | 504 => Code::DeadlineExceeded,
                409 | 412 => Code::FailedPrecondition,
                429 => Code::ResourceExhausted,
                503 => Code::Unavailable,
                500 => Code::Internal,
                _ => Code::Unknown,
            };
            Status::new(grpc, format!("{code}: {e}"))
        }
    }
}

/// A read answered with the wrong kind of view: a server bug, as `Internal`.
pub fn unexpected<T: std::fmt::Debug>(what: &T) -> Status {
    tracing::error!(?what, "etcd port: unexpected answer");
    Status::internal("unexpected answer to this request (a server bug; logged)")
}

/// An RPC or field this port does not serve, with what to use instead.
pub fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!(
        "{what} is not supported by Turnstile's etcd port (docs/etcd-compat.md)"
    ))
}

/// The principal a stream's events are judged and redacted for; `None` sees everything
/// (root, or anyone when authentication is off).
pub fn judged_principal(caller: &Caller) -> Option<String> {
    if caller.is_root() {
        return None;
    }
    caller.principal().map(str::to_string)
}

/// One of the node's long-lived streams of one kind (keep-alive, watch), counted in `count`
/// and given back when dropped.
pub struct StreamSlot(&'static AtomicUsize);

impl StreamSlot {
    /// A slot, or `ResourceExhausted` when the node already serves `max` such streams.
    pub fn take(count: &'static AtomicUsize, max: usize, what: &str) -> Result<Self, Status> {
        let before = count.fetch_add(1, Ordering::SeqCst);
        if before >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return Err(Status::resource_exhausted(format!(
                "this node serves at most {max} {what} streams"
            )));
        }
        Ok(StreamSlot(count))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_text_stays_text() {
        let cases: [&[u8]; 5] = [
            b"plain text",
            b"",
            &[0x80, 0xff, 0x00],
            "\u{0}looks marked".as_bytes(),
            "ünïcode".as_bytes(),
        ];
        for bytes in cases {
            let stored = value(bytes).expect("stored");
            assert_eq!(value_bytes(stored.clone()), bytes, "{stored:?}");
        }
        assert_eq!(value(b"plain text").expect("text"), "plain text");
        assert_eq!(value(&[0x80, 0xff]).expect("bytes"), "\u{0}gP8=");
        // One-to-one: different bytes never store the same string.
        assert_ne!(
            value(b"\0gP8=").expect("a"),
            value(&[0x80, 0xff]).expect("b")
        );
    }

    #[test]
    fn a_value_too_large_once_encoded_is_refused() {
        let limit = turnstile_core::limits::VALUE_BYTES_MAX;
        assert!(value(&vec![b'a'; limit]).is_ok());
        let err = value(&vec![0xff; limit * 3 / 4 + 3]).expect_err("over the limit as base64");
        assert_eq!(err.code(), Code::InvalidArgument);
    }
}
