//! `serve`: run one node from its arguments until SIGINT or SIGTERM, then drain (hand
//! leadership over) and stop. Shared by `turnstile
//! serve` and the chaos harness's node processes, so the harness runs exactly this code.

use anyhow::Context;

use crate::config::{format_initial_cluster, ServeArgs};

/// Resolves the configuration, binds, starts the node and stops it on a signal.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.resolve().context("invalid configuration")?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    tracing::info!(initial_cluster = %format_initial_cluster(&cfg.initial_cluster), "starting");
    let node = crate::node::start(cfg, listener, Default::default())
        .await
        .context("node failed to start")?;
    wait_for_signal().await;
    tracing::info!("signal received; draining");
    let drained = node.drain().await;
    tracing::info!(handed_to = ?drained.handed_to, handover_ms = ?drained.handover_ms, "drained; stopping");
    node.shutdown().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
