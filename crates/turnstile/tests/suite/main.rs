//! The CLI's parsing, and the CLI against real `turnstile` processes (lock, elect, operations, the fsync check under
//! strace, a full disk on a tmpfs, damaged bytes in a snapshot or the log, a log torn by a
//! crash, a data dir from an earlier release, the README binary's lack of test hooks), the
//! docs' console examples against a `turnstile dev` cluster, and their `sh` examples on
//! machines of their own (namespaces), linked as one test executable.

mod common;

mod cli_client;
mod cli_elect;
mod cli_lock;
mod cli_ops;
mod cli_parse;
mod cli_ranges;
mod disk_corrupt;
mod disk_full;
mod disk_torn;
mod docs_console;
mod docs_sh;
mod fsync_strace;
mod upgrade_fixture;
