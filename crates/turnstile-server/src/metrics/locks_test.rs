//! `LockMetrics` fed by a real `turnstile_core::State`: each scenario applies entries the way
//! the state machine adapter does and checks every figure it should have moved.

use turnstile_core::{Command, Envelope, LockMode, State};
use turnstile_raft::apply_observer::ApplyObserver;

use super::*;

/// A state with the observer attached, applying entries at explicit `sm_time`s.
struct Replica {
    state: State,
    index: u64,
    metrics: LockMetrics,
}

impl Replica {
    fn new(lock_names_max: usize) -> Replica {
        Replica {
            state: State::default(),
            index: 0,
            metrics: LockMetrics::new(lock_names_max),
        }
    }

    /// Applies `command` at `now_ms`; returns its index.
    fn apply(&mut self, now_ms: u64, request_id: Option<&str>, command: Command) -> u64 {
        self.index += 1;
        let env = Envelope {
            now_ms,
            request_id: request_id.map(str::to_string),
            command,
        };
        let applied = self.state.apply_full(self.index, 1, &env);
        self.metrics
            .entry_applied(&self.state, self.index, &env, &applied);
        self.index
    }

    fn lease(&mut self, now_ms: u64, ttl_ms: u64) -> u64 {
        self.apply(now_ms, None, Command::LeaseGrant { ttl_ms })
    }
}

/// An acquire that fails rather than queue.
fn acquire(name: &str, lease_id: u64, mode: LockMode, permits: Option<u32>) -> Command {
    Command::Acquire {
        names: vec![name.to_string()],
        lease_id,
        mode,
        permits,
        wait: false,
    }
}

/// An exclusive acquire that queues if it must (it needs a request id, its waiter id).
fn queue(name: &str, lease_id: u64) -> Command {
    Command::Acquire {
        names: vec![name.to_string()],
        lease_id,
        mode: LockMode::Exclusive,
        permits: None,
        wait: true,
    }
}

fn kind(kind: LockKind) -> LockLabels {
    LockLabels { kind, name: None }
}

fn count(family: &Family<LockLabels, Counter>, labels: &LockLabels) -> u64 {
    family.get(labels).map_or(0, |c| c.get())
}

fn expiries(m: &LockMetrics, k: LockKind, cause: ExpiryCause, state: Lost) -> u64 {
    let labels = ExpiryLabels {
        lock: kind(k),
        cause,
        state,
    };
    m.expiries.get(&labels).map_or(0, |c| c.get())
}

fn histogram(family: &HistogramFamily<LockLabels>, labels: &LockLabels) -> (u64, f64) {
    family
        .get(labels)
        .map_or((0, 0.0), |h| (h.count(), h.sum()))
}

#[test]
fn release_handoff_ttl_expiry_revoke_and_replay() {
    use LockKind::{Exclusive, Semaphore, Shared};
    let mut r = Replica::new(0);
    let a = r.lease(0, 60_000);
    let b = r.lease(0, 2_000);
    let c = r.lease(0, 60_000);
    let t1 = r.apply(100, None, acquire("x", a, LockMode::Exclusive, None));
    r.apply(200, Some("wb"), queue("x", b));
    r.apply(300, None, acquire("s", a, LockMode::Shared, None));
    // a releases x at 1.2 s: held 1.1 s; b, queued at 0.2 s, gets it after 1.0 s.
    let release = Command::LockRelease {
        name: "x".into(),
        lease_id: a,
        token: t1,
    };
    r.apply(1_200, None, release);
    // b's TTL ends at 2 s; the next entry expires it: its hold of x (1.8 s) is lost.
    r.apply(3_000, None, Command::Tick);
    let sem = acquire("sem", c, LockMode::Exclusive, Some(2));
    r.apply(3_000, Some("r-sem"), sem.clone());
    r.apply(3_100, Some("r-sem"), sem);
    r.apply(4_000, None, Command::LeaseRevoke { lease_id: c });

    let m = &r.metrics;
    assert_eq!(count(&m.grants, &kind(Exclusive)), 2);
    assert_eq!(count(&m.grants, &kind(Shared)), 1);
    assert_eq!(count(&m.grants, &kind(Semaphore)), 1);
    assert_eq!(count(&m.releases, &kind(Exclusive)), 1);
    assert_eq!(count(&m.waits, &kind(Exclusive)), 1);
    assert_eq!(expiries(m, Exclusive, ExpiryCause::Ttl, Lost::Held), 1);
    assert_eq!(expiries(m, Semaphore, ExpiryCause::Revoke, Lost::Held), 1);
    assert_eq!(expiries(m, Exclusive, ExpiryCause::Revoke, Lost::Held), 0);
    let (n, sum) = histogram(&m.hold_seconds, &kind(Exclusive));
    assert_eq!(n, 2);
    assert!((sum - (1.1 + 1.8)).abs() < 1e-9, "{sum}");
    assert_eq!(histogram(&m.wait_seconds, &kind(Exclusive)), (1, 1.0));
    assert_eq!(histogram(&m.hold_seconds, &kind(Semaphore)), (1, 1.0));
    let replays = CommandLabels { command: "acquire" };
    assert_eq!(m.replays.get(&replays).map(|c| c.get()), Some(1));
    // Only a's shared hold of s is left.
    assert_eq!(m.ledger().books.sizes(), (1, 0));
}

#[test]
fn lost_waits_by_ttl_revoke_deadlock_and_timeout() {
    use LockKind::Exclusive;
    let mut r = Replica::new(0);
    let a = r.lease(0, 60_000);
    let b = r.lease(0, 60_000);
    let short = r.lease(0, 1_000);
    let gone = r.lease(0, 60_000);
    r.apply(10, None, acquire("x", a, LockMode::Exclusive, None));
    r.apply(10, None, acquire("y", b, LockMode::Exclusive, None));
    r.apply(20, Some("w-short"), queue("x", short));
    r.apply(20, Some("w-gone"), queue("x", gone));
    // a waits for y and b for x: a deadlock; b's wait is the victim.
    r.apply(30, Some("w-a"), queue("y", a));
    r.apply(30, Some("w-b"), queue("x", b));
    let cycle = vec![a, b];
    let abort = Command::AbortWaiter {
        waiter_id: "w-b".into(),
        cycle,
    };
    r.apply(40, None, abort);
    r.apply(50, None, Command::LeaseRevoke { lease_id: gone });
    r.apply(1_500, None, Command::Tick);
    let cancel = Command::Cancel {
        waiter_id: "w-a".into(),
    };
    r.apply(1_600, None, cancel);

    let m = &r.metrics;
    assert_eq!(count(&m.waits, &kind(Exclusive)), 4);
    let lost = |cause| expiries(m, Exclusive, cause, Lost::Waiting);
    assert_eq!(lost(ExpiryCause::DeadlockVictim), 1);
    assert_eq!(lost(ExpiryCause::Revoke), 1);
    assert_eq!(lost(ExpiryCause::Ttl), 1);
    assert_eq!(count(&m.wait_timeouts, &kind(Exclusive)), 1);
    assert_eq!(histogram(&m.wait_seconds, &kind(Exclusive)).0, 0);
    assert_eq!(m.ledger().books.sizes(), (2, 0));
}

#[test]
fn name_labels_are_capped() {
    let mut r = Replica::new(2);
    let a = r.lease(0, 60_000);
    for name in ["n1", "n2", "n3", "n4"] {
        r.apply(10, None, acquire(name, a, LockMode::Exclusive, None));
    }
    let named = |name: &str| LockLabels {
        kind: LockKind::Exclusive,
        name: Some(name.to_string()),
    };
    let m = &r.metrics;
    assert_eq!(count(&m.grants, &named("n1")), 1);
    assert_eq!(count(&m.grants, &named("n2")), 1);
    assert_eq!(
        count(&m.grants, &named(super::super::labels::OTHER_NAME)),
        2
    );
    assert_eq!(count(&m.grants, &kind(LockKind::Exclusive)), 0);
    assert_eq!(m.grants.len(), 3);
}

#[test]
fn books_follow_a_loaded_state() {
    let mut r = Replica::new(0);
    let a = r.lease(0, 60_000);
    let t = r.apply(100, None, acquire("x", a, LockMode::Exclusive, None));
    // A fresh observer (a restarted node) learns the hold from the loaded state.
    let fresh = LockMetrics::new(0);
    fresh.state_loaded(&r.state);
    r.metrics = fresh;
    let release = Command::LockRelease {
        name: "x".into(),
        lease_id: a,
        token: t,
    };
    r.apply(600, None, release);
    let m = &r.metrics;
    assert_eq!(count(&m.releases, &kind(LockKind::Exclusive)), 1);
    assert_eq!(
        histogram(&m.hold_seconds, &kind(LockKind::Exclusive)),
        (1, 0.5)
    );
}
