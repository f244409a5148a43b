//! What the first write after a snapshot's copy of the state costs, against a write with no
//! copy alive: W8's state (held locks, one lease per 1,000, every acquire with its own
//! `request_id`; four keys per lock) applied straight to a `State`, then, per round, the state
//! copied as the snapshot builder copies it (`State::clone`, kept alive like a snapshot in
//! progress) and one write timed: an acquire of a new lock on one of the leases, and a put
//! over an existing key. A persistent collection copies only the
//! tree path a write touches; whatever sits in that path by value is copied whole
//! (docs/benchmarks.md, "Memory per held lock").
//!
//! `cargo run --release -p turnstile-core --example first_write_after_copy -- [locks, default
//! 50000] [value bytes, default 64]`

use std::time::{Duration, Instant};

use turnstile_core::Command;

#[path = "w6_log/mod.rs"]
mod w6_log;
use w6_log::Log;

/// The node's allocator (see Cargo.toml).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Timed writes of each kind; the median is printed.
const ROUNDS: usize = 201;
/// Keys put per held lock (W8: 200,000 keys beside 50,000 locks).
const KEYS_PER_LOCK: u64 = 4;

/// Puts `key` with `value`; exits on a refusal.
fn put(log: &mut Log, key: String, value: &str) {
    let command = Command::KvPut {
        key: key.clone(),
        value: value.to_string(),
        lease_id: None,
        condition: None,
        fence: None,
    };
    if let Err(e) = log.apply(command, None).outcome {
        eprintln!("put of {key} refused: {e}");
        std::process::exit(1);
    }
}

/// Times `write(log, round)` ROUNDS times with no copy alive, then ROUNDS times as the first
/// write after a copy; returns both medians. Two runs, not alternating: a dropped copy frees
/// what the writes after it copied, and the allocator hands those warm pages to the next write.
fn time_writes(log: &mut Log, write: impl Fn(&mut Log, usize, &str)) -> (Duration, Duration) {
    let mut plain = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let started = Instant::now();
        write(log, round, "plain");
        plain.push(started.elapsed());
    }
    let mut after_copy = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let copy = log.state.clone();
        let started = Instant::now();
        write(log, round, "copied");
        after_copy.push(started.elapsed());
        drop(copy);
    }
    (median(plain), median(after_copy))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    const USAGE: &str = "first_write_after_copy [locks > 0] [value bytes > 0]";
    let locks = w6_log::arg_or(1, 50_000, USAGE);
    let value = "v".repeat(usize::try_from(w6_log::arg_or(2, 64, USAGE)).unwrap_or(usize::MAX));
    let mut log = Log::new();
    let leases = log.grant_leases(locks, 3_600_000);
    for k in 0..locks {
        let name = format!("held-{k}");
        log.acquire(&name, format!("req-{name}"), w6_log::lease_of(&leases, k));
    }

    for k in 0..locks * KEYS_PER_LOCK {
        put(&mut log, format!("key-{k}"), &value);
    }

    let (plain, copied) = time_writes(&mut log, |log, round, kind| {
        let name = format!("{kind}-{round}");
        log.acquire(&name, format!("req-{name}"), leases[round % leases.len()]);
    });
    println!(
        "{locks} held locks on {} leases: one acquire, median of {ROUNDS}: {plain:?} with no \
         copy, {copied:?} as the first write after a copy",
        leases.len(),
    );
    let keys = locks * KEYS_PER_LOCK;
    let (plain, copied) = time_writes(&mut log, |log, round, _| {
        put(log, format!("key-{}", round as u64 * 997 % keys), &value);
    });
    println!(
        "{keys} keys of {} bytes: one put over a key, median of {ROUNDS}: {plain:?} with no \
         copy, {copied:?} as the first write after a copy",
        value.len(),
    );
}
