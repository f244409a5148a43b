//! The command line and what it resolves to: the `Plan` of a comparison run (which systems and
//! workloads run, and every size, count and duration a workload uses), or the `SoakPlan` of
//! `turnstile-bench soak`. All limits of the harness are named here.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

/// Seconds per measurement in a full run, unless `--duration-s` says otherwise.
pub const DURATION_S_DEFAULT: f64 = 10.0;
/// Seconds per measurement in `--quick` mode, unless `--duration-s` says otherwise.
pub const DURATION_S_QUICK: f64 = 0.5;
/// Longest measurement `--duration-s` accepts, so that no load loop can run away.
pub const DURATION_S_MAX: f64 = 600.0;
/// Operations one worker may complete in one measurement: a count bound beside the time bound.
pub const OPS_PER_WORKER_MAX: u64 = 10_000_000;
/// How long a whole cluster may take to start and elect a leader.
pub const CLUSTER_START_MS_MAX: u64 = 30_000;
/// Upper bound of any single client request (waiting acquires included).
pub const REQUEST_MS_MAX: u64 = 30_000;
/// Lease TTL for workloads whose leases must outlive the measurement without keepalives.
pub const LEASE_TTL_MS_LONG: u64 = 600_000;
/// TTL of the holder's lease in W7's holder-killed measurement (the 2 s).
pub const W7_HOLDER_TTL_MS: u64 = 2_000;
/// Locks one lease holds in W6 (Turnstile allows at most 10,000 per lease).
pub const W6_LOCKS_PER_LEASE: usize = 1_000;
/// Clients that take W6's locks concurrently.
pub const W6_CLIENTS: usize = 64;
/// W6 reads resident memory again this long after the fill, on both systems: allocators hand
/// freed pages back to the kernel seconds after the frees (jemalloc's dirty pages decay over
/// 10 s; Go's scavenger works in the background), so what a node holds with the locks is the
/// settled figure, not the fill's transient.
pub const W6_SETTLE_S: u64 = 15;
/// W1 clients of W8's two runs (empty and loaded state): the 64.
pub const W8_CLIENTS: usize = 64;
/// Locks one lease holds in W8's preload, as in W6.
pub const W8_LOCKS_PER_LEASE: usize = W6_LOCKS_PER_LEASE;
/// Size of each value W8's preload puts, in bytes.
pub const W8_VALUE_BYTES: usize = 64;
/// TTL of the leases holding W8's preloaded locks: an hour (Turnstile's longest TTL), so that
/// they outlive the preload, three snapshots and both runs even on a slow, shared machine.
pub const W8_LEASE_TTL_MS: u64 = 3_600_000;
/// Longest one W8 preload (the locks, or the keys) may take before the workload fails: at
/// etcd's W6 pace (about 3,000 locks/s) 50,000 locks take 17 s; this allows a hundred times
/// slower and still ends.
pub const W8_PRELOAD_S_MAX: u64 = 1_800;
/// Interval of the preload's progress lines on stderr.
pub const W8_PROGRESS_MS: u64 = 2_000;
/// Interval between W5's writes.
pub const W5_WRITE_INTERVAL_MS: u64 = 25;
/// How long W5 watchers keep reading after the last write, for its deliveries to arrive.
pub const W5_DRAIN_MS: u64 = 2_000;
/// Most W1 points `--w1-clients` may name.
pub const W1_POINTS_MAX: usize = 8;
/// Most clients one W1 point may have: each is a task, a lease and a lock.
pub const W1_CLIENTS_MAX: usize = 1_000;
/// Size of W4's values, in bytes.
pub const W4_VALUE_BYTES: usize = 100;
/// Requests in flight while setting up (granting leases, opening watches).
pub const SETUP_CONCURRENCY: usize = 64;
/// etcd client connections (HTTP/2, multiplexed) that workers share, at least; Turnstile
/// workers share one pooled HTTP/1.1 client, which opens a connection per request in flight.
pub const ETCD_CONNECTIONS_MIN: usize = 8;
/// Workers per etcd connection, at most. The Rust HTTP/2 client (h2, under tonic) opens at
/// most 100 streams per connection unless the server advertises a limit, and etcd advertises
/// none; past 100, calls queue in the client, and an `Unlock` queued behind waiting `Lock`
/// calls deadlocks the handoff chain. Each worker has one call in flight, so 50 per
/// connection keeps every call on an open stream.
pub const ETCD_WORKERS_PER_CONNECTION_MAX: usize = 50;

/// Soak length unless `--minutes` says otherwise: the "at least 30 minutes".
pub const SOAK_MINUTES_DEFAULT: f64 = 30.0;
/// Longest soak `--minutes` accepts (one day), so that no soak can run away.
pub const SOAK_MINUTES_MAX: f64 = 1_440.0;
/// Soak clients unless `--clients` says otherwise: the 32.
pub const SOAK_CLIENTS_DEFAULT: usize = 32;
/// Most soak clients; each is a lease, a lock, a load task and a keepalive task.
pub const SOAK_CLIENTS_MAX: usize = 1_000;
/// Seconds between soak samples unless `--sample-s` says otherwise.
pub const SOAK_SAMPLE_S_DEFAULT: f64 = 10.0;
/// Shortest sample interval: each sample reads `/proc` three times and `/v1/cluster` four.
pub const SOAK_SAMPLE_S_MIN: f64 = 0.5;
/// Longest sample interval: a minute must hold at least one sample for the per-minute table.
pub const SOAK_SAMPLE_S_MAX: f64 = 60.0;
/// TTL of each soak client's lease: short enough that the lease lives only because it is
/// renewed, as a real client's does, and not by outlasting the run.
pub const SOAK_LEASE_TTL_MS: u64 = 30_000;
/// Interval of each soak client's keepalives: a third of the TTL, so that two renewals in a
/// row can fail before the lease is in danger.
pub const SOAK_KEEPALIVE_INTERVAL_MS: u64 = SOAK_LEASE_TTL_MS / 3;
/// Calls one soak client may make (acquires and releases): a count bound beside the time
/// bound. At the ~100 calls/s a client makes here, a day of soak is under 10 million.
pub const SOAK_CALLS_PER_CLIENT_MAX: u64 = 50_000_000;
/// Start of the soak excluded from the memory verdict: nodes fill their buffers and caches.
pub const SOAK_WARMUP_S: f64 = 60.0;
/// Latest end of the memory verdict's reference period (the "after warm-up" figure is
/// taken by the end of the fifth minute); shorter runs end it at half the run.
pub const SOAK_REFERENCE_END_S: f64 = 300.0;
/// How much a node's peak RSS in the second half of the soak may exceed its peak in the
/// reference period, as a fraction of the latter, and still count as flat.
pub const SOAK_RSS_GROWTH_FRACTION_MAX: f64 = 0.10;
/// Length of the two windows whose throughputs the throughput verdict compares.
pub const SOAK_THROUGHPUT_WINDOW_S: f64 = 60.0;
/// Least last-minute / first-minute throughput (cycles/s) that passes: the 80%.
pub const SOAK_THROUGHPUT_RATIO_MIN: f64 = 0.8;

/// The systems the harness can compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    Turnstile,
    /// Turnstile's etcd port (`--etcd-listen`), driven by the etcd workloads' own client.
    TurnstileEtcd,
    Etcd,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Turnstile => "turnstile",
            System::TurnstileEtcd => "turnstile-etcd",
            System::Etcd => "etcd",
        }
    }

    /// Whether `workload` runs on this system. The etcd port serves no Watch yet (W5), and its
    /// lock keys are not KV keys, so W2's count of waiters through etcd's API cannot work; the
    /// rest of W6-W8 measure Turnstile itself, already measured on the native API.
    pub fn runs(self, workload: &str) -> bool {
        self != System::TurnstileEtcd || matches!(workload, "W1" | "W3" | "W4")
    }
}

/// How clients and peers talk in a run's clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Transport {
    /// Plain HTTP (Turnstile) and plain gRPC (etcd), no authentication: the default.
    Plain,
    /// TLS for clients and peers with client certificates checked by both systems: a CA per
    /// cluster, Turnstile with `--tls-*` (auth on; clients present `root`'s certificate), etcd
    /// with `--client-cert-auth` and `--peer-client-cert-auth`.
    Tls,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Plain => "plain",
            Transport::Tls => "tls",
        }
    }
}

/// The workloads of issue 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    W1,
    W2,
    W3,
    W4,
    W5,
    W6,
    W7,
    W8,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
        Workload::W7,
        Workload::W8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
            Workload::W6 => "W6",
            Workload::W7 => "W7",
            Workload::W8 => "W8",
        }
    }
}

/// Benchmark Turnstile against etcd on local 3-node clusters.
#[derive(Parser, Debug)]
#[command(
    name = "turnstile-bench",
    version,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// Without a subcommand: the side-by-side comparison.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Systems to measure, comma-separated: turnstile, turnstile-etcd (Turnstile's etcd
    /// port, W1, W3 and W4 only), etcd.
    #[arg(long, default_value = "turnstile,turnstile-etcd,etcd")]
    pub systems: String,
    /// Workloads to run, comma-separated: w1..w8, or all.
    #[arg(long, default_value = "all")]
    pub workloads: String,
    /// Transports, comma-separated: plain, tls (TLS with client certificates on both
    /// systems). Each workload runs on each transport, side by side.
    #[arg(long, default_value = "plain")]
    pub transport: String,
    /// W1's client counts, comma-separated (default 1,16,64, or 1,16 with --quick).
    #[arg(long)]
    pub w1_clients: Option<String>,
    /// Seconds per measurement (default 10, or 0.5 with --quick).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// A few-second run with small sizes (CI's smoke); its figures mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// Markdown table written here; the same results as JSON beside it (extension .json).
    #[arg(long, default_value = "turnstile-bench-results.md")]
    pub out: PathBuf,
    /// The `turnstile` binary (default: next to this binary).
    #[arg(long)]
    pub turnstile_bin: Option<PathBuf>,
    /// The `etcd` binary (default: `etcd` on PATH, from Debian's etcd-server).
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// Where the run's temp dir (data dirs, node logs) goes; same disk as the data dirs' limit.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the node logs: copy them to `<out>.logs/` before the temp dir is removed.
    #[arg(long)]
    pub keep_logs: bool,
}

/// The modes other than the comparison.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Turnstile alone, for a long time: clients loop acquire + release with a fresh
    /// `request_id` on every call, and the run judges refusals, memory and throughput.
    Soak(SoakArgs),
}

/// `turnstile-bench soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Length of the load, in minutes (fractions allowed).
    #[arg(long, default_value_t = SOAK_MINUTES_DEFAULT)]
    pub minutes: f64,
    /// Clients, each with its own lease and its own lock.
    #[arg(long, default_value_t = SOAK_CLIENTS_DEFAULT)]
    pub clients: usize,
    /// Never acknowledge answers (no `x-turnstile-ack`): records stay for their retry window.
    #[arg(long)]
    pub no_ack: bool,
    /// Seconds between samples.
    #[arg(long, default_value_t = SOAK_SAMPLE_S_DEFAULT)]
    pub sample_s: f64,
    /// Markdown written here; the same results as JSON beside it (extension .json).
    #[arg(long, default_value = "turnstile-bench-soak.md")]
    pub out: PathBuf,
    /// The `turnstile` binary (default: next to this binary).
    #[arg(long)]
    pub turnstile_bin: Option<PathBuf>,
    /// Where the run's temp dir (data dirs, node logs) goes.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the node logs: copy them to `<out>.logs/` before the temp dir is removed.
    #[arg(long)]
    pub keep_logs: bool,
}

/// Everything a soak does, resolved from [`SoakArgs`].
#[derive(Clone, Debug)]
pub struct SoakPlan {
    pub duration: Duration,
    pub clients: usize,
    /// Whether clients acknowledge answered request ids.
    pub ack: bool,
    pub sample: Duration,
    pub out: PathBuf,
    pub turnstile_bin: PathBuf,
    pub work_dir: PathBuf,
    pub keep_logs: bool,
}

impl SoakPlan {
    /// Validates the arguments into a soak plan.
    pub fn from_args(args: SoakArgs) -> anyhow::Result<SoakPlan> {
        if !(args.minutes > 0.0 && args.minutes <= SOAK_MINUTES_MAX) {
            bail!("--minutes must be within (0, {SOAK_MINUTES_MAX}]");
        }
        if !(1..=SOAK_CLIENTS_MAX).contains(&args.clients) {
            bail!("--clients must be within 1..={SOAK_CLIENTS_MAX}");
        }
        if !(SOAK_SAMPLE_S_MIN..=SOAK_SAMPLE_S_MAX).contains(&args.sample_s) {
            bail!("--sample-s must be within [{SOAK_SAMPLE_S_MIN}, {SOAK_SAMPLE_S_MAX}]");
        }
        let turnstile_bin = match args.turnstile_bin {
            Some(p) => p,
            None => default_turnstile_bin()?,
        };
        Ok(SoakPlan {
            duration: Duration::from_secs_f64(args.minutes * 60.0),
            clients: args.clients,
            ack: !args.no_ack,
            sample: Duration::from_secs_f64(args.sample_s),
            out: args.out,
            turnstile_bin,
            work_dir: args.work_dir.unwrap_or_else(std::env::temp_dir),
            keep_logs: args.keep_logs,
        })
    }
}

/// Everything a run does, resolved from [`Args`].
#[derive(Clone, Debug)]
pub struct Plan {
    pub systems: Vec<System>,
    pub workloads: Vec<Workload>,
    pub transports: Vec<Transport>,
    pub quick: bool,
    pub duration: Duration,
    /// Time W2 lets its waiters queue up before the window opens.
    pub w2_warmup: Duration,
    pub w1_clients: Vec<usize>,
    pub w2_waiters: Vec<usize>,
    pub w3_clients: usize,
    pub w4_clients: usize,
    pub w5_watchers: Vec<usize>,
    pub w6_locks: usize,
    /// How long after the fill W6 reads resident memory again (settled).
    pub w6_settle: Duration,
    pub w7_trials: usize,
    /// Held locks W8 preloads (each with its pinned request record).
    pub w8_locks: usize,
    /// Keys W8 preloads, of [`W8_VALUE_BYTES`] each.
    pub w8_keys: usize,
    pub fsync_samples: usize,
    pub rtt_samples: usize,
    pub out: PathBuf,
    pub turnstile_bin: PathBuf,
    pub etcd_bin: PathBuf,
    pub work_dir: PathBuf,
    pub keep_logs: bool,
}

impl Plan {
    /// Validates the arguments into a plan.
    pub fn from_args(args: Args) -> anyhow::Result<Plan> {
        let systems = parse_systems(&args.systems)?;
        let workloads = parse_workloads(&args.workloads)?;
        let transports = parse_transports(&args.transport)?;
        let q = args.quick;
        let w1_clients = match &args.w1_clients {
            Some(list) => parse_w1_clients(list)?,
            None if q => vec![1, 16],
            None => vec![1, 16, 64],
        };
        let duration_s = args.duration_s.unwrap_or(if args.quick {
            DURATION_S_QUICK
        } else {
            DURATION_S_DEFAULT
        });
        if !(duration_s > 0.0 && duration_s <= DURATION_S_MAX) {
            bail!("--duration-s must be within (0, {DURATION_S_MAX}]");
        }
        let turnstile_bin = match args.turnstile_bin {
            Some(p) => p,
            None => default_turnstile_bin()?,
        };
        let work_dir = args.work_dir.unwrap_or_else(std::env::temp_dir);
        Ok(Plan {
            systems,
            workloads,
            transports,
            quick: q,
            duration: Duration::from_secs_f64(duration_s),
            w2_warmup: Duration::from_millis(if q { 200 } else { 2_000 }),
            w1_clients,
            w2_waiters: if q { vec![16] } else { vec![16, 100, 1_000] },
            w3_clients: if q { 8 } else { 64 },
            w4_clients: if q { 8 } else { 64 },
            w5_watchers: if q { vec![1, 10] } else { vec![1, 100, 1_000] },
            w6_locks: if q { 1_000 } else { 50_000 },
            w6_settle: Duration::from_secs(if q { 1 } else { W6_SETTLE_S }),
            w7_trials: if q { 1 } else { 3 },
            w8_locks: if q { 1_000 } else { 50_000 },
            w8_keys: if q { 4_000 } else { 200_000 },
            fsync_samples: if q { 50 } else { 500 },
            rtt_samples: if q { 200 } else { 2_000 },
            out: args.out,
            turnstile_bin,
            etcd_bin: args.etcd_bin,
            work_dir,
            keep_logs: args.keep_logs,
        })
    }
}

/// `turnstile` next to this binary: `cargo build --release` puts both in `target/release/`.
fn default_turnstile_bin() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find this binary's path")?;
    let dir = me
        .parent()
        .context("this binary's path has no parent directory")?;
    Ok(dir.join("turnstile"))
}

fn parse_systems(s: &str) -> anyhow::Result<Vec<System>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let sys = match part.to_ascii_lowercase().as_str() {
            "turnstile" => System::Turnstile,
            "turnstile-etcd" => System::TurnstileEtcd,
            "etcd" => System::Etcd,
            other => {
                bail!("unknown system {other:?} in --systems (turnstile, turnstile-etcd, etcd)")
            }
        };
        if !out.contains(&sys) {
            out.push(sys);
        }
    }
    if out.is_empty() {
        bail!("--systems names no system");
    }
    out.sort();
    Ok(out)
}

fn parse_transports(s: &str) -> anyhow::Result<Vec<Transport>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let t = match part.to_ascii_lowercase().as_str() {
            "plain" => Transport::Plain,
            "tls" => Transport::Tls,
            other => bail!("unknown transport {other:?} in --transport (plain, tls)"),
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.is_empty() {
        bail!("--transport names no transport");
    }
    out.sort();
    Ok(out)
}

fn parse_w1_clients(s: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: usize = part
            .parse()
            .with_context(|| format!("--w1-clients: {part:?} is not a count"))?;
        if !(1..=W1_CLIENTS_MAX).contains(&n) {
            bail!("--w1-clients: each count must be within 1..={W1_CLIENTS_MAX}");
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.is_empty() || out.len() > W1_POINTS_MAX {
        bail!("--w1-clients names 1 to {W1_POINTS_MAX} counts");
    }
    out.sort_unstable();
    Ok(out)
}

fn parse_workloads(s: &str) -> anyhow::Result<Vec<Workload>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            out.extend(Workload::ALL);
            continue;
        }
        let w = Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(part))
            .with_context(|| format!("unknown workload {part:?} in --workloads (w1..w8, all)"))?;
        out.push(w);
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        bail!("--workloads names no workload");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_parse_dedup_and_sort() {
        let s = parse_systems("etcd, turnstile,etcd").expect("valid");
        assert_eq!(s, vec![System::Turnstile, System::Etcd]);
        assert!(parse_systems("zookeeper").is_err());
        assert!(parse_systems(" , ").is_err());
    }

    #[test]
    fn workloads_parse_names_and_all() {
        assert_eq!(
            parse_workloads("w3,W1").expect("valid"),
            vec![Workload::W1, Workload::W3]
        );
        assert_eq!(parse_workloads("all").expect("valid").len(), 8);
        assert_eq!(parse_workloads("w8").expect("valid"), vec![Workload::W8]);
        assert!(parse_workloads("w9").is_err());
    }

    #[test]
    fn transports_and_w1_clients_parse_bounded() {
        assert_eq!(
            parse_transports("tls,plain,tls").expect("valid"),
            vec![Transport::Plain, Transport::Tls]
        );
        assert!(parse_transports("ssl").is_err());
        assert!(parse_transports("").is_err());
        assert_eq!(parse_w1_clients("64").expect("valid"), vec![64]);
        assert_eq!(parse_w1_clients("16, 1,16").expect("valid"), vec![1, 16]);
        assert!(parse_w1_clients("0").is_err());
        assert!(parse_w1_clients("1001").is_err());
        assert!(parse_w1_clients("x").is_err());
        assert!(parse_w1_clients("1,2,3,4,5,6,7,8,9").is_err());
    }

    #[test]
    fn soak_is_a_subcommand_with_bounded_arguments() {
        let soak = |line: &str| match Args::try_parse_from(line.split_whitespace()) {
            Ok(Args {
                command: Some(Command::Soak(a)),
                ..
            }) => SoakPlan::from_args(SoakArgs {
                turnstile_bin: Some("/bin/true".into()),
                ..a
            }),
            other => panic!("{line}: not a soak: {other:?}"),
        };
        let p = soak("b soak --minutes 0.5 --clients 4 --no-ack").expect("valid");
        assert_eq!(p.duration, Duration::from_secs(30));
        assert_eq!((p.clients, p.ack), (4, false));
        assert_eq!(p.sample, Duration::from_secs(10));
        assert!(soak("b soak").expect("defaults").ack);
        assert!(soak("b soak --minutes 0").is_err());
        assert!(soak("b soak --minutes 5000").is_err());
        assert!(soak("b soak --clients 0").is_err());
        assert!(soak("b soak --sample-s 0.1").is_err());
        assert!(Args::try_parse_from(["b", "--quick", "soak"]).is_err());
    }
}
