//! HTTP connection figures of this node, fed by `crate::http_server`: connections open now,
//! connections refused at the cap, and connections closed by a timeout, by the phase that
//! timed out (`header` or `idle`). A request body that stalls is not here: it fails its
//! request (`408 body_timeout`), counted in `http_request_duration_seconds` by status.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TimedOutLabels {
    pub phase: &'static str,
}

/// The connection counters and gauge.
#[derive(Debug, Default)]
pub struct ConnectionMetrics {
    open: Gauge,
    refused: Counter,
    timed_out: Family<TimedOutLabels, Counter>,
}

impl ConnectionMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "http_connections_open",
            "HTTP connections this node has open now (clients and peers); at most --http-connections-max",
            self.open.clone(),
        );
        r.register(
            "http_connections_refused",
            "HTTP connections this node closed on accept because --http-connections-max were open",
            self.refused.clone(),
        );
        r.register(
            "http_connections_timed_out",
            "HTTP connections this node closed because a request head was not sent whole in time (phase=header) or no request came on a kept-alive connection (phase=idle)",
            self.timed_out.clone(),
        );
    }

    pub fn opened(&self) {
        self.open.inc();
    }

    pub fn closed(&self) {
        self.open.dec();
    }

    pub fn refused(&self) {
        self.refused.inc();
    }

    /// `phase` is [`crate::http_server::Expired::as_str`].
    pub fn timed_out(&self, phase: &'static str) {
        self.timed_out
            .get_or_create(&TimedOutLabels { phase })
            .inc();
    }

    /// Connections open now.
    pub fn open(&self) -> i64 {
        self.open.get()
    }

    /// Connections refused since the node started.
    pub fn refused_total(&self) -> u64 {
        self.refused.get()
    }
}
