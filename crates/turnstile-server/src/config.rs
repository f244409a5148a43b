//! Node configuration: one clap `ServeArgs` (flags, each also read from `TURNSTILE_<FLAG>`),
//! an optional TOML file with the same keys, and built-in defaults, in that order of
//! precedence. `ServeArgs::resolve` validates the result into a typed [`NodeConfig`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Deserialize;

use crate::tls::TlsFiles;

/// Default heartbeat interval.
pub const HEARTBEAT_MS_DEFAULT: u64 = 100;
/// Default election timeout range.
pub const ELECTION_TIMEOUT_MS_MIN_DEFAULT: u64 = 500;
pub const ELECTION_TIMEOUT_MS_MAX_DEFAULT: u64 = 1_000;
/// Default interval of leader tick entries while anything depends on time.
pub const TICK_MS_DEFAULT: u64 = 500;
/// Default deadline of one client request at the server.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default number of log entries between snapshots.
pub const SNAPSHOT_LOGS_DEFAULT: u64 = 10_000;
/// Entries kept in the log behind a snapshot, so a follower that is slightly behind catches
/// up from the log instead of needing the whole snapshot.
pub const SNAPSHOT_KEEP_LOGS_DEFAULT: u64 = 1_000;
/// Upper bound of `snapshot-logs` and `snapshot-keep-logs`: beyond it the log on disk grows
/// without bound in practice.
pub const SNAPSHOT_LOGS_MAX: u64 = 10_000_000;
/// Default interval of the leader's deadlock check.
pub const DEADLOCK_CHECK_MS_DEFAULT: u64 = 200;
/// Free space (MiB) below which a node refuses writes (`crate::disk_space`).
pub const DISK_RESERVE_MB_DEFAULT: u64 = 256;
/// Largest `--disk-reserve-mb`: 1 TiB.
pub const DISK_RESERVE_MB_MAX: u64 = 1024 * 1024;
/// Most lock names `--metrics-lock-names` may give their own metric series: each name costs
/// about 40 series (counters by cause, two histograms), so 1000 names is ~40k series.
pub const METRICS_LOCK_NAMES_MAX: u32 = 1_000;
/// Default time a client has to send a whole request head, counted from the accept (a new
/// connection) or from the first byte of the head (a kept-alive one). An honest client sends
/// a head in one write; ten seconds leaves room for a slow link, not for a trickle.
pub const HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Default time a kept-alive connection may wait for its next request: far above the
/// heartbeat, so the leader's connections to its followers (a heartbeat every 100 ms) stay
/// open, and long enough that a client pool reuses its connections between bursts.
pub const HTTP_IDLE_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Default longest gap between two pieces of a request body (not its total time: a large
/// snapshot sent steadily is fine).
pub const HTTP_BODY_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default cap on open HTTP connections of one node (clients and peers together), far below
/// a typical 64k file descriptor limit so sled and the peer client keep theirs.
pub const HTTP_CONNECTIONS_MAX_DEFAULT: u32 = 4_096;
/// Bounds of each HTTP timeout: below 100 ms an honest client on a busy link is cut; above
/// an hour a connection is as good as never timed out.
pub const HTTP_TIMEOUT_MS_MIN: u64 = 100;
pub const HTTP_TIMEOUT_MS_MAX: u64 = 3_600_000;
/// Lowest and highest accepted `--http-connections-max`: a node needs a few connections for
/// its peers and an operator; a million is past any file descriptor limit worth having.
pub const HTTP_CONNECTIONS_MAX_LOWEST: u32 = 8;
pub const HTTP_CONNECTIONS_MAX_HIGHEST: u32 = 1_000_000;
/// Default interval at which the TLS files are read again to pick up rotated certificates
/// (SIGHUP reloads at once). Reading three small files every 10 s costs nothing.
pub const TLS_RELOAD_INTERVAL_MS_DEFAULT: u64 = 10_000;
/// Bounds of `tls-reload-interval-ms`: tests poll fast; past a day a rotation is as good as
/// never noticed without a SIGHUP.
pub const TLS_RELOAD_INTERVAL_MS_MIN: u64 = 50;
pub const TLS_RELOAD_INTERVAL_MS_MAX: u64 = 86_400_000;

/// Which lease of a deadlock cycle loses its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeadlockVictim {
    /// The most recently granted lease of the cycle.
    #[default]
    Youngest,
    /// The oldest lease of the cycle.
    Oldest,
}

impl From<DeadlockVictim> for turnstile_core::VictimPolicy {
    fn from(v: DeadlockVictim) -> Self {
        match v {
            DeadlockVictim::Youngest => turnstile_core::VictimPolicy::Youngest,
            DeadlockVictim::Oldest => turnstile_core::VictimPolicy::Oldest,
        }
    }
}

/// Shortest accepted cluster secret.
pub const CLUSTER_SECRET_BYTES_MIN: usize = 8;

/// Whether an empty node may form a new cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InitialClusterState {
    /// Form the cluster in `--initial-cluster` if no peer already belongs to one.
    #[default]
    New,
    /// Never bootstrap; an empty node waits to be added through a membership change.
    Existing,
}

// No flag here turns test hooks on: these are every `turnstile serve`'s flags, and that binary
// must have no such switch (the harness adds its own, see `serve::serve_with_test_hooks`). A
// plain comment, not a doc comment: clap would compile a doc comment into the binary as help.
/// `turnstile serve` flags. Every flag also reads `TURNSTILE_<FLAG>`.
#[derive(Debug, Clone, Args, Default)]
pub struct ServeArgs {
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long, env = "TURNSTILE_ID")]
    pub id: Option<u64>,
    /// Address serving both the client API (/v1) and peer RPC (/raft).
    #[arg(long, env = "TURNSTILE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address serving etcd's v3 gRPC API (docs/etcd-compat.md); off when not given. TLS and
    /// authentication as on --listen.
    #[arg(long, env = "TURNSTILE_ETCD_LISTEN")]
    pub etcd_listen: Option<SocketAddr>,
    /// Directory for the Raft log, snapshots and the node's identity.
    #[arg(long, env = "TURNSTILE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Every initial member as `id=ip:port`, comma separated (this node included).
    #[arg(long, env = "TURNSTILE_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,
    /// Shared secret every peer RPC must carry.
    #[arg(long, env = "TURNSTILE_CLUSTER_SECRET")]
    pub cluster_secret: Option<String>,
    /// `new` (default) or `existing`.
    #[arg(long, env = "TURNSTILE_INITIAL_CLUSTER_STATE", value_enum)]
    pub initial_cluster_state: Option<InitialClusterState>,
    /// Optional TOML file with any of these settings (flags and env win).
    #[arg(long, env = "TURNSTILE_CONFIG")]
    pub config: Option<PathBuf>,
    /// How often the leader sends heartbeats, in ms (default 100; at most half of
    /// --election-timeout-ms-min).
    #[arg(long, env = "TURNSTILE_HEARTBEAT_MS", value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Shortest time a follower waits without hearing from a leader before it campaigns, in
    /// ms (default 500). Raise it (not lease TTLs) for slow disks or networks.
    #[arg(long, env = "TURNSTILE_ELECTION_TIMEOUT_MS_MIN", value_name = "MS")]
    pub election_timeout_ms_min: Option<u64>,
    /// Longest such wait, in ms (default 1000); each election draws in [min, max).
    #[arg(long, env = "TURNSTILE_ELECTION_TIMEOUT_MS_MAX", value_name = "MS")]
    pub election_timeout_ms_max: Option<u64>,
    /// How often the leader commits a tick entry that advances the cluster clock and expires
    /// leases while any lease exists, in ms (default 500, within 10..=10000). Lease expiry
    /// is late by up to this much.
    #[arg(long, env = "TURNSTILE_TICK_MS", value_name = "MS")]
    pub tick_ms: Option<u64>,
    /// How long the node works on one client request (forwarding, commit, read barrier)
    /// before answering `unavailable` or `indeterminate`, in ms (default 5000; at least two
    /// election timeouts).
    #[arg(long, env = "TURNSTILE_REQUEST_TIMEOUT_MS", value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
    /// Take a snapshot after at least this many entries since the last one; more when the
    /// state holds more records (as many entries as records: docs/operations.md).
    #[arg(long, env = "TURNSTILE_SNAPSHOT_LOGS")]
    pub snapshot_logs: Option<u64>,
    /// Entries kept in the log behind a snapshot (for followers slightly behind).
    #[arg(long, env = "TURNSTILE_SNAPSHOT_KEEP_LOGS")]
    pub snapshot_keep_logs: Option<u64>,
    /// How often the leader looks for deadlocks among queued waiters.
    #[arg(long, env = "TURNSTILE_DEADLOCK_CHECK_MS")]
    pub deadlock_check_ms: Option<u64>,
    /// Refuse writes while the data dir's filesystem has less than this many MiB free
    /// (default 256; 0: never refuse).
    #[arg(long, env = "TURNSTILE_DISK_RESERVE_MB", value_name = "MIB")]
    pub disk_reserve_mb: Option<u64>,
    /// Which lease of a deadlock cycle loses its wait: youngest (default) or oldest.
    #[arg(long, env = "TURNSTILE_DEADLOCK_VICTIM", value_enum)]
    pub deadlock_victim: Option<DeadlockVictim>,
    /// Lock metrics get a `name` label for the first N lock names seen (the rest share
    /// `name="_other"`); 0 (default) means no `name` label. At most 1000.
    #[arg(long, env = "TURNSTILE_METRICS_LOCK_NAMES")]
    pub metrics_lock_names: Option<u32>,
    /// How long a client may take to send a request head (from accept, or from the first
    /// byte on a kept-alive connection).
    #[arg(long, env = "TURNSTILE_HTTP_HEADER_READ_TIMEOUT_MS")]
    pub http_header_read_timeout_ms: Option<u64>,
    /// How long a kept-alive connection may wait for its next request.
    #[arg(long, env = "TURNSTILE_HTTP_IDLE_TIMEOUT_MS")]
    pub http_idle_timeout_ms: Option<u64>,
    /// Longest gap between two pieces of a request body.
    #[arg(long, env = "TURNSTILE_HTTP_BODY_TIMEOUT_MS")]
    pub http_body_timeout_ms: Option<u64>,
    /// Most HTTP connections open at once (clients and peers); more are closed on accept.
    #[arg(long, env = "TURNSTILE_HTTP_CONNECTIONS_MAX")]
    pub http_connections_max: Option<u32>,
    /// PEM file of the cluster CA: it signs every node and client certificate (TLS on
    /// needs all three of --tls-ca, --tls-cert, --tls-key).
    #[arg(long, env = "TURNSTILE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of this node's certificate (CN node-<id>), served to clients and presented
    /// to peers.
    #[arg(long, env = "TURNSTILE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of this node's private key.
    #[arg(long, env = "TURNSTILE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// How often the TLS files are read again for rotated certificates (SIGHUP: at once).
    #[arg(long, env = "TURNSTILE_TLS_RELOAD_INTERVAL_MS")]
    pub tls_reload_interval_ms: Option<u64>,
    /// Serve plain HTTP with no authentication on a non-loopback address. Without TLS files
    /// a node refuses to listen anywhere but loopback unless this is given.
    #[arg(long, env = "TURNSTILE_INSECURE")]
    pub insecure: bool,
    /// Check state machine invariants after every applied batch (slow; for tests).
    #[arg(long, env = "TURNSTILE_CHECK_INVARIANTS", hide = true)]
    pub check_invariants: bool,
}

/// The same settings read from a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u64>,
    listen: Option<SocketAddr>,
    etcd_listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    initial_cluster: Option<String>,
    cluster_secret: Option<String>,
    initial_cluster_state: Option<InitialClusterState>,
    heartbeat_ms: Option<u64>,
    election_timeout_ms_min: Option<u64>,
    election_timeout_ms_max: Option<u64>,
    tick_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    snapshot_logs: Option<u64>,
    snapshot_keep_logs: Option<u64>,
    deadlock_check_ms: Option<u64>,
    disk_reserve_mb: Option<u64>,
    deadlock_victim: Option<DeadlockVictim>,
    metrics_lock_names: Option<u32>,
    http_header_read_timeout_ms: Option<u64>,
    http_idle_timeout_ms: Option<u64>,
    http_body_timeout_ms: Option<u64>,
    http_connections_max: Option<u32>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_reload_interval_ms: Option<u64>,
    insecure: Option<bool>,
}

/// A validated node configuration.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: u64,
    pub listen: SocketAddr,
    /// The etcd port (`crate::etcd`), if served.
    pub etcd_listen: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub initial_cluster: BTreeMap<u64, SocketAddr>,
    pub cluster_secret: String,
    pub initial_cluster_state: InitialClusterState,
    pub heartbeat_ms: u64,
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub tick_ms: u64,
    pub request_timeout_ms: u64,
    pub snapshot_logs: u64,
    pub snapshot_keep_logs: u64,
    pub deadlock_check_ms: u64,
    /// Free MiB below which writes are refused (0: off); see `crate::disk_space`.
    pub disk_reserve_mb: u64,
    pub deadlock_victim: DeadlockVictim,
    /// Lock names with their own metric series (0: none); see `metrics::labels::NameCap`.
    pub metrics_lock_names: u32,
    /// HTTP server limits; see `crate::http_server`.
    pub http_header_read_timeout_ms: u64,
    pub http_idle_timeout_ms: u64,
    pub http_body_timeout_ms: u64,
    pub http_connections_max: u32,
    /// The CA, certificate and key files: TLS on the port and mutual TLS between peers.
    /// `None`: plain HTTP (loopback, or `insecure`).
    pub tls: Option<TlsFiles>,
    /// How often the TLS files are read again; see `crate::tls::reload`.
    pub tls_reload_interval_ms: u64,
    /// Plain HTTP on a non-loopback address, said out loud (`--insecure`).
    pub insecure: bool,
    /// Test hooks (`/debug/*`, `TURNSTILE_BUGS`). Never set from flags, env or the file:
    /// only a program embedding the node sets it (see `serve::serve_with_test_hooks`).
    #[cfg(feature = "test-hooks")]
    pub enable_test_hooks: bool,
    pub check_invariants: bool,
    /// Test-only broken behaviour (`TURNSTILE_BUGS`); all off unless the harness asks, and a
    /// zero-sized constant-off stand-in without the `test-hooks` feature.
    pub bugs: crate::bugs::Bugs,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("missing required setting `{0}`")]
    Missing(&'static str),
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    ParseFile {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("bad --initial-cluster entry `{entry}`: expected id=ip:port")]
    InitialClusterEntry { entry: String },
    #[error("--initial-cluster does not list this node's id {id}")]
    SelfNotInInitialCluster { id: u64 },
    #[error("invalid setting: {0}")]
    Invalid(String),
    #[error("TLS needs all three of --tls-ca, --tls-cert and --tls-key; missing: {missing}")]
    TlsIncomplete { missing: String },
    #[error("--insecure and the --tls-* files contradict each other: give one or the other")]
    InsecureWithTls,
    #[error("refusing to serve plain HTTP without authentication on {listen}, which is not a loopback address: \
             give --tls-ca, --tls-cert and --tls-key (see `turnstile certs`), or say --insecure to accept that \
             anyone who can reach {listen} controls every lock")]
    InsecureNotSaid { listen: SocketAddr },
}

impl ServeArgs {
    /// Merges flags/env over the config file over defaults, and validates.
    pub fn resolve(self) -> Result<NodeConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let initial = self
            .initial_cluster
            .or(file.initial_cluster)
            .ok_or(ConfigError::Missing("initial-cluster"))?;
        let cfg = NodeConfig {
            id: self.id.or(file.id).ok_or(ConfigError::Missing("id"))?,
            listen: self
                .listen
                .or(file.listen)
                .ok_or(ConfigError::Missing("listen"))?,
            etcd_listen: self.etcd_listen.or(file.etcd_listen),
            data_dir: self
                .data_dir
                .or(file.data_dir)
                .ok_or(ConfigError::Missing("data-dir"))?,
            initial_cluster: parse_initial_cluster(&initial)?,
            cluster_secret: self
                .cluster_secret
                .or(file.cluster_secret)
                .ok_or(ConfigError::Missing("cluster-secret"))?,
            initial_cluster_state: self
                .initial_cluster_state
                .or(file.initial_cluster_state)
                .unwrap_or_default(),
            heartbeat_ms: self
                .heartbeat_ms
                .or(file.heartbeat_ms)
                .unwrap_or(HEARTBEAT_MS_DEFAULT),
            election_timeout_ms_min: self
                .election_timeout_ms_min
                .or(file.election_timeout_ms_min)
                .unwrap_or(ELECTION_TIMEOUT_MS_MIN_DEFAULT),
            election_timeout_ms_max: self
                .election_timeout_ms_max
                .or(file.election_timeout_ms_max)
                .unwrap_or(ELECTION_TIMEOUT_MS_MAX_DEFAULT),
            tick_ms: self.tick_ms.or(file.tick_ms).unwrap_or(TICK_MS_DEFAULT),
            request_timeout_ms: self
                .request_timeout_ms
                .or(file.request_timeout_ms)
                .unwrap_or(REQUEST_TIMEOUT_MS_DEFAULT),
            snapshot_logs: self
                .snapshot_logs
                .or(file.snapshot_logs)
                .unwrap_or(SNAPSHOT_LOGS_DEFAULT),
            snapshot_keep_logs: self
                .snapshot_keep_logs
                .or(file.snapshot_keep_logs)
                .unwrap_or(SNAPSHOT_KEEP_LOGS_DEFAULT),
            deadlock_check_ms: self
                .deadlock_check_ms
                .or(file.deadlock_check_ms)
                .unwrap_or(DEADLOCK_CHECK_MS_DEFAULT),
            disk_reserve_mb: self
                .disk_reserve_mb
                .or(file.disk_reserve_mb)
                .unwrap_or(DISK_RESERVE_MB_DEFAULT),
            deadlock_victim: self
                .deadlock_victim
                .or(file.deadlock_victim)
                .unwrap_or_default(),
            metrics_lock_names: self
                .metrics_lock_names
                .or(file.metrics_lock_names)
                .unwrap_or(0),
            http_header_read_timeout_ms: self
                .http_header_read_timeout_ms
                .or(file.http_header_read_timeout_ms)
                .unwrap_or(HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT),
            http_idle_timeout_ms: self
                .http_idle_timeout_ms
                .or(file.http_idle_timeout_ms)
                .unwrap_or(HTTP_IDLE_TIMEOUT_MS_DEFAULT),
            http_body_timeout_ms: self
                .http_body_timeout_ms
                .or(file.http_body_timeout_ms)
                .unwrap_or(HTTP_BODY_TIMEOUT_MS_DEFAULT),
            http_connections_max: self
                .http_connections_max
                .or(file.http_connections_max)
                .unwrap_or(HTTP_CONNECTIONS_MAX_DEFAULT),
            tls: tls_files(
                self.tls_ca.or(file.tls_ca),
                self.tls_cert.or(file.tls_cert),
                self.tls_key.or(file.tls_key),
            )?,
            tls_reload_interval_ms: self
                .tls_reload_interval_ms
                .or(file.tls_reload_interval_ms)
                .unwrap_or(TLS_RELOAD_INTERVAL_MS_DEFAULT),
            // A flag can only say yes; the file may say either.
            insecure: self.insecure || file.insecure.unwrap_or(false),
            #[cfg(feature = "test-hooks")]
            enable_test_hooks: false,
            check_invariants: self.check_invariants,
            bugs: Default::default(),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// All three TLS files or none.
fn tls_files(
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (ca, cert, key) {
        (None, None, None) => Ok(None),
        (Some(ca), Some(cert), Some(key)) => Ok(Some(TlsFiles { ca, cert, key })),
        (ca, cert, key) => {
            let missing: Vec<&str> = [
                (ca.is_none(), "--tls-ca"),
                (cert.is_none(), "--tls-cert"),
                (key.is_none(), "--tls-key"),
            ]
            .into_iter()
            .filter_map(|(absent, name)| absent.then_some(name))
            .collect();
            Err(ConfigError::TlsIncomplete {
                missing: missing.join(", "),
            })
        }
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::ParseFile {
        path: path.into(),
        source,
    })
}

/// Parses `1=127.0.0.1:7001,2=127.0.0.1:7002`.
pub fn parse_initial_cluster(s: &str) -> Result<BTreeMap<u64, SocketAddr>, ConfigError> {
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || ConfigError::InitialClusterEntry {
            entry: entry.to_string(),
        };
        let (id, addr) = entry.split_once('=').ok_or_else(bad)?;
        let id: u64 = id.trim().parse().map_err(|_| bad())?;
        let addr: SocketAddr = addr.trim().parse().map_err(|_| bad())?;
        if id == 0 || out.insert(id, addr).is_some() {
            return Err(bad());
        }
    }
    Ok(out)
}

/// Formats an initial-cluster map back into its flag form.
pub fn format_initial_cluster(members: &BTreeMap<u64, SocketAddr>) -> String {
    members
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl NodeConfig {
    /// Checks the settings against each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.id == 0 {
            return invalid("id must be positive".into());
        }
        if !self.initial_cluster.contains_key(&self.id) {
            return Err(ConfigError::SelfNotInInitialCluster { id: self.id });
        }
        if self.cluster_secret.len() < CLUSTER_SECRET_BYTES_MIN {
            return invalid(format!(
                "cluster-secret must be at least {CLUSTER_SECRET_BYTES_MIN} bytes"
            ));
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms * 2 > self.election_timeout_ms_min {
            return invalid(
                "heartbeat-ms must be positive and at most half of election-timeout-ms-min".into(),
            );
        }
        if self.election_timeout_ms_min >= self.election_timeout_ms_max {
            return invalid("election-timeout-ms-min must be below election-timeout-ms-max".into());
        }
        if self.tick_ms < 10 || self.tick_ms > 10_000 {
            return invalid("tick-ms must be within 10..=10000".into());
        }
        if self.request_timeout_ms < 2 * self.election_timeout_ms_max {
            return invalid("request-timeout-ms must be at least two election timeouts".into());
        }
        if !(10..=60_000).contains(&self.deadlock_check_ms) {
            return invalid("deadlock-check-ms must be within 10..=60000".into());
        }
        if self.disk_reserve_mb > DISK_RESERVE_MB_MAX {
            return invalid(format!(
                "disk-reserve-mb must be within 0..={DISK_RESERVE_MB_MAX}"
            ));
        }
        if !(100..=SNAPSHOT_LOGS_MAX).contains(&self.snapshot_logs) {
            return invalid(format!(
                "snapshot-logs must be within 100..={SNAPSHOT_LOGS_MAX}"
            ));
        }
        if self.snapshot_keep_logs > SNAPSHOT_LOGS_MAX {
            return invalid(format!(
                "snapshot-keep-logs must be at most {SNAPSHOT_LOGS_MAX}"
            ));
        }
        if self.metrics_lock_names > METRICS_LOCK_NAMES_MAX {
            return invalid(format!(
                "metrics-lock-names must be at most {METRICS_LOCK_NAMES_MAX}"
            ));
        }
        self.validate_http()?;
        self.validate_tls()
    }

    /// TLS files or `--insecure`, never both; plain HTTP off loopback only when said out loud.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        if self.insecure && self.tls.is_some() {
            return Err(ConfigError::InsecureWithTls);
        }
        if self.tls.is_none() && !self.insecure && !self.listen.ip().is_loopback() {
            return Err(ConfigError::InsecureNotSaid {
                listen: self.listen,
            });
        }
        if let Some(etcd) = self.etcd_listen.filter(|a| !a.ip().is_loopback()) {
            if self.tls.is_none() && !self.insecure {
                return Err(ConfigError::InsecureNotSaid { listen: etcd });
            }
        }
        let interval = TLS_RELOAD_INTERVAL_MS_MIN..=TLS_RELOAD_INTERVAL_MS_MAX;
        if !interval.contains(&self.tls_reload_interval_ms) {
            return Err(ConfigError::Invalid(format!(
                "tls-reload-interval-ms must be within {TLS_RELOAD_INTERVAL_MS_MIN}..={TLS_RELOAD_INTERVAL_MS_MAX}"
            )));
        }
        Ok(())
    }

    /// True when the node serves HTTPS and peers talk mutual TLS (and authentication is on).
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    fn validate_http(&self) -> Result<(), ConfigError> {
        let timeouts = [
            (
                "http-header-read-timeout-ms",
                self.http_header_read_timeout_ms,
            ),
            ("http-idle-timeout-ms", self.http_idle_timeout_ms),
            ("http-body-timeout-ms", self.http_body_timeout_ms),
        ];
        for (name, ms) in timeouts {
            if !(HTTP_TIMEOUT_MS_MIN..=HTTP_TIMEOUT_MS_MAX).contains(&ms) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be within {HTTP_TIMEOUT_MS_MIN}..={HTTP_TIMEOUT_MS_MAX}"
                )));
            }
        }
        // Peers send a heartbeat every `heartbeat-ms` on a kept-alive connection; an idle
        // timeout near it would close and reopen peer connections all the time.
        if self.http_idle_timeout_ms < self.heartbeat_ms.saturating_mul(10) {
            return Err(ConfigError::Invalid(
                "http-idle-timeout-ms must be at least ten heartbeat-ms".into(),
            ));
        }
        let connections = HTTP_CONNECTIONS_MAX_LOWEST..=HTTP_CONNECTIONS_MAX_HIGHEST;
        if !connections.contains(&self.http_connections_max) {
            return Err(ConfigError::Invalid(format!(
                "http-connections-max must be within {HTTP_CONNECTIONS_MAX_LOWEST}..={HTTP_CONNECTIONS_MAX_HIGHEST}"
            )));
        }
        Ok(())
    }

    /// How long a write waits for a leader before answering `no_quorum`: about two election
    /// timeouts, so a minority side refuses promptly instead of hanging.
    pub fn no_quorum_after_ms(&self) -> u64 {
        2 * self.election_timeout_ms_max
    }

    /// Peers of this node (initial cluster minus itself).
    pub fn peers(&self) -> impl Iterator<Item = (u64, SocketAddr)> + '_ {
        self.initial_cluster
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(id, a)| (*id, *a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The five settings a node needs, everything else left to its default.
    fn minimal() -> ServeArgs {
        ServeArgs {
            id: Some(1),
            listen: Some("127.0.0.1:1".parse().expect("addr")),
            data_dir: Some("/tmp/x".into()),
            initial_cluster: Some("1=127.0.0.1:1".into()),
            cluster_secret: Some("0123456789".into()),
            ..ServeArgs::default()
        }
    }

    /// The help of each timing flag states its default, and that figure is the constant the
    /// node uses: the text cannot drift from the code unnoticed.
    #[test]
    fn timing_flags_show_their_defaults() {
        let cmd = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
        let cases = [
            ("heartbeat_ms", HEARTBEAT_MS_DEFAULT),
            ("election_timeout_ms_min", ELECTION_TIMEOUT_MS_MIN_DEFAULT),
            ("election_timeout_ms_max", ELECTION_TIMEOUT_MS_MAX_DEFAULT),
            ("tick_ms", TICK_MS_DEFAULT),
            ("request_timeout_ms", REQUEST_TIMEOUT_MS_DEFAULT),
            ("disk_reserve_mb", DISK_RESERVE_MB_DEFAULT),
        ];
        for (id, default) in cases {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no flag {id}"));
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(
                help.contains(&format!("(default {default}")),
                "{id}: help {help:?} does not state the default {default}"
            );
        }
    }

    #[test]
    fn initial_cluster_parses_and_rejects() {
        let m = parse_initial_cluster("1=127.0.0.1:7001, 2=127.0.0.1:7002").expect("parses");
        assert_eq!(m.len(), 2);
        for bad in [
            "1",
            "x=127.0.0.1:1",
            "1=localhost:1",
            "0=127.0.0.1:1",
            "1=127.0.0.1:1,1=127.0.0.1:2",
        ] {
            assert!(parse_initial_cluster(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_catches_inconsistent_timeouts() {
        let args = ServeArgs {
            election_timeout_ms_min: Some(900),
            election_timeout_ms_max: Some(800),
            ..minimal()
        };
        assert!(matches!(
            args.clone().resolve(),
            Err(ConfigError::Invalid(_))
        ));
        let ok = ServeArgs {
            election_timeout_ms_max: Some(1_800),
            ..args
        };
        assert!(ok.resolve().is_ok());
    }

    #[test]
    fn metrics_lock_names_is_capped() {
        let args = |names| ServeArgs {
            metrics_lock_names: names,
            ..minimal()
        };
        let resolved = |names| args(names).resolve().map(|c| c.metrics_lock_names);
        assert_eq!(resolved(None).ok(), Some(0));
        assert_eq!(resolved(Some(METRICS_LOCK_NAMES_MAX)).ok(), Some(1_000));
        assert!(matches!(
            resolved(Some(METRICS_LOCK_NAMES_MAX + 1)),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn http_limits_have_defaults_and_bounds() {
        let args = minimal();
        let cfg = args.clone().resolve().expect("defaults are valid");
        assert_eq!(
            (
                cfg.http_header_read_timeout_ms,
                cfg.http_idle_timeout_ms,
                cfg.http_body_timeout_ms,
                cfg.http_connections_max
            ),
            (
                HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT,
                HTTP_IDLE_TIMEOUT_MS_DEFAULT,
                HTTP_BODY_TIMEOUT_MS_DEFAULT,
                HTTP_CONNECTIONS_MAX_DEFAULT
            )
        );
        let refused = [
            ServeArgs {
                http_header_read_timeout_ms: Some(HTTP_TIMEOUT_MS_MIN - 1),
                ..args.clone()
            },
            ServeArgs {
                http_body_timeout_ms: Some(HTTP_TIMEOUT_MS_MAX + 1),
                ..args.clone()
            },
            // Under ten heartbeats: peer connections would churn.
            ServeArgs {
                http_idle_timeout_ms: Some(10 * HEARTBEAT_MS_DEFAULT - 1),
                ..args.clone()
            },
            ServeArgs {
                http_connections_max: Some(HTTP_CONNECTIONS_MAX_LOWEST - 1),
                ..args.clone()
            },
        ];
        for bad in refused {
            assert!(
                matches!(bad.clone().resolve(), Err(ConfigError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tls_files_come_all_three_or_none() {
        let with = |ca: Option<&str>, cert: Option<&str>, key: Option<&str>| ServeArgs {
            tls_ca: ca.map(PathBuf::from),
            tls_cert: cert.map(PathBuf::from),
            tls_key: key.map(PathBuf::from),
            ..minimal()
        };
        let cfg = with(Some("ca"), Some("c"), Some("k"))
            .resolve()
            .expect("all three");
        assert!(cfg.tls_enabled());
        assert!(!minimal().resolve().expect("none").tls_enabled());
        match with(Some("ca"), None, Some("k")).resolve() {
            Err(ConfigError::TlsIncomplete { missing }) => assert_eq!(missing, "--tls-cert"),
            other => panic!("{other:?}"),
        }
        let both = ServeArgs {
            insecure: true,
            ..with(Some("ca"), Some("c"), Some("k"))
        };
        assert!(matches!(both.resolve(), Err(ConfigError::InsecureWithTls)));
    }

    #[test]
    fn plain_http_off_loopback_needs_insecure() {
        let wildcard = ServeArgs {
            listen: Some("0.0.0.0:7001".parse().expect("addr")),
            initial_cluster: Some("1=10.0.0.1:7001".into()),
            ..minimal()
        };
        let err = wildcard.clone().resolve().expect_err("refused");
        assert!(
            matches!(err, ConfigError::InsecureNotSaid { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("--insecure"), "{err}");
        let said = ServeArgs {
            insecure: true,
            ..wildcard.clone()
        };
        assert!(said.resolve().expect("insecure said").insecure);
        let secure = ServeArgs {
            tls_ca: Some("ca".into()),
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            ..wildcard
        };
        assert!(secure.resolve().is_ok());
        let v6_loopback = ServeArgs {
            listen: Some("[::1]:7001".parse().expect("addr")),
            ..minimal()
        };
        assert!(v6_loopback.resolve().is_ok());
    }
}
