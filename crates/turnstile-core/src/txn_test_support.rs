//! Shared by the transaction tests (`txn_test.rs`, `txn_range_test.rs`, `txn_etcd_ops_test.rs`): applying an
//! entry with the invariants checked after it, building transactions, prefixes and
//! authenticated commands, and a user `bob` with key permissions of its own.

use crate::auth::{Access, Kind, Permission, Quotas, ROOT};
use crate::command::{Command, Envelope};
use crate::key_span::{prefix_end, KeySpan, SpanEnd};
use crate::response::Response;
use crate::state::State;
use crate::txn::{Compare, TxnOp};

/// Applies `command` as the next entry, at `sm_time` 1,000 ms; panics if an invariant breaks.
pub(crate) fn apply(state: &mut State, command: Command) -> Response {
    let index = state.applied_index + 1;
    apply_at(state, index, 1_000, command)
}

/// Applies `command` as entry `index` at `now_ms`; panics if an invariant breaks.
pub(crate) fn apply_at(state: &mut State, index: u64, now_ms: u64, command: Command) -> Response {
    let env = Envelope {
        now_ms,
        request_id: None,
        command,
    };
    let r = state.apply(index, 1, &env);
    state
        .check_invariants()
        .unwrap_or_else(|e| panic!("after {env:?}: {e}"));
    r
}

/// A transaction with an empty failure branch.
pub(crate) fn txn(compares: Vec<Compare>, success: Vec<TxnOp>) -> Command {
    Command::Txn {
        compares,
        success,
        failure: vec![],
    }
}

/// `command` made by `principal`.
pub(crate) fn as_(principal: &str, command: Command) -> Command {
    Command::As {
        principal: principal.into(),
        token_id: None,
        command: Box::new(command),
    }
}

/// The end of the keys starting with `p`.
pub(crate) fn prefix_end_of(p: &str) -> SpanEnd {
    let end = String::from_utf8(prefix_end(p.as_bytes()).expect("an end")).expect("utf-8");
    SpanEnd::Before(end)
}

/// Every key starting with `p`.
pub(crate) fn prefix(p: &str) -> KeySpan {
    KeySpan::bounds(p.into(), prefix_end_of(p))
}

/// Root makes a role with `(prefix, access)` key permissions and a user `bob` holding it.
pub(crate) fn bob_with_keys(state: &mut State, grants: &[(&str, Access)]) {
    let permissions = grants
        .iter()
        .map(|&(prefix, access)| Permission {
            kind: Kind::Key,
            prefix: prefix.into(),
            access,
        })
        .collect();
    let setup = [
        Command::AuthPutRole {
            role: "r".into(),
            permissions,
            metrics: false,
        },
        Command::AuthPutUser {
            user: "bob".into(),
            roles: vec!["r".into()],
            quotas: Quotas::default(),
        },
    ];
    for c in setup {
        let r = apply(state, as_(ROOT, c));
        assert!(r.outcome.is_ok(), "{r:?}");
    }
}
