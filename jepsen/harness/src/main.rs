//! `turnstile-jepsen`: `node` runs one Turnstile node (exactly `turnstile serve`, plus the
//! `--enable-test-hooks` flag that only this binary has), `run` runs a seeded chaos run and
//! checks it, `check` re-checks a recorded run, `cleanup` removes networks left by killed runs.

use clap::{Parser, Subcommand};
use turnstile_jepsen::cluster::Backend;
use turnstile_server::config::ServeArgs;

#[derive(Parser)]
#[command(
    name = "turnstile-jepsen",
    version,
    about = "Turnstile's chaos harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node: the same code as `turnstile serve` (for the harness's node processes).
    Node(Box<NodeArgs>),
    /// A lock-holding client process that tests freeze, kill or cut off (see `holder.rs`).
    Holder(turnstile_jepsen::holder::HolderArgs),
    /// A seeded chaos run: cluster, workloads, nemesis, checkers; exits 1 unless every checker
    /// passes (or, with --expect-invalid, unless one finds a violation).
    Run(RunArgs),
    /// Re-check a recorded run folder and rewrite its results and report.
    Check {
        /// The run folder.
        dir: std::path::PathBuf,
    },
    /// Remove networks, processes and containers left behind by runs that were killed.
    Cleanup,
}

/// Arguments of `node`: `turnstile serve`'s, and the switch for test hooks.
#[derive(clap::Args)]
struct NodeArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Test hooks: `/debug/clock` (the clock-jump fault) and the `TURNSTILE_BUGS` switches.
    /// Here and in the in-process test fixture only: the `turnstile` binary has no such flag.
    #[arg(long)]
    enable_test_hooks: bool,
}

/// Arguments of `run`.
#[derive(clap::Args)]
struct RunArgs {
    /// Seeds to run, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    seeds: Vec<u64>,
    /// Length of each run's fault phase, seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Bug switches for the nodes (skip-fence, local-reads, skip-dedup, grant-due-waiters,
    /// ignore-sync-failure, survive-raft-failure, wiped-node-votes).
    #[arg(long, default_value = "")]
    bugs: String,
    /// Faults to use (names as in docs/chaos.md); all when absent.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Where run folders go.
    #[arg(long, default_value = "target/jepsen-runs")]
    out: std::path::PathBuf,
    /// Succeed only if some checker finds a violation (for bug-injection runs).
    #[arg(long)]
    expect_invalid: bool,
    /// Where the nodes run: network namespaces, or containers of the `turnstile-jepsen:test`
    /// image (build it first with jepsen/image/build-image.sh).
    #[arg(long, value_enum, default_value_t = Backend::Netns)]
    backend: Backend,
    /// Plain HTTP without authentication (`serve --insecure`), for debugging with tcpdump or
    /// curl. Runs are secure by default: a CA and certificates per run, HTTPS, mutual TLS
    /// between peers, clients authenticated with the `root` client certificate.
    #[arg(long)]
    insecure: bool,
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    use turnstile_jepsen::nemesis::Fault;
    let binary = std::env::current_exe()?;
    let mut faults = Vec::new();
    for name in &args.faults {
        faults.push(Fault::parse(name).ok_or_else(|| anyhow::anyhow!("unknown fault {name}"))?);
    }
    let mut all_good = true;
    for &seed in &args.seeds {
        let mut cfg = turnstile_jepsen::run::RunConfig::new(
            seed,
            std::time::Duration::from_secs(args.seconds),
            binary.clone(),
            args.out.clone(),
        );
        cfg.bugs = args.bugs.clone();
        cfg.backend = args.backend;
        if args.insecure {
            cfg.mode = turnstile_jepsen::tls::Mode::Insecure;
        }
        if !faults.is_empty() {
            cfg.faults = faults.clone();
        }
        // On Ctrl-C or SIGTERM the run future is dropped, and with it the cluster: its Drop
        // kills the nodes and removes the network.
        let summary = tokio::select! {
            summary = turnstile_jepsen::run::run(cfg) => summary?,
            () = turnstile_server::serve::wait_for_signal() => anyhow::bail!("interrupted"),
        };
        print!("{}", summary.render());
        let good = if args.expect_invalid {
            !summary.invalid().is_empty()
        } else {
            summary.passed()
        };
        all_good &= good;
    }
    if !all_good {
        std::process::exit(1);
    }
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    match Cli::parse().command {
        Cmd::Node(args) => {
            turnstile_server::serve::serve_with_test_hooks(args.serve, args.enable_test_hooks).await
        }
        Cmd::Holder(args) => turnstile_jepsen::holder::run(args).await,
        Cmd::Run(args) => run(args).await,
        Cmd::Check { dir } => {
            let recorded = turnstile_jepsen::run::load(&dir)?;
            let results = turnstile_jepsen::run::check(&recorded);
            for r in &results {
                println!("{:?} {}: {}", r.validity, r.name, r.checked);
                for p in &r.problems {
                    println!("    {p}");
                }
            }
            let html = turnstile_checker::report::render_html(&recorded, &results, "re-check");
            std::fs::write(dir.join("report-recheck.html"), html)?;
            Ok(())
        }
        Cmd::Cleanup => {
            let removed = turnstile_jepsen::netns::sweep_stale();
            println!("removed {removed} stale network(s)");
            if turnstile_jepsen::docker::engine_available() {
                let removed = turnstile_jepsen::docker::sweep_stale();
                println!("removed {removed} stale Docker network(s)");
            }
            Ok(())
        }
    }
}
