//! `turnstile auth role|user|token|whoami`: root's management of roles, users and tokens
//! (`/v1/auth/...`), and `whoami` for any principal. Human output by default, the API's JSON
//! with `--json`; exit codes as for the other client commands (`client_cmd.rs`).

use std::time::Duration;

use clap::{Args, Subcommand};
use turnstile_client::{Access, Error, Permission, PermissionKind, Quotas, Role, User};

use crate::client_cmd::{print_json, refused, ClientArgs, EXIT_REFUSED};
use crate::duration_arg;

#[derive(Subcommand, Debug)]
pub enum AuthCmd {
    /// Create, replace, delete and list roles.
    #[command(subcommand)]
    Role(RoleCmd),
    /// Create, replace, delete and list users.
    #[command(subcommand)]
    User(UserCmd),
    /// Create and revoke bearer tokens.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Show who the cluster takes you for: user, roles, quotas and usage.
    Whoami,
}

#[derive(Subcommand, Debug)]
pub enum RoleCmd {
    /// Create or replace a role.
    Put(RolePut),
    /// Delete a role.
    Delete { name: String },
    /// List the roles.
    List,
}

#[derive(Args, Debug)]
pub struct RolePut {
    pub name: String,
    /// A grant, kind:prefix:access: kind is lock, key or counter; access is read or write
    /// (write implies read). Repeat for several. Example: --perm lock:jobs/:write
    #[arg(long = "perm", value_name = "KIND:PREFIX:ACCESS", value_parser = parse_permission)]
    pub perms: Vec<Permission>,
    /// Members may read /metrics.
    #[arg(long)]
    pub metrics: bool,
}

#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Create or replace a user.
    Put(UserPut),
    /// Delete a user (its tokens stop working).
    Delete { name: String },
    /// List the users.
    List,
}

#[derive(Args, Debug)]
pub struct UserPut {
    pub name: String,
    /// A role of the user; repeat for several.
    #[arg(long = "role", value_name = "ROLE")]
    pub roles: Vec<String>,
    /// A quota, NAME=N with NAME one of leases, locks, keys, request_records, watches; repeat
    /// for several. Unset quotas take the server's defaults.
    #[arg(long = "quota", value_name = "NAME=N", value_parser = parse_quota)]
    pub quotas: Vec<(String, u64)>,
}

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Mint a token for a user; it is printed once (the cluster keeps only its hash).
    Create {
        user: String,
        /// How long the token is valid (500ms, 10s, 2m, 1h); the server's default if omitted.
        #[arg(long, value_parser = duration_arg::parse)]
        ttl: Option<Duration>,
    },
    /// Revoke a token now.
    Delete { token_id: String },
}

/// Parses `kind:prefix:access`; the prefix may itself hold `:`.
pub fn parse_permission(s: &str) -> Result<Permission, String> {
    let usage = || format!("{s:?}: want KIND:PREFIX:ACCESS, like lock:jobs/:write");
    let (kind, rest) = s.split_once(':').ok_or_else(usage)?;
    let (prefix, access) = rest.rsplit_once(':').ok_or_else(usage)?;
    let kind = match kind {
        "lock" => PermissionKind::Lock,
        "key" => PermissionKind::Key,
        "counter" => PermissionKind::Counter,
        other => return Err(format!("{other:?}: kind is lock, key or counter")),
    };
    let access = match access {
        "read" => Access::Read,
        "write" => Access::Write,
        other => return Err(format!("{other:?}: access is read or write")),
    };
    Ok(Permission {
        kind,
        prefix: prefix.to_string(),
        access,
    })
}

/// Parses `name=N` for a known quota name.
pub fn parse_quota(s: &str) -> Result<(String, u64), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: want NAME=N, like leases=100"))?;
    if !Quotas::NAMES.contains(&name) {
        return Err(format!(
            "{name:?}: unknown quota (one of {})",
            Quotas::NAMES.join(", ")
        ));
    }
    let n = n
        .parse()
        .map_err(|_| format!("{n:?}: a quota is a whole number"))?;
    Ok((name.to_string(), n))
}

pub async fn run(args: &ClientArgs, cmd: AuthCmd) -> anyhow::Result<i32> {
    let result = match cmd {
        AuthCmd::Role(cmd) => role(args, cmd).await,
        AuthCmd::User(cmd) => user(args, cmd).await,
        AuthCmd::Token(cmd) => token(args, cmd).await,
        AuthCmd::Whoami => whoami(args).await,
    };
    match result {
        Ok(printed) => printed.map(|()| 0),
        // A name that does not exist (delete) is a refusal like the others.
        Err(e @ Error::NotFound { .. }) => {
            eprintln!("turnstile: {e}");
            Ok(EXIT_REFUSED)
        }
        Err(e) => refused(e),
    }
}

/// Each handler returns the client's error apart from printing's, so `run` picks exit codes.
type Outcome = Result<anyhow::Result<()>, Error>;

async fn role(args: &ClientArgs, cmd: RoleCmd) -> Outcome {
    let client = match args.client() {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    Ok(match cmd {
        RoleCmd::Put(p) => {
            let role = Role {
                permissions: p.perms,
                metrics: p.metrics,
            };
            let w = client.put_role(&p.name, &role).await?;
            written(args, &w, &format!("role {} saved", p.name))
        }
        RoleCmd::Delete { name } => {
            let w = client.delete_role(&name).await?;
            written(args, &w, &format!("role {name} deleted"))
        }
        RoleCmd::List => {
            let roles = client.roles().await?;
            if args.json {
                print_json(&serde_json::json!({ "items": roles }))
            } else {
                for r in &roles {
                    let metrics = if r.role.metrics { " +metrics" } else { "" };
                    let perms: Vec<String> = r.role.permissions.iter().map(show_perm).collect();
                    println!("{}{metrics}: {}", r.name, perms.join(" "));
                }
                Ok(())
            }
        }
    })
}

async fn user(args: &ClientArgs, cmd: UserCmd) -> Outcome {
    let client = match args.client() {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    Ok(match cmd {
        UserCmd::Put(p) => {
            let quotas = (!p.quotas.is_empty()).then(|| {
                let mut q = Quotas::default();
                for (name, n) in &p.quotas {
                    // parse_quota admitted only known names.
                    q.set(name, *n);
                }
                q
            });
            let user = User {
                roles: p.roles,
                quotas,
            };
            let w = client.put_user(&p.name, &user).await?;
            written(args, &w, &format!("user {} saved", p.name))
        }
        UserCmd::Delete { name } => {
            let w = client.delete_user(&name).await?;
            written(args, &w, &format!("user {name} deleted"))
        }
        UserCmd::List => {
            let users = client.users().await?;
            if args.json {
                print_json(&serde_json::json!({ "items": users }))
            } else {
                for u in &users {
                    let quotas = u.user.quotas.as_ref().map(show_quotas).unwrap_or_default();
                    println!("{}: roles [{}]{quotas}", u.name, u.user.roles.join(", "));
                }
                Ok(())
            }
        }
    })
}

async fn token(args: &ClientArgs, cmd: TokenCmd) -> Outcome {
    let client = match args.client() {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    Ok(match cmd {
        TokenCmd::Create { user, ttl } => {
            let ttl_ms = ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let t = client.create_token(&user, ttl_ms).await?;
            if args.json {
                print_json(&t)
            } else {
                println!("token_id {}", t.token_id);
                println!("token    {}", t.token);
                eprintln!("turnstile: the token is shown once; store it now");
                Ok(())
            }
        }
        TokenCmd::Delete { token_id } => {
            let w = client.delete_token(&token_id).await?;
            written(args, &w, &format!("token {token_id} revoked"))
        }
    })
}

async fn whoami(args: &ClientArgs) -> Outcome {
    let client = match args.client() {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    let me = client.whoami().await?;
    if args.json {
        return Ok(print_json(&me));
    }
    println!("user   {}", me.user);
    println!("roles  [{}]", me.roles.join(", "));
    for name in Quotas::NAMES {
        let quota = me
            .quotas
            .as_ref()
            .and_then(|q| q.entries().into_iter().find(|(n, _)| *n == name))
            .map_or_else(|| "-".to_string(), |(_, v)| v.to_string());
        let used = me
            .usage
            .get(name)
            .map_or_else(|| "-".into(), u64::to_string);
        println!("{name:<16} {used} of {quota}");
    }
    Ok(Ok(()))
}

fn written(args: &ClientArgs, w: &turnstile_client::Written, what: &str) -> anyhow::Result<()> {
    if args.json {
        return print_json(w);
    }
    println!("{what} (revision {})", w.revision);
    Ok(())
}

pub fn show_perm(p: &Permission) -> String {
    let kind = match p.kind {
        PermissionKind::Lock => "lock",
        PermissionKind::Key => "key",
        PermissionKind::Counter => "counter",
    };
    let access = match p.access {
        Access::Read => "read",
        Access::Write => "write",
    };
    format!("{kind}:{}:{access}", p.prefix)
}

fn show_quotas(q: &Quotas) -> String {
    let set: Vec<String> = q
        .entries()
        .into_iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    if set.is_empty() {
        String::new()
    } else {
        format!(", quotas {}", set.join(" "))
    }
}
