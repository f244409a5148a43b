//! A Turnstile node: the HTTP client API, the peer API, request routing to the leader, and the
//! background drivers (leader ticks and lease expiry, cluster formation).
//!
//! Module map:
//! - [`config`]: flags, env and TOML into a validated [`config::NodeConfig`].
//! - [`identity`]: the data dir's identity file and the join [`identity::Phase`].
//! - [`node`]: starting and stopping a node ([`node::start`], [`node::RunningNode`]).
//! - [`app`]: the shared context; [`routing`] gets requests to the leader; [`leader_ops`] is
//!   what the leader does with them; [`proposer`] sends the writes that arrive together to
//!   Raft as one message; [`membership`]: adding, promoting and removing nodes.
//! - [`http_server`]: the HTTP/1.1 server loop and its connection limits (timeouts, cap).
//! - [`auth`]: who is calling (client certificate or bearer token) and per-node quotas;
//!   what they may do is judged in `turnstile_core::auth`.
//! - [`tls`]: TLS on the port and between peers, certificate reload, `turnstile certs`.
//! - [`api`]: client HTTP handlers; [`peer_api`]: `/raft/*` handlers; [`error`]: the one
//!   error-to-HTTP mapping; [`views`] and [`election_views`]: read models; [`ranges`]: paged
//!   range reads (keys, locks, leases); [`proto`]: node-to-node messages.
//! - [`backup`]: backup files and restoring a new cluster from one.
//! - [`drain`]: the graceful stop's leader hand-over; [`readiness`]: what `/readyz` checks.
//! - [`disk_space`]: writes refused while the data dir's free space is below the reserve;
//!   [`raft_fatal`]: the process exits when Raft's core stops on an error.
//! - [`term_leaders`]: who led each recent term, as this node learned (`/v1/cluster`).
//! - [`driver`]: leader ticks, expiry, cluster id; [`bootstrap`]: forming a new cluster;
//!   [`snapshot_policy`]: when to snapshot, by the state's size.
//! - [`clock`]: the leader's monotonic `sm_time` source; [`waiters`]: queued acquires held
//!   by this node.
//! - [`metrics`]: `/metrics` (Prometheus), fed by apply, Raft, the log store and HTTP.
//! - [`bugs`]: the chaos harness's bug switches; with the `test-hooks` feature only, a
//!   constant-off stand-in (`bugs_off.rs`) otherwise. `api::debug` exists only with the
//!   feature too: the `turnstile` binary as the README builds it compiles no test hook.

pub mod acks;
pub mod api;
pub mod app;
pub mod auth;
pub mod auth_views;
pub mod backup;
pub mod bootstrap;
#[cfg(feature = "test-hooks")]
pub mod bugs;
#[cfg(not(feature = "test-hooks"))]
#[path = "bugs_off.rs"]
pub mod bugs;
pub mod clock;
pub mod config;
pub mod denials;
pub mod disk_space;
pub mod drain;
pub mod driver;
pub mod election_views;
pub mod error;
pub mod etcd;
pub mod http_server;
pub mod identity;
pub mod key_span;
pub mod leader_ops;
pub mod membership;
pub mod metrics;
pub mod node;
pub mod peer_api;
pub mod proposer;
pub mod proto;
pub mod raft_fatal;
pub mod ranges;
pub mod readiness;
pub mod routing;
pub mod serve;
pub mod snapshot_policy;
pub mod term_leaders;
pub mod tls;
pub mod views;
pub mod waiters;

/// The exit status of a node whose log sync failed (`EX_IOERR`): it stops rather than
/// acknowledge a write that may not be on disk (docs/operations.md, "Disk faults").
pub use turnstile_raft::log_store::SYNC_FAILED_EXIT_CODE;
