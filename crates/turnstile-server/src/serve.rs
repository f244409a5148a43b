//! `serve`: run one node from its arguments until SIGINT or SIGTERM, then drain (hand
//! leadership over) and stop. Shared by `turnstile serve` and the chaos harness's node
//! processes, so the harness runs exactly this code.
//!
//! Test hooks are not a setting of [`ServeArgs`], so no flag, variable or config file of
//! `turnstile serve` can turn them on: [`serve`] runs with them off. Only a program that embeds
//! the node and was built with the `test-hooks` feature (the harness's `node
//! --enable-test-hooks`) can ask for them, through [`serve_with_test_hooks`].

use anyhow::Context;

use crate::config::{format_initial_cluster, NodeConfig, ServeArgs};

/// Resolves the configuration, binds, starts the node (test hooks off) and stops it on a
/// signal.
#[cfg(not(feature = "compiled-once"))]
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    run(args.resolve().context("invalid configuration")?).await
}

/// As above, compiled in this crate ([`crate::node::Compiled`]: test builds).
#[cfg(feature = "compiled-once")]
pub fn serve(args: ServeArgs) -> crate::node::Compiled<anyhow::Result<()>> {
    Box::pin(async move { run(args.resolve().context("invalid configuration")?).await })
}

/// Like [`serve`], with the node's test hooks (`/debug/*`, `TURNSTILE_BUGS`) on if `enabled`.
/// Only test builds have it, so it is always compiled here ([`crate::node::Compiled`]).
#[cfg(feature = "test-hooks")]
pub fn serve_with_test_hooks(
    args: ServeArgs,
    enabled: bool,
) -> crate::node::Compiled<anyhow::Result<()>> {
    Box::pin(async move {
        let mut cfg = args.resolve().context("invalid configuration")?;
        cfg.enable_test_hooks = enabled;
        run(cfg).await
    })
}

async fn run(cfg: NodeConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    tracing::info!(initial_cluster = %format_initial_cluster(&cfg.initial_cluster), tls = cfg.tls_enabled(), "starting");
    if cfg.insecure {
        warn_insecure(cfg.listen);
    }
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

/// The `--insecure` banner, after CockroachDB's: loud, and naming what is exposed.
fn warn_insecure(listen: std::net::SocketAddr) {
    tracing::warn!(
        "\n\
         *\n\
         * ALL SECURITY CONTROLS ARE DISABLED (--insecure)\n\
         * Listening on {listen} over plain HTTP: no TLS, no authentication, no authorization.\n\
         * Anyone who can reach this address can take, release and read every lock and key,\n\
         * and can watch all traffic. For a secure cluster see `turnstile certs` and\n\
         * --tls-ca/--tls-cert/--tls-key (docs/security.md).\n\
         *"
    );
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
