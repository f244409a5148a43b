//! `/metrics`: the node's Prometheus metrics, built with the `prometheus-client` crate.
//!
//! Module map:
//! - [`locks`]: lock figures derived from applied entries (the state machine's
//!   `ApplyObserver`), with [`books`] (when each hold and wait began) and [`labels`] (label
//!   sets, and the cap on per-lock-name series).
//! - [`raft`]: openraft's batch-size and RPC hook, and the leader-change watcher.
//! - [`http`]: request latency by method, route template and status.
//! - [`connections`]: HTTP connections open, refused at the cap, and timed out.
//! - [`tls`]: failed TLS handshakes, certificate reloads and refused reloads.
//! - [`scrape`]: figures read at scrape time (Raft, lock state, log store, API counters).
//!
//! Two kinds of figures: apply-derived ones are the same on every node (every node applies
//! the same log) and their HELP texts say so; the others (HTTP, Raft role, log store, fencing
//! rejections answered) describe this node. Labels never carry client-chosen strings except
//! lock names, and those only when `--metrics-lock-names` allows, capped. docs/metrics.md lists
//! every metric and the alerts worth setting.

use std::fmt;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use turnstile_raft::apply_observer::ApplyObserver;
use turnstile_raft::log_store::SyncStatsHandle;
use turnstile_raft::types::Raft;

use crate::app::App;
use crate::config::NodeConfig;
use crate::error::ApiError;
use crate::term_leaders::TermLeaders;

pub mod books;
pub mod connections;
pub mod http;
pub mod labels;
pub mod locks;
pub mod raft;
pub mod scrape;
pub mod tls;

/// Prefix of every metric name.
pub const PREFIX: &str = "turnstile";

/// The scrape path.
pub const METRICS_PATH: &str = "/metrics";

/// `Content-Type` of an OpenMetrics answer (sent when the scraper asks for it, as Prometheus
/// does); anyone else gets the Prometheus text format 0.0.4.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric of one node. Holds no reference to `App` (the scrape handler is given one),
/// so the node's shutdown still releases Raft and the data dir.
pub struct NodeMetrics {
    /// Metrics updated as things happen; fixed after construction.
    registry: Registry,
    http: Arc<http::HttpMetrics>,
    connections: Arc<connections::ConnectionMetrics>,
    tls: Arc<tls::TlsMetrics>,
    locks: Arc<locks::LockMetrics>,
    raft: Arc<raft::RaftRecorder>,
    log: SyncStatsHandle,
}

/// The exposition format of one scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    PrometheusText,
}

impl NodeMetrics {
    /// Metrics for a node configured by `cfg`, reading the log store through `log`.
    pub fn new(cfg: &NodeConfig, log: SyncStatsHandle) -> Arc<NodeMetrics> {
        let http = Arc::new(http::HttpMetrics::new());
        let connections = Arc::new(connections::ConnectionMetrics::default());
        let tls = Arc::new(tls::TlsMetrics::default());
        let locks = Arc::new(locks::LockMetrics::new(cfg.metrics_lock_names as usize));
        let raft = Arc::new(raft::RaftRecorder::new());
        let mut registry = Registry::with_prefix(PREFIX);
        http.register(&mut registry);
        connections.register(&mut registry);
        tls.register(&mut registry);
        locks.register(&mut registry);
        raft.register(&mut registry);
        Arc::new(NodeMetrics {
            registry,
            http,
            connections,
            tls,
            locks,
            raft,
            log,
        })
    }

    /// What the HTTP server counts its connections in.
    pub fn connections(&self) -> Arc<connections::ConnectionMetrics> {
        self.connections.clone()
    }

    /// What the HTTP server and the TLS reload count handshakes and reloads in.
    pub fn tls(&self) -> Arc<tls::TlsMetrics> {
        self.tls.clone()
    }

    /// What the state machine reports applied entries to.
    pub fn apply_observer(&self) -> Arc<dyn ApplyObserver> {
        self.locks.clone()
    }

    /// Hooks into `raft`, counts leader changes and records them in `leaders` until it stops
    /// or `stop` fires.
    pub fn spawn_raft_watch(
        &self,
        raft: Raft,
        leaders: TermLeaders,
        stop: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        tokio::spawn(raft::watch_leaders(raft, self.raft.clone(), leaders, stop))
    }

    /// The whole exposition of this node now.
    pub fn encode(&self, app: &App, format: Format) -> Result<String, fmt::Error> {
        let sampled = scrape::sampled(app, &self.log);
        let mut out = String::with_capacity(32 * 1024);
        match format {
            Format::OpenMetrics => {
                text::encode_registry(&mut out, &self.registry)?;
                text::encode_registry(&mut out, &sampled)?;
                text::encode_eof(&mut out)?;
            }
            Format::PrometheusText => {
                prometheus_text::encode(&mut out, &self.registry)?;
                prometheus_text::encode(&mut out, &sampled)?;
            }
        }
        Ok(out)
    }
}

/// Adds `/metrics` to the node's router and records every request's latency (the layer goes
/// outermost, over every route and the fallback).
pub fn instrument(router: Router, app: Arc<App>, metrics: Arc<NodeMetrics>) -> Router {
    let http = metrics.http.clone();
    router
        .route(METRICS_PATH, get(serve).with_state((app, metrics)))
        .layer(axum::middleware::from_fn_with_state(http, http::track))
}

/// `GET /metrics`.
async fn serve(
    State((app, metrics)): State<(Arc<App>, Arc<NodeMetrics>)>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    // Root, or a principal with a role that has `"metrics": true` (`crate::auth`).
    let caller = crate::auth::authenticate(&app, headers, req.extensions())
        .await
        .inspect_err(|e| app.denials.client(METRICS_PATH, None, &e.to_string()))?;
    if let Some(principal) = caller.principal() {
        if !app.sm.read().state.auth.may_read_metrics(principal) {
            let reason = format!("{principal} has no role with \"metrics\": true");
            app.denials.client(METRICS_PATH, Some(principal), &reason);
            return Err(ApiError::Apply(
                turnstile_core::ApplyError::PermissionDenied { reason },
            ));
        }
    }
    let format = format_for(headers);
    let body = metrics.encode(&app, format).map_err(|e| {
        tracing::error!(error = %e, "metrics encoding failed");
        ApiError::Unavailable("metrics could not be encoded".into())
    })?;
    let content_type = match format {
        Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        Format::PrometheusText => prometheus_text::CONTENT_TYPE,
    };
    Ok(([(CONTENT_TYPE, content_type)], body).into_response())
}

/// OpenMetrics if the scraper lists it in `Accept` (Prometheus does), else the 0.0.4 text.
fn format_for(headers: &HeaderMap) -> Format {
    let accepts_openmetrics = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if accepts_openmetrics {
        Format::OpenMetrics
    } else {
        Format::PrometheusText
    }
}
