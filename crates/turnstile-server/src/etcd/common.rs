//! What every etcd RPC shares: who is calling, the response header, etcd's keys and values as
//! Turnstile's strings, and Turnstile's errors as the gRPC statuses etcd's clients expect.

use sha2::{Digest, Sha256};
use tonic::{Code, Status};
use turnstile_core::ApplyError;
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
    let mut headers = axum::http::HeaderMap::new();
    if let Some(token) = req.metadata().get(TOKEN_METADATA) {
        let token = token
            .to_str()
            .map_err(|_| Status::unauthenticated("etcdserver: invalid auth token"))?;
        let bearer = axum::http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Status::unauthenticated("etcdserver: invalid auth token"))?;
        headers.insert(axum::http::header::AUTHORIZATION, bearer);
    }
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

/// etcd's response header: the cluster (a number made from Turnstile's cluster id), this
/// member, the revision the answer reflects (the log index) and the current term.
pub fn header(app: &App, revision: u64) -> Option<ResponseHeader> {
    let cluster_id = app.sm.read().state.cluster_id.clone().unwrap_or_default();
    Some(ResponseHeader {
        cluster_id: cluster_number(&cluster_id),
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

/// An etcd key as a Turnstile key: UTF-8, 1..=512 bytes, no control characters.
pub fn key(bytes: &[u8]) -> Result<String, Status> {
    if bytes.is_empty() {
        return Err(Status::invalid_argument("etcdserver: key is not provided"));
    }
    let key = utf8("key", bytes)?;
    validate::key(&key).map_err(|e| status(&e))?;
    Ok(key)
}

/// An etcd value as a Turnstile value: UTF-8, at most 64 KiB.
pub fn value(bytes: &[u8]) -> Result<String, Status> {
    let value = utf8("value", bytes)?;
    validate::value(&value).map_err(|e| status(&e))?;
    Ok(value)
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
        value: v.value.into_bytes(),
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
