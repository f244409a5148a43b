//! openraft glue for Turnstile: the type config ([`types`]), the fsync'd sled log store
//! ([`log_store`]), the state machine adapter ([`state_machine`]) with its snapshot files
//! ([`snapshot_files`]) and metrics hook ([`apply_observer`]), and the peer network
//! ([`network`], authenticated by [`peer_auth`], outages logged once by [`peer_health`], with
//! [`faults`] for tests), and the write [`responder`] that answers a proposal where it applies.

pub mod apply_observer;
pub mod faults;
pub mod log_store;
pub mod network;
pub mod peer_auth;
pub mod peer_conn;
pub mod peer_health;
pub mod responder;
pub mod snapshot_files;
pub mod state_machine;
pub mod types;
