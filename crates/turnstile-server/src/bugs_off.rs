//! The bug switches of a build without the `test-hooks` feature (the `turnstile` binary as the
//! README builds it): a zero-sized stand-in for `bugs.rs` whose switches are constant off, so
//! the write and read paths compile to what they would be without the switches, and neither
//! `TURNSTILE_BUGS` nor any switch name is in the binary.

use turnstile_core::Command;

/// No switches: this build has none to turn on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs;

impl Bugs {
    /// Always false: reads go through ReadIndex and the leader.
    #[inline(always)]
    pub fn local_reads(&self) -> bool {
        false
    }

    /// A failed log sync stops the node.
    #[inline(always)]
    pub fn sync_failure(&self) -> turnstile_raft::log_store::SyncFailure {
        turnstile_raft::log_store::SyncFailure::ExitProcess
    }

    /// Raft's core stopping on an error stops the process.
    #[inline(always)]
    pub fn exit_on_raft_failure(&self) -> bool {
        true
    }

    /// A node votes and takes entries only once (re)admitted.
    #[inline(always)]
    pub fn wiped_node_votes(&self) -> bool {
        false
    }

    /// The write, unchanged.
    #[inline(always)]
    pub fn break_write(
        &self,
        request_id: Option<String>,
        command: Command,
    ) -> (Option<String>, Command) {
        (request_id, command)
    }
}
