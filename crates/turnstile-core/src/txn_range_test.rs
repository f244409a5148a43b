//! Ranges inside a transaction (`TxnOp::Range`, etcd's `Range` in a `Txn`): read at apply as
//! the branch's earlier ops left the keys, bounded before the branch runs, and judged on the
//! span's covering prefix.

use super::txn_test_support::{apply, as_, bob_with_keys, prefix, txn};
use crate::auth::Access;
use crate::key_span::{KeySpan, SortBy};
use crate::limits;
use crate::response::{ApplyError, Outcome, Response};
use crate::state::State;
use crate::txn::{Compare, TxnOp, TxnResult};

fn put(key: &str) -> TxnOp {
    TxnOp::Put {
        key: key.into(),
        value: "v".into(),
        lease_id: None,
    }
}

/// `(keys, more, count)` of the branch's range results.
fn ranges(r: &Response) -> Vec<(Vec<String>, bool, u64)> {
    let Ok(Outcome::Txn { results, .. }) = &r.outcome else {
        panic!("{r:?}");
    };
    results
        .iter()
        .filter_map(|r| match r {
            TxnResult::Range { kvs, more, count } => {
                Some((kvs.iter().map(|k| k.key.clone()).collect(), *more, *count))
            }
            _ => None,
        })
        .collect()
}

/// etcd's mutex: put my key if absent, then read the oldest waiter, in one entry.
#[test]
fn the_mutex_recipe_sees_its_own_put_and_the_oldest_waiter() {
    let mut s = State::default();
    let mut oldest = prefix("lock/");
    oldest.sort = Some((SortBy::CreateRevision, false));
    oldest.limit = 1;
    let mine = |key: &str| {
        txn(
            vec![Compare::Absent { key: key.into() }],
            vec![put(key), TxnOp::Range(oldest.clone())],
        )
    };
    let r = apply(&mut s, mine("lock/b"));
    assert_eq!(ranges(&r), vec![(vec!["lock/b".into()], false, 1)]);
    // A later waiter with a smaller key still finds the older one first, and counts both.
    let r = apply(&mut s, mine("lock/a"));
    assert_eq!(ranges(&r), vec![(vec!["lock/b".into()], true, 2)]);
    // The election recipe's proclaim: a compare on the key's create revision.
    let created = s.keys.get("lock/b").map(|k| k.create_revision);
    let proclaim = |create_revision| {
        txn(
            vec![Compare::CreateRevision {
                key: "lock/b".into(),
                create_revision,
            }],
            vec![put("lock/b")],
        )
    };
    let held = |r: Response| matches!(r.outcome, Ok(Outcome::Txn { succeeded, .. }) if succeeded);
    assert!(held(apply(&mut s, proclaim(created.expect("exists")))));
    assert!(!held(apply(&mut s, proclaim(99))));
}

#[test]
fn ranges_are_bounded_before_the_branch_runs() {
    let mut s = State::default();
    for i in 0..limits::TXN_RANGE_SCAN_MAX - 1 {
        s.keys.insert(
            format!("k/{i:05}"),
            crate::state::KeyRecord {
                value: "v".into(),
                create_revision: 1,
                mod_revision: 1,
                version: 1,
                lease_id: None,
            }
            .into(),
        );
    }
    // 9,999 keys plus the put before the range: exactly the bound.
    let r = apply(
        &mut s,
        txn(vec![], vec![put("k/x"), TxnOp::Range(prefix("k/"))]),
    );
    let got = ranges(&r);
    assert_eq!(
        (got[0].0.len(), got[0].1, got[0].2),
        (
            limits::TXN_RANGE_ITEMS_MAX,
            true,
            limits::TXN_RANGE_SCAN_MAX as u64
        )
    );
    // One more put before it: refused whole, nothing written.
    let keys_before = s.keys.len();
    let r = apply(
        &mut s,
        txn(
            vec![],
            vec![put("k/y"), put("k/z"), TxnOp::Range(prefix("k/"))],
        ),
    );
    assert!(
        matches!(&r.outcome, Err(ApplyError::Invalid { reason }) if reason.contains("look at most")),
        "{r:?}"
    );
    assert_eq!(s.keys.len(), keys_before);
    // Too many ranges in one branch.
    let many = vec![TxnOp::Range(prefix("a/")); limits::TXN_RANGES_PER_BRANCH_MAX + 1];
    let r = apply(&mut s, txn(vec![], many));
    assert!(
        matches!(r.outcome, Err(ApplyError::Invalid { .. })),
        "{r:?}"
    );
}

#[test]
fn a_range_needs_read_on_its_covering_prefix() {
    let mut s = State::default();
    bob_with_keys(&mut s, &[("shared/", Access::Read)]);
    let read = |span: KeySpan| as_("bob", txn(vec![], vec![TxnOp::Range(span)]));
    let r = apply(&mut s, read(prefix("shared/x/")));
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = apply(&mut s, read(prefix("s")));
    assert!(
        matches!(r.outcome, Err(ApplyError::PermissionDenied { .. })),
        "{r:?}"
    );
}
