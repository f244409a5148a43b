//! Operator commands: `member list|add|promote|remove`, `snapshot`, `backup` (through the
//! API) and `restore` (offline, into a new node's empty data dir).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use turnstile_client::{Error, Members};
use turnstile_server::backup::{self, RestorePlan};
use turnstile_server::config::parse_initial_cluster;

use crate::client_cmd::{print_json, ClientArgs, EXIT_REFUSED};

#[derive(Subcommand, Debug)]
pub enum MemberCmd {
    /// List the members and their roles.
    List,
    /// Add a node as a learner; returns once it has caught up. Start the node first with
    /// `--initial-cluster-state existing`.
    Add {
        /// The new node's id.
        id: u64,
        /// The new node's address, ip:port.
        addr: String,
    },
    /// Make a learner a voter.
    Promote { id: u64 },
    /// Remove a node (refused if the remaining voters could not form a quorum).
    Remove { id: u64 },
}

/// `turnstile backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// File to write (it must not exist yet).
    #[arg(long, short)]
    out: PathBuf,
}

/// `turnstile restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Backup file written by `turnstile backup`.
    #[arg(long)]
    from: PathBuf,
    /// This node's new, empty data dir.
    #[arg(long)]
    data_dir: PathBuf,
    /// This node's id in the new cluster.
    #[arg(long)]
    id: u64,
    /// Every member of the new cluster as `id=ip:port`, comma separated (as for `serve`).
    #[arg(long)]
    initial_cluster: String,
    /// The new cluster's id. Omit it for the first node: a fresh one is made and printed;
    /// pass that one when restoring the other nodes.
    #[arg(long)]
    cluster_id: Option<String>,
}

pub async fn member(args: &ClientArgs, cmd: MemberCmd) -> anyhow::Result<i32> {
    let client = args.client()?;
    let result = match cmd {
        MemberCmd::List => client.members().await,
        MemberCmd::Add { id, addr } => client.add_member(id, &addr).await,
        MemberCmd::Promote { id } => client.promote_member(id).await,
        MemberCmd::Remove { id } => client.remove_member(id).await,
    };
    match result {
        Ok(m) if args.json => print_json(&m).map(|()| 0),
        Ok(m) => {
            print_members(&m);
            Ok(0)
        }
        Err(
            e @ (Error::Server { status: 409, .. }
            | Error::PermissionDenied { .. }
            | Error::QuotaExceeded { .. }),
        ) => {
            eprintln!("turnstile: {e}");
            Ok(EXIT_REFUSED)
        }
        Err(e) => Err(e.into()),
    }
}

fn print_members(m: &Members) {
    for member in &m.members {
        let role = if member.voter { "voter" } else { "learner" };
        let leader = if Some(member.id) == m.leader_id {
            " (leader)"
        } else {
            ""
        };
        let unreachable = if member.reachable == Some(false) {
            " (unreachable)"
        } else {
            ""
        };
        println!(
            "{:<4} {:<22} {role}{leader}{unreachable}",
            member.id, member.addr
        );
    }
}

/// Snapshots every node in `--endpoints` (each node snapshots its own state).
pub async fn snapshot(args: &ClientArgs) -> anyhow::Result<i32> {
    let mut code = 0;
    for endpoint in &args.endpoints()? {
        let client = args.client_for(vec![endpoint.clone()])?;
        match client.snapshot().await {
            Ok(s) if args.json => print_json(&s)?,
            Ok(s) => println!(
                "node {} at {endpoint}: snapshot at index {}",
                s.node_id, s.last_snapshot_index
            ),
            Err(e) => {
                eprintln!("turnstile: {endpoint}: {e}");
                code = crate::client_cmd::EXIT_ERROR;
            }
        }
    }
    Ok(code)
}

pub async fn backup(args: &ClientArgs, cmd: BackupArgs) -> anyhow::Result<i32> {
    if cmd.out.exists() {
        anyhow::bail!("{} exists; choose a new file", cmd.out.display());
    }
    let bytes = args.client()?.backup().await?;
    write_durably(&cmd.out, &bytes)
        .with_context(|| format!("cannot write {}", cmd.out.display()))?;
    println!("wrote {} ({} bytes)", cmd.out.display(), bytes.len());
    Ok(0)
}

/// Writes to a temporary name, fsyncs, and renames, so a crash never leaves half a backup
/// under the final name.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("partial");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub async fn restore(json: bool, cmd: RestoreArgs) -> anyhow::Result<i32> {
    let initial_cluster = parse_initial_cluster(&cmd.initial_cluster)?;
    let cluster_id = cmd.cluster_id.unwrap_or_else(backup::new_cluster_id);
    let plan = RestorePlan {
        backup: cmd.from,
        data_dir: cmd.data_dir,
        node_id: cmd.id,
        initial_cluster,
        cluster_id,
    };
    let restored = backup::restore(&plan).await?;
    if json {
        print_json(&serde_json::json!({
            "cluster_id": restored.cluster_id,
            "source_cluster_id": restored.source_cluster_id,
            "last_index": restored.last_index,
        }))?;
    } else {
        println!(
            "restored node {} into {} at index {}: new cluster id {} (was {})",
            plan.node_id,
            plan.data_dir.display(),
            restored.last_index,
            restored.cluster_id,
            restored.source_cluster_id.as_deref().unwrap_or("none"),
        );
        println!(
            "restore the other nodes with --cluster-id {}, then start each with `turnstile serve`",
            restored.cluster_id
        );
    }
    Ok(0)
}
