//! What the first write after a snapshot's copy of the state costs, against a write with no
//! copy alive: W8's held locks (one lease per 1,000 locks, every acquire with its own
//! `request_id`) applied straight to a `State`, then, per round, the state copied as the
//! snapshot builder copies it (`State::clone`, kept alive like a snapshot in progress) and one
//! acquire of a new lock on one of the leases timed. A persistent collection copies only the
//! tree path a write touches; whatever sits in that path by value is copied whole
//! (docs/benchmarks.md, "Memory per held lock").
//!
//! `cargo run --release -p turnstile-core --example first_write_after_copy -- [locks, default 50000]`

use std::time::{Duration, Instant};

use turnstile_core::{Command, Envelope, LockMode, State};

const LOCKS_PER_LEASE: u64 = 1_000;
/// Timed writes of each kind; the median is printed.
const ROUNDS: usize = 201;

/// Applies entries at consecutive indexes, each 1 ms after the last.
struct Log {
    state: State,
    index: u64,
}

impl Log {
    fn apply(&mut self, command: Command, request_id: Option<String>) -> turnstile_core::Response {
        self.index += 1;
        let env = Envelope {
            now_ms: 1_000 + self.index,
            request_id,
            command,
        };
        self.state.apply(self.index, 1, &env)
    }

    /// Takes lock `name` on `lease_id` with a request id, as W6 and W8 do; exits on a refusal.
    fn acquire(&mut self, name: String, lease_id: u64) {
        let command = Command::AcquireFor {
            names: vec![name.clone()],
            lease_id,
            mode: LockMode::Exclusive,
            permits: None,
            wait_ms: 1_000,
        };
        if let Err(e) = self.apply(command, Some(format!("req-{name}"))).outcome {
            eprintln!("acquire of {name} refused: {e}");
            std::process::exit(1);
        }
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let locks: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 50_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: first_write_after_copy [locks > 0]");
            std::process::exit(2);
        }
    };
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
    let leases: Vec<u64> = (0..locks.div_ceil(LOCKS_PER_LEASE))
        .map(|_| {
            log.apply(Command::LeaseGrant { ttl_ms: 3_600_000 }, None)
                .revision
        })
        .collect();
    for k in 0..locks {
        let lease = leases[usize::try_from(k / LOCKS_PER_LEASE).unwrap_or(usize::MAX)];
        log.acquire(format!("held-{k}"), lease);
    }

    let mut plain = Vec::with_capacity(ROUNDS);
    let mut after_copy = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let lease = leases[round % leases.len()];
        let started = Instant::now();
        log.acquire(format!("plain-{round}"), lease);
        plain.push(started.elapsed());

        let copy = log.state.clone();
        let started = Instant::now();
        log.acquire(format!("copied-{round}"), lease);
        after_copy.push(started.elapsed());
        drop(copy);
    }
    println!(
        "{locks} held locks on {} leases: one acquire, median of {ROUNDS}: {:?} with no copy, \
         {:?} as the first write after a copy",
        leases.len(),
        median(plain),
        median(after_copy),
    );
}
