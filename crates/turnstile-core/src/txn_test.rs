//! Table-driven tests of `Command::Txn`: which branch runs, what each op returns, and that a
//! refused transaction changes nothing.

use crate::auth::{Access, Kind, Permission, Quotas, ROOT};
use crate::command::{Command, Fence};
use crate::events::Event;
use crate::limits;
use crate::response::{ApplyError, Outcome, Response};
use crate::state::State;
use crate::txn::{Compare, TxnOp, TxnResult};

use super::txn_test_support::apply_at;

/// Lease 1 (`L` held by it with token 3), key `a` = "1" written at 2, counter `c` = 5 at 4,
/// counter `max` = `i64::MAX`.
fn base() -> State {
    let mut state = State::default();
    let cmds = [
        Command::LeaseGrant { ttl_ms: 60_000 },
        Command::KvPut {
            key: "a".into(),
            value: "1".into(),
            lease_id: None,
            condition: None,
            fence: None,
        },
        Command::LockAcquire {
            name: "L".into(),
            lease_id: 1,
        },
        Command::CounterIncr {
            name: "c".into(),
            by: 5,
        },
    ];
    for (i, command) in cmds.into_iter().enumerate() {
        let r = apply(&mut state, i as u64 + 1, command);
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    // A counter at the top (reaching it by steps would take 1024 entries).
    state.counters.insert("max".into(), i64::MAX);
    state
}

fn apply(state: &mut State, index: u64, command: Command) -> Response {
    apply_at(state, index, 1_000 + index, command)
}

fn txn(compares: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> Command {
    Command::Txn {
        compares,
        success,
        failure,
    }
}

fn put(key: &str, value: &str) -> TxnOp {
    TxnOp::Put {
        key: key.into(),
        value: value.into(),
        lease_id: None,
    }
}

fn get(key: &str) -> TxnOp {
    TxnOp::Get { key: key.into() }
}

fn incr(counter: &str, by: i64) -> TxnOp {
    TxnOp::Incr {
        counter: counter.into(),
        by,
    }
}

fn fence(token: u64) -> Compare {
    Compare::Fence(Fence {
        lock: "L".into(),
        token,
    })
}

fn key_cmp(key: &str, f: impl Fn(String) -> Compare) -> Compare {
    f(key.to_string())
}

/// What a table row expects.
enum Want {
    /// The branch that ran, and the value of key `a` afterwards (`None`: absent).
    Ran {
        succeeded: bool,
        a: Option<&'static str>,
    },
    /// Refused with this error kind (checked by `matches`), nothing changed.
    Refused(fn(&ApplyError) -> bool),
}

#[test]
fn branches_and_refusals() {
    let set_a = |v: &str| vec![put("a", v)];
    let too_many_compares = vec![Compare::Absent { key: "z".into() }; limits::TXN_COMPARES_MAX + 1];
    let too_many_ops: Vec<TxnOp> = (0..=limits::TXN_OPS_PER_BRANCH_MAX)
        .map(|i| get(&format!("k{i}")))
        .collect();
    let big = "x".repeat(limits::VALUE_BYTES_MAX);
    let cases: Vec<(&str, Command, Want)> = vec![
        (
            "no compares: success runs",
            txn(vec![], set_a("s"), set_a("f")),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "absent on an existing key fails",
            txn(
                vec![key_cmp("a", |key| Compare::Absent { key })],
                set_a("s"),
                set_a("f"),
            ),
            Want::Ran {
                succeeded: false,
                a: Some("f"),
            },
        ),
        (
            "absent on a missing key holds",
            txn(
                vec![key_cmp("b", |key| Compare::Absent { key })],
                set_a("s"),
                set_a("f"),
            ),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "mod_revision equal holds",
            txn(
                vec![Compare::ModRevision {
                    key: "a".into(),
                    mod_revision: 2,
                }],
                set_a("s"),
                set_a("f"),
            ),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "mod_revision stale fails",
            txn(
                vec![Compare::ModRevision {
                    key: "a".into(),
                    mod_revision: 1,
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: false,
                a: Some("1"),
            },
        ),
        (
            "mod_revision on a missing key fails",
            txn(
                vec![Compare::ModRevision {
                    key: "b".into(),
                    mod_revision: 2,
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: false,
                a: Some("1"),
            },
        ),
        (
            "version equal holds",
            txn(
                vec![Compare::Version {
                    key: "a".into(),
                    version: 1,
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "version other fails",
            txn(
                vec![Compare::Version {
                    key: "a".into(),
                    version: 2,
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: false,
                a: Some("1"),
            },
        ),
        (
            "value equal holds",
            txn(
                vec![Compare::Value {
                    key: "a".into(),
                    value: "1".into(),
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "value other fails",
            txn(
                vec![Compare::Value {
                    key: "a".into(),
                    value: "2".into(),
                }],
                set_a("s"),
                vec![],
            ),
            Want::Ran {
                succeeded: false,
                a: Some("1"),
            },
        ),
        (
            "current fence holds",
            txn(vec![fence(3)], set_a("s"), set_a("f")),
            Want::Ran {
                succeeded: true,
                a: Some("s"),
            },
        ),
        (
            "stale fence fails",
            txn(vec![fence(2)], set_a("s"), set_a("f")),
            Want::Ran {
                succeeded: false,
                a: Some("f"),
            },
        ),
        (
            "one false compare among true ones fails the whole",
            txn(
                vec![
                    fence(3),
                    Compare::Version {
                        key: "a".into(),
                        version: 9,
                    },
                ],
                set_a("s"),
                set_a("f"),
            ),
            Want::Ran {
                succeeded: false,
                a: Some("f"),
            },
        ),
        (
            "delete in a branch",
            txn(vec![], vec![TxnOp::Delete { key: "a".into() }], vec![]),
            Want::Ran {
                succeeded: true,
                a: None,
            },
        ),
        (
            "an unknown lease after a good put refuses the whole branch",
            txn(
                vec![],
                vec![
                    put("a", "s"),
                    TxnOp::Put {
                        key: "b".into(),
                        value: "v".into(),
                        lease_id: Some(99),
                    },
                ],
                vec![],
            ),
            Want::Refused(|e| matches!(e, ApplyError::LeaseNotFound { lease_id: 99 })),
        ),
        (
            "an overflowing increment refuses the whole branch",
            txn(vec![], vec![put("a", "s"), incr("max", 1)], vec![]),
            Want::Refused(|e| matches!(e, ApplyError::CounterOverflow { .. })),
        ),
        (
            "a key written twice in a branch is refused",
            txn(
                vec![],
                vec![put("a", "s"), TxnOp::Delete { key: "a".into() }],
                vec![],
            ),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "a counter incremented twice in a branch is refused",
            txn(vec![], vec![incr("c", 1), incr("c", 1)], vec![]),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "a bad shape in the branch that would not run still refuses",
            txn(vec![], set_a("s"), vec![put("", "v")]),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "too many compares",
            txn(too_many_compares, set_a("s"), vec![]),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "too many ops",
            txn(vec![], set_a("s"), too_many_ops),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "a value over the limit",
            txn(vec![], vec![put("a", &format!("{big}x"))], vec![]),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "two full values exceed the payload limit",
            txn(vec![], vec![put("a", &big)], vec![put("b", &big)]),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
        (
            "a step over the limit",
            txn(
                vec![],
                vec![incr("c", limits::COUNTER_STEP_ABS_MAX + 1)],
                vec![],
            ),
            Want::Refused(|e| matches!(e, ApplyError::Invalid { .. })),
        ),
    ];
    for (what, command, want) in cases {
        let mut state = base();
        let before = state.clone();
        let r = apply(&mut state, 5, command);
        match want {
            Want::Ran { succeeded, a } => {
                let Ok(Outcome::Txn { succeeded: s, .. }) = &r.outcome else {
                    panic!("{what}: {r:?}");
                };
                assert_eq!(*s, succeeded, "{what}");
                let now = state.keys.get("a").map(|k| k.value.as_str());
                assert_eq!(now, a, "{what}");
            }
            Want::Refused(is) => {
                let Err(e) = &r.outcome else {
                    panic!("{what}: {r:?}");
                };
                assert!(is(e), "{what}: {e:?}");
                assert_eq!(state.keys, before.keys, "{what}");
                assert_eq!(state.counters, before.counters, "{what}");
                assert_eq!(state.events, before.events, "{what}");
                assert_eq!(state.leases, before.leases, "{what}");
            }
        }
    }
}

#[test]
fn results_follow_the_ops_in_order() {
    let mut state = base();
    let r = apply(
        &mut state,
        5,
        txn(
            vec![],
            vec![
                get("a"),
                put("a", "2"),
                get("a"),
                put("b", "new"),
                TxnOp::Delete { key: "gone".into() },
                incr("c", 2),
                incr("d", -1),
            ],
            vec![],
        ),
    );
    let Ok(Outcome::Txn {
        succeeded: true,
        results,
    }) = r.outcome
    else {
        panic!("{r:?}");
    };
    let value_of = |res: &TxnResult| match res {
        TxnResult::Get { record, .. } => record.as_ref().map(|k| (k.value.clone(), k.version)),
        other => panic!("not a get: {other:?}"),
    };
    assert_eq!(value_of(&results[0]), Some(("1".into(), 1)));
    assert_eq!(
        results[1],
        TxnResult::Put {
            revision: 5,
            existed: true
        }
    );
    assert_eq!(value_of(&results[2]), Some(("2".into(), 2)));
    assert_eq!(
        results[3],
        TxnResult::Put {
            revision: 5,
            existed: false
        }
    );
    assert_eq!(
        results[4],
        TxnResult::Delete {
            revision: 5,
            existed: false
        }
    );
    assert_eq!(
        results[5],
        TxnResult::Incr {
            counter: "c".into(),
            value: 7
        }
    );
    assert_eq!(
        results[6],
        TxnResult::Incr {
            counter: "d".into(),
            value: -1
        }
    );
    assert_eq!(results.len(), 7);
}

/// A transaction's puts and deletes leave the same watch history as the plain commands.
#[test]
fn events_match_plain_puts_and_deletes() {
    let mut plain = base();
    apply(
        &mut plain,
        5,
        Command::KvPut {
            key: "b".into(),
            value: "v".into(),
            lease_id: Some(1),
            condition: None,
            fence: None,
        },
    );
    apply(
        &mut plain,
        6,
        Command::KvDelete {
            key: "a".into(),
            condition: None,
            fence: None,
        },
    );
    let mut txned = base();
    apply(
        &mut txned,
        5,
        txn(
            vec![],
            vec![TxnOp::Put {
                key: "b".into(),
                value: "v".into(),
                lease_id: Some(1),
            }],
            vec![],
        ),
    );
    apply(
        &mut txned,
        6,
        txn(vec![], vec![TxnOp::Delete { key: "a".into() }], vec![]),
    );
    assert_eq!(plain.events, txned.events);
    assert_eq!(plain.keys, txned.keys);
    let kinds: Vec<&Event> = txned.events.values().map(|e| &**e).collect();
    assert!(matches!(kinds[kinds.len() - 2], Event::Put { key, .. } if key == "b"));
    assert!(matches!(kinds[kinds.len() - 1], Event::Delete { key } if key == "a"));
}

fn as_(principal: &str, command: Command) -> Command {
    Command::As {
        principal: principal.into(),
        token_id: None,
        command: Box::new(command),
    }
}

/// `bob` may write keys under `b/` and counters under `b/`, and read keys under `shared/`.
fn with_bob(keys_quota: Option<u64>) -> State {
    let mut state = base();
    let perm = |kind, prefix: &str, access| Permission {
        kind,
        prefix: prefix.into(),
        access,
    };
    let cmds = [
        Command::AuthPutRole {
            role: "bob".into(),
            permissions: vec![
                perm(Kind::Key, "b/", Access::Write),
                perm(Kind::Counter, "b/", Access::Write),
                perm(Kind::Key, "shared/", Access::Read),
            ],
            metrics: false,
        },
        Command::AuthPutUser {
            user: "bob".into(),
            roles: vec!["bob".into()],
            quotas: Quotas {
                keys: keys_quota,
                ..Quotas::default()
            },
        },
    ];
    for (i, c) in cmds.into_iter().enumerate() {
        let r = apply(&mut state, 5 + i as u64, as_(ROOT, c));
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    state
}

#[test]
fn every_name_in_either_branch_needs_access() {
    let cases: Vec<(&str, Command, bool)> = vec![
        (
            "own prefix",
            txn(vec![], vec![put("b/1", "v")], vec![]),
            true,
        ),
        (
            "read-only prefix in a compare",
            txn(
                vec![Compare::Absent {
                    key: "shared/x".into(),
                }],
                vec![put("b/1", "v")],
                vec![],
            ),
            true,
        ),
        (
            "a compare on an unreadable key",
            txn(
                vec![Compare::Absent { key: "a".into() }],
                vec![put("b/1", "v")],
                vec![],
            ),
            false,
        ),
        (
            "a write to a read-only key in the branch that would not run",
            txn(vec![], vec![put("b/1", "v")], vec![put("shared/x", "v")]),
            false,
        ),
        (
            "a get of an unreadable key",
            txn(vec![], vec![get("a")], vec![]),
            false,
        ),
        (
            "an increment outside the prefix",
            txn(vec![], vec![incr("c", 1)], vec![]),
            false,
        ),
        (
            "a stale fence on an unreadable lock",
            txn(vec![fence(2)], vec![], vec![]),
            false,
        ),
        (
            "someone else's lease",
            txn(
                vec![],
                vec![TxnOp::Put {
                    key: "b/1".into(),
                    value: "v".into(),
                    lease_id: Some(1),
                }],
                vec![],
            ),
            false,
        ),
    ];
    for (what, command, allowed) in cases {
        let mut state = with_bob(None);
        let r = apply(&mut state, 10, as_("bob", command));
        match (&r.outcome, allowed) {
            (Ok(Outcome::Txn { .. }), true) => {}
            (
                Err(ApplyError::PermissionDenied { .. } | ApplyError::LeaseNotFound { .. }),
                false,
            ) => {
                assert!(!state.keys.contains_key("b/1"), "{what}")
            }
            _ => panic!("{what}: {r:?}"),
        }
    }
}

#[test]
fn created_keys_are_owned_and_count_against_the_quota() {
    let mut state = with_bob(Some(2));
    let r = apply(
        &mut state,
        10,
        as_(
            "bob",
            txn(vec![], vec![put("b/1", "v"), put("b/2", "v")], vec![]),
        ),
    );
    assert!(
        matches!(
            r.outcome,
            Ok(Outcome::Txn {
                succeeded: true,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(state.auth.usage_of("bob").keys, 2);
    assert_eq!(
        state.auth.key_owners.get("b/1").map(String::as_str),
        Some("bob")
    );
    // Rewriting owned keys creates nothing; one more key is over the quota, whole txn refused.
    let r = apply(
        &mut state,
        11,
        as_(
            "bob",
            txn(vec![], vec![put("b/1", "w"), put("b/3", "v")], vec![]),
        ),
    );
    assert!(
        matches!(r.outcome, Err(ApplyError::QuotaExceeded { .. })),
        "{r:?}"
    );
    assert_eq!(state.keys["b/1"].value, "v");
    // The quota is judged for the branch that runs: the failure branch creates nothing.
    let r = apply(
        &mut state,
        12,
        as_(
            "bob",
            txn(
                vec![Compare::Absent { key: "b/1".into() }],
                vec![put("b/3", "v")],
                vec![put("b/1", "w")],
            ),
        ),
    );
    assert!(
        matches!(
            r.outcome,
            Ok(Outcome::Txn {
                succeeded: false,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(state.keys["b/1"].value, "w");
}

#[test]
fn a_get_hides_lease_ids_of_other_principals() {
    let mut state = with_bob(None);
    let r = apply(
        &mut state,
        10,
        as_(
            ROOT,
            txn(
                vec![],
                vec![TxnOp::Put {
                    key: "shared/x".into(),
                    value: "v".into(),
                    lease_id: Some(1),
                }],
                vec![],
            ),
        ),
    );
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = apply(
        &mut state,
        11,
        as_("bob", txn(vec![], vec![get("shared/x")], vec![])),
    );
    let Ok(Outcome::Txn { results, .. }) = r.outcome else {
        panic!("{r:?}");
    };
    let TxnResult::Get {
        record: Some(k), ..
    } = &results[0]
    else {
        panic!("{results:?}");
    };
    assert_eq!((k.value.as_str(), k.lease_id), ("v", None));
}
