//! The CLI's range and transaction commands: `kv list`, `locks list`, `leases list` (every
//! page, up to `--max` items) and `txn` (a JSON body from a file or stdin). Exit codes as in
//! `client_cmd.rs`; `txn` exits 1 when its compares failed and the `failure` branch ran.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use turnstile_client::{TxnResponse, TxnResult};

use crate::client_cmd::{print_json, print_lock, refused, ClientArgs, EXIT_REFUSED};

/// Items a listing prints unless `--max` says otherwise.
const LIST_ITEMS_DEFAULT: usize = 10_000;
/// Largest transaction file read, in bytes (the server takes at most 256 KiB).
const TXN_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// `--prefix` and `--max` of the listings.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// List only names starting with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Stop after this many items (the listing says when more remain).
    #[arg(long, default_value_t = LIST_ITEMS_DEFAULT)]
    max: usize,
}

/// `turnstile locks ...`: one lock by name, or `list`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LocksArgs {
    #[command(subcommand)]
    cmd: Option<LocksCmd>,
    /// Name of the lock to show (a lock named `list`: `turnstile locks -- list`).
    name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum LocksCmd {
    /// List held or waited-for locks (idle locks are not stored).
    List(ListArgs),
}

#[derive(Subcommand, Debug)]
pub enum LeasesCmd {
    /// List your leases (root: every lease).
    List {
        #[arg(long, default_value_t = LIST_ITEMS_DEFAULT)]
        max: usize,
    },
}

/// `turnstile txn [FILE]`.
#[derive(Args, Debug)]
pub struct TxnArgs {
    /// The transaction as JSON ({compare, success, failure}); `-` or none reads stdin.
    file: Option<PathBuf>,
}

fn truncated(truncated: bool, max: usize) {
    if truncated {
        eprintln!("turnstile: stopped at {max} items (--max); more remain");
    }
}

pub async fn kv_list(args: &ClientArgs, l: ListArgs) -> anyhow::Result<i32> {
    let listing = match args.client()?.all_keys(&l.prefix, l.max).await {
        Ok(listing) => listing,
        Err(e) => return refused(e),
    };
    if args.json {
        print_json(&listing.items)?;
    } else {
        for kv in &listing.items {
            println!("{}\t{}", kv.key, kv.value);
        }
    }
    truncated(listing.truncated, l.max);
    Ok(0)
}

pub async fn locks(args: &ClientArgs, l: LocksArgs) -> anyhow::Result<i32> {
    let list = match (l.cmd, l.name) {
        (Some(LocksCmd::List(list)), _) => list,
        (None, Some(name)) => return crate::client_cmd::locks(args, &name).await,
        (None, None) => anyhow::bail!("name a lock, or `turnstile locks list`"),
    };
    let listing = match args.client()?.all_locks(&list.prefix, list.max).await {
        Ok(listing) => listing,
        Err(e) => return refused(e),
    };
    if args.json {
        print_json(&listing.items)?;
    } else {
        listing.items.iter().for_each(print_lock);
    }
    truncated(listing.truncated, list.max);
    Ok(0)
}

pub async fn leases(args: &ClientArgs, cmd: LeasesCmd) -> anyhow::Result<i32> {
    let LeasesCmd::List { max } = cmd;
    let listing = match args.client()?.all_leases(max).await {
        Ok(listing) => listing,
        Err(e) => return refused(e),
    };
    if args.json {
        print_json(&listing.items)?;
    } else {
        for l in &listing.items {
            println!(
                "lease {}: ttl {} ms, {} ms left",
                l.lease_id, l.ttl_ms, l.remaining_ms
            );
        }
    }
    truncated(listing.truncated, max);
    Ok(0)
}

fn read_body(file: Option<&PathBuf>) -> anyhow::Result<serde_json::Value> {
    let mut text = String::new();
    let what = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            let f = std::fs::File::open(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            f.take(TXN_FILE_BYTES_MAX)
                .read_to_string(&mut text)
                .with_context(|| format!("cannot read {}", path.display()))?;
            path.display().to_string()
        }
        None => {
            std::io::stdin()
                .take(TXN_FILE_BYTES_MAX)
                .read_to_string(&mut text)
                .context("cannot read stdin")?;
            "stdin".to_string()
        }
    };
    serde_json::from_str(&text).with_context(|| format!("invalid JSON in {what}"))
}

fn print_txn(r: &TxnResponse) {
    let branch = if r.succeeded { "success" } else { "failure" };
    println!("{branch} branch applied (revision {})", r.revision);
    for (i, res) in r.results.iter().enumerate() {
        let line = match res {
            TxnResult::Put { revision, existed } => {
                let what = if *existed { "replaced" } else { "created" };
                format!("put: {what} (revision {revision})")
            }
            TxnResult::Delete { revision, existed } => {
                let what = if *existed { "deleted" } else { "absent" };
                format!("delete: {what} (revision {revision})")
            }
            TxnResult::Get(Some(kv)) => format!(
                "get {}: {} (mod_revision {}, version {})",
                kv.key, kv.value, kv.mod_revision, kv.version
            ),
            TxnResult::Get(None) => "get: absent".to_string(),
            TxnResult::Incr { counter, value } => format!("incr {counter}: {value}"),
        };
        println!("  {}. {line}", i + 1);
    }
}

pub async fn txn(args: &ClientArgs, t: TxnArgs) -> anyhow::Result<i32> {
    let body = read_body(t.file.as_ref())?;
    let r = match args.client()?.txn_json(body).await {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    if args.json {
        print_json(&r)?;
    } else {
        print_txn(&r);
    }
    Ok(if r.succeeded { 0 } else { EXIT_REFUSED })
}
