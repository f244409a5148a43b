//! The Rust client (`turnstile-client`) against real in-process clusters (and, for TLS and
//! credentials, a fake node in `tls_auth.rs`). In this executable rather than one of the
//! client crate's own: every test executable links the server and its dependencies again,
//! which costs CI minutes on two cores.

mod common;

mod client_api;
mod recipes;
mod session_lost;
mod tls_auth;
mod waiting_and_watch;
