//! `turnstile elect NAME VALUE -- CMD ...`: campaigns in election NAME with VALUE under a
//! session, and runs CMD while leader. CMD gets `TURNSTILE_ELECTION`, `TURNSTILE_TOKEN` (the
//! leader's fencing token), `TURNSTILE_VALUE`, `TURNSTILE_CLUSTER_ID` and `TURNSTILE_LEASE_ID`
//! in its environment. When the leadership is lost (the session is lost, or the watch shows
//! it ended), CMD is stopped as `turnstile lock` stops it (SIGTERM, SIGKILL after
//! `--kill-after`); when CMD ends the leadership is resigned. Exit codes are `turnstile
//! lock`'s (1 if leadership was not won within `--wait`).
//!
//! `turnstile elect NAME --get` prints the current leader (`{lease_id, value, token,
//! since_ms}`, or `no leader`) and exits.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::process::{Child, Command};
use turnstile_client::{Leadership, LostReason};

use crate::client_cmd::{print_json, refused, ClientArgs};
use crate::duration_arg;
use crate::lock_cmd::{exit_code, supervise, CLEANUP_BUDGET_MS, EXIT_CANNOT_RUN};

/// `turnstile elect`.
#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Name of the election (the lock of the same name).
    name: String,
    /// The value to publish while leader.
    #[arg(required_unless_present = "get")]
    value: Option<String>,
    /// Print the current leader and exit instead of campaigning.
    #[arg(long, conflicts_with_all = ["value", "cmd"])]
    get: bool,
    /// TTL of the session's lease; keepalives go out every TTL/3.
    #[arg(long, default_value = "10s", value_parser = duration_arg::parse)]
    ttl: Duration,
    /// How long to wait in the election's queue; 0 fails at once if someone leads.
    #[arg(long, default_value = "30s", value_parser = duration_arg::parse)]
    wait: Duration,
    /// When the leadership is lost, how long CMD has after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = duration_arg::parse)]
    kill_after: Duration,
    /// The command to run while leader.
    #[arg(last = true, required_unless_present = "get", value_name = "CMD")]
    cmd: Vec<String>,
}

pub async fn run(args: &ClientArgs, e: ElectArgs) -> anyhow::Result<i32> {
    if e.get {
        return get(args, &e.name).await;
    }
    let value = e.value.clone().unwrap_or_default();
    let client = args.client()?;
    let session = match client.session(e.ttl).await {
        Ok(s) => s,
        Err(err) => return refused(err),
    };
    let leadership = match client
        .election(&e.name)
        .campaign(&session, &value, e.wait)
        .await
    {
        Ok(l) => l,
        Err(err) => {
            let _ = session.close().await;
            return refused(err);
        }
    };
    if args.json {
        eprintln!("{}", serde_json::to_string(leadership.campaigned())?);
    } else {
        eprintln!(
            "turnstile: leading {} (token {}, lease {})",
            e.name,
            leadership.token(),
            leadership.lease_id()
        );
    }
    let code = match spawn(&e.cmd, &leadership) {
        Ok(mut child) => {
            let (status, lost) = supervise(&mut child, leadership.lost(), e.kill_after).await?;
            if let Some(reason) = lost {
                eprintln!(
                    "turnstile: leadership of {} lost ({reason}); stopped {:?}",
                    e.name, e.cmd[0]
                );
            }
            exit_code(status)
        }
        Err(err) => {
            eprintln!("turnstile: cannot run {:?}: {err:#}", e.cmd[0]);
            EXIT_CANNOT_RUN
        }
    };
    cleanup(leadership).await;
    Ok(code)
}

async fn get(args: &ClientArgs, name: &str) -> anyhow::Result<i32> {
    let client = args.client()?;
    let info = match client.election(name).get().await {
        Ok(i) => i,
        Err(err) => return refused(err),
    };
    if args.json {
        print_json(&info)?;
        return Ok(0);
    }
    match info.leader {
        Some(l) => println!(
            "{name}: leader lease {} token {} since {} ms: {}",
            l.lease_id.map_or("-".into(), |v| v.to_string()),
            l.token.map_or("-".into(), |v| v.to_string()),
            l.since_ms,
            l.value
        ),
        None => println!("{name}: no leader"),
    }
    Ok(0)
}

fn spawn(cmd: &[String], l: &Leadership) -> anyhow::Result<Child> {
    let (program, rest) = cmd.split_first().context("no command given")?;
    let child = Command::new(program)
        .args(rest)
        .env("TURNSTILE_ELECTION", l.name())
        .env("TURNSTILE_TOKEN", l.token().to_string())
        .env("TURNSTILE_VALUE", l.value())
        .env("TURNSTILE_CLUSTER_ID", l.cluster_id().unwrap_or_default())
        .env("TURNSTILE_LEASE_ID", l.lease_id().to_string())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

/// Resigns and revokes the session's lease, briefly: if the cluster cannot be reached, the
/// lease expires by itself.
async fn cleanup(l: Leadership) {
    let session = l.session().clone();
    if session.lost().reason() == Some(LostReason::LeaseNotFound) {
        return;
    }
    let budget = Duration::from_millis(CLEANUP_BUDGET_MS);
    match tokio::time::timeout(budget, l.resign()).await {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => tracing::debug!(error = %err, "resign after the command failed"),
        Err(_) => tracing::debug!("resign after the command timed out"),
    }
    if tokio::time::timeout(budget, session.close()).await.is_err() {
        tracing::debug!("revoke after the command timed out");
    }
}
