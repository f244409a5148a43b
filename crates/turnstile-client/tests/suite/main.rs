//! The client's integration suites against real in-process clusters (and, for TLS and
//! credentials, a fake node in `tls_auth.rs`), linked as one executable.

mod common;

mod client_api;
mod recipes;
mod session_lost;
mod tls_auth;
mod waiting_and_watch;
