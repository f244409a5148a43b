//! `App`: everything a handler needs, shared by the client API, the peer API and the
//! background drivers. Also owns the node's join phase (who may vote and serve).

use openraft::async_runtime::WatchReceiver;
use std::sync::RwLock;

use openraft::ServerState;
use turnstile_raft::log_store::SyncStats;
use turnstile_raft::network::PeerClient;
use turnstile_raft::state_machine::SharedState;
use turnstile_raft::types::Raft;

use crate::clock::{LeaderClock, WallClock};
use crate::config::NodeConfig;
use crate::identity::{self, Identity, IdentityError, Phase};
use crate::waiters::WaiterRegistry;
use std::sync::Arc;

/// Shared node context.
pub struct App {
    pub cfg: NodeConfig,
    pub raft: Raft,
    pub sm: SharedState,
    pub peers: PeerClient,
    pub clock: LeaderClock,
    pub wall: WallClock,
    pub(crate) log_stats: Box<dyn Fn() -> SyncStats + Send + Sync>,
    pub stats: ApiStats,
    /// Refused callers, counted and logged at a bounded rate.
    pub denials: crate::denials::Denials,
    /// Request ids clients acknowledged, waiting to be proposed (`crate::acks`).
    pub acks: crate::acks::AckQueue,
    /// Queued acquires whose HTTP request this node holds.
    pub waiters: Arc<WaiterRegistry>,
    waiter_seq: std::sync::atomic::AtomicU64,
    /// Flips to true when the node starts shutting down: waits end early (`503`).
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// Set by a graceful stop: `/readyz` answers 503 so load balancers move away first.
    pub draining: std::sync::atomic::AtomicBool,
    phase: RwLock<Phase>,
    /// Held while the identity file is composed and written. Two writers (the admit RPC moving
    /// the phase, housekeeping recording the cluster id) each write what they read of the
    /// other's field: unserialised, one could write an older phase back over a newer one.
    identity_write: std::sync::Mutex<()>,
    /// Watch streams and waiting requests per principal on this node (`crate::auth`).
    pub node_usage: crate::auth::NodeUsage,
    /// `/readyz`'s probe and its newest result (`crate::readiness`).
    pub readiness: crate::readiness::ReadyProbe,
    /// When this node last accepted an append (entries or heartbeat) from a leader.
    leader_contact: LeaderContact,
    /// The data dir's free space against `--disk-reserve-mb` (`crate::disk_space`).
    pub disk: crate::disk_space::DiskSpace,
    /// Who led the recent terms, as this node learned (`crate::term_leaders`).
    pub term_leaders: crate::term_leaders::TermLeaders,
    /// A newer membership than this node's log, as a member vouched for it
    /// (`crate::tls::member_vouch`).
    pub member_vouch: crate::tls::member_vouch::MemberVouch,
    /// Client writes go to Raft through it, several in one message (`crate::proposer`).
    pub(crate) proposer: crate::proposer::Proposer,
}

/// The last time a leader's append was accepted here, in ms since the node started (0:
/// never). With PreVote a cut-off follower keeps its leader's id (it never campaigns), so
/// "knows a leader" no longer says "hears one"; this does.
#[derive(Debug)]
struct LeaderContact {
    started: std::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact {
            started: std::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

/// Counters of API events that are not Raft's (read by `/metrics` and `/v1/cluster`).
#[derive(Debug, Default)]
pub struct ApiStats {
    /// Fenced writes refused because their token was not the lock's current grant.
    pub fenced_rejections: std::sync::atomic::AtomicU64,
}

impl App {
    pub(crate) fn new(
        cfg: NodeConfig,
        raft: Raft,
        sm: SharedState,
        peers: PeerClient,
        phase: Phase,
        log_stats: Box<dyn Fn() -> SyncStats + Send + Sync>,
        waiters: Arc<WaiterRegistry>,
    ) -> App {
        let disk = crate::disk_space::DiskSpace::new(cfg.id, &cfg.data_dir, cfg.disk_reserve_mb);
        let proposer = crate::proposer::Proposer::start(raft.clone());
        let app = App {
            cfg,
            raft,
            sm,
            peers,
            clock: LeaderClock::default(),
            wall: WallClock::default(),
            log_stats,
            stats: ApiStats::default(),
            denials: Default::default(),
            acks: Default::default(),
            waiters,
            waiter_seq: Default::default(),
            stopping: tokio::sync::watch::channel(false).0,
            draining: Default::default(),
            phase: RwLock::new(phase),
            identity_write: Default::default(),
            node_usage: Default::default(),
            readiness: Default::default(),
            leader_contact: Default::default(),
            disk,
            term_leaders: Default::default(),
            member_vouch: Default::default(),
            proposer,
        };
        app.raft.runtime_config().elect(phase.may_vote());
        app
    }

    /// Notes that a leader's append (entries or a heartbeat) was just accepted.
    pub fn note_leader_contact(&self) {
        let c = &self.leader_contact;
        let ms = u64::try_from(c.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        c.last_ms
            .store(ms.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// True if a leader's append was accepted here within `span`.
    pub fn heard_leader_within(&self, span: std::time::Duration) -> bool {
        let c = &self.leader_contact;
        let last = c.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        let now = u64::try_from(c.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        last > 0 && u128::from(now.saturating_sub(last)) < span.as_millis()
    }

    /// A waiter id for a waiting acquire sent without a `request_id`: unique across nodes
    /// and restarts (node id, start-up nanos, sequence).
    pub fn new_waiter_id(&self) -> String {
        let seq = self
            .waiter_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("auto-{}-{}-{seq}", self.cfg.id, self.started_nanos())
    }

    fn started_nanos(&self) -> u128 {
        static STARTED: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
        *STARTED.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        })
    }

    /// True when clients must authenticate: exactly when the node serves TLS.
    pub fn auth_on(&self) -> bool {
        self.cfg.tls_enabled()
    }

    pub fn node_id(&self) -> u64 {
        self.cfg.id
    }

    pub fn phase(&self) -> Phase {
        *self.phase.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves to `phase`, persisting it first: a node must never vote after a restart on the
    /// strength of a phase it had not yet written down.
    pub fn set_phase(&self, phase: Phase) -> Result<(), IdentityError> {
        let _writing = self.identity_writer();
        let cluster_id = self.peers.identity().cluster_id();
        identity::store(
            &self.cfg.data_dir,
            &Identity {
                node_id: self.cfg.id,
                cluster_id,
                phase,
            },
        )?;
        *self.phase.write().unwrap_or_else(|p| p.into_inner()) = phase;
        self.raft.runtime_config().elect(phase.may_vote());
        tracing::info!(?phase, "node phase changed");
        Ok(())
    }

    /// The identity file's lock (see `identity_write`). It guards no data (the file is what it
    /// protects), so a poisoned one is taken all the same.
    fn identity_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.identity_write
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records the replicated cluster id in the identity file once it is known.
    pub(crate) fn learn_cluster_id(&self, cluster_id: &str) -> Result<(), IdentityError> {
        let _writing = self.identity_writer();
        let cell = &self.peers.identity().cluster_id;
        if cell.read().ok().and_then(|c| c.clone()).as_deref() == Some(cluster_id) {
            return Ok(());
        }
        let identity = Identity {
            node_id: self.cfg.id,
            cluster_id: Some(cluster_id.to_string()),
            phase: self.phase(),
        };
        identity::store(&self.cfg.data_dir, &identity)?;
        // Only once it is on disk: a failed write is tried again by the next housekeeping.
        if let Ok(mut c) = cell.write() {
            *c = Some(cluster_id.to_string());
        }
        tracing::info!(cluster_id, "cluster id recorded");
        Ok(())
    }

    /// The peer address of `node_id` according to the current membership.
    pub fn node_addr(&self, node_id: u64) -> Option<String> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        m.membership_config
            .membership()
            .get_node(&node_id)
            .map(|n| n.addr.clone())
    }

    /// The leader this node currently knows, if any.
    pub fn current_leader(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// True if this node believes it is the leader.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow_watched().current_term
    }

    /// Fsync counters of the log store.
    pub fn log_sync_stats(&self) -> SyncStats {
        (self.log_stats)()
    }
}
