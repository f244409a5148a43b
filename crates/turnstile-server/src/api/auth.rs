//! `/v1/auth/...`: users, roles and tokens (root only), and `whoami` (anyone authenticated).
//! Changes are replicated writes judged again in apply; lists are linearizable reads. With
//! authentication off (no TLS) there is no one to manage, and these routes say so.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::auth::{check_name, Access, Kind, Permission, Quotas, ROOT};
use turnstile_core::{Command, Outcome};
use utoipa::ToSchema;

use crate::api::answers::{
    AuthChangeAnswer, AuthOff, RolesAnswer, TokenAnswer, UserItem, UsersAnswer, WhoamiAnswer,
};
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionBody {
    #[schema(pattern = "^(lock|key|counter)$")]
    kind: String,
    /// Names starting with this (empty: every name of the kind).
    prefix: String,
    /// `write` implies `read`.
    #[schema(pattern = "^(read|write)$")]
    access: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleBody {
    #[serde(default)]
    permissions: Vec<PermissionBody>,
    #[serde(default)]
    metrics: bool,
}

fn permission(p: PermissionBody) -> Result<Permission, ApiError> {
    let kind = Kind::parse(&p.kind).ok_or_else(|| {
        ApiError::BadRequest(format!("kind {:?}: expected lock, key or counter", p.kind))
    })?;
    let access = Access::parse(&p.access).ok_or_else(|| {
        ApiError::BadRequest(format!("access {:?}: expected read or write", p.access))
    })?;
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

async fn change(
    app: &App,
    caller: &Caller,
    command: Command,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
    let w = app.write(caller, None, command).await?;
    match w.outcome {
        Outcome::AuthChanged { auth_revision } => Ok(Json(AuthChangeAnswer {
            revision: w.revision,
            auth_revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// Creates or replaces a role (root only).
#[utoipa::path(put, path = "/v1/auth/roles/{role}", tag = "auth",
    params(("role" = String, Path, description = "The role name")),
    request_body = RoleBody,
    responses((status = 200, description = "Stored", body = AuthChangeAnswer)))]
pub async fn put_role(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(role): Param<String>,
    Body(b): Body<RoleBody>,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
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

/// Deletes a role (root only).
#[utoipa::path(delete, path = "/v1/auth/roles/{role}", tag = "auth",
    params(("role" = String, Path, description = "The role name")),
    responses((status = 200, description = "Deleted", body = AuthChangeAnswer),
        (status = 404, description = "`not_found`: no such role", body = ErrorAnswer)))]
pub async fn delete_role(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(role): Param<String>,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
    root_only(&app, &caller)?;
    name("role", &role)?;
    change(&app, &caller, Command::AuthDeleteRole { role }).await
}

/// Per-principal quotas; an absent one takes its documented default.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    leases: Option<u64>,
    locks: Option<u64>,
    keys: Option<u64>,
    request_records: Option<u64>,
    watches: Option<u64>,
    waiting: Option<u64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserBody {
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    quotas: QuotasBody,
}

/// Creates or replaces a user: its roles and quotas (root only).
#[utoipa::path(put, path = "/v1/auth/users/{user}", tag = "auth",
    params(("user" = String, Path, description = "The user name")),
    request_body = UserBody,
    responses((status = 200, description = "Stored", body = AuthChangeAnswer),
        (status = 404, description = "`not_found`: a named role does not exist", body = ErrorAnswer)))]
pub async fn put_user(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(user): Param<String>,
    Body(b): Body<UserBody>,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
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

/// Deletes a user and its tokens (root only).
#[utoipa::path(delete, path = "/v1/auth/users/{user}", tag = "auth",
    params(("user" = String, Path, description = "The user name")),
    responses((status = 200, description = "Deleted", body = AuthChangeAnswer),
        (status = 404, description = "`not_found`: no such user", body = ErrorAnswer)))]
pub async fn delete_user(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(user): Param<String>,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
    root_only(&app, &caller)?;
    change(&app, &caller, Command::AuthDeleteUser { user }).await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    user: String,
    ttl_ms: Option<u64>,
}

/// `POST /v1/auth/tokens`: the node makes the secret, proposes only its hash, and shows the
/// token (`<token_id>.<secret>`) in this answer alone.
#[utoipa::path(post, path = "/v1/auth/tokens", tag = "auth", request_body = TokenBody,
    responses((status = 200, description = "The token, shown this once", body = TokenAnswer),
        (status = 404, description = "`not_found`: no such user", body = ErrorAnswer)))]
pub async fn create_token(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<TokenBody>,
) -> Result<Json<TokenAnswer>, ApiError> {
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
        Outcome::TokenCreated { expires_ms, .. } => Ok(Json(TokenAnswer {
            token: format!("{token_id}.{secret}"),
            token_id,
            user: b.user,
            expires_ms,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// Revokes a token (root only).
#[utoipa::path(delete, path = "/v1/auth/tokens/{token_id}", tag = "auth",
    params(("token_id" = String, Path, description = "The token id")),
    responses((status = 200, description = "Deleted", body = AuthChangeAnswer),
        (status = 404, description = "`not_found`: no such token", body = ErrorAnswer)))]
pub async fn delete_token(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(token_id): Param<String>,
) -> Result<Json<AuthChangeAnswer>, ApiError> {
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

/// Every role (root only).
#[utoipa::path(get, path = "/v1/auth/roles", tag = "auth",
    responses((status = 200, description = "The roles", body = RolesAnswer)))]
pub async fn list_roles(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<RolesAnswer>, ApiError> {
    let view = auth_view(&app, &caller).await?;
    Ok(Json(RolesAnswer {
        items: view.roles,
        auth_revision: view.auth_revision,
    }))
}

/// Every user, with its token ids and expiry (never a secret; root only).
#[utoipa::path(get, path = "/v1/auth/users", tag = "auth",
    responses((status = 200, description = "The users", body = UsersAnswer)))]
pub async fn list_users(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<UsersAnswer>, ApiError> {
    let view = auth_view(&app, &caller).await?;
    let items = view
        .users
        .iter()
        .map(|u| UserItem {
            name: u.name.clone(),
            roles: u.roles.clone(),
            quotas: u.quotas,
            tokens: view
                .tokens
                .iter()
                .filter(|t| t.user == u.name)
                .cloned()
                .collect(),
        })
        .collect();
    Ok(Json(UsersAnswer {
        items,
        auth_revision: view.auth_revision,
    }))
}

/// The caller: its roles, quotas and usage.
#[utoipa::path(get, path = "/v1/auth/whoami", tag = "auth",
    responses((status = 200, description = "The caller (or a note that authentication is off)", body = WhoamiAnswer)))]
pub async fn whoami(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<WhoamiAnswer>, ApiError> {
    let Some(principal) = caller.principal() else {
        return Ok(Json(WhoamiAnswer::Off(AuthOff {
            user: None,
            authentication: "off",
        })));
    };
    let mut view = match app.read(&caller, ReadQuery::Whoami).await? {
        ReadAnswer::Whoami(view) => view,
        other => return Err(unexpected_answer(&other)),
    };
    view.usage.watches = app.node_usage.of(principal, NodeQuota::Watches);
    view.usage.waiting = app.node_usage.of(principal, NodeQuota::Waiting);
    Ok(Json(WhoamiAnswer::On(view)))
}
