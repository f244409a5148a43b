//! Test-only switches that each break one guarantee, so the chaos harness can prove that its
//! checkers catch the broken guarantee. Compiled in only with the `bug-injection` feature
//! (the harness's build, never a release build), switched on only through `TURNSTILE_BUGS`
//! (a comma-separated list) on a node that also runs with `--enable-test-hooks`.

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
}

/// Why `TURNSTILE_BUGS` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BugsError {
    #[error(
        "unknown bug switch {0:?} (known: skip-fence, local-reads, skip-dedup, grant-due-waiters)"
    )]
    Unknown(String),
    #[error("{BUGS_ENV} needs --enable-test-hooks")]
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
                other => return Err(BugsError::Unknown(other.to_string())),
            }
        }
        Ok(bugs)
    }

    /// Reads the switches from the environment. Without the feature, any switch is refused, so a
    /// harness run can never silently test a correct server while believing it broke it.
    pub fn from_env(test_hooks: bool) -> Result<Bugs, BugsError> {
        let list = std::env::var(BUGS_ENV).unwrap_or_default();
        let bugs = Bugs::parse(&list)?;
        if bugs == Bugs::default() {
            return Ok(bugs);
        }
        if !cfg!(feature = "bug-injection") {
            return Err(BugsError::NotCompiled);
        }
        if !test_hooks {
            return Err(BugsError::HooksDisabled);
        }
        #[cfg(feature = "bug-injection")]
        turnstile_core::bugs::set_grant_due_waiters(bugs.grant_due_waiters);
        tracing::error!(bugs = %bugs, "BUG INJECTION ON: this node breaks guarantees on purpose");
        Ok(bugs)
    }
}

impl Bugs {
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
        assert_eq!(b.to_string(), "skip-fence,local-reads");
        assert_eq!(
            Bugs::parse("skip-fencing"),
            Err(BugsError::Unknown("skip-fencing".into()))
        );
    }
}
