//! The transaction ops and compares only the etcd port makes: deleting a range
//! (`TxnOp::DeleteRange`, etcd's `DeleteRange` with a `range_end`: what it deletes and
//! answers, its watch events, bounds, overlap rule and permission), etcd's ordered compares
//! (`Compare::Ordered`, a key's lease as the judging principal sees it), and a put that keeps
//! the key's value or lease (`TxnOp::PutKeeping`).

use super::txn_test_support::{apply, as_, bob_with_keys, prefix_end_of, txn};
use crate::auth::{Access, ROOT};
use crate::command::Command;
use crate::key_span::SpanEnd;
use crate::limits;
use crate::response::{ApplyError, Outcome, Response};
use crate::state::{KeyRecord, State};
use crate::txn::{Compare, Operand, Order, TxnOp, TxnResult};

fn put(key: &str, value: &str) -> TxnOp {
    TxnOp::Put {
        key: key.into(),
        value: value.into(),
        lease_id: None,
    }
}

fn delete_prefix(p: &str, prev: bool) -> TxnOp {
    TxnOp::DeleteRange {
        start: p.into(),
        end: prefix_end_of(p),
        prev,
    }
}

/// `(deleted, previous keys)` of the branch's first delete-range result.
fn deleted(r: &Response) -> (u64, Vec<String>) {
    let Ok(Outcome::Txn { results, .. }) = &r.outcome else {
        panic!("{r:?}");
    };
    results
        .iter()
        .find_map(|r| match r {
            TxnResult::DeleteRange { deleted, prev, .. } => {
                Some((*deleted, prev.iter().map(|k| k.key.clone()).collect()))
            }
            _ => None,
        })
        .expect("a delete-range result")
}

fn succeeded(r: &Response) -> bool {
    match &r.outcome {
        Ok(Outcome::Txn { succeeded, .. }) => *succeeded,
        other => panic!("{other:?}"),
    }
}

fn keys(s: &State) -> Vec<String> {
    s.keys.keys().cloned().collect()
}

#[test]
fn a_range_delete_removes_exactly_its_span_and_answers_what_it_removed() {
    let mut s = State::default();
    let r = apply(
        &mut s,
        txn(
            vec![],
            vec![
                put("a", "1"),
                put("b/1", "2"),
                put("b/2", "3"),
                put("c", "4"),
            ],
        ),
    );
    assert!(succeeded(&r));
    let history_before = s.events.len();
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("b/", true)]));
    assert_eq!(deleted(&r), (2, vec!["b/1".into(), "b/2".into()]));
    assert_eq!(keys(&s), vec!["a".to_string(), "c".to_string()]);
    // One delete event per key, all at the entry's index, as etcd's watchers see them.
    assert_eq!(s.events.len(), history_before + 2);
    // Without `prev`, the count alone; an empty span deletes nothing and still succeeds.
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("b/", false)]));
    assert_eq!(deleted(&r), (0, vec![]));
    let everything_from_b = TxnOp::DeleteRange {
        start: "b".into(),
        end: SpanEnd::All,
        prev: false,
    };
    let r = apply(&mut s, txn(vec![], vec![everything_from_b]));
    assert_eq!(deleted(&r), (1, vec![]));
    assert_eq!(keys(&s), vec!["a".to_string()]);
}

#[test]
fn a_branch_may_not_write_inside_a_range_it_deletes() {
    let mut s = State::default();
    apply(&mut s, txn(vec![], vec![put("b/1", "x")]));
    for ops in [
        vec![put("b/2", "y"), delete_prefix("b/", false)],
        vec![delete_prefix("b/", false), put("b/2", "y")],
        vec![
            TxnOp::Delete { key: "b/1".into() },
            delete_prefix("b/", false),
        ],
        vec![delete_prefix("b/", false), delete_prefix("b/1", false)],
    ] {
        let r = apply(&mut s, txn(vec![], ops.clone()));
        assert!(
            matches!(&r.outcome, Err(ApplyError::Invalid { .. })),
            "{ops:?}: {r:?}"
        );
        assert_eq!(
            keys(&s),
            vec!["b/1".to_string()],
            "{ops:?} changed the state"
        );
    }
    // Next to each other is fine: [b/, b0) and [c/, c0) do not meet.
    let r = apply(
        &mut s,
        txn(
            vec![],
            vec![
                delete_prefix("b/", false),
                delete_prefix("c/", false),
                put("c", "z"),
            ],
        ),
    );
    assert!(succeeded(&r), "{r:?}");
}

#[test]
fn range_deletes_are_bounded_before_the_branch_runs() {
    let mut s = State::default();
    let record = |value: String| KeyRecord {
        value,
        create_revision: 1,
        mod_revision: 1,
        version: 1,
        lease_id: None,
    };
    for i in 0..=limits::TXN_RANGE_SCAN_MAX {
        s.keys
            .insert(format!("k/{i:05}"), record("v".into()).into());
    }
    // One key past the scan bound: refused whole.
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("k/", false)]));
    assert!(
        matches!(&r.outcome, Err(ApplyError::Invalid { reason }) if reason.contains("look at most")),
        "{r:?}"
    );
    assert_eq!(s.keys.len(), limits::TXN_RANGE_SCAN_MAX + 1);
    // Within the scan bound but too many previous keys to answer: refused, not cut.
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("k/0", true)]));
    assert!(
        matches!(&r.outcome, Err(ApplyError::Invalid { reason }) if reason.contains("previous keys")),
        "{r:?}"
    );
    // Few keys but too many bytes of previous values: refused too.
    let big = "x".repeat(limits::VALUE_BYTES_MAX);
    for i in 0..(limits::TXN_RANGE_BYTES_MAX / limits::VALUE_BYTES_MAX + 1) {
        s.keys
            .insert(format!("big/{i}"), record(big.clone()).into());
    }
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("big/", true)]));
    assert!(
        matches!(&r.outcome, Err(ApplyError::Invalid { .. })),
        "{r:?}"
    );
    // The same without previous keys goes through.
    let r = apply(&mut s, txn(vec![], vec![delete_prefix("big/", false)]));
    assert_eq!(deleted(&r).0, 9);
}

#[test]
fn a_range_delete_needs_write_on_its_covering_prefix() {
    let mut s = State::default();
    bob_with_keys(
        &mut s,
        &[("mine/", Access::Write), ("shared/", Access::Read)],
    );
    let seed = txn(vec![], vec![put("shared/a", "1"), put("mine/a", "2")]);
    let r = apply(&mut s, as_(ROOT, seed));
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = apply(
        &mut s,
        as_("bob", txn(vec![], vec![delete_prefix("shared/", false)])),
    );
    assert!(
        matches!(r.outcome, Err(ApplyError::PermissionDenied { .. })),
        "{r:?}"
    );
    let r = apply(
        &mut s,
        as_("bob", txn(vec![], vec![delete_prefix("m", false)])),
    );
    assert!(
        matches!(r.outcome, Err(ApplyError::PermissionDenied { .. })),
        "{r:?}"
    );
    let r = apply(
        &mut s,
        as_("bob", txn(vec![], vec![delete_prefix("mine/", false)])),
    );
    assert_eq!(deleted(&r).0, 1);
    assert_eq!(keys(&s), vec!["shared/a".to_string()]);
}

#[test]
fn ordered_compares_judge_as_etcd_does() {
    let mut s = State::default();
    apply(&mut s, txn(vec![], vec![put("k", "m")]));
    apply(&mut s, txn(vec![], vec![put("k", "m")]));
    let k = &s.keys["k"];
    let (version, create, modified) = (k.version, k.create_revision, k.mod_revision);
    assert_eq!(version, 2);
    let holds = |s: &mut State, key: &str, order: Order, of: Operand| {
        let c = Compare::Ordered {
            key: key.into(),
            order,
            of,
        };
        succeeded(&apply(s, txn(vec![c], vec![])))
    };
    let cases = [
        ("k", Order::Greater, Operand::Version(1), true),
        ("k", Order::Greater, Operand::Version(2), false),
        ("k", Order::Less, Operand::Version(3), true),
        ("k", Order::NotEqual, Operand::Version(2), false),
        ("k", Order::Equal, Operand::Version(2), true),
        ("k", Order::Less, Operand::CreateRevision(create + 1), true),
        ("k", Order::Less, Operand::CreateRevision(create), false),
        ("k", Order::Greater, Operand::ModRevision(create), true),
        ("k", Order::Less, Operand::ModRevision(modified), false),
        // Values compare byte by byte.
        ("k", Order::Greater, Operand::Value("l".into()), true),
        ("k", Order::Greater, Operand::Value("mm".into()), false),
        ("k", Order::Less, Operand::Value("n".into()), true),
        ("k", Order::NotEqual, Operand::Value("m".into()), false),
        // A missing key is etcd's empty key: numbers 0, and no value to compare.
        ("nope", Order::Less, Operand::Version(1), true),
        ("nope", Order::Equal, Operand::ModRevision(0), true),
        ("nope", Order::Greater, Operand::CreateRevision(0), false),
        ("nope", Order::NotEqual, Operand::Value("x".into()), false),
        ("nope", Order::Less, Operand::Value("x".into()), false),
    ];
    for (key, order, of, expected) in cases {
        assert_eq!(
            holds(&mut s, key, order, of.clone()),
            expected,
            "{key} {order:?} {of:?}"
        );
    }
}

fn granted(r: &Response) -> u64 {
    match &r.outcome {
        Ok(Outcome::LeaseGranted { lease_id, .. }) => *lease_id,
        other => panic!("{other:?}"),
    }
}

fn lease_is(order: Order, lease: u64) -> Command {
    txn(
        vec![Compare::Ordered {
            key: "shared/k".into(),
            order,
            of: Operand::Lease(lease),
        }],
        vec![],
    )
}

#[test]
fn a_lease_compare_sees_the_lease_as_the_principals_reads_do() {
    let mut s = State::default();
    bob_with_keys(&mut s, &[("shared/", Access::Read)]);
    let lease = granted(&apply(
        &mut s,
        as_(ROOT, Command::LeaseGrant { ttl_ms: 60_000 }),
    ));
    let leased = TxnOp::Put {
        key: "shared/k".into(),
        value: "v".into(),
        lease_id: Some(lease),
    };
    assert!(succeeded(&apply(
        &mut s,
        as_(ROOT, txn(vec![], vec![leased]))
    )));
    // Root (and a state without auth) sees the lease; bob sees none, as his reads do.
    assert!(succeeded(&apply(
        &mut s,
        as_(ROOT, lease_is(Order::Equal, lease))
    )));
    assert!(succeeded(&apply(&mut s, lease_is(Order::Equal, lease))));
    assert!(!succeeded(&apply(
        &mut s,
        as_("bob", lease_is(Order::Equal, lease))
    )));
    assert!(succeeded(&apply(
        &mut s,
        as_("bob", lease_is(Order::Equal, 0))
    )));
    assert!(succeeded(&apply(
        &mut s,
        as_(ROOT, lease_is(Order::Greater, 0))
    )));
}

#[test]
fn a_kept_put_keeps_the_value_or_the_lease_of_an_existing_key_only() {
    let mut s = State::default();
    let lease = granted(&apply(&mut s, Command::LeaseGrant { ttl_ms: 60_000 }));
    let other = granted(&apply(&mut s, Command::LeaseGrant { ttl_ms: 60_000 }));
    let leased = TxnOp::Put {
        key: "k".into(),
        value: "old".into(),
        lease_id: Some(lease),
    };
    assert!(succeeded(&apply(&mut s, txn(vec![], vec![leased]))));
    let keep = |value: Option<&str>, lease_id: Option<u64>, keep_lease: bool| TxnOp::PutKeeping {
        key: "k".into(),
        value: value.map(str::to_string),
        lease_id,
        keep_lease,
    };
    let now = |s: &State| {
        let r = &s.keys["k"];
        (r.value.clone(), r.lease_id, r.version)
    };
    // ignore_lease: a new value, the same lease.
    assert!(succeeded(&apply(
        &mut s,
        txn(vec![], vec![keep(Some("new"), None, true)])
    )));
    assert_eq!(now(&s), ("new".to_string(), Some(lease), 2));
    assert!(s.leases[&lease].keys.contains("k"));
    // ignore_value: the same value, another lease (the key moves to it).
    assert!(succeeded(&apply(
        &mut s,
        txn(vec![], vec![keep(None, Some(other), false)])
    )));
    assert_eq!(now(&s), ("new".to_string(), Some(other), 3));
    assert!(!s.leases[&lease].keys.contains("k"));
    assert!(s.leases[&other].keys.contains("k"));
    // Both: only the version and revision move.
    assert!(succeeded(&apply(
        &mut s,
        txn(vec![], vec![keep(None, None, true)])
    )));
    assert_eq!(now(&s), ("new".to_string(), Some(other), 4));
    // A missing key, or a lease that is gone: refused whole, nothing written.
    let missing = TxnOp::PutKeeping {
        key: "nope".into(),
        value: None,
        lease_id: None,
        keep_lease: true,
    };
    let r = apply(&mut s, txn(vec![], vec![put("a", "1"), missing]));
    assert!(
        matches!(&r.outcome, Err(ApplyError::Invalid { reason }) if reason.contains("key not found")),
        "{r:?}"
    );
    assert!(!s.keys.contains_key("a"));
    let r = apply(&mut s, txn(vec![], vec![keep(None, Some(999), false)]));
    assert!(
        matches!(r.outcome, Err(ApplyError::LeaseNotFound { lease_id: 999 })),
        "{r:?}"
    );
    assert_eq!(now(&s).2, 4);
}
