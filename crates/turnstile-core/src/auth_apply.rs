//! Applying user, role and token changes (root's commands, already authorized by
//! `State::authorize`). Every change moves `AuthState::revision` to its entry's index.

use crate::auth::{
    self, check_name, AuthState, Permission, Quotas, Role, Token, User, PERMISSIONS_PER_ROLE_MAX,
    PREFIX_BYTES_MAX, ROLES_MAX, ROLES_PER_USER_MAX, TOKENS_MAX, TOKEN_ID_HEX_LEN, USERS_MAX,
};
use crate::command::Command;
use crate::limits;
use crate::response::{ApplyError, Outcome};
use crate::state::State;

type ApplyResult = Result<Outcome, ApplyError>;

/// Longest token lifetime (one year); a token without `ttl_ms` lives until deleted.
pub const TOKEN_TTL_MS_MAX: u64 = 365 * 24 * 3_600_000;

fn invalid(reason: String) -> ApplyError {
    ApplyError::Invalid { reason }
}

fn not_found(what: String) -> ApplyError {
    ApplyError::AuthNotFound { what }
}

impl State {
    /// Applies `cmd` if it is an auth change; `None` for every other command.
    pub(crate) fn apply_auth_change(&mut self, index: u64, cmd: &Command) -> Option<ApplyResult> {
        let now_ms = self.sm_time_ms;
        let auth = &mut self.auth;
        let result = match cmd {
            Command::AuthPutRole {
                role,
                permissions,
                metrics,
            } => put_role(auth, role, permissions, *metrics),
            Command::AuthDeleteRole { role } => auth
                .roles
                .remove(role)
                .map(drop)
                .ok_or_else(|| not_found(format!("role {role}"))),
            Command::AuthPutUser {
                user,
                roles,
                quotas,
            } => put_user(auth, user, roles, *quotas),
            Command::AuthDeleteUser { user } => match auth.users.remove(user) {
                Some(_) => {
                    auth.tokens.retain(|_, t| &t.user != user);
                    Ok(())
                }
                None => Err(not_found(format!("user {user}"))),
            },
            Command::AuthCreateToken {
                token_id,
                user,
                secret_sha256,
                ttl_ms,
            } => {
                return Some(create_token(
                    auth,
                    index,
                    now_ms,
                    token_id,
                    user,
                    *secret_sha256,
                    *ttl_ms,
                ));
            }
            Command::AuthDeleteToken { token_id } => auth
                .tokens
                .remove(token_id)
                .map(drop)
                .ok_or_else(|| not_found(format!("token {token_id}"))),
            Command::AuthSetUserRoles { user, roles } => match auth.users.get(user) {
                Some(u) => {
                    let quotas = u.quotas;
                    put_user(auth, user, roles, quotas)
                }
                None => Err(not_found(format!("user {user}"))),
            },
            Command::AuthChangeIf {
                auth_revision,
                change,
            } => {
                if !matches!(
                    **change,
                    Command::AuthPutRole { .. }
                        | Command::AuthDeleteRole { .. }
                        | Command::AuthPutUser { .. }
                        | Command::AuthDeleteUser { .. }
                        | Command::AuthSetUserRoles { .. }
                ) {
                    return Some(Err(ApplyError::Invalid {
                        reason: "a conditional auth change is a role or user put or delete".into(),
                    }));
                }
                if auth.revision != *auth_revision {
                    return Some(Err(ApplyError::CompareFailed {
                        key: "auth_revision".into(),
                    }));
                }
                return self.apply_auth_change(index, change);
            }
            _ => return None,
        };
        Some(result.map(|()| {
            auth.revision = index;
            Outcome::AuthChanged {
                auth_revision: index,
            }
        }))
    }
}

fn put_role(
    auth: &mut AuthState,
    role: &str,
    permissions: &[Permission],
    metrics: bool,
) -> Result<(), ApplyError> {
    check_name("role", role).map_err(invalid)?;
    if permissions.len() > PERMISSIONS_PER_ROLE_MAX {
        return Err(invalid(format!(
            "a role has at most {PERMISSIONS_PER_ROLE_MAX} permissions"
        )));
    }
    if let Some(p) = permissions
        .iter()
        .find(|p| p.prefix.len() > PREFIX_BYTES_MAX)
    {
        return Err(invalid(format!(
            "prefix {:?} is longer than {PREFIX_BYTES_MAX} bytes",
            p.prefix
        )));
    }
    if !auth.roles.contains_key(role) && auth.roles.len() >= ROLES_MAX {
        return Err(ApplyError::LimitReached {
            limit: "roles_max".into(),
        });
    }
    let role_record = Role {
        permissions: permissions.to_vec(),
        metrics,
    };
    auth.roles.insert(role.to_string(), role_record);
    Ok(())
}

fn put_user(
    auth: &mut AuthState,
    user: &str,
    roles: &[String],
    quotas: Quotas,
) -> Result<(), ApplyError> {
    if user != auth::ROOT {
        check_name("user", user).map_err(invalid)?;
    }
    if roles.len() > ROLES_PER_USER_MAX {
        return Err(invalid(format!(
            "a user has at most {ROLES_PER_USER_MAX} roles"
        )));
    }
    if let Some(missing) = roles.iter().find(|r| !auth.roles.contains_key(*r)) {
        return Err(not_found(format!("role {missing}")));
    }
    if !auth.users.contains_key(user) && auth.users.len() >= USERS_MAX {
        return Err(ApplyError::LimitReached {
            limit: "users_max".into(),
        });
    }
    let record = User {
        roles: roles.to_vec(),
        quotas,
    };
    auth.users.insert(user.to_string(), record);
    Ok(())
}

fn create_token(
    auth: &mut AuthState,
    index: u64,
    now_ms: u64,
    token_id: &str,
    user: &str,
    secret_sha256: [u8; 32],
    ttl_ms: Option<u64>,
) -> ApplyResult {
    if token_id.len() != TOKEN_ID_HEX_LEN || !token_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid(format!(
            "token id must be {TOKEN_ID_HEX_LEN} hex characters"
        )));
    }
    if !auth.users.contains_key(user) {
        return Err(not_found(format!("user {user}")));
    }
    if let Some(ttl) = ttl_ms.filter(|t| !(limits::TTL_MS_MIN..=TOKEN_TTL_MS_MAX).contains(t)) {
        return Err(invalid(format!(
            "ttl_ms {ttl} out of range {}..={TOKEN_TTL_MS_MAX}",
            limits::TTL_MS_MIN
        )));
    }
    if auth.tokens.contains_key(token_id) {
        return Err(invalid(format!("token id {token_id} is taken")));
    }
    if auth.tokens.len() >= TOKENS_MAX {
        return Err(ApplyError::LimitReached {
            limit: "tokens_max".into(),
        });
    }
    let expires_ms = ttl_ms.map(|t| now_ms.saturating_add(t));
    auth.tokens.insert(
        token_id.to_string(),
        Token {
            user: user.to_string(),
            secret_sha256,
            expires_ms,
        },
    );
    auth.revision = index;
    Ok(Outcome::TokenCreated {
        token_id: token_id.to_string(),
        expires_ms,
    })
}
