//! Test-only switches that each break one guarantee, so the chaos harness can prove that its
//! checkers catch the broken guarantee. This module exists only with the `test-hooks` feature
//! (without it, `bugs_off.rs` stands in: no switch, no `TURNSTILE_BUGS`); the switches work
//! only with `bug-injection` as well (the harness's build), and are switched on only through
//! `TURNSTILE_BUGS` (a comma-separated list) on a node whose embedding program enabled test
//! hooks (the harness's `node --enable-test-hooks`; `turnstile serve` never does).

use std::fmt;

use turnstile_core::Command;

/// Environment variable naming the switches to turn on.
pub const BUGS_ENV: &str = "TURNSTILE_BUGS";

/// The switches. All off is the only correct server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// Fenced key writes are proposed without their fence: a stale holder's write lands.
    pub skip_fence: bool,
    /// Reads are answered from this node's local state, without ReadIndex or the leader.
    pub local_reads: bool,
    /// Writes are proposed without their request id: a retry applies twice.
    pub skip_dedup: bool,
    /// Expiry frees due holders' locks before failing due waits (see `turnstile_core::bugs`).
    pub grant_due_waiters: bool,
    /// A failed log sync is treated as a success: the node acknowledges and carries on
    /// (`turnstile_raft::log_store::SyncFailure::Ignore`).
    pub ignore_sync_failure: bool,
    /// Raft's core stopping on an error leaves the process up without Raft (`raft_fatal.rs`).
    pub survive_raft_failure: bool,
    /// A node whose disk was wiped votes and takes entries at once, as the same voter, instead
    /// of waiting to be re-added (`peer_api.rs`): its empty log can elect a leader that lacks
    /// acknowledged entries.
    pub wiped_node_votes: bool,
}

/// Why `TURNSTILE_BUGS` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BugsError {
    #[error(
        "unknown bug switch {0:?} (known: skip-fence, local-reads, skip-dedup, grant-due-waiters, ignore-sync-failure, survive-raft-failure, wiped-node-votes)"
    )]
    Unknown(String),
    /// Also what `turnstile serve` answers in a build where another workspace member turned
    /// the feature on: it has no way to enable test hooks.
    #[error("{BUGS_ENV} needs test hooks, which only the chaos harness's `node --enable-test-hooks` turns on")]
    HooksDisabled,
    #[error("{BUGS_ENV} is set but this binary was built without the bug-injection feature")]
    NotCompiled,
}

impl Bugs {
    /// Parses a comma-separated switch list.
    pub fn parse(list: &str) -> Result<Bugs, BugsError> {
        let mut bugs = Bugs::default();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "skip-fence" => bugs.skip_fence = true,
                "local-reads" => bugs.local_reads = true,
                "skip-dedup" => bugs.skip_dedup = true,
                "grant-due-waiters" => bugs.grant_due_waiters = true,
                "ignore-sync-failure" => bugs.ignore_sync_failure = true,
                "survive-raft-failure" => bugs.survive_raft_failure = true,
                "wiped-node-votes" => bugs.wiped_node_votes = true,
                other => return Err(BugsError::Unknown(other.to_string())),
            }
        }
        Ok(bugs)
    }

    /// Reads the switches from the environment and turns them on (see [`Bugs::admit`]).
    pub fn from_env(test_hooks: bool) -> Result<Bugs, BugsError> {
        let bugs = Bugs::admit(&std::env::var(BUGS_ENV).unwrap_or_default(), test_hooks)?;
        if bugs == Bugs::default() {
            return Ok(bugs);
        }
        #[cfg(feature = "bug-injection")]
        turnstile_core::bugs::set_grant_due_waiters(bugs.grant_due_waiters);
        tracing::error!(bugs = %bugs, "BUG INJECTION ON: this node breaks guarantees on purpose");
        Ok(bugs)
    }

    /// Parses `list` and decides whether this node may run with it. Without test hooks, or
    /// without `bug-injection`, any switch is refused, so a harness run can never silently test
    /// a correct server while believing it broke it, and a production node never runs broken.
    pub fn admit(list: &str, test_hooks: bool) -> Result<Bugs, BugsError> {
        let bugs = Bugs::parse(list)?;
        if bugs == Bugs::default() {
            return Ok(bugs);
        }
        // Hooks first: on a node that cannot have them (`turnstile serve`), that is the reason.
        if !test_hooks {
            return Err(BugsError::HooksDisabled);
        }
        if !cfg!(feature = "bug-injection") {
            return Err(BugsError::NotCompiled);
        }
        Ok(bugs)
    }
}

impl Bugs {
    /// Whether reads skip ReadIndex and the leader (`local-reads`).
    pub fn local_reads(&self) -> bool {
        self.local_reads
    }

    /// What the log store does when a sync fails: exit, or (`ignore-sync-failure`) carry on.
    pub fn sync_failure(&self) -> turnstile_raft::log_store::SyncFailure {
        #[cfg(feature = "bug-injection")]
        if self.ignore_sync_failure {
            return turnstile_raft::log_store::SyncFailure::Ignore;
        }
        turnstile_raft::log_store::SyncFailure::ExitProcess
    }

    /// Whether the process exits when Raft's core stops on an error (not with
    /// `survive-raft-failure`).
    pub fn exit_on_raft_failure(&self) -> bool {
        !self.survive_raft_failure
    }

    /// Whether a node that has not been (re)admitted votes and takes entries anyway
    /// (`wiped-node-votes`).
    pub fn wiped_node_votes(&self) -> bool {
        self.wiped_node_votes
    }

    /// Applies the write-path switches to a write about to be routed to the leader.
    pub fn break_write(
        &self,
        request_id: Option<String>,
        mut command: Command,
    ) -> (Option<String>, Command) {
        if self.skip_fence {
            if let Command::KvPut { fence, .. } | Command::KvDelete { fence, .. } = &mut command {
                *fence = None;
            }
        }
        let request_id = if self.skip_dedup { None } else { request_id };
        (request_id, command)
    }
}

impl fmt::Display for Bugs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on: Vec<&str> = [
            (self.skip_fence, "skip-fence"),
            (self.local_reads, "local-reads"),
            (self.skip_dedup, "skip-dedup"),
            (self.grant_due_waiters, "grant-due-waiters"),
            (self.ignore_sync_failure, "ignore-sync-failure"),
            (self.survive_raft_failure, "survive-raft-failure"),
            (self.wiped_node_votes, "wiped-node-votes"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        write!(f, "{}", on.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_refuses_unknown_names() {
        assert_eq!(Bugs::parse(""), Ok(Bugs::default()));
        let b = Bugs::parse("skip-fence, local-reads").expect("valid");
        assert!(b.skip_fence && b.local_reads && !b.skip_dedup && !b.grant_due_waiters);
        assert!(Bugs::parse("ignore-sync-failure").is_ok_and(|b| b.ignore_sync_failure));
        assert_eq!(b.to_string(), "skip-fence,local-reads");
        assert_eq!(
            Bugs::parse("skip-fencing"),
            Err(BugsError::Unknown("skip-fencing".into()))
        );
    }

    #[test]
    fn switches_need_test_hooks_and_the_feature() {
        let on = Bugs {
            skip_fence: true,
            ..Bugs::default()
        };
        let compiled = if cfg!(feature = "bug-injection") {
            Ok(on)
        } else {
            Err(BugsError::NotCompiled)
        };
        for (list, test_hooks, want) in [
            ("", false, Ok(Bugs::default())),
            (" ", true, Ok(Bugs::default())),
            ("skip-fence", false, Err(BugsError::HooksDisabled)),
            (
                "skip-fencing",
                false,
                Err(BugsError::Unknown("skip-fencing".into())),
            ),
            ("skip-fence", true, compiled),
        ] {
            assert_eq!(Bugs::admit(list, test_hooks), want, "{list:?} {test_hooks}");
        }
    }
}
