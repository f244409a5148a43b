//! The CLI against real `turnstile` processes (lock, elect, operations, the fsync check under strace,
//! a full disk on a tmpfs, the README binary's lack of test hooks), linked as one test executable.

mod common;

mod cli_client;
mod cli_elect;
mod cli_lock;
mod cli_ops;
mod cli_ranges;
mod disk_full;
mod fsync_strace;
