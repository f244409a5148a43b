//! Sequential specifications for the WGL search in `wgl`: a [`Model`] says which operations it
//! covers, how they partition (one partition per key or counter), and which steps are legal.
//!
//! Models are deterministic. Uncertainty about *whether* an operation happened (an `info`
//! completion) is handled by the search, which may leave such an operation un-linearized; a
//! model only decides what the operation does *if* it happened.

use std::fmt::Debug;
use std::hash::Hash;

use crate::history::{EventType, Op, OpValue};

/// The error code with which the server reports a compare-and-set whose comparison failed: a
/// definite observation that the value was not `from` at the linearization point.
pub const CAS_COMPARE_FAILED: &str = "compare_failed";

/// A sequential object the search linearizes histories against.
///
/// `Sync` because `wgl::check` searches partitions on scoped threads that share the model.
pub trait Model: Sync {
    /// The object's state for one partition. Hashed into the search's memo cache.
    type State: Clone + Eq + Hash + Debug;

    /// The state of every partition before any operation.
    fn init(&self) -> Self::State;

    /// The state after `op` takes effect in `state`, or `None` if `op` with its recorded
    /// results cannot take effect there. Called for `ok` operations, for `fail` operations the
    /// model keeps (definite negative observations) and for `info` operations, which the
    /// search may also leave out entirely.
    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State>;

    /// The partition `op` belongs to, or `None` when the model ignores it: another model's
    /// operation, a failure that did not happen, or an `info` read, which carries no
    /// information. Histories are linearizable iff every partition is (P-compositionality).
    fn partition_key(&self, op: &Op) -> Option<String>;

    /// A state as counterexamples print it.
    fn describe_state(&self, state: &Self::State) -> String {
        format!("{state:?}")
    }
}

/// `true` for completions that say nothing about whether the operation took effect. The
/// harness never records `Invoke` as a status, but an `Op` built by hand might carry one;
/// treating it as unknown is the only sound reading.
fn is_unknown(status: EventType) -> bool {
    matches!(status, EventType::Info | EventType::Invoke)
}

/// A compare-and-set that definitely failed its comparison.
fn is_compare_failed(op: &Op) -> bool {
    matches!(op.value, OpValue::Cas { .. })
        && op.status == EventType::Fail
        && op.error.as_deref() == Some(CAS_COMPARE_FAILED)
}

/// A `fail` that is not a definite observation: the operation did not take effect. Partition
/// keys drop these; `step` treats them as no-ops so a caller that passes one anyway still gets
/// a sound answer.
fn did_not_happen(op: &Op) -> bool {
    op.status == EventType::Fail && !is_compare_failed(op)
}

/// One register per key holding `Option<i64>` (absent until the first write), for the `read`,
/// `write` and `cas` operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register;

impl Model for Register {
    type State = Option<i64>;

    fn init(&self) -> Self::State {
        None
    }

    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State> {
        if did_not_happen(op) {
            return Some(*state);
        }
        match &op.value {
            OpValue::Read { value, .. } => {
                (is_unknown(op.status) || value == state).then_some(*state)
            }
            OpValue::Write { value, .. } => Some(Some(*value)),
            OpValue::Cas { from, to, .. } => {
                let matches = *state == Some(*from);
                if is_compare_failed(op) {
                    // The comparison was observed to fail: nothing changed.
                    (!matches).then_some(*state)
                } else {
                    // `ok`, or `info` that took effect: a cas that took effect succeeded,
                    // since a failed comparison is indistinguishable from not happening.
                    matches.then_some(Some(*to))
                }
            }
            _ => None,
        }
    }

    fn partition_key(&self, op: &Op) -> Option<String> {
        let key = match &op.value {
            OpValue::Read { key, .. } | OpValue::Write { key, .. } | OpValue::Cas { key, .. } => {
                key
            }
            _ => return None,
        };
        let kept = match op.status {
            EventType::Ok => true,
            EventType::Fail => is_compare_failed(op),
            EventType::Info | EventType::Invoke => !matches!(op.value, OpValue::Read { .. }),
        };
        kept.then(|| key.clone())
    }
}

/// One `i64` counter per name, starting at 0, for the `incr` and `counter_read` operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counter;

impl Model for Counter {
    type State = i64;

    fn init(&self) -> Self::State {
        0
    }

    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State> {
        // No counter operation fails with a definite observation: a failure did not happen.
        if op.status == EventType::Fail {
            return Some(*state);
        }
        match &op.value {
            OpValue::Incr { by, value, .. } => {
                // Overflow cannot happen in a correct store, so it is an illegal step.
                let next = state.checked_add(*by)?;
                // An `info` increment's result is unknown, whatever the invocation carried.
                let observed = if is_unknown(op.status) { None } else { *value };
                observed.is_none_or(|v| v == next).then_some(next)
            }
            OpValue::CounterRead { value, .. } => {
                (is_unknown(op.status) || *value == Some(*state)).then_some(*state)
            }
            _ => None,
        }
    }

    fn partition_key(&self, op: &Op) -> Option<String> {
        let counter = match &op.value {
            OpValue::Incr { counter, .. } | OpValue::CounterRead { counter, .. } => counter,
            _ => return None,
        };
        let kept = match op.status {
            EventType::Ok => true,
            EventType::Fail => false,
            EventType::Info | EventType::Invoke => !matches!(op.value, OpValue::CounterRead { .. }),
        };
        kept.then(|| counter.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(status: EventType, value: OpValue, error: Option<&str>) -> Op {
        Op {
            id: 0,
            process: 0,
            node: 0,
            call_ns: 0,
            ret_ns: (status != EventType::Info).then_some(1),
            status,
            value,
            error: error.map(str::to_owned),
        }
    }

    fn cas(from: i64, to: i64) -> OpValue {
        OpValue::Cas {
            key: "k".into(),
            from,
            to,
        }
    }

    #[test]
    fn register_steps() {
        use EventType::{Fail, Info, Ok};
        let read = |v| OpValue::Read {
            key: "k".into(),
            value: v,
        };
        let cases: Vec<(Option<i64>, Op, Option<Option<i64>>)> = vec![
            (None, op(Ok, read(None), None), Some(None)),
            (Some(1), op(Ok, read(None), None), None),
            (Some(1), op(Ok, read(Some(1)), None), Some(Some(1))),
            (
                None,
                op(
                    Ok,
                    OpValue::Write {
                        key: "k".into(),
                        value: 3,
                    },
                    None,
                ),
                Some(Some(3)),
            ),
            (Some(1), op(Ok, cas(1, 2), None), Some(Some(2))),
            (Some(3), op(Ok, cas(1, 2), None), None),
            (None, op(Ok, cas(1, 2), None), None),
            (
                Some(3),
                op(Fail, cas(1, 2), Some(CAS_COMPARE_FAILED)),
                Some(Some(3)),
            ),
            (Some(1), op(Fail, cas(1, 2), Some(CAS_COMPARE_FAILED)), None),
            (Some(1), op(Info, cas(1, 2), None), Some(Some(2))),
            (Some(3), op(Info, cas(1, 2), None), None),
        ];
        for (i, (state, op, want)) in cases.iter().enumerate() {
            assert_eq!(
                Register.step(state, op),
                *want,
                "case {i}: {op:?} from {state:?}"
            );
        }
    }

    #[test]
    fn register_partitions_drop_uninformative_ops() {
        use EventType::{Fail, Info, Ok};
        let read = OpValue::Read {
            key: "k".into(),
            value: None,
        };
        let k = Some("k".to_owned());
        assert_eq!(Register.partition_key(&op(Ok, read.clone(), None)), k);
        assert_eq!(Register.partition_key(&op(Info, read.clone(), None)), None);
        assert_eq!(
            Register.partition_key(&op(Fail, read, Some("timeout"))),
            None
        );
        assert_eq!(
            Register.partition_key(&op(Fail, cas(1, 2), Some("timeout"))),
            None
        );
        let failed = op(Fail, cas(1, 2), Some(CAS_COMPARE_FAILED));
        assert_eq!(Register.partition_key(&failed), k);
        assert_eq!(Register.partition_key(&op(Info, cas(1, 2), None)), k);
        let incr = OpValue::Incr {
            counter: "c".into(),
            by: 1,
            value: Some(1),
        };
        assert_eq!(Register.partition_key(&op(Ok, incr, None)), None);
    }

    #[test]
    fn counter_steps() {
        use EventType::{Info, Ok};
        let incr = |by, value| OpValue::Incr {
            counter: "c".into(),
            by,
            value,
        };
        let read = |value| OpValue::CounterRead {
            counter: "c".into(),
            value,
        };
        assert_eq!(Counter.step(&0, &op(Ok, incr(2, Some(2)), None)), Some(2));
        assert_eq!(Counter.step(&1, &op(Ok, incr(2, Some(2)), None)), None);
        assert_eq!(Counter.step(&1, &op(Info, incr(2, Some(9)), None)), Some(3));
        assert_eq!(
            Counter.step(&i64::MAX, &op(Info, incr(1, None), None)),
            None
        );
        assert_eq!(Counter.step(&4, &op(Ok, read(Some(4)), None)), Some(4));
        assert_eq!(Counter.step(&4, &op(Ok, read(Some(3)), None)), None);
        assert_eq!(Counter.step(&0, &op(Ok, read(None), None)), None);
        assert_eq!(Counter.partition_key(&op(Info, read(None), None)), None);
        assert_eq!(
            Counter.partition_key(&op(Info, incr(1, None), None)),
            Some("c".into())
        );
    }
}
