//! End-state checks: no acknowledged set add lost, counters within what their increments
//! allow, and every node converged on one state after the final heal.

use std::collections::{BTreeMap, BTreeSet};

use crate::findings::{describe, Findings};
use crate::history::{EventType, FinalNodeState, Op, OpValue, TimeNs};
use crate::CheckResult;

/// What the final set read of one lock showed about its adds.
#[derive(Default)]
struct SetTally {
    ok_adds: usize,
    /// `ok` adds still running when the final read was invoked: they may order after it.
    concurrent: usize,
    lost: usize,
    info_adds: usize,
    recovered: usize,
    unexpected: usize,
    failed_present: usize,
}

/// Per lock, the last `ok` `SetRead` (latest invocation, the read after the final heal) holds
/// every element of each `ok` `SetAdd` that returned before it was invoked. Elements present
/// that no `SetAdd` ever tried are unexpected, and an element present whose every add failed
/// was written although `fail` means "did not take effect". No final read ⇒ Unknown.
pub fn set_no_lost_adds(ops: &[Op]) -> CheckResult {
    let mut adds: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    let mut reads: BTreeMap<&str, &Op> = BTreeMap::new();
    for op in ops {
        match &op.value {
            OpValue::SetAdd { lock, element, .. } => {
                adds.entry(lock).or_default().push((op, *element));
            }
            OpValue::SetRead { lock, .. } if op.status == EventType::Ok => {
                let last = reads.entry(lock).or_insert(op);
                if (op.call_ns, op.id) > (last.call_ns, last.id) {
                    *last = op;
                }
            }
            _ => {}
        }
    }
    let locks: BTreeSet<&str> = adds.keys().chain(reads.keys()).copied().collect();
    let mut found = Findings::default();
    let mut tally = SetTally::default();
    for lock in &locks {
        let adds = adds.get(lock).map(Vec::as_slice).unwrap_or_default();
        match reads.get(lock) {
            Some(read) => check_set(lock, adds, read, &mut tally, &mut found),
            None => found.unknown(format!(
                "lock {lock}: {} set adds but no ok final read",
                adds.len()
            )),
        }
    }
    let checked = format!(
        "{} sets: {} ok adds ({} concurrent with the final read, not required), {} lost, \
         {} of {} info adds recovered, {} unexpected, {} present although their add failed",
        locks.len(),
        tally.ok_adds,
        tally.concurrent,
        tally.lost,
        tally.recovered,
        tally.info_adds,
        tally.unexpected,
        tally.failed_present
    );
    found.finish("set-lost-adds", checked)
}

fn check_set(
    lock: &str,
    adds: &[(&Op, u64)],
    read: &Op,
    tally: &mut SetTally,
    found: &mut Findings,
) {
    let OpValue::SetRead {
        elements: Some(elements),
        ..
    } = &read.value
    else {
        found.unknown(format!(
            "lock {lock}: final read {} has no elements",
            describe(read)
        ));
        return;
    };
    let present: BTreeSet<u64> = elements.iter().copied().collect();
    // Per element: was any add of it ok or info (may have taken effect)?
    let mut attempted: BTreeMap<u64, bool> = BTreeMap::new();
    for &(op, element) in adds {
        let may_apply = op.status != EventType::Fail;
        *attempted.entry(element).or_insert(may_apply) |= may_apply;
        match op.status {
            EventType::Ok if op.ret_ns.is_some_and(|r| r < read.call_ns) => {
                tally.ok_adds += 1;
                if !present.contains(&element) {
                    tally.lost += 1;
                    found.violation(format!(
                        "lock {lock}: element {element} of ok {} is missing from final read {}",
                        describe(op),
                        describe(read)
                    ));
                }
            }
            EventType::Ok => {
                tally.ok_adds += 1;
                tally.concurrent += 1;
            }
            EventType::Info => {
                tally.info_adds += 1;
                tally.recovered += usize::from(present.contains(&element));
            }
            EventType::Fail | EventType::Invoke => {}
        }
    }
    for element in &present {
        match attempted.get(element) {
            None => {
                tally.unexpected += 1;
                found.violation(format!(
                    "lock {lock}: final read {} holds element {element}, which no set_add tried",
                    describe(read)
                ));
            }
            Some(false) => {
                tally.failed_present += 1;
                found.violation(format!(
                    "lock {lock}: final read {} holds element {element}, although every add \
                     of it failed",
                    describe(read)
                ));
            }
            Some(true) => {}
        }
    }
}

/// What may have reached one counter by its final read.
#[derive(Default)]
struct CounterBounds {
    lower: i128,
    upper: i128,
    ok: usize,
    info: usize,
}

/// Per counter, the final `ok` `CounterRead` (latest invocation) lies within what the
/// increments allow: increments that returned `ok` before the read was invoked surely count;
/// `ok` ones concurrent with it and `info` ones invoked before it returned may or may not.
/// With positive `by` that is `sum(ok by) <= final <= sum(ok by) + sum(info by)`; a final
/// value above it is a retried increment applied twice. No final read ⇒ Unknown.
pub fn counter_bounds(ops: &[Op]) -> CheckResult {
    let mut incrs: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    let mut reads: BTreeMap<&str, &Op> = BTreeMap::new();
    for op in ops {
        match &op.value {
            OpValue::Incr { counter, .. } => incrs.entry(counter).or_default().push(op),
            OpValue::CounterRead { counter, .. } if op.status == EventType::Ok => {
                let last = reads.entry(counter).or_insert(op);
                if (op.call_ns, op.id) > (last.call_ns, last.id) {
                    *last = op;
                }
            }
            _ => {}
        }
    }
    let mut found = Findings::default();
    let mut incrs_total = 0usize;
    for (counter, incrs) in &incrs {
        incrs_total += incrs.len();
        let Some(read) = reads.get(counter) else {
            found.unknown(format!(
                "counter {counter}: {} increments but no ok final read",
                incrs.len()
            ));
            continue;
        };
        let b = counter_bounds_at(incrs, read);
        // An absent counter reads as 0.
        let value = match &read.value {
            OpValue::CounterRead { value, .. } => i128::from(value.unwrap_or(0)),
            _ => 0,
        };
        if value < b.lower || value > b.upper {
            found.violation(format!(
                "counter {counter}: final read {} = {value}, outside [{}, {}] allowed by {} ok \
                 and {} info increments{}",
                describe(read),
                b.lower,
                b.upper,
                b.ok,
                b.info,
                if value > b.upper {
                    " (an increment applied more than once?)"
                } else {
                    " (an acknowledged increment lost?)"
                }
            ));
        }
    }
    let checked = format!(
        "{} counters, {incrs_total} increments, {} final reads",
        incrs.len(),
        reads.len()
    );
    found.finish("counter-bounds", checked)
}

fn counter_bounds_at(incrs: &[&Op], read: &Op) -> CounterBounds {
    let read_ret = read.ret_ns.unwrap_or(TimeNs::MAX);
    let mut b = CounterBounds::default();
    for op in incrs {
        let OpValue::Incr { by, .. } = op.value else {
            continue;
        };
        let by = i128::from(by);
        let surely = match op.status {
            EventType::Ok if op.ret_ns.is_some_and(|r| r < read.call_ns) => true,
            EventType::Ok | EventType::Info if op.call_ns < read_ret => false,
            _ => continue,
        };
        if op.status == EventType::Ok {
            b.ok += 1;
        } else {
            b.info += 1;
        }
        if surely {
            b.lower += by;
            b.upper += by;
        } else {
            b.lower += by.min(0);
            b.upper += by.max(0);
        }
    }
    b
}

/// After the final heal every node applied the same log: the same `applied_index` and the same
/// `state_digest`. Nodes outside the largest agreeing group are listed. Unknown with fewer
/// than two reports.
pub fn digests_converged(final_nodes: &[FinalNodeState]) -> CheckResult {
    let mut found = Findings::default();
    let checked = format!("{} nodes reported a final state", final_nodes.len());
    if final_nodes.len() < 2 {
        found.unknown(format!(
            "{} final node states: at least 2 are needed to compare",
            final_nodes.len()
        ));
        return found.finish("state-digests", checked);
    }
    let mut groups: BTreeMap<(u64, &str), Vec<u64>> = BTreeMap::new();
    for n in final_nodes {
        groups
            .entry((n.applied_index, &n.state_digest))
            .or_default()
            .push(n.node);
    }
    // Compare against the largest group; on a tie, the one that applied the most.
    let reference = groups
        .iter()
        .max_by_key(|((index, _), nodes)| (nodes.len(), *index))
        .map(|(key, nodes)| (*key, nodes.clone()));
    if let Some(((ref_index, ref_digest), ref_nodes)) = reference {
        for ((index, digest), nodes) in &groups {
            if (*index, *digest) != (ref_index, ref_digest) {
                found.violation(format!(
                    "nodes {nodes:?} at applied_index {index} with digest {digest} differ from \
                     nodes {ref_nodes:?} at applied_index {ref_index} with digest {ref_digest}"
                ));
            }
        }
    }
    found.finish("state-digests", checked)
}
