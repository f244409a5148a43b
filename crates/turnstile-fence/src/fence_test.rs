//! Tests of [`Fence`]: the fencing rule one case at a time, then threads hammering it with
//! seeded random tokens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Fence, FenceConfig, FenceStats};
use crate::error::FenceError;
use crate::token::FenceToken;

const CLUSTER: &str = "c0ffee";

fn tok(token: u64) -> FenceToken {
    FenceToken::new(CLUSTER, "lock-a", token)
}

#[test]
fn stale_write_is_rejected_and_not_run() {
    let fence = Fence::new();
    assert_eq!(fence.write("r", &tok(11), || "b"), Ok("b"));
    let mut ran = false;
    let got = fence.write("r", &tok(10), || ran = true);
    assert_eq!(
        got,
        Err(FenceError::Stale {
            highest: 11,
            token: 10
        })
    );
    assert!(!ran, "a refused write must not run");
    assert_eq!(fence.highest("r"), Some(11));
}

#[test]
fn equal_token_is_the_same_holder_writing_again() {
    let fence = Fence::new();
    assert_eq!(fence.write("r", &tok(7), || 1), Ok(1));
    assert_eq!(fence.write("r", &tok(7), || 2), Ok(2));
    assert_eq!(fence.write("r", &tok(8), || 3), Ok(3));
}

#[test]
fn newer_holders_read_fences_older_holders_write() {
    let fence = Fence::new();
    let value = Mutex::new(100_i64);
    let get = || *value.lock().expect("test mutex not poisoned");
    // A (token 10) reads, then pauses.
    let a_read = fence.read("acct", &tok(10), get);
    assert_eq!(a_read, Ok(100));
    // B (token 11) reads; it has not written anything yet.
    assert_eq!(fence.read("acct", &tok(11), get), Ok(100));
    // A wakes up and writes its stale read + 1: refused, B may be computing from 100.
    let a_write = fence.write("acct", &tok(10), || {
        *value.lock().expect("test mutex not poisoned") = 101
    });
    assert_eq!(
        a_write,
        Err(FenceError::Stale {
            highest: 11,
            token: 10
        })
    );
    assert_eq!(get(), 100);
    // A's fenced read is refused too.
    assert!(matches!(
        fence.read("acct", &tok(10), get),
        Err(FenceError::Stale { .. })
    ));
}

#[test]
fn foreign_cluster_is_rejected_when_pinned_at_construction() {
    let fence = Fence::pinned(CLUSTER).expect("valid cluster id");
    let foreign = FenceToken::new("other", "lock-a", 1_000);
    let got = fence.write("r", &foreign, || ());
    assert_eq!(
        got,
        Err(FenceError::ForeignCluster {
            expected: CLUSTER.into(),
            got: "other".into()
        })
    );
    assert_eq!(fence.highest("r"), None, "a foreign token records nothing");
    assert_eq!(fence.write("r", &tok(1), || ()), Ok(()));
}

#[test]
fn foreign_cluster_is_rejected_after_the_first_cluster_seen() {
    let fence = Fence::new();
    assert_eq!(fence.cluster_id(), None);
    assert_eq!(fence.read("r", &tok(5), || ()), Ok(()));
    assert_eq!(fence.cluster_id(), Some(CLUSTER));
    // A larger token from another cluster, on another resource too: still refused.
    let foreign = FenceToken::new("other", "lock-a", 99);
    for resource in ["r", "s"] {
        assert!(matches!(
            fence.write(resource, &foreign, || ()),
            Err(FenceError::ForeignCluster { .. })
        ));
    }
    assert_eq!(fence.highest("r"), Some(5));
}

#[test]
fn a_resource_accepts_only_the_lock_it_first_saw() {
    let fence = Fence::new();
    assert_eq!(fence.write("r", &tok(5), || ()), Ok(()));
    let other_lock = FenceToken::new(CLUSTER, "lock-b", 50);
    assert_eq!(
        fence.write("r", &other_lock, || ()),
        Err(FenceError::WrongLock {
            expected: "lock-a".into(),
            got: "lock-b".into()
        })
    );
    assert_eq!(fence.highest("r"), Some(5));
}

#[test]
fn resources_past_the_limit_are_refused_not_evicted() {
    let fence = Fence::with_config(FenceConfig {
        cluster_id: None,
        resources_tracked_max: 2,
    })
    .expect("valid config");
    assert_eq!(fence.write("a", &tok(1), || ()), Ok(()));
    assert_eq!(fence.write("b", &tok(1), || ()), Ok(()));
    assert_eq!(
        fence.write("c", &tok(1), || ()),
        Err(FenceError::TooManyResources { max: 2 })
    );
    // Known resources keep working.
    assert_eq!(fence.write("a", &tok(2), || ()), Ok(()));
}

#[test]
fn malformed_requests_are_refused() {
    let long = "x".repeat(1024);
    let cases: Vec<(&str, FenceToken, &str)> = vec![
        ("", tok(1), "resource"),
        (&long, tok(1), "resource"),
        ("r", tok(0), "token"),
        ("r", FenceToken::new("", "l", 1), "cluster_id"),
        ("r", FenceToken::new(&long, "l", 1), "cluster_id"),
        ("r", FenceToken::new(CLUSTER, "", 1), "lock"),
        ("r", FenceToken::new(CLUSTER, &long, 1), "lock"),
    ];
    let fence = Fence::new();
    for (resource, token, field) in cases {
        match fence.write(resource, &token, || ()) {
            Err(FenceError::Invalid { field: got, .. }) => assert_eq!(got, field),
            other => panic!("{field}: expected Invalid, got {other:?}"),
        }
    }
    assert_eq!(fence.cluster_id(), None, "malformed tokens pin nothing");
    assert!(Fence::pinned("").is_err());
    let zero = FenceConfig {
        cluster_id: None,
        resources_tracked_max: 0,
    };
    assert!(Fence::with_config(zero).is_err());
}

#[test]
fn stats_count_every_outcome() {
    let fence = Fence::new();
    let _ = fence.write("r", &tok(5), || ());
    let _ = fence.read("r", &tok(6), || ());
    let _ = fence.write("r", &tok(4), || ());
    let _ = fence.write("r", &FenceToken::new("other", "lock-a", 9), || ());
    let _ = fence.write("r", &FenceToken::new(CLUSTER, "lock-b", 9), || ());
    assert_eq!(
        fence.stats(),
        FenceStats {
            accepted: 2,
            rejected: 3,
            rejected_stale: 1,
            rejected_foreign_cluster: 1,
            resources_tracked: 1,
        }
    );
}

/// The seed of a random schedule: `FENCE_STRESS_SEED` if set, otherwise fresh. Printed so a
/// failure can be replayed (thread interleavings still vary; the tokens drawn do not).
fn stress_seed(test: &str) -> u64 {
    let seed = std::env::var("FENCE_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            u64::from(nanos) ^ u64::from(std::process::id())
        });
    println!("{test}: seed {seed} (rerun with FENCE_STRESS_SEED={seed})");
    seed
}

const STRESS_THREADS: u64 = 4;
const STRESS_OPS_PER_THREAD: u64 = 2_000;
const STRESS_RESOURCES: usize = 3;

#[test]
fn concurrent_accesses_never_let_a_lower_token_through_after_a_higher_one() {
    let seed = stress_seed("concurrent_accesses_never_let_a_lower_token_through");
    let fence = Arc::new(Fence::new());
    // Per resource, the tokens in the order their accesses ran (appended inside the closure,
    // so under the fence's own per-resource critical section).
    let logs: Arc<Vec<Mutex<Vec<u64>>>> = Arc::new(
        (0..STRESS_RESOURCES)
            .map(|_| Mutex::new(Vec::new()))
            .collect(),
    );
    let submitted_max: Arc<Vec<AtomicU64>> =
        Arc::new((0..STRESS_RESOURCES).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..STRESS_THREADS)
        .map(|t| {
            let (fence, logs, submitted_max) = (
                Arc::clone(&fence),
                Arc::clone(&logs),
                Arc::clone(&submitted_max),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_add(t));
                for op in 0..STRESS_OPS_PER_THREAD {
                    let r = rng.gen_range(0..STRESS_RESOURCES);
                    // Tokens drift upward with overlap, so threads often present older ones.
                    let token = 1 + op * 10 + rng.gen_range(0..200);
                    submitted_max[r].fetch_max(token, Ordering::Relaxed);
                    let record = || logs[r].lock().expect("log not poisoned").push(token);
                    let name = format!("res-{r}");
                    let got = if rng.gen_bool(0.3) {
                        fence.read(&name, &tok(token), record)
                    } else {
                        fence.write(&name, &tok(token), record)
                    };
                    if let Err(e) = got {
                        match e {
                            FenceError::Stale { highest, token: t } => {
                                assert!(highest > t && t == token, "seed {seed}: {e:?}")
                            }
                            other => panic!("seed {seed}: unexpected {other:?}"),
                        }
                    }
                    if rng.gen_bool(0.1) {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("stress thread panicked");
    }
    for r in 0..STRESS_RESOURCES {
        let log = logs[r].lock().expect("log not poisoned");
        for pair in log.windows(2) {
            assert!(
                pair[0] <= pair[1],
                "seed {seed}: res-{r} ran token {} after {}",
                pair[1],
                pair[0]
            );
        }
        // The largest token ever presented is never refused.
        let max = submitted_max[r].load(Ordering::Relaxed);
        assert_eq!(log.last().copied(), Some(max), "seed {seed}: res-{r}");
        assert_eq!(fence.highest(&format!("res-{r}")), Some(max));
    }
    let stats = fence.stats();
    assert_eq!(
        stats.accepted + stats.rejected,
        STRESS_THREADS * STRESS_OPS_PER_THREAD
    );
    println!("seed {seed}: {stats:?}");
}

#[test]
fn concurrent_read_modify_writes_lose_no_update() {
    let seed = stress_seed("concurrent_read_modify_writes_lose_no_update");
    let fence = Arc::new(Fence::new());
    let balance = Arc::new(Mutex::new(0_u64));
    // Each attempt is a new grant: unique, increasing tokens, as the lock service hands out.
    let next_token = Arc::new(AtomicU64::new(1));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..STRESS_THREADS)
        .map(|t| {
            let (fence, balance, next_token, acknowledged) = (
                Arc::clone(&fence),
                Arc::clone(&balance),
                Arc::clone(&next_token),
                Arc::clone(&acknowledged),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_add(t));
                for _ in 0..STRESS_OPS_PER_THREAD / 4 {
                    let token = tok(next_token.fetch_add(1, Ordering::Relaxed));
                    let read = || *balance.lock().expect("balance not poisoned");
                    let Ok(seen) = fence.read("acct", &token, read) else {
                        continue;
                    };
                    // A pause between read and write: other holders may come and go.
                    for _ in 0..rng.gen_range(0..3) {
                        std::thread::yield_now();
                    }
                    let write = || *balance.lock().expect("balance not poisoned") = seen + 1;
                    if fence.write("acct", &token, write).is_ok() {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("stress thread panicked");
    }
    let acknowledged = acknowledged.load(Ordering::Relaxed);
    let balance = *balance.lock().expect("balance not poisoned");
    println!("seed {seed}: {acknowledged} increments acknowledged");
    assert!(acknowledged > 0, "seed {seed}: no increment ever succeeded");
    assert_eq!(
        balance, acknowledged,
        "seed {seed}: every acknowledged increment is in the balance"
    );
}
