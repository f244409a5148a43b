//! The chaos harness's integration tests, one binary (each test binary costs a link on a
//! 2-core CI machine): failure stories against real node processes in network namespaces
//! (`stories_*`), a rolling restart under load, short seeded chaos runs with and without bug
//! switches (`harness_runs`), and the Docker backend end to end. Fixtures are in `common`.
//!
//! Run one group with a filter, as the module is the first part of every test's name:
//! `cargo test --release -p turnstile-jepsen --test suite stories_locks::`.
#![allow(clippy::unwrap_used)]

mod common;
mod docker_backend;
mod harness_runs;
mod rolling_restart;
mod stories_faults;
mod stories_fencing;
mod stories_locks;
