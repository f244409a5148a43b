//! etcd's Auth service over Turnstile's principals (docs/security.md): users and roles are
//! Turnstile's, managed by root, and every change is a replicated write judged again at apply.
//!
//! - `Authenticate` takes a Turnstile token as the password: `name` must be the token's user,
//!   and the answer's token is that same token, which the client then sends as its `token`
//!   metadata. Turnstile keeps no passwords, so `UserAdd` with a password and
//!   `UserChangePassword` are `Unimplemented` (a user signs in with a client certificate or a
//!   token: `turnstile auth token create`).
//! - A role's etcd permissions are its key permissions. etcd's `READ` is Turnstile's `read`
//!   and `READWRITE` its `write` (which implies read); a `WRITE` without read, a permission on
//!   one key and a range that is not a prefix have no Turnstile equivalent and are refused
//!   with `Unimplemented` rather than widened. A role's lock and counter permissions are kept
//!   through etcd's changes and not shown by `RoleGet`.
//! - Grants and revokes read the auth state, change it, and write it back only if nothing
//!   changed it meanwhile (`Command::AuthChangeIf`), retried a few times: two concurrent
//!   grants both land, neither is lost.
//! - Authentication is on exactly when the cluster runs with TLS, so `AuthEnable` and
//!   `AuthDisable` are `Unimplemented`; without TLS every call here but `AuthStatus` fails as
//!   etcd fails when auth is off.

use tonic::{Request, Response, Status};
use turnstile_core::auth::{check_name, Access, Kind, Permission, ROOT};
use turnstile_core::{ApplyError, Command, Outcome};
use turnstile_etcd_proto::authpb::{self, permission::Type as PermType, UserAddOptions};
use turnstile_etcd_proto::etcdserverpb::{
    auth_server::Auth, AuthDisableRequest, AuthDisableResponse, AuthEnableRequest,
    AuthEnableResponse, AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleDeleteRequest,
    AuthRoleDeleteResponse, AuthRoleGetRequest, AuthRoleGetResponse,
    AuthRoleGrantPermissionRequest, AuthRoleGrantPermissionResponse, AuthRoleListRequest,
    AuthRoleListResponse, AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse,
    AuthStatusRequest, AuthStatusResponse, AuthUserAddRequest, AuthUserAddResponse,
    AuthUserChangePasswordRequest, AuthUserChangePasswordResponse, AuthUserDeleteRequest,
    AuthUserDeleteResponse, AuthUserGetRequest, AuthUserGetResponse, AuthUserGrantRoleRequest,
    AuthUserGrantRoleResponse, AuthUserListRequest, AuthUserListResponse,
    AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse, AuthenticateRequest,
    AuthenticateResponse, ResponseHeader,
};

use crate::app::App;
use crate::auth::Caller;
use crate::auth_views::{AuthView, RoleView};
use crate::error::ApiError;
use crate::etcd::cluster::ClusterService;
use crate::etcd::common::{caller, header, status, unexpected, unsupported};
use crate::key_span::prefix_end;
use crate::proto::{ReadAnswer, ReadQuery};

/// Tries of one read-modify-write before it gives up (each lost only to another auth change
/// that landed in between).
const CHANGE_ATTEMPTS_MAX: usize = 8;

const USER_NOT_FOUND: &str = "etcdserver: user name not found";
const ROLE_NOT_FOUND: &str = "etcdserver: role name not found";

/// The caller, if it is root on a cluster with authentication on.
async fn root<T>(app: &App, req: &Request<T>, what: &str) -> Result<Caller, Status> {
    let caller = caller(app, req).await?;
    if !app.auth_on() {
        return Err(Status::failed_precondition(
            "etcdserver: authentication is not enabled (this cluster runs without TLS)",
        ));
    }
    caller.require_root(what).map_err(|e| status(&e))?;
    Ok(caller)
}

/// The auth state, read through the leader.
async fn view(app: &App, caller: &Caller) -> Result<AuthView, Status> {
    match app.read(caller, ReadQuery::Auth).await {
        Ok(ReadAnswer::Auth(view)) => Ok(view),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(status(&e)),
    }
}

/// Writes an auth change; the header of its entry.
async fn change(
    app: &App,
    caller: &Caller,
    command: Command,
) -> Result<Option<ResponseHeader>, ApiError> {
    let w = app.write(caller, None, command).await?;
    match w.outcome {
        Outcome::AuthChanged { .. } => Ok(header(app, w.revision)),
        other => Err(ApiError::Internal(format!(
            "unexpected outcome of an auth change: {other:?}"
        ))),
    }
}

/// Why a read-modify-write stops: an answer for the client, or nothing to change.
enum Step {
    Refuse(Status),
    Write(Command),
}

/// Reads the auth state, lets `decide` make the change from it, and writes the change only
/// if the state is still the one read (`Command::AuthChangeIf`); again if another change
/// came in between, at most [`CHANGE_ATTEMPTS_MAX`] times.
async fn read_modify_write(
    app: &App,
    caller: &Caller,
    decide: impl Fn(&AuthView) -> Step,
) -> Result<Option<ResponseHeader>, Status> {
    for _ in 0..CHANGE_ATTEMPTS_MAX {
        let v = view(app, caller).await?;
        let command = match decide(&v) {
            Step::Refuse(s) => return Err(s),
            Step::Write(c) => c,
        };
        let conditional = Command::AuthChangeIf {
            auth_revision: v.auth_revision,
            change: Box::new(command),
        };
        match change(app, caller, conditional).await {
            Err(ApiError::Apply(ApplyError::CompareFailed { key })) if key == "auth_revision" => {
                continue
            }
            other => return other.map_err(|e| status(&e)),
        }
    }
    Err(Status::aborted(
        "etcdserver: the auth state kept changing under this request; retry it",
    ))
}

fn role_of<'a>(v: &'a AuthView, name: &str) -> Option<&'a RoleView> {
    v.roles.iter().find(|r| r.name == name)
}

/// A role's permissions as Turnstile's (the view's words back to the types).
fn permissions_of(role: &RoleView) -> Result<Vec<Permission>, Status> {
    role.permissions
        .iter()
        .map(|p| match (Kind::parse(&p.kind), Access::parse(&p.access)) {
            (Some(kind), Some(access)) => Ok(Permission {
                kind,
                prefix: p.prefix.clone(),
                access,
            }),
            _ => Err(unexpected(p)),
        })
        .collect()
}

/// The key prefix etcd's `[key, range_end)` names: a prefix range (`--prefix`), or every key
/// (`"\0"` to `"\0"`, or an empty key to `"\0"`). Anything else has no Turnstile equivalent.
fn prefix_of(key: &[u8], range_end: &[u8]) -> Result<String, Status> {
    if range_end.is_empty() {
        return Err(unsupported(
            "a permission on one key (Turnstile's permissions are prefixes: grant it with \
             --prefix)",
        ));
    }
    let all = (key.is_empty() || key == [0]) && range_end == [0];
    if !all && prefix_end(key).as_deref() != Some(range_end) {
        return Err(unsupported(
            "a permission over a range that is not a prefix (Turnstile's permissions are \
             prefixes)",
        ));
    }
    if all {
        return Ok(String::new());
    }
    String::from_utf8(key.to_vec())
        .map_err(|_| Status::invalid_argument("a permission's key must be UTF-8 text"))
}

/// An etcd permission as Turnstile's key permission.
fn permission_of(p: &authpb::Permission) -> Result<Permission, Status> {
    let access = match PermType::try_from(p.perm_type) {
        Ok(PermType::Read) => Access::Read,
        Ok(PermType::Readwrite) => Access::Write,
        Ok(PermType::Write) => {
            return Err(unsupported(
                "a WRITE permission without READ (Turnstile's write implies read): grant \
                 READWRITE",
            ))
        }
        Err(_) => return Err(Status::invalid_argument("unknown permission type")),
    };
    Ok(Permission {
        kind: Kind::Key,
        prefix: prefix_of(&p.key, &p.range_end)?,
        access,
    })
}

/// A Turnstile key permission as etcd's (`None` for lock and counter permissions).
fn etcd_permission(p: &Permission) -> Option<authpb::Permission> {
    if p.kind != Kind::Key {
        return None;
    }
    let (key, range_end) = if p.prefix.is_empty() {
        (vec![0], vec![0])
    } else {
        let end = prefix_end(p.prefix.as_bytes()).unwrap_or_else(|| vec![0]);
        (p.prefix.as_bytes().to_vec(), end)
    };
    let perm_type = match p.access {
        Access::Read => PermType::Read,
        Access::Write => PermType::Readwrite,
    };
    Some(authpb::Permission {
        perm_type: perm_type.into(),
        key,
        range_end,
    })
}

fn name_ok(what: &str, name: &str) -> Result<(), Status> {
    if name == ROOT {
        return Err(Status::invalid_argument(format!(
            "{what} {ROOT:?} is Turnstile's built-in root (its client certificate)"
        )));
    }
    check_name(what, name).map_err(Status::invalid_argument)
}

#[tonic::async_trait]
impl Auth for ClusterService {
    async fn auth_enable(
        &self,
        _req: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        Err(unsupported(
            "AuthEnable (authentication is on exactly when the cluster runs with TLS)",
        ))
    }

    async fn auth_disable(
        &self,
        _req: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        Err(unsupported(
            "AuthDisable (authentication is on exactly when the cluster runs with TLS)",
        ))
    }

    async fn auth_status(
        &self,
        req: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        let _caller: Caller = caller(&self.app, &req).await?;
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthStatusResponse {
            header: header(&self.app, revision),
            enabled: self.app.auth_on(),
            auth_revision: 0,
        }))
    }

    async fn authenticate(
        &self,
        req: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let r = req.into_inner();
        let failed = || {
            Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password",
            )
        };
        if !self.app.auth_on() {
            return Err(Status::failed_precondition(
                "etcdserver: authentication is not enabled (this cluster runs without TLS)",
            ));
        }
        let headers = crate::etcd::common::bearer_headers(&r.password).ok_or_else(failed)?;
        let caller = crate::auth::authenticate(&self.app, &headers, &Default::default())
            .await
            .map_err(|_| failed())?;
        if caller.principal() != Some(r.name.as_str()) {
            return Err(failed());
        }
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthenticateResponse {
            header: header(&self.app, revision),
            token: r.password,
        }))
    }

    async fn user_add(
        &self,
        req: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let caller = root(&self.app, &req, "UserAdd").await?;
        let r = req.into_inner();
        let no_password = r
            .options
            .as_ref()
            .is_some_and(|o: &UserAddOptions| o.no_password);
        let has_password = !r.password.is_empty() || !r.hashed_password.is_empty();
        if has_password && !no_password {
            return Err(unsupported(
                "UserAdd with a password (Turnstile keeps no passwords: add the user with \
                 --no-password, then sign in with a client certificate or a token from \
                 `turnstile auth token create`)",
            ));
        }
        name_ok("user", &r.name)?;
        let header = read_modify_write(&self.app, &caller, |v| {
            if v.users.iter().any(|u| u.name == r.name) {
                return Step::Refuse(Status::failed_precondition(
                    "etcdserver: user name already exists",
                ));
            }
            Step::Write(Command::AuthPutUser {
                user: r.name.clone(),
                roles: Vec::new(),
                quotas: Default::default(),
            })
        })
        .await?;
        Ok(Response::new(AuthUserAddResponse { header }))
    }

    async fn user_get(
        &self,
        req: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        let caller = root(&self.app, &req, "UserGet").await?;
        let name = req.into_inner().name;
        let v = view(&self.app, &caller).await?;
        let user = v.users.iter().find(|u| u.name == name);
        let user = user.ok_or_else(|| Status::failed_precondition(USER_NOT_FOUND))?;
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthUserGetResponse {
            header: header(&self.app, revision),
            roles: user.roles.clone(),
        }))
    }

    async fn user_list(
        &self,
        req: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        let caller = root(&self.app, &req, "UserList").await?;
        let v = view(&self.app, &caller).await?;
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthUserListResponse {
            header: header(&self.app, revision),
            users: v.users.into_iter().map(|u| u.name).collect(),
        }))
    }

    async fn user_delete(
        &self,
        req: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        let caller = root(&self.app, &req, "UserDelete").await?;
        let user = req.into_inner().name;
        match change(&self.app, &caller, Command::AuthDeleteUser { user }).await {
            Ok(header) => Ok(Response::new(AuthUserDeleteResponse { header })),
            Err(ApiError::Apply(ApplyError::AuthNotFound { .. })) => {
                Err(Status::failed_precondition(USER_NOT_FOUND))
            }
            Err(e) => Err(status(&e)),
        }
    }

    async fn user_change_password(
        &self,
        _req: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        Err(unsupported(
            "UserChangePassword (Turnstile keeps no passwords: a user signs in with a client \
             certificate or a token)",
        ))
    }

    async fn user_grant_role(
        &self,
        req: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        let caller = root(&self.app, &req, "UserGrantRole").await?;
        let r = req.into_inner();
        let header = read_modify_write(&self.app, &caller, |v| {
            let Some(user) = v.users.iter().find(|u| u.name == r.user) else {
                return Step::Refuse(Status::failed_precondition(USER_NOT_FOUND));
            };
            if role_of(v, &r.role).is_none() {
                return Step::Refuse(Status::failed_precondition(ROLE_NOT_FOUND));
            }
            let mut roles = user.roles.clone();
            if !roles.contains(&r.role) {
                roles.push(r.role.clone());
            }
            Step::Write(Command::AuthSetUserRoles {
                user: r.user.clone(),
                roles,
            })
        })
        .await?;
        Ok(Response::new(AuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        req: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        let caller = root(&self.app, &req, "UserRevokeRole").await?;
        let r = req.into_inner();
        let header = read_modify_write(&self.app, &caller, |v| {
            let Some(user) = v.users.iter().find(|u| u.name == r.name) else {
                return Step::Refuse(Status::failed_precondition(USER_NOT_FOUND));
            };
            if !user.roles.contains(&r.role) {
                return Step::Refuse(Status::failed_precondition(
                    "etcdserver: role is not granted to the user",
                ));
            }
            let roles = user.roles.iter().filter(|x| **x != r.role).cloned();
            Step::Write(Command::AuthSetUserRoles {
                user: r.name.clone(),
                roles: roles.collect(),
            })
        })
        .await?;
        Ok(Response::new(AuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(
        &self,
        req: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        let caller = root(&self.app, &req, "RoleAdd").await?;
        let name = req.into_inner().name;
        name_ok("role", &name)?;
        let header = read_modify_write(&self.app, &caller, |v| {
            if role_of(v, &name).is_some() {
                return Step::Refuse(Status::failed_precondition(
                    "etcdserver: role name already exists",
                ));
            }
            Step::Write(Command::AuthPutRole {
                role: name.clone(),
                permissions: Vec::new(),
                metrics: false,
            })
        })
        .await?;
        Ok(Response::new(AuthRoleAddResponse { header }))
    }

    async fn role_get(
        &self,
        req: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        let caller = root(&self.app, &req, "RoleGet").await?;
        let name = req.into_inner().role;
        let v = view(&self.app, &caller).await?;
        let role = role_of(&v, &name).ok_or_else(|| Status::failed_precondition(ROLE_NOT_FOUND))?;
        let perm = permissions_of(role)?
            .iter()
            .filter_map(etcd_permission)
            .collect();
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthRoleGetResponse {
            header: header(&self.app, revision),
            perm,
        }))
    }

    async fn role_list(
        &self,
        req: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        let caller = root(&self.app, &req, "RoleList").await?;
        let v = view(&self.app, &caller).await?;
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(AuthRoleListResponse {
            header: header(&self.app, revision),
            roles: v.roles.into_iter().map(|r| r.name).collect(),
        }))
    }

    async fn role_delete(
        &self,
        req: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        let caller = root(&self.app, &req, "RoleDelete").await?;
        let role = req.into_inner().role;
        match change(&self.app, &caller, Command::AuthDeleteRole { role }).await {
            Ok(header) => Ok(Response::new(AuthRoleDeleteResponse { header })),
            Err(ApiError::Apply(ApplyError::AuthNotFound { .. })) => {
                Err(Status::failed_precondition(ROLE_NOT_FOUND))
            }
            Err(e) => Err(status(&e)),
        }
    }

    async fn role_grant_permission(
        &self,
        req: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        let caller = root(&self.app, &req, "RoleGrantPermission").await?;
        let r = req.into_inner();
        let perm = r
            .perm
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("etcdserver: permission not given"))?;
        let granted = permission_of(perm)?;
        let header = read_modify_write(&self.app, &caller, |v| {
            let Some(role) = role_of(v, &r.name) else {
                return Step::Refuse(Status::failed_precondition(ROLE_NOT_FOUND));
            };
            let mut permissions = match permissions_of(role) {
                Ok(p) => p,
                Err(s) => return Step::Refuse(s),
            };
            // As etcd: granting a range the role already has replaces its type.
            permissions.retain(|p| !(p.kind == Kind::Key && p.prefix == granted.prefix));
            permissions.push(granted.clone());
            Step::Write(Command::AuthPutRole {
                role: r.name.clone(),
                permissions,
                metrics: role.metrics,
            })
        })
        .await?;
        Ok(Response::new(AuthRoleGrantPermissionResponse { header }))
    }

    async fn role_revoke_permission(
        &self,
        req: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        let caller = root(&self.app, &req, "RoleRevokePermission").await?;
        let r = req.into_inner();
        let prefix = prefix_of(&r.key, &r.range_end)?;
        let header = read_modify_write(&self.app, &caller, |v| {
            let Some(role) = role_of(v, &r.role) else {
                return Step::Refuse(Status::failed_precondition(ROLE_NOT_FOUND));
            };
            let mut permissions = match permissions_of(role) {
                Ok(p) => p,
                Err(s) => return Step::Refuse(s),
            };
            let before = permissions.len();
            permissions.retain(|p| !(p.kind == Kind::Key && p.prefix == prefix));
            if permissions.len() == before {
                return Step::Refuse(Status::failed_precondition(
                    "etcdserver: permission is not granted to the role",
                ));
            }
            Step::Write(Command::AuthPutRole {
                role: r.role.clone(),
                permissions,
                metrics: role.metrics,
            })
        })
        .await?;
        Ok(Response::new(AuthRoleRevokePermissionResponse { header }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(perm_type: PermType, key: &[u8], range_end: &[u8]) -> authpb::Permission {
        authpb::Permission {
            perm_type: perm_type.into(),
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        }
    }

    #[test]
    fn prefixes_map_both_ways_and_nothing_is_widened() {
        let p = permission_of(&etcd(PermType::Readwrite, b"app/", b"app0"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (p.kind, p.prefix.as_str(), p.access),
            (Kind::Key, "app/", Access::Write)
        );
        assert_eq!(
            etcd_permission(&p),
            Some(etcd(PermType::Readwrite, b"app/", b"app0"))
        );
        let all =
            permission_of(&etcd(PermType::Read, b"\0", b"\0")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((all.prefix.as_str(), all.access), ("", Access::Read));
        assert_eq!(
            etcd_permission(&all),
            Some(etcd(PermType::Read, b"\0", b"\0"))
        );
        // One key, a range that is not a prefix, write without read: refused, not widened.
        for refused in [
            etcd(PermType::Read, b"app/a", b""),
            etcd(PermType::Read, b"a", b"c"),
            etcd(PermType::Write, b"app/", b"app0"),
        ] {
            let err = permission_of(&refused).expect_err("no Turnstile equivalent");
            assert_eq!(err.code(), tonic::Code::Unimplemented, "{refused:?}");
        }
        // Lock permissions are not etcd's.
        let lock = Permission {
            kind: Kind::Lock,
            prefix: "app/".into(),
            access: Access::Write,
        };
        assert_eq!(etcd_permission(&lock), None);
    }
}
