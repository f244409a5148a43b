//! Table-driven tests of the lock engine: fair queues, modes, semaphores, multi-lock,
//! cancel, lease expiry while queued, and deadlock detection. Invariants after every step.

use crate::command::{Command, Envelope, LockMode};
use crate::deadlock::VictimPolicy;
use crate::response::{ApplyError, Notice, Outcome, Response};
use crate::state::State;

struct Sm {
    state: State,
    index: u64,
    now_ms: u64,
    notices: Vec<Notice>,
}

impl Sm {
    fn new() -> Self {
        Sm {
            state: State::default(),
            index: 0,
            now_ms: 0,
            notices: Vec::new(),
        }
    }
    fn run(&mut self, request_id: Option<&str>, command: Command) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms: self.now_ms,
            request_id: request_id.map(str::to_string),
            command,
        };
        let applied = self.state.apply_full(self.index, 1, &env);
        if let Err(e) = self.state.check_invariants() {
            panic!("after {env:?}: {e}");
        }
        self.notices.extend(applied.notices);
        applied.response
    }
    fn lease(&mut self, ttl_ms: u64) -> u64 {
        self.run(None, Command::LeaseGrant { ttl_ms }).revision
    }
    fn acquire(
        &mut self,
        id: &str,
        names: &[&str],
        lease_id: u64,
        mode: LockMode,
        permits: Option<u32>,
        wait: bool,
    ) -> Response {
        let names = names.iter().map(|s| s.to_string()).collect();
        self.run(
            Some(id),
            Command::Acquire {
                names,
                lease_id,
                mode,
                permits,
                wait,
            },
        )
    }
    fn x(&mut self, id: &str, name: &str, lease_id: u64) -> Response {
        self.acquire(id, &[name], lease_id, LockMode::Exclusive, None, true)
    }
    fn release(&mut self, name: &str, lease_id: u64, token: u64) -> Response {
        self.run(
            None,
            Command::LockRelease {
                name: name.into(),
                lease_id,
                token,
            },
        )
    }
    fn take_notices(&mut self) -> Vec<(String, Result<Outcome, ApplyError>)> {
        self.notices
            .drain(..)
            .map(|n| (n.waiter_id, n.response.outcome))
            .collect()
    }
    fn holders(&self, name: &str) -> Vec<u64> {
        self.state
            .locks
            .get(name)
            .map(|l| l.holders.iter().map(|h| h.lease_id).collect())
            .unwrap_or_default()
    }
}

fn token(r: &Response) -> u64 {
    r.token().unwrap_or_else(|| panic!("not a grant: {r:?}"))
}

fn queued(r: &Response) -> bool {
    matches!(r.outcome, Ok(Outcome::Queued { .. }))
}

#[test]
fn fifo_handoff_grants_one_waiter_per_release_with_the_release_index() {
    let mut sm = Sm::new();
    let leases: Vec<u64> = (0..4).map(|_| sm.lease(60_000)).collect();
    let t0 = token(&sm.x("w0", "hot", leases[0]));
    for (i, &l) in leases.iter().enumerate().skip(1) {
        assert!(queued(&sm.x(&format!("w{i}"), "hot", l)));
    }
    let mut prev = (leases[0], t0);
    for (i, &lease) in leases.iter().enumerate().skip(1) {
        let r = sm.release("hot", prev.0, prev.1);
        assert!(r.outcome.is_ok());
        let notices = sm.take_notices();
        assert_eq!(notices.len(), 1, "one grant per release: {notices:?}");
        let (waiter, outcome) = &notices[0];
        assert_eq!(waiter, &format!("w{i}"));
        let Ok(Outcome::Granted {
            token, lease_id, ..
        }) = outcome
        else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            *token, r.revision,
            "token is the index of the freeing entry"
        );
        assert_eq!(*lease_id, lease);
        prev = (lease, *token);
    }
    // A retry of a granted waiter's request id returns the grant.
    let retry = sm.x("w2", "hot", leases[2]);
    assert!(retry.replayed && retry.token().is_some(), "{retry:?}");
}

#[test]
fn waiter_whose_lease_expires_is_dropped_never_granted() {
    let mut sm = Sm::new();
    let holder = sm.lease(60_000);
    let short = sm.lease(1_000);
    let next = sm.lease(60_000);
    let t = token(&sm.x("h", "l", holder));
    assert!(queued(&sm.x("short", "l", short)));
    assert!(queued(&sm.x("next", "l", next)));
    sm.now_ms = 5_000; // `short` is due; the release entry expires it first.
    sm.release("l", holder, t);
    let notices = sm.take_notices();
    assert!(
        notices
            .iter()
            .any(|(w, o)| w == "short" && matches!(o, Err(ApplyError::LeaseNotFound { .. }))),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|(w, o)| w == "next" && matches!(o, Ok(Outcome::Granted { .. }))),
        "{notices:?}"
    );
    assert_eq!(sm.holders("l"), vec![next]);
}

#[test]
fn cancel_dequeues_or_releases_a_grant_that_won_the_race() {
    let mut sm = Sm::new();
    let a = sm.lease(60_000);
    let b = sm.lease(60_000);
    let c = sm.lease(60_000);
    let t = token(&sm.x("a", "l", a));
    assert!(queued(&sm.x("b", "l", b)));
    assert!(queued(&sm.x("c", "l", c)));
    // Plain cancel of a queued waiter.
    let r = sm.run(
        None,
        Command::Cancel {
            waiter_id: "c".into(),
        },
    );
    assert_eq!(
        r.outcome,
        Ok(Outcome::Cancelled {
            waiter_id: "c".into(),
            released: false
        })
    );
    assert!(sm
        .take_notices()
        .iter()
        .any(|(w, o)| w == "c" && matches!(o, Err(ApplyError::WaitTimeout { .. }))));
    // b's grant commits, then b's cancel (its timer fired first) arrives: released.
    sm.release("l", a, t);
    sm.take_notices();
    assert_eq!(sm.holders("l"), vec![b]);
    let r = sm.run(
        None,
        Command::Cancel {
            waiter_id: "b".into(),
        },
    );
    assert_eq!(
        r.outcome,
        Ok(Outcome::Cancelled {
            waiter_id: "b".into(),
            released: true
        })
    );
    assert!(
        sm.holders("l").is_empty(),
        "a timed-out wait must end released, not held"
    );
    let retry = sm.x("b", "l", b);
    assert!(
        matches!(retry.outcome, Err(ApplyError::WaitTimeout { .. })),
        "retry sees the final outcome: {retry:?}"
    );
}

#[test]
fn read_write_modes_and_writer_starvation_rule() {
    let mut sm = Sm::new();
    let r1 = sm.lease(60_000);
    let r2 = sm.lease(60_000);
    let w = sm.lease(60_000);
    let r3 = sm.lease(60_000);
    let r4 = sm.lease(60_000);
    let t1 = token(&sm.acquire("r1", &["rw"], r1, LockMode::Shared, None, true));
    let t2 = token(&sm.acquire("r2", &["rw"], r2, LockMode::Shared, None, true));
    assert!(queued(&sm.x("w", "rw", w)));
    // No barging: a reader behind a queued writer waits.
    assert!(queued(&sm.acquire(
        "r3",
        &["rw"],
        r3,
        LockMode::Shared,
        None,
        true
    )));
    assert!(queued(&sm.acquire(
        "r4",
        &["rw"],
        r4,
        LockMode::Shared,
        None,
        true
    )));
    let try_read = sm.acquire("r4-try", &["rw"], r4, LockMode::Shared, None, false);
    assert!(try_read.outcome.is_err());
    sm.release("rw", r1, t1);
    assert!(sm.take_notices().is_empty(), "writer still blocked by r2");
    sm.release("rw", r2, t2);
    let n = sm.take_notices();
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].0, "w");
    let tw = sm.state.locks["rw"].holders[0].token;
    let rel = sm.release("rw", w, tw);
    // Both queued readers are admitted together by the writer's release, sharing its index.
    let n = sm.take_notices();
    assert_eq!(n.len(), 2, "{n:?}");
    for (_, o) in &n {
        let Ok(Outcome::Granted { token, mode, .. }) = o else {
            panic!("{o:?}")
        };
        assert_eq!((*token, *mode), (rel.revision, LockMode::Shared));
    }
}

#[test]
fn semaphores_and_mode_mismatch() {
    let mut sm = Sm::new();
    let l: Vec<u64> = (0..4).map(|_| sm.lease(60_000)).collect();
    let sem = |sm: &mut Sm, id: &str, lease, permits, wait| {
        sm.acquire(id, &["pool"], lease, LockMode::Exclusive, permits, wait)
    };
    let ta = token(&sem(&mut sm, "a", l[0], Some(2), true));
    token(&sem(&mut sm, "b", l[1], None, true));
    assert!(queued(&sem(&mut sm, "c", l[2], Some(2), true)));
    let cases: Vec<(&str, Response)> = vec![
        ("different permits", sem(&mut sm, "d1", l[3], Some(3), true)),
        (
            "shared on a semaphore",
            sm.acquire("d2", &["pool"], l[3], LockMode::Shared, None, true),
        ),
    ];
    for (what, r) in cases {
        assert!(
            matches!(r.outcome, Err(ApplyError::ModeMismatch { .. })),
            "{what}: {r:?}"
        );
    }
    sm.release("pool", l[0], ta);
    assert_eq!(sm.take_notices().len(), 1);
    assert_eq!(sm.holders("pool"), vec![l[1], l[2]]);
    // Fenced writes accept exclusive grants of a plain lock only, never a semaphore's.
    assert_eq!(sm.state.exclusive_token("pool"), None);
}

#[test]
fn acquire_many_is_all_or_nothing_and_queues_on_every_lock() {
    let mut sm = Sm::new();
    let a = sm.lease(60_000);
    let b = sm.lease(60_000);
    let tb = token(&sm.x("b", "y", b));
    let try_many = sm.acquire("try", &["x", "y"], a, LockMode::Exclusive, None, false);
    assert!(matches!(try_many.outcome, Err(ApplyError::LockHeld { .. })));
    assert!(
        sm.holders("x").is_empty(),
        "nothing granted by a refused acquire-many"
    );
    assert!(queued(&sm.acquire(
        "many",
        &["y", "x", "y"],
        a,
        LockMode::Exclusive,
        None,
        true
    )));
    let rel = sm.release("y", b, tb);
    let n = sm.take_notices();
    let Ok(Outcome::Granted { names, token, .. }) = &n[0].1 else {
        panic!("{n:?}")
    };
    assert_eq!(
        (names.clone(), *token),
        (vec!["x".to_string(), "y".to_string()], rel.revision)
    );
    assert_eq!((sm.holders("x"), sm.holders("y")), (vec![a], vec![a]));
}

#[test]
fn deadlocks_are_found_with_the_right_victim_and_no_false_positives() {
    // Two-cycle: a holds x, b holds y; a waits y, b waits x.
    let mut sm = Sm::new();
    let a = sm.lease(60_000);
    let b = sm.lease(60_000);
    sm.x("ax", "x", a);
    sm.x("by", "y", b);
    sm.x("ay", "y", a);
    assert!(
        sm.state.deadlocked_leases().is_empty(),
        "one wait alone is no deadlock"
    );
    sm.x("bx", "x", b);
    assert_eq!(sm.state.deadlocked_leases(), [a, b].into());
    let youngest = sm.state.deadlock_victims(VictimPolicy::Youngest);
    assert_eq!(youngest.len(), 1);
    assert_eq!(youngest[0].waiter_id, "bx");
    assert_eq!(
        sm.state.deadlock_victims(VictimPolicy::Oldest)[0].waiter_id,
        "ay"
    );
    let v = &youngest[0];
    let r = sm.run(
        None,
        Command::AbortWaiter {
            waiter_id: v.waiter_id.clone(),
            cycle: v.cycle.clone(),
        },
    );
    assert_eq!(
        r.outcome,
        Ok(Outcome::Aborted {
            waiter_id: "bx".into(),
            aborted: true
        })
    );
    assert!(sm
        .take_notices()
        .iter()
        .any(|(w, o)| w == "bx" && matches!(o, Err(ApplyError::DeadlockVictim { .. }))));
    assert!(sm.state.deadlocked_leases().is_empty());

    // Three-cycle.
    let mut sm = Sm::new();
    let l: Vec<u64> = (0..3).map(|_| sm.lease(60_000)).collect();
    for (i, &lease) in l.iter().enumerate() {
        sm.x(&format!("h{i}"), &format!("k{i}"), lease);
    }
    for (i, &lease) in l.iter().enumerate() {
        sm.x(&format!("w{i}"), &format!("k{}", (i + 1) % 3), lease);
    }
    assert_eq!(sm.state.deadlocked_leases().len(), 3);
    let v = sm.state.deadlock_victims(VictimPolicy::Youngest);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].cycle.len(), 3);
    // The cycle resolves before the abort applies (a lease revoked): the abort is a no-op.
    sm.run(None, Command::LeaseRevoke { lease_id: l[0] });
    let r = sm.run(
        None,
        Command::AbortWaiter {
            waiter_id: v[0].waiter_id.clone(),
            cycle: v[0].cycle.clone(),
        },
    );
    assert!(
        matches!(r.outcome, Ok(Outcome::Aborted { aborted: false, .. })),
        "{r:?}"
    );
}

#[test]
fn semaphore_waits_that_can_proceed_are_not_deadlocks() {
    let mut sm = Sm::new();
    let a = sm.lease(60_000);
    let b = sm.lease(60_000);
    let c = sm.lease(60_000);
    sm.acquire("a-sem", &["sem"], a, LockMode::Exclusive, Some(2), true);
    sm.acquire("c-sem", &["sem"], c, LockMode::Exclusive, Some(2), true);
    sm.x("b-y", "y", b);
    sm.x("a-y", "y", a); // a waits for b
    sm.acquire("b-sem", &["sem"], b, LockMode::Exclusive, Some(2), true); // b waits for a or c
    assert!(
        sm.state.deadlocked_leases().is_empty(),
        "c can free a permit, so b can proceed"
    );
    // Once c also waits on b, every permit holder is blocked: a deadlock.
    sm.x("c-y", "y", c);
    assert_eq!(sm.state.deadlocked_leases(), [a, b, c].into());
}

#[test]
fn watch_events_have_increasing_positions() {
    let mut sm = Sm::new();
    let l = sm.lease(60_000);
    let t = token(&sm.x("a", "lk", l));
    sm.run(
        None,
        Command::KvPut {
            key: "k".into(),
            value: "v".into(),
            lease_id: Some(l),
            condition: None,
            fence: None,
        },
    );
    sm.release("lk", l, t);
    sm.run(None, Command::LeaseRevoke { lease_id: l });
    let kinds: Vec<&str> = sm.state.events.values().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["lock_granted", "put", "lock_released", "delete"]);
    let positions: Vec<(u64, u32)> = sm.state.events.keys().copied().collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        sm.state
            .events_after(State::position_before(1))
            .map(|e| e.count()),
        Ok(4)
    );
}

#[test]
fn watch_history_is_bounded_and_reports_compaction() {
    let mut sm = Sm::new();
    let n = crate::limits::WATCH_HISTORY_EVENTS_MAX + 10;
    for i in 0..n {
        sm.run(
            None,
            Command::KvPut {
                key: format!("k{}", i % 7),
                value: "v".into(),
                lease_id: None,
                condition: None,
                fence: None,
            },
        );
    }
    assert_eq!(
        sm.state.events.len(),
        crate::limits::WATCH_HISTORY_EVENTS_MAX
    );
    assert!(
        sm.state.events_after(State::position_before(1)).is_err(),
        "an old start is compacted"
    );
    let oldest = sm.state.oldest_event_revision();
    assert_eq!(oldest, 11);
    assert!(sm
        .state
        .events_after(State::position_before(oldest))
        .is_ok());
}

#[test]
fn a_waiter_due_in_the_same_entry_as_the_holder_is_never_granted() {
    let mut sm = Sm::new();
    let holder = sm.lease(1_000);
    let doomed = sm.lease(1_000);
    let live = sm.lease(60_000);
    token(&sm.x("h", "l", holder));
    assert!(queued(&sm.x("doomed", "l", doomed)));
    assert!(queued(&sm.x("live", "l", live)));
    sm.take_notices();
    sm.now_ms = 2_000; // holder and doomed fall due in one entry
    let tick = sm.run(None, Command::Tick);
    let notices = sm.take_notices();
    assert!(
        notices
            .iter()
            .all(|(w, o)| w != "doomed" || matches!(o, Err(ApplyError::LeaseNotFound { .. }))),
        "{notices:?}"
    );
    let grants: Vec<_> = notices.iter().filter(|(_, o)| o.is_ok()).collect();
    assert_eq!(grants.len(), 1, "{notices:?}");
    assert_eq!(grants[0].0, "live");
    assert_eq!(sm.state.locks["l"].holders[0].token, tick.revision);
}

/// Memory per held lock is one of the bench's figures (W6): an exclusive grant keeps room for
/// exactly one holder, not the four a first `Vec::push` would allocate.
#[test]
fn an_exclusive_grant_keeps_room_for_one_holder() {
    let mut sm = Sm::new();
    let lease = sm.lease(60_000);
    token(&sm.x("w0", "one", lease));
    let lock = sm.state.locks.get("one").expect("held");
    assert_eq!(lock.holders.capacity(), 1);
    // A semaphore's later holders still fit.
    for i in 0..3 {
        let lease = sm.lease(60_000);
        let r = sm.acquire(
            &format!("s{i}"),
            &["sem"],
            lease,
            LockMode::Exclusive,
            Some(3),
            true,
        );
        assert!(r.token().is_some(), "holder {i}: {r:?}");
    }
    assert_eq!(sm.holders("sem").len(), 3);
}
