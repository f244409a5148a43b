//! The CLI's client commands (`kv`, `lease`, `locks`, `watch`, `status`; `lock` is in
//! `lock_cmd.rs`), built on `turnstile-client`. Human output by default; `--json` prints the
//! API's JSON (one object per line for `watch`). Each command returns the process exit code:
//! 0 done, 1 refused (lock held, key absent, condition failed, lease gone, ...), 2 failed
//! (cluster unreachable, bad arguments), 3 outcome unknown (`indeterminate`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use futures::StreamExt;
use serde::Serialize;
use turnstile_client::{
    Client, ClientConfig, Condition, DeleteOptions, Error, Fence, LockInfo, PutOptions, Security,
    WatchEvent, WatchOptions,
};

use crate::duration_arg;

/// Exit code of a command that failed (cluster unreachable, bad arguments, ...).
pub const EXIT_ERROR: i32 = 2;
/// Exit code of a command that ran but was refused (lock held, key absent, ...).
pub const EXIT_REFUSED: i32 = 1;
/// Exit code when the outcome of a write is unknown (`indeterminate`).
pub const EXIT_INDETERMINATE: i32 = 3;

/// The refusal of a client command that was not told where the cluster is.
pub const NO_ENDPOINTS: &str = "no cluster to talk to: pass --endpoints HOST:PORT[,HOST:PORT...] \
     or set TURNSTILE_ENDPOINTS (`turnstile dev` prints the line for its cluster)";

/// Client options shared by every client command. clap lists global flags under every
/// subcommand, `serve` included, so they carry a heading of their own, and `main` refuses them
/// on the commands that run a node or make certificates (`serve`, `dev`, `certs`).
#[derive(Args, Clone)]
#[command(next_help_heading = "Client options (client commands only)")]
pub struct ClientArgs {
    /// Cluster nodes to talk to (any node answers; the others are tried when one fails):
    /// ip:port, http://h:p or https://h:p. With --cacert, ip:port means https. No default:
    /// a client command without it (or TURNSTILE_ENDPOINTS) is refused rather than sent to
    /// whatever listens on some well-known local port. `turnstile dev` prints the line to use.
    #[arg(
        long,
        global = true,
        env = "TURNSTILE_ENDPOINTS",
        value_delimiter = ',',
        value_name = "ENDPOINTS"
    )]
    pub endpoints: Vec<String>,
    /// Print JSON (for scripts) instead of human-readable text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The cluster's CA certificate (PEM): turns TLS on and is the only CA trusted.
    #[arg(long, global = true, env = "TURNSTILE_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) to authenticate with; its CN is the principal. Needs --key.
    /// Given before the command (not global: `watch --key` and `kv put KEY` are taken).
    #[arg(
        long = "cert",
        id = "client_cert",
        env = "TURNSTILE_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert. Given before the command.
    #[arg(
        long = "key",
        id = "client_key",
        env = "TURNSTILE_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    pub key: Option<PathBuf>,
    /// Bearer token to authenticate with (from `turnstile auth token create`). Read from
    /// TURNSTILE_AUTH_TOKEN, not TURNSTILE_TOKEN: `turnstile lock` gives its command the
    /// fencing token under that name.
    #[arg(
        long,
        global = true,
        env = "TURNSTILE_AUTH_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
}

/// The token never reaches a log or a panic message.
impl std::fmt::Debug for ClientArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientArgs")
            .field("endpoints", &self.endpoints)
            .field("json", &self.json)
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ClientArgs {
    /// A client for every endpoint in --endpoints.
    pub fn client(&self) -> anyhow::Result<Client> {
        self.client_for(self.endpoints()?)
    }

    /// --endpoints (or TURNSTILE_ENDPOINTS), or the error that says how to give them.
    pub fn endpoints(&self) -> anyhow::Result<Vec<String>> {
        if self.endpoints.iter().all(|e| e.trim().is_empty()) {
            anyhow::bail!("{NO_ENDPOINTS}");
        }
        Ok(self.endpoints.clone())
    }

    /// A client for these endpoints, with the TLS and credential flags.
    pub fn client_for(&self, endpoints: Vec<String>) -> anyhow::Result<Client> {
        let config = ClientConfig {
            security: self.security()?,
            ..ClientConfig::default()
        };
        Ok(Client::with_config(endpoints, config)?)
    }

    fn security(&self) -> anyhow::Result<Security> {
        let mut security = Security::default();
        if let Some(ca) = &self.cacert {
            security = security.with_ca_file(ca)?;
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => security = security.with_identity_files(cert, key)?,
            (None, None) => {}
            // clap's `requires` normally stops this first.
            _ => anyhow::bail!("--cert and --key go together: give both or neither"),
        }
        if let Some(token) = &self.token {
            security = security.with_token(token.clone());
        }
        Ok(security)
    }
}

#[derive(Subcommand, Debug)]
pub enum KvCmd {
    /// Print a key's value.
    Get { key: String },
    /// Write a key.
    Put {
        key: String,
        value: String,
        /// Bind the key to a lease: it is deleted when the lease ends.
        #[arg(long)]
        lease: Option<u64>,
        #[command(flatten)]
        guards: Guards,
    },
    /// Delete a key.
    Del {
        key: String,
        #[command(flatten)]
        guards: Guards,
    },
    /// List keys and values (every page, up to --max).
    List(crate::range_cmd::ListArgs),
}

/// `if` conditions and the fence of a key write.
#[derive(Args, Debug)]
pub struct Guards {
    /// Write only if the key does not exist.
    #[arg(long, conflicts_with_all = ["if_mod_revision", "if_value"])]
    if_absent: bool,
    /// Write only if the key's mod_revision is this.
    #[arg(long, conflicts_with = "if_value")]
    if_mod_revision: Option<u64>,
    /// Write only if the key's value is this.
    #[arg(long)]
    if_value: Option<String>,
    /// Fenced write: apply only while --fence-token is this lock's current grant.
    #[arg(long, requires = "fence_token")]
    fence_lock: Option<String>,
    #[arg(long, requires = "fence_lock")]
    fence_token: Option<u64>,
}

impl Guards {
    fn condition(&self) -> Option<Condition> {
        if self.if_absent {
            return Some(Condition::Absent);
        }
        if let Some(r) = self.if_mod_revision {
            return Some(Condition::ModRevision(r));
        }
        self.if_value.clone().map(Condition::Value)
    }

    fn fence(&self) -> Option<Fence> {
        Some(Fence {
            lock: self.fence_lock.clone()?,
            token: self.fence_token?,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    /// Grant a lease and print its id.
    Grant {
        /// Time to live (1s to 1h), as `lease grant 10s` or `lease grant --ttl 10s`.
        #[arg(value_parser = duration_arg::parse, required_unless_present = "ttl_flag", conflicts_with = "ttl_flag")]
        ttl: Option<Duration>,
        /// The same as the positional TTL (`turnstile lock` takes `--ttl` too).
        #[arg(long = "ttl", id = "ttl_flag", value_parser = duration_arg::parse, value_name = "TTL")]
        ttl_flag: Option<Duration>,
    },
    /// Keep a lease alive (every TTL/3) until interrupted, or once with --once.
    Keepalive {
        id: u64,
        #[arg(long)]
        once: bool,
    },
    /// End a lease now: releases its locks and deletes its keys.
    Revoke { id: u64 },
    /// Show a lease: TTL, time left, its locks and keys.
    Get { id: u64 },
}

/// `turnstile watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Watch every key and lock name starting with this.
    #[arg(long, conflicts_with = "key")]
    prefix: Option<String>,
    /// Watch one key or lock name.
    #[arg(long)]
    key: Option<String>,
    /// First revision to show (inclusive); 0 means from now.
    #[arg(long, default_value_t = 0)]
    from_revision: u64,
}

pub fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// Reports a refusal on stderr and picks the exit code: refusals are expected outcomes
/// (exit 1), an unknown outcome has its own code, anything else is an error.
pub fn refused(e: Error) -> anyhow::Result<i32> {
    match e {
        Error::Indeterminate { .. } => {
            eprintln!("turnstile: {e}");
            Ok(EXIT_INDETERMINATE)
        }
        Error::LockHeld { .. }
        | Error::NotHolder { .. }
        | Error::NotLeader { .. }
        | Error::LeaseNotFound { .. }
        | Error::KeyNotFound { .. }
        | Error::WaitTimeout { .. }
        | Error::ModeMismatch { .. }
        | Error::DeadlockVictim { .. }
        | Error::Fenced { .. }
        | Error::CompareFailed { .. }
        | Error::RequestIdReused { .. }
        | Error::CounterOverflow { .. }
        | Error::PermissionDenied { .. }
        | Error::QuotaExceeded { .. } => {
            eprintln!("turnstile: {e}");
            Ok(EXIT_REFUSED)
        }
        e => Err(e.into()),
    }
}

pub async fn kv(args: &ClientArgs, cmd: KvCmd) -> anyhow::Result<i32> {
    let client = args.client()?;
    match cmd {
        KvCmd::List(l) => crate::range_cmd::kv_list(args, l).await,
        KvCmd::Get { key } => match client.get(&key).await {
            Ok(Some(kv)) if args.json => print_json(&kv).map(|()| 0),
            Ok(Some(kv)) => {
                println!("{}", kv.value);
                Ok(0)
            }
            Ok(None) => {
                eprintln!("turnstile: key {key:?} not found");
                Ok(EXIT_REFUSED)
            }
            Err(e) => refused(e),
        },
        KvCmd::Put {
            key,
            value,
            lease,
            guards,
        } => {
            let opts = PutOptions {
                lease_id: lease,
                condition: guards.condition(),
                fence: guards.fence(),
            };
            match client.put(&key, &value, opts).await {
                Ok(w) if args.json => print_json(&w).map(|()| 0),
                Ok(w) => {
                    println!("OK (revision {})", w.revision);
                    Ok(0)
                }
                Err(e) => refused(e),
            }
        }
        KvCmd::Del { key, guards } => {
            let opts = DeleteOptions {
                condition: guards.condition(),
                fence: guards.fence(),
            };
            match client.delete(&key, opts).await {
                Ok(d) if args.json => print_json(&d).map(|()| 0),
                Ok(d) => {
                    let what = if d.deleted { "deleted" } else { "absent" };
                    println!("{what} (revision {})", d.revision);
                    Ok(0)
                }
                Err(e) => refused(e),
            }
        }
    }
}

pub async fn lease(args: &ClientArgs, cmd: LeaseCmd) -> anyhow::Result<i32> {
    let client = args.client()?;
    let result = match cmd {
        LeaseCmd::Grant { ttl, ttl_flag } => {
            // clap makes exactly one of the two present.
            let ttl = ttl.or(ttl_flag).unwrap_or_default();
            client.grant_lease(ttl).await.map(|g| {
                if args.json {
                    return print_json(&g);
                }
                println!("lease {} granted (ttl {} ms)", g.lease_id, g.ttl_ms);
                Ok(())
            })
        }
        LeaseCmd::Keepalive { id, once } => return keepalive(args, &client, id, once).await,
        LeaseCmd::Revoke { id } => client.revoke_lease(id).await.map(|w| {
            if args.json {
                return print_json(&w);
            }
            println!("lease {id} revoked (revision {})", w.revision);
            Ok(())
        }),
        LeaseCmd::Get { id } => client.lease(id).await.map(|l| {
            if args.json {
                return print_json(&l);
            }
            println!(
                "lease {}: ttl {} ms, {} ms left, locks [{}], keys [{}]",
                l.lease_id,
                l.ttl_ms,
                l.remaining_ms,
                l.locks.join(", "),
                l.keys.join(", ")
            );
            Ok(())
        }),
    };
    match result {
        Ok(printed) => printed.map(|()| 0),
        Err(e) => refused(e),
    }
}

async fn keepalive(args: &ClientArgs, client: &Client, id: u64, once: bool) -> anyhow::Result<i32> {
    loop {
        let k = match client.keepalive(id).await {
            Ok(k) => k,
            Err(e) => return refused(e),
        };
        if args.json {
            print_json(&k)?;
        } else {
            println!("lease {id} renewed: ttl {} ms", k.ttl_ms);
        }
        if once {
            return Ok(0);
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(k.ttl_ms / 3)) => {}
            () = crate::wait_for_signal() => return Ok(0),
        }
    }
}

pub async fn locks(args: &ClientArgs, name: &str) -> anyhow::Result<i32> {
    let info = match args.client()?.locks(name).await {
        Ok(info) => info,
        Err(e) => return refused(e),
    };
    if args.json {
        print_json(&info)?;
    } else {
        print_lock(&info);
    }
    Ok(0)
}

/// A lease id or token, or `-` where the cluster hides another principal's.
fn shown(id: Option<u64>) -> String {
    id.map_or_else(|| "-".into(), |id| id.to_string())
}

pub fn print_lock(info: &LockInfo) {
    if info.holders.is_empty() && info.waiters.is_empty() {
        println!("{}: free", info.name);
        return;
    }
    println!("{} (permits {})", info.name, info.permits);
    println!("  holders:");
    for h in &info.holders {
        println!(
            "    lease {:<8} token {:<8} {:<9} since {} ms",
            shown(h.lease_id),
            shown(h.token),
            h.mode,
            h.since_ms
        );
    }
    println!("  waiters ({}):", info.waiters.len());
    for (i, w) in info.waiters.iter().enumerate() {
        println!(
            "    {:>3}. lease {:<8} {:<9} since {} ms",
            i + 1,
            shown(w.lease_id),
            w.mode,
            w.since_ms
        );
    }
}

pub async fn watch(args: &ClientArgs, w: WatchArgs) -> anyhow::Result<i32> {
    let client = args.client()?;
    let opts = WatchOptions {
        key: w.key,
        prefix: w.prefix,
        from_revision: w.from_revision,
        ..WatchOptions::default()
    };
    let mut stream = client.watch(opts);
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            () = crate::wait_for_signal() => return Ok(0),
        };
        match next {
            None => return Ok(0),
            Some(Ok(ev)) => print_event(args.json, &ev)?,
            Some(Err(e @ Error::Compacted { .. })) => {
                eprintln!("turnstile: {e}");
                return Ok(EXIT_REFUSED);
            }
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

fn print_event(json: bool, ev: &WatchEvent) -> anyhow::Result<()> {
    if json {
        return print_json(&ev.data);
    }
    let kind = ev.data.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
    let mut line = format!("{:<10} {kind:<13}", ev.id());
    let fields = ["key", "value", "lock", "lease_id", "token", "mode", "cause"];
    for f in fields {
        match ev.data.get(f) {
            None | Some(serde_json::Value::Null) => {}
            Some(v) => line.push_str(&format!(" {f}={v}")),
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

pub async fn status(args: &ClientArgs) -> anyhow::Result<i32> {
    let client = args.client()?;
    let raw = client.cluster_raw().await?;
    if args.json {
        print_json(&raw)?;
        return Ok(0);
    }
    let info: turnstile_client::ClusterInfo =
        serde_json::from_value(raw).context("unexpected /v1/cluster answer")?;
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    println!("cluster   {}", or_none(info.cluster_id));
    println!(
        "node      {} ({}, phase {})",
        info.node_id, info.state, info.phase
    );
    println!(
        "leader    {}",
        or_none(info.leader_id.map(|l| l.to_string()))
    );
    println!("term      {}", info.term);
    println!(
        "index     commit {} applied {}",
        or_none(info.commit_index.map(|c| c.to_string())),
        info.applied_index
    );
    println!("members:");
    for m in &info.members {
        let role = if m.voter { "voter" } else { "learner" };
        let leader = if Some(m.id) == info.leader_id {
            " (leader)"
        } else {
            ""
        };
        println!("  {:<4} {:<22} {role}{leader}", m.id, m.addr);
    }
    Ok(0)
}
