//! Who is calling: authentication of client requests, and the per-node quotas (watch streams,
//! waiting requests) that are not replicated. Authorization itself is judged in the state
//! machine (`turnstile_core::auth`) for writes, and on the leader after its ReadIndex for reads
//! (`leader_ops.rs`).
//!
//! Authentication is on exactly when the node serves TLS. A request then carries either
//! `Authorization: Bearer <token_id>.<secret>` or a client certificate signed by the cluster CA
//! (its CN is the principal; CN `root` is the superuser). A bad bearer token is refused even
//! when a good certificate comes with it: a client that sent a token meant to use it.
//! Certificates with CN `node-N` are node identities, good only for `/raft/*`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};
use sha2::{Digest, Sha256};
use turnstile_core::auth::{self as core_auth, TOKEN_ID_HEX_LEN};
use turnstile_core::{ApplyError, Command};

use crate::app::App;
use crate::error::ApiError;

/// How long a node waits for a token it does not know yet to arrive by replication (a token
/// created through the leader a moment ago, used at a follower) before answering 401.
pub const TOKEN_UNKNOWN_WAIT_MS: u64 = 1_000;
/// Length of a token's secret, in bytes (hex-encoded in the token).
pub const TOKEN_SECRET_BYTES: usize = 32;

/// The caller of a request, as the authentication layer found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off (no TLS): every request may do everything, as before auth.
    Open,
    /// The node itself: ticks, acknowledgements, cancels of waits it holds.
    Node,
    /// An authenticated principal, with the token it used, if any.
    Principal {
        name: String,
        token_id: Option<String>,
    },
}

impl Caller {
    /// The principal's name; `None` when authentication is off or for the node itself.
    pub fn principal(&self) -> Option<&str> {
        match self {
            Caller::Principal { name, .. } => Some(name),
            _ => None,
        }
    }

    /// True if the caller may do everything: root, or anyone when authentication is off.
    pub fn is_root(&self) -> bool {
        match self {
            Caller::Open | Caller::Node => true,
            Caller::Principal { name, .. } => name == core_auth::ROOT,
        }
    }

    /// `command` as this caller's: wrapped in `As` for a principal, so apply judges it.
    pub fn command(&self, command: Command) -> Command {
        match self {
            Caller::Principal { name, token_id } => Command::As {
                principal: name.clone(),
                token_id: token_id.clone(),
                command: Box::new(command),
            },
            _ => command,
        }
    }

    /// The id under which this caller's `request_id` is recorded (scoped by principal).
    pub fn request_id(&self, request_id: Option<String>) -> Option<String> {
        match (self, request_id) {
            (Caller::Principal { name, .. }, Some(id)) => {
                Some(core_auth::scoped_request_id(name, &id))
            }
            (_, id) => id,
        }
    }

    /// Refuses a caller that is not root (admin routes).
    pub fn require_root(&self, what: &str) -> Result<(), ApiError> {
        if self.is_root() {
            return Ok(());
        }
        Err(ApiError::Apply(ApplyError::PermissionDenied {
            reason: format!(
                "{} is not root: {what} is for root only",
                self.principal().unwrap_or("caller")
            ),
        }))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller the authentication layer put on the request. A route outside that layer
    /// has none: a server bug, refused rather than served as anyone.
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Unauthenticated("no authenticated caller".into()))
    }
}

/// Authenticates the request and puts its [`Caller`] in its extensions, or refuses it with
/// `401 unauthenticated` (the first check of `crate::api`'s route middleware).
pub async fn admit(app: &App, req: &mut Request) -> Result<(), ApiError> {
    let caller = authenticate(app, req.headers(), req.extensions())
        .await
        .inspect_err(|e| app.denials.client(req.uri().path(), None, &e.to_string()))?;
    req.extensions_mut().insert(caller);
    Ok(())
}

/// Who sent a request with these headers and connection extensions.
pub async fn authenticate(
    app: &App,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<Caller, ApiError> {
    if !app.auth_on() {
        return Ok(Caller::Open);
    }
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let value = value
            .to_str()
            .map_err(|_| unauthenticated("the Authorization header is not ASCII"))?;
        let token = value
            .strip_prefix("Bearer ")
            .ok_or_else(|| unauthenticated("Authorization must be `Bearer <token>`"))?;
        return token_caller(app, token.trim()).await;
    }
    if let Some(cert) = extensions.get::<crate::tls::ClientCert>() {
        let name = &cert.common_name;
        if core_auth::is_node_name(name) {
            return Err(unauthenticated(
                "a node certificate is not a client credential",
            ));
        }
        if core_auth::check_name("principal", name).is_err() && name != core_auth::ROOT {
            return Err(unauthenticated(
                "the certificate's CN is not a valid principal name",
            ));
        }
        return Ok(Caller::Principal {
            name: name.clone(),
            token_id: None,
        });
    }
    Err(unauthenticated(
        "no credential: present a client certificate or `Authorization: Bearer <token>`",
    ))
}

fn unauthenticated(msg: &str) -> ApiError {
    ApiError::Unauthenticated(msg.to_string())
}

/// A bearer token's caller: its id names a stored token whose secret hashes to the stored
/// hash and that has not expired by the cluster's applied time.
async fn token_caller(app: &App, token: &str) -> Result<Caller, ApiError> {
    let (token_id, secret) = parse_token(token)?;
    let secret_sha256: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    let lookup = || {
        let inner = app.sm.read();
        let state = &inner.state;
        state
            .auth
            .token_user(token_id, &secret_sha256, state.sm_time_ms)
            .map(str::to_string)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TOKEN_UNKNOWN_WAIT_MS);
    let mut applied = app.waiters.applied();
    loop {
        if let Some(user) = lookup() {
            return Ok(Caller::Principal {
                name: user,
                token_id: Some(token_id.to_string()),
            });
        }
        // A token this node has never heard of may still be on its way here; a known id
        // with a wrong secret, or an expired one, will not get better.
        if app.sm.read().state.auth.tokens.contains_key(token_id) {
            break;
        }
        if tokio::time::timeout_at(deadline, applied.changed())
            .await
            .is_err()
        {
            break;
        }
    }
    Err(unauthenticated("unknown, deleted or expired token"))
}

/// Splits `<token_id>.<secret>` and checks both parts' shape.
fn parse_token(token: &str) -> Result<(&str, &str), ApiError> {
    let bad = || unauthenticated("malformed token: expected <16 hex>.<64 hex>");
    let (id, secret) = token.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(id, TOKEN_ID_HEX_LEN) || !hex(secret, 2 * TOKEN_SECRET_BYTES) {
        return Err(bad());
    }
    Ok((id, secret))
}

/// A fresh token: its id, its secret, and the secret's hash (the only part replicated).
pub fn mint_token() -> (String, String, [u8; 32]) {
    use rand::RngCore;
    let mut id = [0u8; TOKEN_ID_HEX_LEN / 2];
    let mut secret = [0u8; TOKEN_SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut id);
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let secret = hex::encode(secret);
    let sha: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    (hex::encode(id), secret, sha)
}

/// What each principal holds on this node alone: watch streams and waiting requests.
#[derive(Debug, Default)]
pub struct NodeUsage {
    counts: Mutex<HashMap<(String, NodeQuota), u64>>,
}

/// The per-node quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeQuota {
    Watches,
    Waiting,
}

impl NodeQuota {
    fn name(self) -> &'static str {
        match self {
            NodeQuota::Watches => "watches",
            NodeQuota::Waiting => "waiting",
        }
    }
}

/// One unit of a per-node quota, given back when dropped.
pub struct QuotaSlot {
    app: Option<(Arc<App>, String, NodeQuota)>,
}

impl Drop for QuotaSlot {
    fn drop(&mut self) {
        let Some((app, principal, quota)) = self.app.take() else {
            return;
        };
        let mut counts = app
            .node_usage
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let key = (principal, quota);
        if let Some(n) = counts.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&key);
            }
        }
    }
}

impl NodeUsage {
    /// Takes one unit of `quota` for `caller`, or `429 quota_exceeded`. Root, and callers
    /// when authentication is off, take nothing (the node-wide caps still apply).
    pub fn take(app: &Arc<App>, caller: &Caller, quota: NodeQuota) -> Result<QuotaSlot, ApiError> {
        let Some(principal) = caller.principal().filter(|_| !caller.is_root()) else {
            return Ok(QuotaSlot { app: None });
        };
        let quotas = app.sm.read().state.auth.quotas(principal);
        let limit = match quota {
            NodeQuota::Watches => quotas.watches(),
            NodeQuota::Waiting => quotas.waiting(),
        };
        let mut counts = app
            .node_usage
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = counts.entry((principal.to_string(), quota)).or_insert(0);
        if *n >= limit {
            return Err(ApiError::Apply(ApplyError::QuotaExceeded {
                quota: quota.name().into(),
                limit,
            }));
        }
        *n += 1;
        Ok(QuotaSlot {
            app: Some((app.clone(), principal.to_string(), quota)),
        })
    }

    /// What `principal` holds on this node, for `whoami`.
    pub fn of(&self, principal: &str, quota: NodeQuota) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .get(&(principal.to_string(), quota))
            .copied()
            .unwrap_or(0)
    }
}
