//! `turnstile-ledger`: serves the example fenced ledger ([`turnstile_fence::ledger`]) over HTTP,
//! to try fencing end to end against a Turnstile cluster with curl.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use turnstile_fence::ledger::{self, Ledger, Mode};
use turnstile_fence::Fence;

/// Serve the example ledger protected by Turnstile fencing tokens.
#[derive(Parser)]
#[command(name = "turnstile-ledger", version)]
struct Args {
    /// Address to listen on.
    #[arg(
        long,
        env = "TURNSTILE_LEDGER_LISTEN",
        default_value = "127.0.0.1:7300"
    )]
    listen: SocketAddr,
    /// The only Turnstile cluster whose tokens are accepted (from `GET /v1/cluster`). Without
    /// it, the first cluster seen is pinned.
    #[arg(long, env = "TURNSTILE_LEDGER_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Ignore fencing tokens: the negative control that loses updates. Never in production.
    #[arg(long, env = "TURNSTILE_LEDGER_UNFENCED")]
    unfenced: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let fence = match args.cluster_id {
        Some(id) => Fence::pinned(id).context("invalid --cluster-id")?,
        None => Fence::new(),
    };
    let mode = if args.unfenced {
        tracing::warn!("running UNFENCED: stale holders' writes are accepted");
        Mode::Unfenced
    } else {
        Mode::Fenced
    };
    let app = ledger::router(Arc::new(Ledger::new(mode, fence)));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, ?mode, "ledger serving");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            // An error here means no signal handler could be installed: stop at once.
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("server failed")?;
    Ok(())
}
