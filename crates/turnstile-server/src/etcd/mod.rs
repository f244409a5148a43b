//! The etcd port (`--etcd-listen`): etcd's v3 gRPC API over the same replicated state as the
//! client API, so etcd's own clients (`etcdctl`, clientv3, python-etcd3, etcd-client) work
//! unchanged. Every RPC goes through the same routed writes and linearizable reads as
//! `/v1` (`crate::api::ops`), authenticated the same way (`common::caller`), with the same
//! limits. What is served and how it differs from etcd: docs/etcd-compat.md.
//!
//! - [`kv`]: Range, Put, DeleteRange (one key), Txn, Compact.
//! - [`lease`]: LeaseGrant, LeaseRevoke, LeaseKeepAlive, LeaseTimeToLive, LeaseLeases.
//! - [`cluster`]: MemberList, Status, Authenticate, AuthStatus.
//! - [`lock`]: Lock and Unlock on Turnstile's own locks (the answer's revision is the token).
//! - [`election`]: Campaign, Proclaim, Leader, Resign and ([`observe`]) Observe on Turnstile's
//!   elections.
//! - [`watch`]: Watch, on the replicated watch history.
//! - Everything else answers `Unimplemented`, with a message naming the RPC
//!   ([`unimplemented`]), never a wrong answer.
//!
//! The listener ([`listener`]) holds the same bounds as the HTTP port's: a connection cap,
//! TLS handshakes under the header read timeout. On top: per connection at most
//! [`STREAMS_PER_CONNECTION_MAX`] concurrent RPCs, node-wide at most `--http-connections-max`
//! RPCs in progress (so the port holds no more requests than the HTTP port can), messages of
//! at most [`REQUEST_BYTES_MAX`], and keep-alive and watch streams under the `watches` quota
//! and a node-wide count each (`lease::KEEPALIVE_STREAMS_PER_NODE_MAX`,
//! `watch::WATCH_STREAMS_PER_NODE_MAX`).

pub mod auth;
pub mod cluster;
pub mod common;
pub mod election;
pub mod kv;
pub mod lease;
pub mod listener;
pub mod lock;
pub mod observe;
pub mod unimplemented;
pub mod watch;

pub use unimplemented::UnimplementedMessage;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use turnstile_etcd_proto::etcdserverpb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer,
    lease_server::LeaseServer, maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
use turnstile_etcd_proto::v3electionpb::election_server::ElectionServer;
use turnstile_etcd_proto::v3lockpb::lock_server::LockServer;

use crate::app::App;
use crate::http_server::{HttpLimits, TlsServer};

/// Largest request message (etcd's default `--max-request-bytes` is 1.5 MiB).
pub const REQUEST_BYTES_MAX: usize = 2 * 1024 * 1024;
/// Largest response message (a `Range` is cut well below it, `crate::key_span`).
pub const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Concurrent RPCs (HTTP/2 streams) per connection.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 256;
/// Bytes of request headers (metadata) per RPC.
pub const HEADER_LIST_BYTES_MAX: u32 = 16 * 1024;
/// HTTP/2 keep-alive: a ping this often on a quiet connection ...
pub const KEEPALIVE_INTERVAL_MS: u64 = 30_000;
/// ... which must be answered within this, or the connection is closed.
pub const KEEPALIVE_TIMEOUT_MS: u64 = 10_000;

/// A service with this port's message size bounds.
macro_rules! sized {
    ($svc:expr) => {
        $svc.max_decoding_message_size(REQUEST_BYTES_MAX)
            .max_encoding_message_size(RESPONSE_BYTES_MAX)
    };
}

/// Serves the etcd API on `listener` until `stop` changes, then for at most `drain` more
/// while open RPCs finish.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    limits: HttpLimits,
    tls: Option<TlsServer>,
    stop: tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) {
    let own_url = match listener.local_addr() {
        Ok(a) if tls.is_some() => format!("https://{a}"),
        Ok(a) => format!("http://{a}"),
        Err(_) => String::new(),
    };
    let (incoming, accepting) = listener::accept(listener, limits, tls, stop.clone());
    let cluster = Arc::new(cluster::ClusterService {
        app: app.clone(),
        own_url,
    });
    let kv = KvServer::new(kv::KvService { app: app.clone() });
    let lease = LeaseServer::new(lease::LeaseService { app: app.clone() });
    let router = tonic::transport::Server::builder()
        .concurrency_limit_per_connection(STREAMS_PER_CONNECTION_MAX as usize)
        .max_concurrent_streams(Some(STREAMS_PER_CONNECTION_MAX))
        .http2_max_header_list_size(Some(HEADER_LIST_BYTES_MAX))
        .http2_keepalive_interval(Some(Duration::from_millis(KEEPALIVE_INTERVAL_MS)))
        .http2_keepalive_timeout(Some(Duration::from_millis(KEEPALIVE_TIMEOUT_MS)))
        // Node-wide, as many RPCs in progress as the HTTP port has connections: past it, new
        // RPCs wait (HTTP/2 flow control bounds what they buffer meanwhile).
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            limits.connections_max as usize,
        ))
        .layer(UnimplementedMessage::layer())
        .add_service(sized!(kv))
        .add_service(sized!(lease))
        .add_service(sized!(ClusterServer::from_arc(cluster.clone())))
        .add_service(sized!(MaintenanceServer::from_arc(cluster.clone())))
        .add_service(sized!(AuthServer::from_arc(cluster)))
        .add_service(sized!(WatchServer::new(watch::WatchService {
            app: app.clone()
        })))
        .add_service(sized!(LockServer::new(lock::LockService {
            app: app.clone()
        })))
        .add_service(sized!(ElectionServer::new(election::ElectionService {
            app: app.clone()
        })));
    let mut stopped = stop.clone();
    let shutdown = async move {
        let _ = stopped.changed().await;
    };
    let serving = router.serve_with_incoming_shutdown(incoming, shutdown);
    let mut stop = stop;
    let deadline = async move {
        let _ = stop.changed().await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        r = serving => {
            if let Err(e) = r {
                tracing::error!(error = %e, "etcd port failed");
            }
        }
        () = deadline => tracing::warn!("etcd port: RPCs still open at shutdown; closing them"),
    }
    accepting.abort();
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// The generated etcd API matches the protos it was generated from (the proto crate has no
    /// test target of its own: see its Cargo.toml).
    #[test]
    fn generated_etcd_code_matches_the_proto_files() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../turnstile-etcd-proto/proto");
        let mut hash = Sha256::new();
        for p in turnstile_etcd_proto::PROTO_FILES {
            hash.update(std::fs::read(dir.join(p)).expect("read a proto file"));
        }
        assert_eq!(
            hex::encode(hash.finalize()),
            turnstile_etcd_proto::PROTO_SHA256.trim(),
            "proto/ changed since src/gen/ was generated: run crates/turnstile-etcd-proto/regen.sh"
        );
    }
}
