//! `turnstile lock NAME... -- CMD ...`: runs CMD while holding a lock (or, given several
//! names, all of them at once through acquire-many: one entry, one token), under a session
//! whose lease is kept alive in the background. CMD gets `TURNSTILE_LOCK` (the names, comma
//! separated), `TURNSTILE_TOKEN` (the fencing token), `TURNSTILE_CLUSTER_ID` and
//! `TURNSTILE_LEASE_ID` in its environment. When the
//! session is lost (the lease is gone, or no keepalive was confirmed before the local
//! deadline), CMD is stopped: SIGTERM, then SIGKILL after `--kill-after`. The lock is released
//! when CMD ends, and the exit code is CMD's (128 + signal if a signal ended it; 127 if it
//! cannot be started; 1 if the lock was not granted). Status lines (and, with `--json`, the
//! grant as JSON) go to stderr, leaving stdout to CMD.
//!
//! CMD runs in its own process group, so the whole group is signalled (a `sh -c` wrapper and
//! what it started); SIGINT, SIGTERM and SIGHUP sent to this process are passed on to it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use turnstile_client::{LockGuard, LockOptions, Lost, LostReason, ManyGuard, Mode, Session};

use crate::client_cmd::{refused, ClientArgs};
use crate::duration_arg;

/// Exit code when CMD cannot be started (as a shell reports a missing command).
pub(crate) const EXIT_CANNOT_RUN: i32 = 127;
/// Retry budget of the release and revoke after CMD ends: short, since the lease ends by
/// itself anyway.
pub(crate) const CLEANUP_BUDGET_MS: u64 = 3_000;

/// Most names one `turnstile lock` takes (the server's acquire-many bound).
const NAMES_MAX: usize = 64;

/// `turnstile lock`.
#[derive(Args, Debug)]
pub struct LockArgs {
    /// Name of the lock; several names take them all at once (acquire-many: exclusive, all
    /// or nothing, one token).
    #[arg(required = true, num_args = 1..=NAMES_MAX, value_name = "NAME")]
    names: Vec<String>,
    /// TTL of the session's lease; keepalives go out every TTL/3.
    #[arg(long, default_value = "10s", value_parser = duration_arg::parse)]
    ttl: Duration,
    /// How long to wait in the lock's queue; 0 fails at once if the lock is held.
    #[arg(long, default_value = "30s", value_parser = duration_arg::parse)]
    wait: Duration,
    /// Take the lock in shared (read) mode.
    #[arg(long)]
    shared: bool,
    /// Treat NAME as a semaphore of this many permits (the first acquire of an idle lock
    /// sets it; a different figure while it is held is refused). Without it: 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    permits: Option<u32>,
    /// When the lock is lost, how long CMD has after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = duration_arg::parse)]
    kill_after: Duration,
    /// The command to run while holding the lock.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

/// What `turnstile lock` holds: one lock, or a set granted together.
enum Held {
    One(LockGuard),
    Many(ManyGuard),
}

impl Held {
    fn names(&self) -> String {
        match self {
            Held::One(g) => g.name().to_string(),
            Held::Many(g) => g.names().collect::<Vec<_>>().join(","),
        }
    }

    fn token(&self) -> u64 {
        match self {
            Held::One(g) => g.token(),
            Held::Many(g) => g.token(),
        }
    }

    fn cluster_id(&self) -> &str {
        match self {
            Held::One(g) => g.cluster_id(),
            Held::Many(g) => g.cluster_id(),
        }
        .unwrap_or_default()
    }

    fn lease_id(&self) -> u64 {
        match self {
            Held::One(g) => g.lease_id(),
            Held::Many(g) => g.lease_id(),
        }
    }

    fn lost(&self) -> Lost {
        match self {
            Held::One(g) => g.lost(),
            Held::Many(g) => g.lost(),
        }
    }

    fn session(&self) -> Session {
        match self {
            Held::One(g) => g.session().clone(),
            Held::Many(g) => g.session().clone(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Held::One(g) => serde_json::to_value(g.grant()).unwrap_or_default(),
            Held::Many(g) => serde_json::json!({
                "names": g.names().collect::<Vec<_>>(),
                "token": g.token(),
                "lease_id": g.lease_id(),
                "cluster_id": g.cluster_id(),
            }),
        }
    }

    async fn release(self) -> Result<turnstile_client::Written, turnstile_client::Error> {
        match self {
            Held::One(g) => g.release().await,
            Held::Many(g) => g.release().await,
        }
    }
}

/// Takes what the arguments name under `session`.
async fn take(session: &Session, l: &LockArgs) -> Result<Held, turnstile_client::Error> {
    if let [name] = l.names.as_slice() {
        let opts = LockOptions {
            wait: l.wait,
            mode: if l.shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            permits: l.permits,
        };
        return session.lock(name, opts).await.map(Held::One);
    }
    session.lock_many(&l.names, l.wait).await.map(Held::Many)
}

pub async fn run(args: &ClientArgs, l: LockArgs) -> anyhow::Result<i32> {
    if l.names.len() > 1 && (l.shared || l.permits.is_some()) {
        anyhow::bail!(
            "several names are taken together, exclusive: --shared and --permits take one NAME"
        );
    }
    let client = args.client()?;
    let session = match client.session(l.ttl).await {
        Ok(s) => s,
        Err(e) => return refused(e),
    };
    let held = match take(&session, &l).await {
        Ok(h) => h,
        Err(e) => {
            let _ = session.close().await;
            return refused(e);
        }
    };
    if args.json {
        eprintln!("{}", serde_json::to_string(&held.json())?);
    } else {
        eprintln!(
            "turnstile: acquired {} (token {}, lease {})",
            held.names(),
            held.token(),
            held.lease_id()
        );
    }
    let code = match spawn(&l.cmd, &held) {
        Ok(mut child) => {
            let (status, lost) = supervise(&mut child, held.lost(), l.kill_after).await?;
            if let Some(reason) = lost {
                eprintln!(
                    "turnstile: lock {} lost ({reason}); stopped {:?}",
                    held.names(),
                    l.cmd[0]
                );
            }
            exit_code(status)
        }
        Err(e) => {
            eprintln!("turnstile: cannot run {:?}: {e:#}", l.cmd[0]);
            EXIT_CANNOT_RUN
        }
    };
    cleanup(held).await;
    Ok(code)
}

fn spawn(cmd: &[String], held: &Held) -> anyhow::Result<Child> {
    let (program, rest) = cmd.split_first().context("no command given")?;
    let child = Command::new(program)
        .args(rest)
        .env("TURNSTILE_LOCK", held.names())
        .env("TURNSTILE_TOKEN", held.token().to_string())
        .env("TURNSTILE_CLUSTER_ID", held.cluster_id())
        .env("TURNSTILE_LEASE_ID", held.lease_id().to_string())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

/// Waits for CMD, passing signals on, and stops it when the session is lost. Returns CMD's
/// status and, if it was stopped for that, why the session was lost.
pub(crate) async fn supervise(
    child: &mut Child,
    lost: Lost,
    kill_after: Duration,
) -> anyhow::Result<(ExitStatus, Option<LostReason>)> {
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .context("the child has no pid")?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            status = child.wait() => return Ok((status?, None)),
            reason = lost.wait() => {
                send(group, Signal::SIGTERM);
                let status = match tokio::time::timeout(kill_after, child.wait()).await {
                    Ok(status) => status?,
                    Err(_) => {
                        send(group, Signal::SIGKILL);
                        child.wait().await?
                    }
                };
                return Ok((status, Some(reason)));
            }
            _ = int.recv() => send(group, Signal::SIGINT),
            _ = term.recv() => send(group, Signal::SIGTERM),
            _ = hup.recv() => send(group, Signal::SIGHUP),
        }
    }
}

fn send(group: Pid, sig: Signal) {
    // The group may be gone already (CMD exited); nothing more to do then.
    if let Err(e) = killpg(group, sig) {
        tracing::debug!(%group, ?sig, error = %e, "cannot signal the command's process group");
    }
}

pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Releases the hold and revokes the session's lease, briefly: if the cluster cannot be
/// reached, the lease expires by itself.
async fn cleanup(held: Held) {
    let session = held.session();
    if session.lost().reason() == Some(LostReason::LeaseNotFound) {
        return;
    }
    let budget = Duration::from_millis(CLEANUP_BUDGET_MS);
    match tokio::time::timeout(budget, held.release()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "release after the command failed"),
        Err(_) => tracing::debug!("release after the command timed out"),
    }
    if tokio::time::timeout(budget, session.close()).await.is_err() {
        tracing::debug!("revoke after the command timed out");
    }
}
