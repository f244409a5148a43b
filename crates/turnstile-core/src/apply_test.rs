//! Table-driven tests of `State::apply`: one scenario per row, invariants after every step.

use crate::command::{Command, Condition, Envelope, Fence};
use crate::response::{ApplyError, Outcome, Response};
use crate::state::State;

/// Applies commands at consecutive indexes (from 1), term 1, checking invariants each time.
struct Sm {
    state: State,
    index: u64,
}

impl Sm {
    fn new() -> Self {
        Sm {
            state: State::default(),
            index: 0,
        }
    }
    fn at(&mut self, now_ms: u64, command: Command) -> Response {
        self.with_id(now_ms, None, command)
    }
    fn with_id(&mut self, now_ms: u64, request_id: Option<&str>, command: Command) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms,
            request_id: request_id.map(str::to_string),
            command,
        };
        let r = self.state.apply(self.index, 1, &env);
        if let Err(e) = self.state.check_invariants() {
            panic!("after {env:?}: {e}");
        }
        r
    }
    fn lease(&mut self, now_ms: u64, ttl_ms: u64) -> u64 {
        match self.at(now_ms, Command::LeaseGrant { ttl_ms }).outcome {
            Ok(Outcome::LeaseGranted { lease_id, .. }) => lease_id,
            other => panic!("lease grant failed: {other:?}"),
        }
    }
}

fn acquire(name: &str, lease_id: u64) -> Command {
    Command::LockAcquire {
        name: name.into(),
        lease_id,
    }
}

fn release(name: &str, lease_id: u64, token: u64) -> Command {
    Command::LockRelease {
        name: name.into(),
        lease_id,
        token,
    }
}

fn put(key: &str, value: &str) -> Command {
    Command::KvPut {
        key: key.into(),
        value: value.into(),
        lease_id: None,
        condition: None,
        fence: None,
    }
}

#[test]
fn grant_release_regrant_tokens_increase() {
    let mut sm = Sm::new();
    let a = sm.lease(0, 10_000);
    let b = sm.lease(0, 10_000);
    let t1 = sm.at(1, acquire("x", a)).token().expect("granted");
    assert!(
        matches!(sm.at(2, acquire("x", b)).outcome, Err(ApplyError::LockHeld { holder_token, .. }) if holder_token == t1)
    );
    // A second acquire by the holder's own lease is not re-entrant.
    assert!(matches!(
        sm.at(2, acquire("x", a)).outcome,
        Err(ApplyError::LockHeld { .. })
    ));
    assert_eq!(
        sm.at(3, release("x", a, t1)).outcome,
        Ok(Outcome::LockReleased { name: "x".into() })
    );
    let t2 = sm.at(4, acquire("x", b)).token().expect("granted");
    assert!(t2 > t1);
    // A stale release (old token, old lease) frees nothing: etcd #22082.
    assert!(matches!(
        sm.at(5, release("x", a, t1)).outcome,
        Err(ApplyError::NotHolder { .. })
    ));
    assert!(matches!(
        sm.at(5, release("x", b, t1)).outcome,
        Err(ApplyError::NotHolder { .. })
    ));
    assert_eq!(sm.state.locks["x"].holders[0].token, t2);
}

#[test]
fn lease_judged_in_apply() {
    let cases: &[(&str, u64, bool)] = &[
        // (what, keepalive time, survives)
        ("renewal before the deadline keeps the lease", 9_999, true),
        ("renewal exactly at the deadline fails", 10_000, false),
        (
            "renewal after the deadline fails without an Expire entry",
            12_000,
            false,
        ),
    ];
    for &(what, at_ms, survives) in cases {
        let mut sm = Sm::new();
        let l = sm.lease(0, 10_000);
        let tok = sm.at(1, acquire("x", l)).token().expect("granted");
        let r = sm.at(at_ms, Command::LeaseKeepalive { lease_ids: vec![l] });
        let Ok(Outcome::LeasesKept { results }) = r.outcome else {
            panic!("{what}: {r:?}")
        };
        assert_eq!(results[0].remaining_ms.is_some(), survives, "{what}");
        assert_eq!(
            sm.state.locks.get("x").map(|l| l.holders[0].token) == Some(tok),
            survives,
            "{what}"
        );
    }
}

#[test]
fn expire_entry_applies_only_if_still_due() {
    let mut sm = Sm::new();
    let l = sm.lease(0, 10_000);
    // Leader believed it due at 10_000 but a renewal committed first at 9_000.
    sm.at(9_000, Command::LeaseKeepalive { lease_ids: vec![l] });
    let r = sm.at(10_000, Command::Expire { lease_ids: vec![l] });
    assert_eq!(r.outcome, Ok(Outcome::Expired { lease_ids: vec![] }));
    assert!(sm.state.leases.contains_key(&l));
    let r = sm.at(19_000, Command::Expire { lease_ids: vec![l] });
    assert_eq!(r.outcome, Ok(Outcome::Expired { lease_ids: vec![l] }));
}

#[test]
fn expiry_frees_locks_and_deletes_keys() {
    let mut sm = Sm::new();
    let l = sm.lease(0, 2_000);
    sm.at(1, acquire("x", l));
    sm.at(
        1,
        Command::KvPut {
            key: "k".into(),
            value: "v".into(),
            lease_id: Some(l),
            condition: None,
            fence: None,
        },
    );
    sm.at(1, put("plain", "v"));
    sm.at(2_000, Command::Tick);
    assert!(sm.state.locks.is_empty());
    assert!(!sm.state.keys.contains_key("k"));
    assert!(sm.state.keys.contains_key("plain"));
}

#[test]
fn time_never_goes_backwards() {
    let mut sm = Sm::new();
    sm.at(5_000, Command::Tick);
    sm.at(1_000, Command::Tick);
    assert_eq!(sm.state.sm_time_ms, 5_000);
}

#[test]
fn conditions_and_fences() {
    let mut sm = Sm::new();
    let l = sm.lease(0, 10_000);
    let tok = sm.at(1, acquire("res", l)).token().expect("granted");
    let cases: Vec<(&str, Command, bool)> = vec![
        (
            "absent on a new key",
            Command::KvPut {
                key: "k".into(),
                value: "1".into(),
                lease_id: None,
                condition: Some(Condition::Absent),
                fence: None,
            },
            true,
        ),
        (
            "absent on an existing key",
            Command::KvPut {
                key: "k".into(),
                value: "2".into(),
                lease_id: None,
                condition: Some(Condition::Absent),
                fence: None,
            },
            false,
        ),
        (
            "value match",
            Command::KvPut {
                key: "k".into(),
                value: "3".into(),
                lease_id: None,
                condition: Some(Condition::Value("1".into())),
                fence: None,
            },
            true,
        ),
        (
            "value mismatch",
            Command::KvPut {
                key: "k".into(),
                value: "4".into(),
                lease_id: None,
                condition: Some(Condition::Value("1".into())),
                fence: None,
            },
            false,
        ),
        (
            "mod revision mismatch",
            Command::KvDelete {
                key: "k".into(),
                condition: Some(Condition::ModRevision(1)),
                fence: None,
            },
            false,
        ),
        (
            "current fence",
            Command::KvPut {
                key: "f".into(),
                value: "1".into(),
                lease_id: None,
                condition: None,
                fence: Some(Fence {
                    lock: "res".into(),
                    token: tok,
                }),
            },
            true,
        ),
        (
            "stale fence",
            Command::KvPut {
                key: "f".into(),
                value: "2".into(),
                lease_id: None,
                condition: None,
                fence: Some(Fence {
                    lock: "res".into(),
                    token: tok - 1,
                }),
            },
            false,
        ),
        (
            "fence on an idle lock",
            Command::KvDelete {
                key: "f".into(),
                condition: None,
                fence: Some(Fence {
                    lock: "other".into(),
                    token: tok,
                }),
            },
            false,
        ),
    ];
    for (what, cmd, ok) in cases {
        let r = sm.at(2, cmd);
        assert_eq!(r.outcome.is_ok(), ok, "{what}: {r:?}");
    }
    assert_eq!(sm.state.keys["k"].value, "3");
    assert_eq!(sm.state.keys["k"].version, 2);
    assert_eq!(sm.state.keys["f"].value, "1");
}

#[test]
fn request_ids_act_once() {
    let mut sm = Sm::new();
    let first = sm.with_id(
        0,
        Some("r1"),
        Command::CounterIncr {
            name: "c".into(),
            by: 5,
        },
    );
    let retry = sm.with_id(
        1,
        Some("r1"),
        Command::CounterIncr {
            name: "c".into(),
            by: 5,
        },
    );
    assert_eq!(retry.outcome, first.outcome);
    assert_eq!(retry.revision, first.revision);
    assert!(retry.replayed);
    assert_eq!(sm.state.counters["c"], 5);
    let other = sm.with_id(
        2,
        Some("r1"),
        Command::CounterIncr {
            name: "c".into(),
            by: 6,
        },
    );
    assert!(matches!(
        other.outcome,
        Err(ApplyError::RequestIdReused { .. })
    ));
    // Lease-less records expire after the window; then the id may act again.
    let later = crate::limits::REQUEST_RECORD_WINDOW_MS + 1;
    let again = sm.with_id(
        later,
        Some("r1"),
        Command::CounterIncr {
            name: "c".into(),
            by: 5,
        },
    );
    assert!(!again.replayed);
    assert_eq!(sm.state.counters["c"], 10);
}

#[test]
fn retried_acquire_returns_the_first_grant() {
    let mut sm = Sm::new();
    let l = sm.lease(0, 10_000);
    let first = sm.with_id(1, Some("acq"), acquire("x", l));
    let retry = sm.with_id(2, Some("acq"), acquire("x", l));
    assert_eq!(first.token(), retry.token());
    assert!(first.token().is_some());
    // Records concerning a lease outlive it by the window, so a retry after revoke still
    // gets the first outcome instead of acting again.
    sm.with_id(3, Some("rev"), Command::LeaseRevoke { lease_id: l });
    let retry = sm.with_id(4, Some("rev"), Command::LeaseRevoke { lease_id: l });
    assert!(retry.replayed && retry.outcome.is_ok());
}

#[test]
fn bad_commands_are_refused_not_applied() {
    let mut sm = Sm::new();
    let cases = vec![
        Command::LeaseGrant { ttl_ms: 1 },
        Command::LeaseGrant { ttl_ms: u64::MAX },
        Command::LockAcquire {
            name: String::new(),
            lease_id: 1,
        },
        Command::LockAcquire {
            name: "x".repeat(10_000),
            lease_id: 1,
        },
        Command::LockAcquire {
            name: "x".into(),
            lease_id: 999,
        },
        Command::KvPut {
            key: "k".into(),
            value: "v".repeat(1 << 20),
            lease_id: None,
            condition: None,
            fence: None,
        },
        Command::CounterIncr {
            name: "c".into(),
            by: i64::MIN,
        },
    ];
    for cmd in cases {
        let r = sm.at(0, cmd.clone());
        assert!(r.outcome.is_err(), "{cmd:?} -> {r:?}");
    }
    assert!(sm.state.keys.is_empty() && sm.state.leases.is_empty() && sm.state.locks.is_empty());
}

#[test]
fn counter_overflow_is_refused() {
    let mut sm = Sm::new();
    let step = crate::limits::COUNTER_STEP_ABS_MAX;
    let mut last = Ok(Outcome::Applied);
    for _ in 0..2_000 {
        last = sm
            .at(
                0,
                Command::CounterIncr {
                    name: "c".into(),
                    by: step,
                },
            )
            .outcome;
        if last.is_err() {
            break;
        }
    }
    assert!(matches!(last, Err(ApplyError::CounterOverflow { .. })));
}

#[test]
fn cluster_id_is_set_once() {
    let mut sm = Sm::new();
    sm.at(
        0,
        Command::InitCluster {
            cluster_id: "a".into(),
        },
    );
    let r = sm.at(
        0,
        Command::InitCluster {
            cluster_id: "b".into(),
        },
    );
    assert_eq!(
        r.outcome,
        Ok(Outcome::ClusterId {
            cluster_id: "a".into()
        })
    );
}

#[path = "records_test.rs"]
mod records_test;
