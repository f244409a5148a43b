//! TLS figures of this node: handshakes that failed (plain HTTP to the TLS port, a client
//! certificate from another CA or expired, a handshake that timed out), and certificate
//! reloads that took effect or were refused (`crate::tls::reload`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The TLS counters.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    handshake_failures: Counter,
    reloads: Counter,
    reload_failures: Counter,
}

impl TlsMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "tls_handshake_failures",
            "TLS handshakes on this node's port that failed or timed out (plain HTTP, an untrusted or expired client certificate, a stalled client)",
            self.handshake_failures.clone(),
        );
        r.register(
            "tls_reloads",
            "Times this node loaded changed TLS files (SIGHUP or the file poll)",
            self.reloads.clone(),
        );
        r.register(
            "tls_reload_failures",
            "Times this node refused changed TLS files (bad PEM, key not matching) and kept the ones in use",
            self.reload_failures.clone(),
        );
    }

    pub fn handshake_failed(&self) {
        self.handshake_failures.inc();
    }

    pub fn reloaded(&self) {
        self.reloads.inc();
    }

    pub fn reload_failed(&self) {
        self.reload_failures.inc();
    }

    pub fn handshake_failures_total(&self) -> u64 {
        self.handshake_failures.get()
    }

    pub fn reloads_total(&self) -> u64 {
        self.reloads.get()
    }

    pub fn reload_failures_total(&self) -> u64 {
        self.reload_failures.get()
    }
}
