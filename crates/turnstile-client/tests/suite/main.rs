//! The client's integration suites against real in-process clusters, linked as one executable.

mod common;

mod client_api;
mod session_lost;
mod waiting_and_watch;
