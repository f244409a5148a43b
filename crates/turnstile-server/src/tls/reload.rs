//! The node's current TLS configs, and their reload: on SIGHUP, and whenever the files'
//! contents change (read every `tls-reload-interval-ms`; reading contents rather than mtimes
//! also catches a symlink swapped by a secrets manager).
//!
//! The server config sits in an `ArcSwap`: each new connection makes its acceptor from the
//! config current at its accept, and connections already open keep theirs, so a reload drops
//! nothing. The peer client is rebuilt from the new client config (`PeerClient::set_tls`).
//! A broken new set (bad PEM, a key that does not match, a CA that does not parse) is refused
//! whole: the old configs stay, an ERROR is logged and `turnstile_tls_reload_failures_total`
//! counts it; the files are tried again at the next poll (they differ from what was loaded).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use turnstile_raft::network::PeerClient;

use super::material::{self, FileContents, TlsConfigs, TlsError, TlsFiles};
use crate::metrics::tls::TlsMetrics;

/// The files, and the configs last built from them.
#[derive(Debug)]
pub struct TlsState {
    files: TlsFiles,
    server: ArcSwap<ServerConfig>,
    /// What the current configs were built from, and the last contents that failed to load
    /// (so a broken file is logged once, not at every poll).
    loaded: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    good: FileContents,
    bad: Option<FileContents>,
}

/// What one reload attempt did.
#[derive(Debug)]
pub enum Reloaded {
    /// The files are what is loaded already (or what failed last time).
    Unchanged,
    /// New configs are in place; the peer client config to use from now on.
    New(Box<rustls::ClientConfig>),
}

impl TlsState {
    /// Reads and builds the configs at start: any error here stops the node from starting.
    pub fn load(files: TlsFiles) -> Result<(Arc<TlsState>, rustls::ClientConfig), TlsError> {
        let contents = FileContents::read(&files)?;
        let TlsConfigs {
            server,
            peer_client,
        } = material::build(&files, &contents)?;
        let state = TlsState {
            files,
            server: ArcSwap::new(server),
            loaded: Mutex::new(Loaded {
                good: contents,
                bad: None,
            }),
        };
        Ok((Arc::new(state), peer_client))
    }

    /// An acceptor from the config current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server.load_full())
    }

    /// The same certificates with ALPN `h2` instead of `http/1.1`, for gRPC (the etcd port):
    /// a gRPC client offers only `h2`, and rustls refuses a handshake with no protocol in
    /// common.
    pub fn acceptor_h2(&self) -> TlsAcceptor {
        let mut config = (*self.server.load_full()).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        TlsAcceptor::from(std::sync::Arc::new(config))
    }

    /// Reads the files and, if they changed, builds and swaps in new configs. On error the
    /// old configs stay.
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let contents = FileContents::read(&self.files)?;
        let Ok(mut loaded) = self.loaded.lock() else {
            // Poisoned only if a reload panicked; the old config stays in use.
            return Ok(Reloaded::Unchanged);
        };
        if contents == loaded.good || loaded.bad.as_ref() == Some(&contents) {
            return Ok(Reloaded::Unchanged);
        }
        match material::build(&self.files, &contents) {
            Ok(configs) => {
                self.server.store(configs.server);
                loaded.good = contents;
                loaded.bad = None;
                Ok(Reloaded::New(Box::new(configs.peer_client)))
            }
            Err(e) => {
                loaded.bad = Some(contents);
                Err(e)
            }
        }
    }

    /// Reloads and applies the result to `peers`, logging and counting the outcome.
    pub fn reload_and_report(&self, peers: &PeerClient, metrics: &TlsMetrics, why: &str) {
        match self.reload() {
            Ok(Reloaded::Unchanged) => {}
            Ok(Reloaded::New(client)) => match peers.set_tls(*client) {
                Ok(()) => {
                    metrics.reloaded();
                    tracing::info!(trigger = why, cert = %self.files.cert.display(), "TLS certificates reloaded");
                }
                Err(e) => {
                    metrics.reload_failed();
                    tracing::error!(trigger = why, error = %e, "TLS reloaded for the port, but the peer client could not be rebuilt; peers keep the old certificate");
                }
            },
            Err(e) => {
                metrics.reload_failed();
                tracing::error!(trigger = why, error = %e, "TLS reload failed; keeping the certificates in use");
            }
        }
    }
}

/// Reloads on SIGHUP and every `interval` until `stop` flips.
pub async fn run(
    state: Arc<TlsState>,
    interval: Duration,
    peers: PeerClient,
    metrics: Arc<TlsMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS files are still polled");
            None
        }
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate; the files were just loaded
    loop {
        let why = tokio::select! {
            _ = stop.changed() => return,
            _ = ticks.tick() => "poll",
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => "SIGHUP",
        };
        // File reads and key parsing block briefly; keep them off the async workers.
        let (state2, peers2, metrics2) = (state.clone(), peers.clone(), metrics.clone());
        let done =
            tokio::task::spawn_blocking(move || state2.reload_and_report(&peers2, &metrics2, why));
        if let Err(e) = done.await {
            tracing::error!(error = %e, "TLS reload task failed");
        }
    }
}
