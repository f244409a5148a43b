//! The WGL linearizability search (Wing & Gong, with Lowe's memo and Horn & Kroening's
//! P-compositional partitioning, as Porcupine and Knossos implement it), run per partition of a
//! [`Model`] and summarised into a [`CheckResult`].
//!
//! An operation occupies the closed interval from its call to its return; calls sort before
//! returns on equal timestamps, so touching intervals count as concurrent. An `info` operation
//! has no return: it may take effect at any point after its call or never, so the search
//! succeeds once every operation with a real return is linearized.
//!
//! Beyond Lowe's memo of failed (linearized set, state) configurations, the search prunes a
//! configuration that only adds `info` operations to a failed one with the same state (see
//! [`Failed`]), and tries definite calls before `info` calls so the smaller configuration is
//! usually explored first. Without this, every pending `info` operation doubles the search:
//! it stays a candidate at every later step. Histories with timeouts are where that matters.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::history::{EventType, Op, OpValue, TimeNs};
use crate::models::Model;
use crate::{CheckResult, Validity, PROBLEMS_LISTED_MAX};

mod entries;

use entries::{Bitset, EntryList, FxHasher, Kind};

/// Threads that search partitions at once. The harness machine is small and shared.
pub const SEARCH_THREADS_MAX: usize = 2;
/// Longest budget [`check`] honours; longer ones are clamped (an `Instant` cannot hold an
/// arbitrary `Duration` past now).
pub const BUDGET_MAX: Duration = Duration::from_secs(24 * 60 * 60);
/// Estimated memory one partition's memo cache may use before the search gives up with
/// `Unknown`. Two partitions are searched at once, so the process may hold twice this.
pub const MEMO_BYTES_MAX: usize = 512 << 20;
/// Search steps between deadline checks: reading the clock every step would dominate the
/// cheapest steps, and a step is well under a microsecond. A power of two, so the check is a
/// mask.
const DEADLINE_CHECK_STEPS: u64 = 1024;
const _: () = assert!(DEADLINE_CHECK_STEPS.is_power_of_two());
/// Longest tail of the linearized prefix a counterexample prints.
const PREFIX_SHOWN_MAX: usize = 12;
/// Most concurrent operations a counterexample prints.
const CONCURRENT_SHOWN_MAX: usize = 16;
/// Assumed per-entry overhead of the memo's hash table and allocations, in bytes.
const MEMO_ENTRY_OVERHEAD_BYTES: usize = 48;

/// The outcome of searching one partition.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Box<Counterexample>),
    /// The search could not decide: its deadline passed or its memory bound was reached, or
    /// the operations were malformed. Never a pass.
    Unknown(String),
}

/// Why a partition is not linearizable: the deepest point the search reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Counterexample {
    /// The operation whose return the search reached without being able to linearize it,
    /// after the longest linearizable prefix below.
    pub stuck: Op,
    /// The longest linearizable prefix found, in linearization order.
    pub prefix: Vec<LinearizedStep>,
    /// The model state after `prefix`, from which the stuck operation could not be linearized:
    /// its step was illegal there, or every continuation from there failed.
    pub state: String,
    /// Every other operation of the partition whose interval overlaps the stuck operation's.
    pub concurrent: Vec<Op>,
}

/// One operation of a linearized prefix and the model state after it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearizedStep {
    pub op: Op,
    pub state_after: String,
}

/// Searches for a linearization of one partition's operations against `model`, giving up
/// with [`Verdict::Unknown`] at `deadline`. Callers pass only operations the model keeps (see
/// [`Model::partition_key`]); `fail` operations the model would drop are harmless no-ops.
pub fn check_partition<M: Model>(model: &M, ops: &[&Op], deadline: Instant) -> Verdict {
    if let Some(op) = ops.iter().find(|o| o.ret_ns.is_some_and(|r| r < o.call_ns)) {
        return Verdict::Unknown(format!("op {} returns before it is called", op.id));
    }
    Search::new(model, ops, deadline).run()
}

/// Checks a whole history against `model`: partitions it with [`Model::partition_key`],
/// searches the partitions on up to [`SEARCH_THREADS_MAX`] threads within one shared
/// `budget`, and reports `Invalid` if any partition is not linearizable, else `Unknown` if any
/// search was undecided, else `Valid`.
pub fn check<M: Model>(name: &str, model: &M, ops: &[Op], budget: Duration) -> CheckResult {
    let deadline = Instant::now() + budget.min(BUDGET_MAX);
    let partitions = partition(model, ops);
    let verdicts = search_all(model, &partitions, deadline);
    summarise(name, &partitions, &verdicts)
}

/// Operations grouped by partition key, in key order so reports are deterministic.
fn partition<'a, M: Model>(model: &M, ops: &'a [Op]) -> Vec<(String, Vec<&'a Op>)> {
    let mut by_key: BTreeMap<String, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(key) = model.partition_key(op) {
            by_key.entry(key).or_default().push(op);
        }
    }
    by_key.into_iter().collect()
}

/// Searches every partition, largest first so the threads finish together. A partition whose
/// thread panicked has no verdict (`None`).
fn search_all<M: Model>(
    model: &M,
    partitions: &[(String, Vec<&Op>)],
    deadline: Instant,
) -> Vec<Option<Verdict>> {
    let mut order: Vec<usize> = (0..partitions.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(partitions[i].1.len()));
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            done.push((i, check_partition(model, &partitions[i].1, deadline)));
        }
        done
    };
    let threads = SEARCH_THREADS_MAX.min(partitions.len()).max(1);
    let finished: Vec<Vec<(usize, Verdict)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut verdicts = vec![None; partitions.len()];
    for (i, verdict) in finished.into_iter().flatten() {
        verdicts[i] = Some(verdict);
    }
    verdicts
}

/// Folds the per-partition verdicts into one result, counterexamples first.
fn summarise(
    name: &str,
    partitions: &[(String, Vec<&Op>)],
    verdicts: &[Option<Verdict>],
) -> CheckResult {
    let mut invalid = Vec::new();
    let mut unknown = Vec::new();
    for ((key, _), verdict) in partitions.iter().zip(verdicts) {
        match verdict {
            Some(Verdict::Linearizable) => {}
            Some(Verdict::NotLinearizable(cex)) => {
                invalid.push(format!("key {key:?}: {}", cex.to_string().trim_end()));
            }
            Some(Verdict::Unknown(why)) => unknown.push(format!("key {key:?}: unknown: {why}")),
            None => unknown.push(format!("key {key:?}: unknown: its search thread panicked")),
        }
    }
    let validity = if !invalid.is_empty() {
        Validity::Invalid
    } else if !unknown.is_empty() {
        Validity::Unknown
    } else {
        Validity::Valid
    };
    let op_count: usize = partitions.iter().map(|(_, ops)| ops.len()).sum();
    CheckResult {
        name: name.to_owned(),
        validity,
        checked: format!(
            "{} in {}",
            counted(op_count, "op"),
            counted(partitions.len(), "key")
        ),
        problems: cap_problems(invalid.into_iter().chain(unknown).collect()),
    }
}

/// Keeps at most [`PROBLEMS_LISTED_MAX`] entries, the last of them counting the rest.
fn cap_problems(mut problems: Vec<String>) -> Vec<String> {
    if problems.len() > PROBLEMS_LISTED_MAX {
        let rest = problems.len() - (PROBLEMS_LISTED_MAX - 1);
        problems.truncate(PROBLEMS_LISTED_MAX - 1);
        problems.push(format!("... and {rest} more problems"));
    }
    problems
}

/// `1204, "op"` as `1,204 ops`.
fn counted(n: usize, noun: &str) -> String {
    format!("{} {noun}{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// `1204` as `1,204`.
fn thousands(n: usize) -> String {
    if n < 1000 {
        return n.to_string();
    }
    format!("{},{:03}", thousands(n / 1000), n % 1000)
}

/// The deepest point the search reached, kept for the counterexample.
struct Deepest<S> {
    /// Linearized operations (indices) in order, with the state after each.
    prefix: Vec<(usize, S)>,
    /// The operation whose return was reached there.
    stuck: Option<usize>,
}

/// Which calls a scan of the entry list tries. At each configuration the search first tries
/// the definite calls, then the `info` ones: exploring without an `info` op first lets
/// [`Failed`] prune the later configurations that differ only by having linearized it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Definite,
    Info,
}

/// Where the scan of the entry list stands.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    at: Option<usize>,
    pass: Pass,
}

/// A linearized call: its node, the state before it, and the pass that chose it.
struct Frame<S> {
    node: usize,
    before: S,
    pass: Pass,
}

/// Configurations proven to have no successful continuation, keyed by (linearized definite
/// ops, state) with the sets of linearized `info` ops seen failing there. A configuration
/// that linearized a superset of those `info` ops fails too: any continuation from it is a
/// continuation from the smaller one that leaves the extra `info` ops out, which is allowed
/// because an op with no return constrains nothing. With no `info` ops this is Lowe's memo.
type Failed<S> = HashMap<(Bitset, S), Vec<Bitset>, BuildHasherDefault<FxHasher>>;

/// One partition's search state. A configuration is the set of linearized ops and the model
/// state; the entry list holds exactly the entries of the ops not yet linearized.
struct Search<'a, M: Model> {
    model: &'a M,
    ops: &'a [&'a Op],
    deadline: Instant,
    list: EntryList,
    state: M::State,
    /// Each op's bit in `definite` (ops with a return) or `info` (ops without).
    slot: Vec<usize>,
    definite: Bitset,
    info: Bitset,
    failed: Failed<M::State>,
    failed_entries: usize,
    failed_entries_max: usize,
    stack: Vec<Frame<M::State>>,
    /// Definite ops not yet linearized; the search succeeds at zero.
    definite_left: usize,
    steps: u64,
    deepest: Deepest<M::State>,
}

impl<'a, M: Model> Search<'a, M> {
    fn new(model: &'a M, ops: &'a [&'a Op], deadline: Instant) -> Self {
        let (mut definite_count, mut info_count) = (0, 0);
        let slot = ops
            .iter()
            .map(|op| {
                let counter = if op.ret_ns.is_some() {
                    &mut definite_count
                } else {
                    &mut info_count
                };
                *counter += 1;
                *counter - 1
            })
            .collect();
        let (definite, info) = (Bitset::new(definite_count), Bitset::new(info_count));
        let entry_bytes = (definite.0.len() + info.0.len()) * 8
            + std::mem::size_of::<((Bitset, M::State), Vec<Bitset>)>()
            + MEMO_ENTRY_OVERHEAD_BYTES;
        Self {
            model,
            ops,
            deadline,
            list: EntryList::new(ops),
            state: model.init(),
            slot,
            definite,
            info,
            failed: Failed::default(),
            failed_entries: 0,
            failed_entries_max: MEMO_BYTES_MAX / entry_bytes,
            stack: Vec::with_capacity(ops.len()),
            definite_left: definite_count,
            steps: 0,
            deepest: Deepest {
                prefix: Vec::new(),
                stuck: None,
            },
        }
    }

    fn run(mut self) -> Verdict {
        let mut cursor = Cursor {
            at: self.list.first(),
            pass: Pass::Definite,
        };
        while self.definite_left > 0 {
            if let Some(why) = self.out_of_budget() {
                return Verdict::Unknown(why);
            }
            let node = cursor.at.map(|n| (n, self.list.nodes[n].kind));
            cursor = match (node, cursor.pass) {
                (Some((n, Kind::Call { ret })), pass) => {
                    if ret.is_some() == (pass == Pass::Definite) {
                        self.try_linearize(n, pass)
                    } else {
                        self.skip(n, pass)
                    }
                }
                // Calls past the first return cannot go next: that return's op would have
                // to precede them. Definite calls are done; try the `info` ones.
                (_, Pass::Definite) => Cursor {
                    at: self.list.first(),
                    pass: Pass::Info,
                },
                // Every call that could go next failed: undo the latest choice. (A scan never
                // passes a return, so `None` cannot occur while definite ops remain; it is
                // handled like a return rather than trusted.)
                (other, Pass::Info) => {
                    self.note_depth(other.map(|(n, _)| self.list.nodes[n].op));
                    match self.backtrack() {
                        Some(next) => next,
                        None => return self.counterexample(),
                    }
                }
            };
        }
        Verdict::Linearizable
    }

    fn skip(&self, node: usize, pass: Pass) -> Cursor {
        Cursor {
            at: self.list.nodes[node].next,
            pass,
        }
    }

    /// Linearizes the call at `node` if the model allows it from the current state and the
    /// resulting configuration is not known to fail; returns where the scan continues.
    fn try_linearize(&mut self, node: usize, pass: Pass) -> Cursor {
        let op = self.list.nodes[node].op;
        let Some(next_state) = self.model.step(&self.state, self.ops[op]) else {
            return self.skip(node, pass);
        };
        self.set_bit(op, true);
        let (doomed, next_state) = self.known_to_fail(next_state);
        if doomed {
            self.set_bit(op, false);
            return self.skip(node, pass);
        }
        let before = std::mem::replace(&mut self.state, next_state);
        self.stack.push(Frame { node, before, pass });
        self.list.lift(node);
        if pass == Pass::Definite {
            self.definite_left -= 1;
        }
        Cursor {
            at: self.list.first(),
            pass: Pass::Definite,
        }
    }

    /// Undoes the latest linearization, recording the configuration it led to as failed;
    /// returns where the scan continues, or `None` when nothing is left to undo.
    fn backtrack(&mut self) -> Option<Cursor> {
        let frame = self.stack.pop()?;
        self.record_failed();
        let op = self.list.nodes[frame.node].op;
        self.state = frame.before;
        self.set_bit(op, false);
        self.list.unlift(frame.node);
        if frame.pass == Pass::Definite {
            self.definite_left += 1;
        }
        Some(self.skip(frame.node, frame.pass))
    }

    fn set_bit(&mut self, op: usize, on: bool) {
        let bits = if self.ops[op].ret_ns.is_some() {
            &mut self.definite
        } else {
            &mut self.info
        };
        bits.assign(self.slot[op], on);
    }

    /// Whether the current linearized sets with `state` are covered by a failed
    /// configuration. Takes and gives back `state` so a probe costs no clone.
    fn known_to_fail(&mut self, state: M::State) -> (bool, M::State) {
        let probe = (std::mem::take(&mut self.definite), state);
        let doomed = self
            .failed
            .get(&probe)
            .is_some_and(|infos| infos.iter().any(|f| f.is_subset_of(&self.info)));
        self.definite = probe.0;
        (doomed, probe.1)
    }

    fn record_failed(&mut self) {
        let key = (self.definite.clone(), self.state.clone());
        self.failed.entry(key).or_default().push(self.info.clone());
        self.failed_entries += 1;
    }

    /// Remembers the current prefix if it is the deepest so far.
    fn note_depth(&mut self, stuck: Option<usize>) {
        if self.deepest.stuck.is_some() && self.stack.len() <= self.deepest.prefix.len() {
            return;
        }
        let states_after = self
            .stack
            .iter()
            .skip(1)
            .map(|frame| &frame.before)
            .chain(std::iter::once(&self.state));
        self.deepest.prefix = self
            .stack
            .iter()
            .zip(states_after)
            .map(|(frame, after)| (self.list.nodes[frame.node].op, after.clone()))
            .collect();
        self.deepest.stuck = stuck.or(self.deepest.stuck);
    }

    fn out_of_budget(&mut self) -> Option<String> {
        self.steps += 1;
        if self.failed_entries > self.failed_entries_max {
            return Some(format!(
                "memo cache passed {} entries (about {} MiB) after {} steps; {}",
                self.failed_entries_max,
                MEMO_BYTES_MAX >> 20,
                self.steps,
                self.progress()
            ));
        }
        if self.steps & (DEADLINE_CHECK_STEPS - 1) == 0 && Instant::now() >= self.deadline {
            return Some(format!(
                "search deadline passed after {} steps; {}",
                self.steps,
                self.progress()
            ));
        }
        None
    }

    fn progress(&self) -> String {
        format!(
            "deepest linearizable prefix {} of {} ops",
            self.deepest.prefix.len().max(self.stack.len()),
            self.ops.len()
        )
    }

    fn counterexample(self) -> Verdict {
        let Some(stuck) = self.deepest.stuck else {
            return Verdict::Unknown("the search failed without reaching a return".into());
        };
        let stuck_op = self.ops[stuck];
        let prefix: Vec<LinearizedStep> = self
            .deepest
            .prefix
            .iter()
            .map(|(op, after)| LinearizedStep {
                op: self.ops[*op].clone(),
                state_after: self.model.describe_state(after),
            })
            .collect();
        let state = match self.deepest.prefix.last() {
            Some((_, after)) => self.model.describe_state(after),
            None => self.model.describe_state(&self.model.init()),
        };
        let concurrent = self
            .ops
            .iter()
            .filter(|o| o.id != stuck_op.id && overlaps(o, stuck_op))
            .map(|o| (*o).clone())
            .collect();
        Verdict::NotLinearizable(Box::new(Counterexample {
            stuck: stuck_op.clone(),
            prefix,
            state,
            concurrent,
        }))
    }
}

/// Whether two closed intervals overlap; a missing return is infinitely late.
fn overlaps(a: &Op, b: &Op) -> bool {
    let before = |x: &Op, y: &Op| x.ret_ns.is_some_and(|r| r < y.call_ns);
    !before(a, b) && !before(b, a)
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "not linearizable: {} could not be linearized after the longest linearizable \
             prefix found ({} ops, ending in state {})",
            op_line(&self.stuck),
            self.prefix.len(),
            self.state
        )?;
        let shown = self.prefix.len().min(PREFIX_SHOWN_MAX);
        let hidden = self.prefix.len() - shown;
        writeln!(f, "  prefix, with the state after each op:")?;
        if hidden > 0 {
            writeln!(f, "    ... {hidden} earlier ops")?;
        }
        for step in &self.prefix[hidden..] {
            writeln!(f, "    {} => {}", op_line(&step.op), step.state_after)?;
        }
        writeln!(
            f,
            "  ops concurrent with op {} ({}):",
            self.stuck.id,
            self.concurrent.len()
        )?;
        for op in self.concurrent.iter().take(CONCURRENT_SHOWN_MAX) {
            let placed = self.prefix.iter().any(|s| s.op.id == op.id);
            let mark = if placed { "in prefix" } else { "not in prefix" };
            writeln!(f, "    {} [{mark}]", op_line(op))?;
        }
        if self.concurrent.len() > CONCURRENT_SHOWN_MAX {
            writeln!(
                f,
                "    ... {} more",
                self.concurrent.len() - CONCURRENT_SHOWN_MAX
            )?;
        }
        Ok(())
    }
}

/// `op 17 (process 3) ok read "x" -> 3 [1.000200s, 1.000950s]`.
fn op_line(op: &Op) -> String {
    let status = match (op.status, &op.error) {
        (EventType::Ok, _) => "ok".to_owned(),
        (EventType::Fail, Some(e)) => format!("fail({e})"),
        (EventType::Fail, None) => "fail".to_owned(),
        (EventType::Info, _) | (EventType::Invoke, _) => "info".to_owned(),
    };
    let ret = op
        .ret_ns
        .map_or_else(|| "never returned".to_owned(), seconds);
    format!(
        "op {} (process {}) {status} {} [{}, {ret}]",
        op.id,
        op.process,
        value_text(&op.value),
        seconds(op.call_ns)
    )
}

fn value_text(value: &OpValue) -> String {
    let opt = |v: &Option<i64>| v.map_or_else(|| "nil".to_owned(), |v| v.to_string());
    match value {
        OpValue::Read { key, value } => format!("read {key:?} -> {}", opt(value)),
        OpValue::Write { key, value } => format!("write {key:?} {value}"),
        OpValue::Cas { key, from, to } => format!("cas {key:?} {from} -> {to}"),
        OpValue::Incr { counter, by, value } => {
            format!("incr {counter:?} by {by} -> {}", opt(value))
        }
        OpValue::CounterRead { counter, value } => format!("read {counter:?} -> {}", opt(value)),
        other => format!("{other:?}"),
    }
}

/// Nanoseconds as seconds with microsecond precision.
fn seconds(ns: TimeNs) -> String {
    format!("{}.{:06}s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        let cases = [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1_204, "1,204"),
            (1_234_567, "1,234,567"),
        ];
        for (n, want) in cases {
            assert_eq!(thousands(n), want);
        }
    }

    #[test]
    fn problems_are_capped_with_a_count() {
        let many: Vec<String> = (0..25).map(|i| i.to_string()).collect();
        let capped = cap_problems(many);
        assert_eq!(capped.len(), PROBLEMS_LISTED_MAX);
        assert_eq!(
            capped.last().map(String::as_str),
            Some("... and 6 more problems")
        );
        assert_eq!(cap_problems(vec!["a".into()]), vec!["a".to_owned()]);
    }

    #[test]
    fn lift_and_unlift_restore_the_list() {
        let op = |id, call, ret| Op {
            id,
            process: id,
            node: 0,
            call_ns: call,
            ret_ns: ret,
            status: EventType::Ok,
            value: OpValue::Write {
                key: "k".into(),
                value: 0,
            },
            error: None,
        };
        let ops = [op(0, 0, Some(5)), op(1, 1, Some(3)), op(2, 2, None)];
        let refs: Vec<&Op> = ops.iter().collect();
        let mut list = EntryList::new(&refs);
        let walk = |list: &EntryList| {
            let mut out = Vec::new();
            let mut at = list.first();
            while let Some(n) = at {
                out.push(list.nodes[n].op);
                at = list.nodes[n].next;
            }
            out
        };
        // Nodes 1..=5: call 0 @0, call 1 @1, call 2 @2, return 1 @3, return 0 @5.
        assert_eq!(walk(&list), vec![0, 1, 2, 1, 0]);
        list.lift(3);
        list.lift(2);
        assert_eq!(walk(&list), vec![0, 0]);
        list.lift(1);
        assert_eq!(walk(&list), Vec::<usize>::new());
        list.unlift(1);
        list.unlift(2);
        list.unlift(3);
        assert_eq!(walk(&list), vec![0, 1, 2, 1, 0]);
    }
}
