//! `/v1/auth/...`: users, roles and tokens (root only), and `whoami` (anyone authenticated).
//! Changes are replicated writes judged again in apply; lists are linearizable reads. With
//! authentication off (no TLS) there is no one to manage, and these routes say so.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use turnstile_core::auth::{check_name, Access, Kind, Permission, Quotas, ROOT};
use turnstile_core::{Command, Outcome};

use crate::api::extract::{Body, Param};
use crate::api::ops::{unexpected, unexpected_answer};
use crate::app::App;
use crate::auth::{mint_token, Caller, NodeQuota};
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};

fn auth_off() -> ApiError {
    ApiError::BadRequest(
        "authentication is off: this node serves without TLS (see docs/security.md)".into(),
    )
}

/// Refuses unless authentication is on and the caller is root.
fn root_only(app: &App, caller: &Caller) -> Result<(), ApiError> {
    if !app.auth_on() {
        return Err(auth_off());
    }
    caller.require_root("managing users, roles and tokens")
}

fn name(what: &str, s: &str) -> Result<(), ApiError> {
    check_name(what, s).map_err(ApiError::BadRequest)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionBody {
    kind: String,
    prefix: String,
    access: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleBody {
    #[serde(default)]
    permissions: Vec<PermissionBody>,
    #[serde(default)]
    metrics: bool,
}

fn permission(p: PermissionBody) -> Result<Permission, ApiError> {
    let kind = match p.kind.as_str() {
        "lock" => Kind::Lock,
        "key" => Kind::Key,
        "counter" => Kind::Counter,
        other => {
            return Err(ApiError::BadRequest(format!(
                "kind {other:?}: expected lock, key or counter"
            )))
        }
    };
    let access = match p.access.as_str() {
        "read" => Access::Read,
        "write" => Access::Write,
        other => {
            return Err(ApiError::BadRequest(format!(
                "access {other:?}: expected read or write"
            )))
        }
    };
    if p.prefix.len() > turnstile_core::auth::PREFIX_BYTES_MAX
        || p.prefix.chars().any(char::is_control)
    {
        return Err(ApiError::BadRequest(format!(
            "prefix must be at most {} bytes without control characters",
            turnstile_core::auth::PREFIX_BYTES_MAX
        )));
    }
    Ok(Permission {
        kind,
        prefix: p.prefix,
        access,
    })
}

async fn change(app: &App, caller: &Caller, command: Command) -> Result<Json<Value>, ApiError> {
    let w = app.write(caller, None, command).await?;
    match w.outcome {
        Outcome::AuthChanged { auth_revision } => Ok(Json(
            json!({"revision": w.revision, "auth_revision": auth_revision}),
        )),
        other => Err(unexpected(&other)),
    }
}

pub async fn put_role(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(role): Param<String>,
    Body(b): Body<RoleBody>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    name("role", &role)?;
    if b.permissions.len() > turnstile_core::auth::PERMISSIONS_PER_ROLE_MAX {
        return Err(ApiError::BadRequest(format!(
            "a role has at most {} permissions",
            turnstile_core::auth::PERMISSIONS_PER_ROLE_MAX
        )));
    }
    let permissions = b
        .permissions
        .into_iter()
        .map(permission)
        .collect::<Result<Vec<_>, _>>()?;
    let cmd = Command::AuthPutRole {
        role,
        permissions,
        metrics: b.metrics,
    };
    change(&app, &caller, cmd).await
}

pub async fn delete_role(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(role): Param<String>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    name("role", &role)?;
    change(&app, &caller, Command::AuthDeleteRole { role }).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    leases: Option<u64>,
    locks: Option<u64>,
    keys: Option<u64>,
    request_records: Option<u64>,
    watches: Option<u64>,
    waiting: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserBody {
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    quotas: QuotasBody,
}

pub async fn put_user(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(user): Param<String>,
    Body(b): Body<UserBody>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    if user != ROOT {
        name("user", &user)?;
    }
    for r in &b.roles {
        name("role", r)?;
    }
    let q = b.quotas;
    let quotas = Quotas {
        leases: q.leases,
        locks: q.locks,
        keys: q.keys,
        request_records: q.request_records,
        watches: q.watches,
        waiting: q.waiting,
    };
    let cmd = Command::AuthPutUser {
        user,
        roles: b.roles,
        quotas,
    };
    change(&app, &caller, cmd).await
}

pub async fn delete_user(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(user): Param<String>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    change(&app, &caller, Command::AuthDeleteUser { user }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    user: String,
    ttl_ms: Option<u64>,
}

/// `POST /v1/auth/tokens`: the node makes the secret, proposes only its hash, and shows the
/// token (`<token_id>.<secret>`) in this answer alone.
pub async fn create_token(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<TokenBody>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    if b.user != ROOT {
        name("user", &b.user)?;
    }
    let (token_id, secret, secret_sha256) = mint_token();
    let cmd = Command::AuthCreateToken {
        token_id: token_id.clone(),
        user: b.user.clone(),
        secret_sha256,
        ttl_ms: b.ttl_ms,
    };
    let w = app.write(&caller, None, cmd).await?;
    match w.outcome {
        Outcome::TokenCreated { expires_ms, .. } => Ok(Json(json!({
            "token_id": token_id,
            "token": format!("{token_id}.{secret}"),
            "user": b.user,
            "expires_ms": expires_ms,
            "revision": w.revision,
        }))),
        other => Err(unexpected(&other)),
    }
}

pub async fn delete_token(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(token_id): Param<String>,
) -> Result<Json<Value>, ApiError> {
    root_only(&app, &caller)?;
    change(&app, &caller, Command::AuthDeleteToken { token_id }).await
}

async fn auth_view(app: &App, caller: &Caller) -> Result<crate::auth_views::AuthView, ApiError> {
    root_only(app, caller)?;
    match app.read(caller, ReadQuery::Auth).await? {
        ReadAnswer::Auth(view) => Ok(view),
        other => Err(unexpected_answer(&other)),
    }
}

/// `GET /v1/auth/roles`.
pub async fn list_roles(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let view = auth_view(&app, &caller).await?;
    Ok(Json(
        json!({"items": view.roles, "auth_revision": view.auth_revision}),
    ))
}

/// `GET /v1/auth/users`, with each user's token ids and expiry (never a secret).
pub async fn list_users(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let view = auth_view(&app, &caller).await?;
    let items: Vec<Value> = view
        .users
        .iter()
        .map(|u| {
            let tokens: Vec<_> = view.tokens.iter().filter(|t| t.user == u.name).collect();
            json!({"name": u.name, "roles": u.roles, "quotas": u.quotas, "tokens": tokens})
        })
        .collect();
    Ok(Json(
        json!({"items": items, "auth_revision": view.auth_revision}),
    ))
}

/// `GET /v1/auth/whoami`.
pub async fn whoami(State(app): State<Arc<App>>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let Some(principal) = caller.principal() else {
        return Ok(Json(json!({"user": null, "authentication": "off"})));
    };
    let mut view = match app.read(&caller, ReadQuery::Whoami).await? {
        ReadAnswer::Whoami(view) => view,
        other => return Err(unexpected_answer(&other)),
    };
    view.usage.watches = app.node_usage.of(principal, NodeQuota::Watches);
    view.usage.waiting = app.node_usage.of(principal, NodeQuota::Waiting);
    Ok(Json(serde_json::to_value(view).unwrap_or_default()))
}
