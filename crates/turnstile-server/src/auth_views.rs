//! Read models of the auth state (`/v1/auth/...`), JSON for clients and bincode between nodes.
//! Token secrets never appear here: only ids, owners and expiry.

use serde::{Deserialize, Serialize};
use turnstile_core::auth::{self, Permission, Quotas};
use turnstile_core::State;

/// `GET /v1/auth/roles` and `GET /v1/auth/users`: everything root manages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuthView {
    pub auth_revision: u64,
    pub roles: Vec<RoleView>,
    pub users: Vec<UserView>,
    pub tokens: Vec<TokenView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoleView {
    pub name: String,
    pub permissions: Vec<PermissionView>,
    pub metrics: bool,
}

/// A permission in the contract's JSON words (`kind`, `prefix`, `access`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PermissionView {
    pub kind: String,
    pub prefix: String,
    pub access: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UserView {
    pub name: String,
    pub roles: Vec<String>,
    pub quotas: QuotasView,
}

/// Effective quotas (defaults filled in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotasView {
    pub leases: u64,
    pub locks: u64,
    pub keys: u64,
    pub request_records: u64,
    pub watches: u64,
    pub waiting: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenView {
    pub token_id: String,
    pub user: String,
    pub expires_ms: Option<u64>,
}

/// `GET /v1/auth/whoami`: the caller, its roles, quotas and what it holds. `watches` and
/// `waiting` are counted per node and filled in by the node that answers the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoamiView {
    pub user: String,
    pub roles: Vec<String>,
    /// `None` (JSON null) for root, which has no quotas.
    pub quotas: Option<QuotasView>,
    pub usage: UsageView,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageView {
    pub leases: u64,
    pub locks: u64,
    pub keys: u64,
    pub request_records: u64,
    pub watches: u64,
    pub waiting: u64,
}

impl PermissionView {
    pub fn of(p: &Permission) -> PermissionView {
        PermissionView {
            kind: p.kind.as_str().into(),
            prefix: p.prefix.clone(),
            access: p.access.as_str().into(),
        }
    }
}

impl QuotasView {
    pub fn of(q: &Quotas) -> QuotasView {
        QuotasView {
            leases: q.leases(),
            locks: q.locks(),
            keys: q.keys(),
            request_records: q.request_records(),
            watches: q.watches(),
            waiting: q.waiting(),
        }
    }
}

impl AuthView {
    pub fn of(state: &State) -> AuthView {
        let a = &state.auth;
        AuthView {
            auth_revision: a.revision,
            roles: a
                .roles
                .iter()
                .map(|(name, r)| RoleView {
                    name: name.clone(),
                    permissions: r.permissions.iter().map(PermissionView::of).collect(),
                    metrics: r.metrics,
                })
                .collect(),
            users: a
                .users
                .iter()
                .map(|(name, u)| UserView {
                    name: name.clone(),
                    roles: u.roles.clone(),
                    quotas: QuotasView::of(&u.quotas),
                })
                .collect(),
            tokens: a
                .tokens
                .iter()
                .map(|(id, t)| TokenView {
                    token_id: id.clone(),
                    user: t.user.clone(),
                    expires_ms: t.expires_ms,
                })
                .collect(),
        }
    }
}

impl WhoamiView {
    pub fn of(state: &State, principal: &str) -> WhoamiView {
        let user = state.auth.user(principal);
        let usage = state.auth.usage_of(principal);
        WhoamiView {
            user: principal.to_string(),
            roles: user.roles.clone(),
            quotas: (principal != auth::ROOT).then(|| QuotasView::of(&user.quotas)),
            usage: UsageView {
                leases: state.auth.leases_of(principal),
                locks: state.locks_of(principal),
                keys: usage.keys,
                request_records: usage.request_records,
                watches: 0,
                waiting: 0,
            },
        }
    }
}
