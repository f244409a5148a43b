//! The state the memory examples build, shared by them (`#[path]`-included, not an example of
//! its own): entries applied straight to a `State` at consecutive indexes, and W6's shape of
//! held locks, one lease per [`LOCKS_PER_LEASE`], every acquire with its own `request_id`.

use turnstile_core::{Command, Envelope, LockMode, Response, State};

/// Locks one lease holds, as in the bench's W6 and W8.
pub const LOCKS_PER_LEASE: u64 = 1_000;

/// The `n`th command-line argument as a positive number, `default` when absent; exits with
/// `usage` otherwise.
pub fn arg_or(n: usize, default: u64, usage: &str) -> u64 {
    match std::env::args().nth(n).map(|a| a.parse()) {
        None => default,
        Some(Ok(v)) if v > 0 => v,
        Some(_) => {
            eprintln!("usage: {usage}");
            std::process::exit(2);
        }
    }
}

/// Applies entries at consecutive indexes, each 1 ms after the last.
pub struct Log {
    pub state: State,
    index: u64,
}

impl Log {
    /// A state with its cluster id set, as the first leader's entry sets it.
    pub fn new() -> Log {
        let mut log = Log {
            state: State::default(),
            index: 0,
        };
        log.apply(
            Command::InitCluster {
                cluster_id: "0d6059aa93a2cc6666012c9e9b367b87".into(),
            },
            None,
        );
        log
    }

    pub fn apply(&mut self, command: Command, request_id: Option<String>) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms: 1_000 + self.index,
            request_id,
            command,
        };
        self.state.apply(self.index, 1, &env)
    }

    /// Grants the leases `locks` held locks need, [`LOCKS_PER_LEASE`] each; their ids in order.
    pub fn grant_leases(&mut self, locks: u64, ttl_ms: u64) -> Vec<u64> {
        (0..locks.div_ceil(LOCKS_PER_LEASE))
            .map(|_| self.apply(Command::LeaseGrant { ttl_ms }, None).revision)
            .collect()
    }

    /// Takes lock `name` on `lease_id` with `request_id`, as W6 and W8 do; exits on a refusal.
    pub fn acquire(&mut self, name: &str, request_id: String, lease_id: u64) {
        let command = Command::AcquireFor {
            names: vec![name.to_string()],
            lease_id,
            mode: LockMode::Exclusive,
            permits: None,
            wait_ms: 1_000,
        };
        if let Err(e) = self.apply(command, Some(request_id)).outcome {
            eprintln!("acquire of {name} refused: {e}");
            std::process::exit(1);
        }
    }
}

/// The lease of held lock `k` among `leases` (from [`Log::grant_leases`]).
pub fn lease_of(leases: &[u64], k: u64) -> u64 {
    leases[usize::try_from(k / LOCKS_PER_LEASE).unwrap_or(usize::MAX)]
}
