//! The node's HTTP server: one listener serving the client API and peer RPC (one axum
//! `Router`) over HTTP/1.1 only, with bounds on what a client can hold:
//!
//! - **header read timeout** (`--http-header-read-timeout-ms`): a request head must arrive
//!   whole within it, counted from the accept, or from its first byte on a kept-alive
//!   connection; a trickled or half-sent head is cut.
//! - **idle timeout** (`--http-idle-timeout-ms`): a kept-alive connection waits at most this
//!   long for its next request.
//! - **body timeout** (`--http-body-timeout-ms`): a request body that sends nothing for this
//!   long fails (tower-http's `RequestBodyTimeout`; the API answers `408 body_timeout`). It is
//!   a gap, not a total, so a large snapshot sent steadily passes.
//! - **connection cap** (`--http-connections-max`): past it, a new connection is accepted and
//!   closed at once, counted (`turnstile_http_connections_refused_total`) and logged at most
//!   once per [`REFUSAL_LOG_INTERVAL_MS`].
//!
//! Responses are never timed: a watch stream, or an acquire waiting up to `WAIT_MS_MAX`, holds
//! its connection as long as it needs (see [`conn_service`]).
//!
//! **TLS** (`--tls-*`): after a connection takes its slot, its own task runs the rustls
//! handshake under the header read timeout, with an acceptor made from the certificates
//! current at that moment (`crate::tls::reload`). A failed or timed-out handshake (plain HTTP
//! sent to the TLS port, a client certificate from another CA or expired) closes the
//! connection, is logged at debug and counted (`turnstile_tls_handshake_failures_total`).
//! The client's verified certificate, if it sent one, is parsed once and put into every
//! request's extensions as a [`crate::tls::ClientCert`].
//!
//! h2c is off: connections are served by hyper's HTTP/1 connection alone, which drops a
//! connection opening with the HTTP/2 preface, and without upgrades, so `Upgrade: h2c` is
//! ignored and the request answered in HTTP/1.1.
//!
//! Why not hyper's own `header_read_timeout`: in hyper 1.x its clock starts whenever the
//! connection begins waiting for a head, after the accept and again right after each response
//! (`proto/h1/conn.rs`, `poll_read_head` and `State::idle`), so it is the idle timeout as well;
//! one value cannot be 10 s for a head and 60 s between requests. [`conn_clock`] keeps the two
//! apart.
//!
//! Why accept-and-close past the cap rather than leaving connections in the kernel's backlog:
//! a refused client learns at once and can try another node, instead of hanging in connect;
//! the backlog stays empty, so freed slots go to new connections rather than to ones whose
//! client gave up long ago; and refusals can be counted. Connections already open (a peer's,
//! kept alive by its heartbeats) are not affected.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower_http::timeout::RequestBodyTimeout;

use crate::config::NodeConfig;
use crate::metrics::connections::ConnectionMetrics;
use crate::metrics::tls::TlsMetrics;
use crate::tls::{ClientCert, TlsState};

pub mod clocked_io;
pub mod conn_clock;
pub mod conn_service;

pub use conn_clock::Expired;

use clocked_io::ClockedIo;
use conn_clock::ConnClock;
use conn_service::ConnService;

/// At most one "connection cap reached" line per this interval; it says how many were refused.
pub const REFUSAL_LOG_INTERVAL_MS: u64 = 1_000;
/// Pause after an accept error other than a connection reset (out of file descriptors, most
/// likely), so the loop does not spin while nothing can be accepted.
pub const ACCEPT_ERROR_BACKOFF_MS: u64 = 1_000;

/// The server's limits, from the node's configuration.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub connections_max: u32,
}

impl HttpLimits {
    pub fn from_config(cfg: &NodeConfig) -> HttpLimits {
        HttpLimits {
            header_read_timeout: Duration::from_millis(cfg.http_header_read_timeout_ms),
            idle_timeout: Duration::from_millis(cfg.http_idle_timeout_ms),
            body_timeout: Duration::from_millis(cfg.http_body_timeout_ms),
            connections_max: cfg.http_connections_max,
        }
    }
}

/// TLS on the port: the current certificates and where handshake failures are counted.
#[derive(Debug, Clone)]
pub struct TlsServer {
    pub state: Arc<TlsState>,
    pub metrics: Arc<TlsMetrics>,
    /// Negotiate HTTP/2 (`h2`, gRPC: the etcd port) instead of HTTP/1.1.
    pub h2: bool,
}

/// What every connection of one server shares.
struct Shared {
    limits: HttpLimits,
    service: RequestBodyTimeout<Router>,
    http1: http1::Builder,
    metrics: Arc<ConnectionMetrics>,
    tls: Option<TlsServer>,
}

/// Serves `router` on `listener` until `stop` changes; then stops accepting and waits for
/// open connections to finish the requests they are serving (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    metrics: Arc<ConnectionMetrics>,
    tls: Option<TlsServer>,
    mut stop: watch::Receiver<bool>,
) {
    let mut http1 = http1::Builder::new();
    // `ConnClock` enforces the head and idle deadlines; see the module header.
    http1.header_read_timeout(None);
    let shared = Arc::new(Shared {
        limits,
        service: RequestBodyTimeout::new(router, limits.body_timeout),
        http1,
        metrics,
        tls,
    });
    let slots = Arc::new(Semaphore::new(limits.connections_max as usize));
    let graceful = GracefulShutdown::new();
    let mut refusals = RefusalLog::default();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "accept failed; pausing");
                let backoff = tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_BACKOFF_MS));
                tokio::select! {
                    _ = stop.changed() => break,
                    () = backoff => continue,
                }
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => spawn_connection(tcp, peer, slot, &shared, graceful.watcher()),
            Err(_) => {
                shared.metrics.refused();
                refusals.refused(peer, limits.connections_max);
                // Dropping the socket closes it.
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Serves one accepted connection on its own task, holding `slot` until it closes.
fn spawn_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    shared: &Arc<Shared>,
    watcher: Watcher,
) {
    // Nagle off, as the peer client has it: a reply written in two pieces must not wait for
    // the client's delayed ACK.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let open = OpenConnection::new(slot, shared.metrics.clone());
    let shared = shared.clone();
    tokio::spawn(async move {
        match &shared.tls {
            None => serve_connection(tcp, None, peer, &shared, watcher).await,
            Some(tls) => {
                if let Some((stream, cert)) = handshake(tcp, peer, tls, &shared.limits).await {
                    serve_connection(stream, cert, peer, &shared, watcher).await;
                }
            }
        }
        drop(open);
    });
}

/// The TLS handshake of one connection, under the header read timeout, and the client's
/// verified certificate if it sent one. `None`: failed (logged and counted), closed.
pub(crate) async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: &TlsServer,
    limits: &HttpLimits,
) -> Option<(
    tokio_rustls::server::TlsStream<TcpStream>,
    Option<ClientCert>,
)> {
    let acceptor = if tls.h2 {
        tls.state.acceptor_h2()
    } else {
        tls.state.acceptor()
    };
    let accepting = acceptor.accept(tcp);
    let stream = match tokio::time::timeout(limits.header_read_timeout, accepting).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tls.metrics.handshake_failed();
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tls.metrics.handshake_failed();
            tracing::debug!(%peer, "TLS handshake timed out");
            return None;
        }
    };
    // rustls verified the chain (if any was sent): the leaf is first.
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| ClientCert::from_der(leaf));
    Some((stream, cert))
}

/// Serves HTTP/1.1 on `io` (plain TCP, or TLS after the handshake) until it closes.
async fn serve_connection<I>(
    io: I,
    cert: Option<ClientCert>,
    peer: SocketAddr,
    shared: &Shared,
    watcher: Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits;
    let clock = Arc::new(ConnClock::new(
        limits.header_read_timeout,
        limits.idle_timeout,
    ));
    let io = TokioIo::new(ClockedIo::new(io, clock.clone()));
    let service = ConnService::new(shared.service.clone(), clock.clone(), cert);
    let conn = watcher.watch(shared.http1.serve_connection(io, service));
    match clock.enforce(conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "http connection failed"),
        Err(expired) => {
            shared.metrics.timed_out(expired.as_str());
            tracing::debug!(%peer, phase = expired.as_str(), "http connection timed out");
        }
    }
}

/// An open connection: its slot under the cap, and its place in the open-connections gauge.
struct OpenConnection {
    _slot: OwnedSemaphorePermit,
    metrics: Arc<ConnectionMetrics>,
}

impl OpenConnection {
    fn new(slot: OwnedSemaphorePermit, metrics: Arc<ConnectionMetrics>) -> OpenConnection {
        metrics.opened();
        OpenConnection {
            _slot: slot,
            metrics,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.closed();
    }
}

/// Errors of one incoming connection (reset before it was accepted), not of the listener.
pub(crate) fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The "connection cap reached" log line, at most once per [`REFUSAL_LOG_INTERVAL_MS`]: a
/// flood of connections is a flood of refusals, and must not become a flood of log lines.
#[derive(Debug, Default)]
struct RefusalLog {
    last_logged: Option<Instant>,
    /// Refusals since the last line, this one included.
    unlogged: u64,
}

impl RefusalLog {
    fn refused(&mut self, peer: SocketAddr, connections_max: u32) {
        self.unlogged += 1;
        let interval = Duration::from_millis(REFUSAL_LOG_INTERVAL_MS);
        if self.last_logged.is_some_and(|at| at.elapsed() < interval) {
            return;
        }
        tracing::warn!(
            %peer,
            connections_max,
            refused = self.unlogged,
            "http connection cap reached; closing new connections"
        );
        self.last_logged = Some(Instant::now());
        self.unlogged = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_once_per_interval_and_counted_whole() {
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let mut log = RefusalLog::default();
        log.refused(peer, 8);
        let first = log.last_logged;
        assert!(first.is_some());
        for _ in 0..1_000 {
            log.refused(peer, 8);
        }
        assert_eq!(log.last_logged, first, "no second line within the interval");
        assert_eq!(
            log.unlogged, 1_000,
            "the next line reports every refusal since"
        );
    }
}
