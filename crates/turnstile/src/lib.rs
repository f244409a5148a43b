//! The `turnstile` binary's code (`src/main.rs` only adds the allocator and calls [`run`]):
//! `serve` runs one node, `dev` runs a local cluster in the
//! foreground, the client commands (`lock`, `elect`, `kv`, `lease`, `leases`, `locks`,
//! `counter`, `txn`, `watch`, `status`, in `client_cmd.rs`, `counter_cmd.rs`, `lock_cmd.rs`,
//! `elect_cmd.rs` and `range_cmd.rs`)
//! and the operator commands (`member`, `snapshot`, `backup`, `restore`, in `admin_cmd.rs`)
//! talk to a cluster through `turnstile-client`; `certs` (in `certs_cmd.rs`) makes the
//! cluster's CA, node and client certificates.
//!
//! A library so that the command-line tests (`tests/suite/cli_parse.rs`) link it into the
//! crate's one test executable: a unit-test build of a binary crate this size costs CI about
//! a minute of compile on two cores. It is not a public API.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use turnstile_server::config::ServeArgs;

pub mod admin_cmd;
pub mod auth_cmd;
pub mod certs_cmd;
pub mod client_cmd;
pub mod counter_cmd;
pub mod dev;
pub mod duration_arg;
pub mod elect_cmd;
pub mod lock_cmd;
pub mod range_cmd;

/// The command line.
#[derive(Parser)]
#[command(
    name = "turnstile",
    version,
    about = "A Raft-replicated lock store with fencing tokens"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, env = "TURNSTILE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub client: client_cmd::ClientArgs,
    #[command(subcommand)]
    pub command: Cmd,
}

/// How logs are written.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Run one node.
    Serve(Box<ServeArgs>),
    /// Run a local cluster on loopback in the foreground (Ctrl-C stops it).
    Dev(dev::DevArgs),
    /// Make the cluster CA, node certificates and client certificates.
    #[command(subcommand)]
    Certs(certs_cmd::CertsCmd),
    /// Run a command while holding a lock: turnstile lock NAME [--ttl 10s] [--wait 30s] -- CMD ...
    Lock(lock_cmd::LockArgs),
    /// Run a command while leading an election: turnstile elect NAME VALUE [--ttl 10s]
    /// [--wait 30s] -- CMD ...; or show the leader: turnstile elect NAME --get
    Elect(elect_cmd::ElectArgs),
    /// Read and write keys.
    #[command(subcommand)]
    Kv(client_cmd::KvCmd),
    /// Grant, keep alive, revoke and show leases.
    #[command(subcommand)]
    Lease(client_cmd::LeaseCmd),
    /// Read and increment sequence counters.
    #[command(subcommand)]
    Counter(counter_cmd::CounterCmd),
    /// Show a lock's holders and its queue of waiters, or list locks (`locks list`).
    Locks(range_cmd::LocksArgs),
    /// List your leases.
    #[command(subcommand)]
    Leases(range_cmd::LeasesCmd),
    /// Run a transaction given as JSON in a file or on stdin.
    Txn(range_cmd::TxnArgs),
    /// Stream changes to keys and locks (until interrupted).
    Watch(client_cmd::WatchArgs),
    /// Show the cluster as the answering node sees it.
    Status,
    /// List, add, promote and remove cluster members.
    #[command(subcommand)]
    Member(admin_cmd::MemberCmd),
    /// Make every node in --endpoints write a snapshot now and compact its log.
    Snapshot,
    /// Write a consistent backup of the cluster's state to a file.
    Backup(admin_cmd::BackupArgs),
    /// Seed a new node's empty data dir from a backup, for a new cluster (offline).
    Restore(admin_cmd::RestoreArgs),
    /// Manage roles, users and tokens (root), or show who you are (whoami).
    #[command(subcommand)]
    Auth(auth_cmd::AuthCmd),
}

/// The log filter without `TURNSTILE_LOG`. openraft's heartbeat and replication loops warn on
/// every failed call to a cut peer (hundreds a minute); the peer network logs each outage once
/// instead (`turnstile_raft::peer_health`), so those two modules log errors only.
const DEFAULT_LOG_FILTER: &str =
    "info,openraft=warn,openraft::core::heartbeat=error,openraft::replication=error";

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Ids of the client flags (`ClientArgs`), refused by the commands that do not talk to a
/// cluster as a client.
const CLIENT_FLAG_IDS: [&str; 6] = [
    "endpoints",
    "json",
    "cacert",
    "client_cert",
    "client_key",
    "token",
];

/// Parses the command line; a client flag typed on a command that ignores it (`serve
/// --endpoints ...`) is a usage error, not silently dropped. Values from the environment do
/// not count: `TURNSTILE_ENDPOINTS` may well be exported in the shell that starts a node.
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    let matches = cmd.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(name) = cli.command.runs_no_client() {
        // Global flags given after the subcommand are propagated up to these matches.
        let typed =
            |id: &&&str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        if let Some(id) = CLIENT_FLAG_IDS.iter().find(typed) {
            cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--{} is a client option; `{name}` does not use it",
                    id.replace('_', "-").replace("client-", "")
                ),
            )
            .exit();
        }
    }
    cli
}

impl Cmd {
    /// The name of a command that takes no client flags, if this is one.
    fn runs_no_client(&self) -> Option<&'static str> {
        match self {
            Cmd::Serve(_) => Some("serve"),
            Cmd::Dev(_) => Some("dev"),
            Cmd::Certs(_) => Some("certs"),
            _ => None,
        }
    }
}

/// What `main` does: parses the command line, sets up logging and runs the command; a client
/// command that fails exits the process with its own code.
pub async fn run() -> anyhow::Result<()> {
    let cli = parse_cli();
    init_logging(cli.log_format);
    let client = &cli.client;
    let result = match cli.command {
        Cmd::Serve(args) => return turnstile_server::serve::serve(*args).await,
        Cmd::Dev(args) => return dev::run(args).await,
        Cmd::Certs(cmd) => return certs_cmd::run(cmd),
        Cmd::Lock(args) => lock_cmd::run(client, args).await,
        Cmd::Elect(args) => elect_cmd::run(client, args).await,
        Cmd::Kv(cmd) => client_cmd::kv(client, cmd).await,
        Cmd::Lease(cmd) => client_cmd::lease(client, cmd).await,
        Cmd::Counter(cmd) => counter_cmd::run(client, cmd).await,
        Cmd::Locks(args) => range_cmd::locks(client, args).await,
        Cmd::Leases(cmd) => range_cmd::leases(client, cmd).await,
        Cmd::Txn(args) => range_cmd::txn(client, args).await,
        Cmd::Watch(args) => client_cmd::watch(client, args).await,
        Cmd::Status => client_cmd::status(client).await,
        Cmd::Member(cmd) => admin_cmd::member(client, cmd).await,
        Cmd::Snapshot => admin_cmd::snapshot(client).await,
        Cmd::Backup(args) => admin_cmd::backup(client, args).await,
        Cmd::Restore(args) => admin_cmd::restore(client.json, args).await,
        Cmd::Auth(cmd) => auth_cmd::run(client, cmd).await,
    };
    // Client commands report failures in one line, and exit with their own codes.
    let code = result.unwrap_or_else(|e| {
        eprintln!("turnstile: {e:#}");
        client_cmd::EXIT_ERROR
    });
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

pub use turnstile_server::serve::wait_for_signal;

/// Listen address of dev node `i` (1-based).
fn dev_addr(base_port: u16, i: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], base_port + i - 1))
}

/// Default data dir of `turnstile dev`.
fn dev_data_dir() -> PathBuf {
    PathBuf::from("turnstile-data")
}
