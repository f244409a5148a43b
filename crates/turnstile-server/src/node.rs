//! Starting and stopping one node: open the data dir (identity, sled log, snapshots), decide
//! the join phase, start Raft, serve the client and peer APIs on one listener, and run the
//! background drivers. `RunningNode::shutdown` stops all of it and releases the data dir.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::{Config, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use turnstile_raft::faults::Faults;
use turnstile_raft::log_store::{LogStoreError, SledLogStore};
use turnstile_raft::network::{PeerClient, PeerIdentity, PeerNetworkFactory};
use turnstile_raft::state_machine::StateMachineStore;
use turnstile_raft::types::{Raft, TypeConfig};

use crate::app::App;
use crate::config::{InitialClusterState, NodeConfig};
use crate::http_server::{self, HttpLimits};
use crate::identity::{self, Identity, IdentityError, Phase};
use crate::{api, bootstrap, driver, peer_api};

/// Subdirectory of the sled log.
pub const LOG_DIR: &str = "raft-log";
/// Subdirectory of snapshot files.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// Beyond the request timeout, how long shutdown waits for requests in flight.
const IN_FLIGHT_MS_MARGIN: u64 = 1_000;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[cfg(feature = "test-hooks")]
    #[error(transparent)]
    Bugs(#[from] crate::bugs::BugsError),
    #[error("log store: {0}")]
    LogStore(#[from] LogStoreError),
    #[error("state machine: {0}")]
    StateMachine(std::io::Error),
    #[error("this data dir belongs to cluster {ours}, but peer {peer} belongs to cluster {theirs}; refusing to start")]
    ForeignCluster {
        ours: String,
        peer: u64,
        theirs: String,
    },
    #[error("raft config: {0}")]
    RaftConfig(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("listener: {0}")]
    Listener(std::io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// A started node.
pub struct RunningNode {
    pub addr: SocketAddr,
    /// The etcd port's address, when it is served (`--etcd-listen`).
    pub etcd_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// The node's fault-injection table (tests).
    pub fn faults(&self) -> &Faults {
        self.app.peers.faults()
    }

    /// Graceful stop, step one: see [`crate::drain`]. Follow it with [`RunningNode::shutdown`].
    pub async fn drain(&self) -> crate::drain::Drained {
        self.app.drain().await
    }

    /// Stops serving, stops Raft and the drivers, and waits until the data dir is released.
    /// The listener closes first and requests in flight are answered (waits and watches on
    /// this node end with a resumable answer) before Raft stops, within a bound.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        self.app.stopping.send_replace(true);
        let server = self.tasks.remove(0);
        let in_flight =
            Duration::from_millis(self.app.cfg.request_timeout_ms + IN_FLIGHT_MS_MARGIN);
        if tokio::time::timeout(in_flight, server).await.is_err() {
            tracing::warn!("requests still in flight at shutdown; stopping anyway");
        }
        if let Err(e) = self.app.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for task in self.tasks {
            let _ = task.await;
        }
        tracing::info!(node_id = self.app.node_id(), "node stopped");
    }

    /// Resolves when the node is asked to stop.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }
}

/// A future this crate compiled, for test builds (the `compiled-once` feature). The body of
/// an `async fn` is compiled in the crate that polls it, not in the one that defines it: every
/// executable that starts a node (the `turnstile` binary, the chaos harness's node binary,
/// each test executable with in-process clusters) compiles the whole node again, openraft's
/// core, the HTTP and gRPC servers and every driver included. With the feature, [`start`]
/// and [`crate::serve::serve`] box their future in a function that is not generic, so this
/// crate compiles the node once and the executables only call it: about 110 s less of the
/// test build on CI's two cores. Not in the README build: compiled inside the binary, where
/// every symbol is internal, the node did 4-21% more lock cycles and writes a second
/// (W1 and W4 at 64 clients, 4 alternating rounds, 2026-12-04). docs/architecture.md, "CI time".
pub type Compiled<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Starts a node serving on `listener` (bind port 0 in tests and pass the real address in
/// `cfg.initial_cluster`).
#[cfg(feature = "compiled-once")]
pub fn start(
    cfg: NodeConfig,
    listener: TcpListener,
    faults: Faults,
) -> Compiled<Result<RunningNode, StartError>> {
    Box::pin(start_node(cfg, listener, faults))
}

/// Starts a node serving on `listener`.
#[cfg(not(feature = "compiled-once"))]
pub async fn start(
    cfg: NodeConfig,
    listener: TcpListener,
    faults: Faults,
) -> Result<RunningNode, StartError> {
    start_node(cfg, listener, faults).await
}

async fn start_node(
    cfg: NodeConfig,
    listener: TcpListener,
    faults: Faults,
) -> Result<RunningNode, StartError> {
    let addr = listener.local_addr().map_err(StartError::Listener)?;
    let etcd_listener = match cfg.etcd_listen {
        Some(at) => Some(TcpListener::bind(at).await.map_err(StartError::Listener)?),
        None => None,
    };
    let etcd_addr = match &etcd_listener {
        Some(l) => Some(l.local_addr().map_err(StartError::Listener)?),
        None => None,
    };
    // Before anything applies: every replica of a bug-injection run must break the same way.
    #[cfg(feature = "test-hooks")]
    let cfg = NodeConfig {
        bugs: crate::bugs::Bugs::from_env(cfg.enable_test_hooks)?,
        ..cfg
    };
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| StartError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    let stored = identity::load(&cfg.data_dir, cfg.id)?;
    // A failed sync stops the process before anything unsynced is acknowledged.
    let log_store = SledLogStore::<TypeConfig>::open_with(
        &cfg.data_dir.join(LOG_DIR),
        cfg.bugs.sync_failure(),
    )?;
    let waiters = crate::waiters::WaiterRegistry::new();
    let mut sm = StateMachineStore::open(&cfg.data_dir.join(SNAPSHOT_DIR), cfg.check_invariants)
        .map_err(StartError::StateMachine)?;
    let has_state = has_raft_state(&cfg.data_dir, &log_store).await?;
    let phase = initial_phase(&cfg, stored.as_ref(), has_state)?;

    let cluster_id = stored.as_ref().and_then(|i| i.cluster_id.clone());
    let mut identity = PeerIdentity::new(cfg.id, &cfg.cluster_secret);
    identity.cluster_id = Arc::new(RwLock::new(cluster_id.clone()));
    // Half the idle timeout every node here serves with (they share one configuration).
    let pool_idle = std::time::Duration::from_millis(cfg.http_idle_timeout_ms / 2);
    let tls = match &cfg.tls {
        Some(files) => Some(crate::tls::TlsState::load(files.clone())?),
        None => None,
    };
    let peer_tls = tls.as_ref().map(|(_, client)| client.clone());
    let tls = tls.map(|(state, _)| state);
    let peers = PeerClient::new(identity, faults, pool_idle, peer_tls)?;
    if let Some(ours) = cluster_id {
        check_peers_cluster(&cfg, &peers, &ours).await?;
    }

    let shared = sm.shared();
    sm.set_listener(waiters.clone());
    let stats = log_store.stats_handle();
    let metrics = crate::metrics::NodeMetrics::new(&cfg, stats.clone());
    sm.set_observer(metrics.apply_observer());
    let raft = Raft::new(
        cfg.id,
        Arc::new(raft_config(&cfg)?),
        PeerNetworkFactory::new(peers.clone()),
        log_store,
        sm,
    )
    .await
    .map_err(|e| StartError::Raft(e.to_string()))?;
    let app = Arc::new(App::new(
        cfg,
        raft,
        shared,
        peers,
        phase,
        Box::new(move || stats.get()),
        waiters,
    ));
    tracing::info!(node_id = app.node_id(), %addr, ?phase, "node starting");

    let (stop, stop_rx) = watch::channel(false);
    let router = api::router(app.clone()).merge(peer_api::router(app.clone()));
    let router = crate::metrics::instrument(router, app.clone(), metrics.clone());
    let tls_server = tls.as_ref().map(|state| http_server::TlsServer {
        state: state.clone(),
        metrics: metrics.tls(),
        h2: false,
    });
    let server = tokio::spawn(http_server::serve(
        listener,
        router,
        HttpLimits::from_config(&app.cfg),
        metrics.connections(),
        tls_server,
        stop_rx.clone(),
    ));
    // The server task comes first: `shutdown` waits for it before stopping Raft.
    let mut tasks = vec![
        server,
        tokio::spawn(driver::run(app.clone(), stop_rx.clone())),
        tokio::spawn(driver::run_deadlock_checks(app.clone(), stop_rx.clone())),
        tokio::spawn(crate::acks::run_flush(app.clone(), stop_rx.clone())),
        tokio::spawn(crate::snapshot_policy::run(app.clone(), stop_rx.clone())),
        tokio::spawn(crate::raft_fatal::exit_when_raft_fails(
            app.clone(),
            stop_rx.clone(),
        )),
        metrics.spawn_raft_watch(app.raft.clone(), app.term_leaders.clone(), stop_rx.clone()),
        tokio::spawn(bootstrap::run(app.clone(), stop_rx.clone())),
    ];
    if let Some(listener) = etcd_listener {
        let drain = Duration::from_millis(app.cfg.request_timeout_ms + IN_FLIGHT_MS_MARGIN);
        tasks.push(tokio::spawn(crate::etcd::serve(
            app.clone(),
            listener,
            HttpLimits::from_config(&app.cfg),
            tls.as_ref().map(|state| http_server::TlsServer {
                state: state.clone(),
                metrics: metrics.tls(),
                h2: true,
            }),
            stop_rx.clone(),
            drain,
        )));
        tracing::info!(node_id = app.node_id(), addr = ?etcd_addr, "etcd port serving");
    }
    if let Some(state) = tls {
        let interval = Duration::from_millis(app.cfg.tls_reload_interval_ms);
        tasks.push(tokio::spawn(crate::tls::reload::run(
            state,
            interval,
            app.peers.clone(),
            metrics.tls(),
            stop_rx,
        )));
    }
    Ok(RunningNode {
        addr,
        etcd_addr,
        app,
        stop,
        tasks,
    })
}

fn raft_config(cfg: &NodeConfig) -> Result<Config, StartError> {
    let config = Config {
        cluster_name: "turnstile".into(),
        heartbeat_interval: cfg.heartbeat_ms,
        election_timeout_min: cfg.election_timeout_ms_min,
        election_timeout_max: cfg.election_timeout_ms_max,
        // `snapshot_policy::run` decides, by the state's size (see there).
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: cfg.snapshot_keep_logs,
        purge_batch_size: 256,
        install_snapshot_timeout: 10_000,
        // A node coming back from a partition asks before it campaigns, so its inflated term
        // does not depose a healthy leader (`/raft/pre-vote`; docs/architecture.md).
        enable_pre_vote: Some(true),
        ..Default::default()
    };
    config
        .validate()
        .map_err(|e| StartError::RaftConfig(e.to_string()))
}

/// True if this data dir has ever taken part in Raft (a vote, log entries or a snapshot).
async fn has_raft_state(dir: &Path, log: &SledLogStore<TypeConfig>) -> Result<bool, StartError> {
    use openraft::storage::{RaftLogReader, RaftLogStorage};
    let mut log = log.clone();
    let state = log
        .get_log_state()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let vote = log
        .read_vote()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let snapshots = std::fs::read_dir(dir.join(SNAPSHOT_DIR))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    Ok(state.last_log_id.is_some() || vote.is_some() || snapshots)
}

fn initial_phase(
    cfg: &NodeConfig,
    stored: Option<&Identity>,
    has_state: bool,
) -> Result<Phase, StartError> {
    if let Some(identity) = stored {
        return Ok(identity.phase);
    }
    if has_state {
        return Err(IdentityError::MissingIdentity {
            dir: cfg.data_dir.clone(),
        }
        .into());
    }
    match cfg.initial_cluster_state {
        InitialClusterState::New => Ok(Phase::Empty),
        InitialClusterState::Existing => {
            identity::store(
                &cfg.data_dir,
                &Identity {
                    node_id: cfg.id,
                    cluster_id: None,
                    phase: Phase::Awaiting,
                },
            )?;
            tracing::warn!("empty data dir with --initial-cluster-state existing: waiting to be added through a membership change");
            Ok(Phase::Awaiting)
        }
    }
}

/// Refuses to start a data dir of one cluster among peers of another.
async fn check_peers_cluster(
    cfg: &NodeConfig,
    peers: &PeerClient,
    ours: &str,
) -> Result<(), StartError> {
    for (id, addr) in cfg.peers() {
        if let Some(st) = bootstrap::probe(peers, id, &addr.to_string()).await {
            if let Some(theirs) = st.cluster_id.filter(|t| t != ours) {
                return Err(StartError::ForeignCluster {
                    ours: ours.to_string(),
                    peer: id,
                    theirs,
                });
            }
        }
    }
    Ok(())
}
