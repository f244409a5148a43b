//! Transactions (`Command::Txn`): compares judged together against the state at apply, then
//! one branch applied whole, in one entry.
//!
//! Order of work: the shape of the whole transaction is checked first ([`check_shape`]:
//! counts, lengths, payload bytes, no key or counter written twice in a branch, no key
//! written inside a range the branch deletes), for both
//! branches, so a malformed transaction fails whichever branch would run. Then the compares
//! pick the branch, and that branch is checked against the state (live leases, `KEYS_MAX`,
//! `COUNTERS_MAX`, overflow) before its first op runs. Every op that follows cannot fail, so a
//! branch applies all of its ops or none, with no undo. Ops run in order: a `get` after a `put`
//! of the same key sees the new value. Puts and deletes emit the same watch events as plain
//! `KvPut` and `KvDelete`; a range delete emits one delete event per key, all at the entry's
//! index, as etcd's do.
//!
//! The types here travel in log entries and request records: append-only, like `Command`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::apply::check_len;
use crate::auth::{self, Access, Kind};
use crate::command::{Command, Fence};
use crate::key_span::{self, KeySpan, SpanBounds, SpanEnd, SpanKey};
use crate::limits;
use crate::response::{ApplyError, Outcome};
use crate::state::{KeyRecord, State};

/// One compare; the transaction's `success` branch runs when all of them hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compare {
    /// The key does not exist.
    Absent { key: String },
    /// The key exists with this `mod_revision`.
    ModRevision { key: String, mod_revision: u64 },
    /// The key exists with this `version`.
    Version { key: String, version: u64 },
    /// The key exists with this value.
    Value { key: String, value: String },
    /// `token` is the lock's current exclusive grant (as a `fence` guard judges it).
    Fence(Fence),
    /// The key exists with this `create_revision` (etcd's election recipe proclaims and
    /// resigns with it).
    CreateRevision { key: String, create_revision: u64 },
    /// etcd's general compare: the key's field `of` against its operand by `order`. A key
    /// that does not exist compares as etcd's empty key does: version and revisions 0, and
    /// a value compare on it never holds.
    Ordered {
        key: String,
        order: Order,
        of: Operand,
    },
}

/// How a [`Compare::Ordered`] judges the key's field against its operand (etcd's
/// `CompareResult`): `Greater` holds when the field is greater than the operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    Equal,
    NotEqual,
    Greater,
    Less,
}

/// The field a [`Compare::Ordered`] reads, with the operand it is judged against. Values
/// compare byte by byte, as etcd's do. A key's lease is 0 when it has none, and also when
/// the principal judging it does not own it: a compare sees what the principal's reads see
/// (`txn_as` hides other principals' lease ids), so it cannot probe for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operand {
    Version(u64),
    CreateRevision(u64),
    ModRevision(u64),
    Value(String),
    Lease(u64),
}

impl Order {
    fn holds(self, field: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            Order::Equal => field == Equal,
            Order::NotEqual => field != Equal,
            Order::Greater => field == Greater,
            Order::Less => field == Less,
        }
    }
}

impl Operand {
    /// How the field of `record` (`None`: no such key), whose lease as the judging principal
    /// sees it is `lease` (0: none), compares with the operand; `None` when it cannot be
    /// compared (a value of a key that does not exist).
    fn judge(&self, record: Option<&KeyRecord>, lease: u64) -> Option<std::cmp::Ordering> {
        let number = |field: fn(&KeyRecord) -> u64| record.map_or(0, field);
        match self {
            Operand::Version(v) => Some(number(|r| r.version).cmp(v)),
            Operand::CreateRevision(c) => Some(number(|r| r.create_revision).cmp(c)),
            Operand::ModRevision(m) => Some(number(|r| r.mod_revision).cmp(m)),
            Operand::Value(v) => record.map(|r| r.value.as_str().cmp(v.as_str())),
            Operand::Lease(l) => Some(lease.cmp(l)),
        }
    }
}

/// One operation of a branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    Put {
        key: String,
        value: String,
        lease_id: Option<u64>,
    },
    Delete {
        key: String,
    },
    Get {
        key: String,
    },
    Incr {
        counter: String,
        by: i64,
    },
    /// The keys of a span (etcd's `Range` inside a `Txn`), as the branch's earlier ops left
    /// them: bounded by `TXN_RANGE_*` (`check_branch` refuses a branch whose ranges would look
    /// at too many keys). Only the etcd port makes it, without a request id, so its answer is
    /// never kept in a request record.
    Range(KeySpan),
    /// Deletes every key from `start` to `end` (etcd's `DeleteRange` with a `range_end`),
    /// answering the deleted keys when `prev`. Bounded with the ranges: its keys count toward
    /// `TXN_RANGE_SCAN_MAX`, and with `prev` they must fit `TXN_RANGE_ITEMS_MAX` and
    /// `TXN_RANGE_BYTES_MAX` (refused whole otherwise: a deletion's previous keys are never
    /// cut). No other op of its branch may write a key inside it. Only the etcd port makes it.
    DeleteRange {
        start: String,
        end: SpanEnd,
        prev: bool,
    },
    /// etcd's `Put` with `ignore_value` or `ignore_lease`: writes an existing key keeping its
    /// current value (`value: None`) and, with `keep_lease`, its current lease (`lease_id`
    /// is then unused). A key that does not exist is refused (etcd's "key not found"), before
    /// anything is written; its result is a `Put`'s. Only the etcd port makes it.
    PutKeeping {
        key: String,
        value: Option<String>,
        lease_id: Option<u64>,
        keep_lease: bool,
    },
}

/// The result of one op, in the order of the branch's ops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnResult {
    /// `existed`: the key existed before this put (false: the put created it).
    Put {
        revision: u64,
        existed: bool,
    },
    Delete {
        revision: u64,
        existed: bool,
    },
    /// The key as this op saw it (after earlier ops of the branch); `None` if absent.
    Get {
        key: String,
        record: Option<KeyRecord>,
    },
    Incr {
        counter: String,
        value: i64,
    },
    /// A span's keys (after earlier ops of the branch), cut at the bounds with `more`; `count`
    /// is every key in the span.
    Range {
        kvs: Vec<SpanKey>,
        more: bool,
        count: u64,
    },
    /// How many keys a `DeleteRange` deleted and, when it asked for them, the keys as they
    /// were (in key order).
    DeleteRange {
        revision: u64,
        deleted: u64,
        prev: Vec<SpanKey>,
    },
}

type ApplyResult = Result<Outcome, ApplyError>;

fn invalid(reason: String) -> ApplyError {
    ApplyError::Invalid { reason }
}

impl Compare {
    /// The key this compare reads, if it reads one (a fence reads a lock).
    pub fn key(&self) -> Option<&str> {
        match self {
            Compare::Absent { key }
            | Compare::ModRevision { key, .. }
            | Compare::Version { key, .. }
            | Compare::CreateRevision { key, .. }
            | Compare::Value { key, .. }
            | Compare::Ordered { key, .. } => Some(key),
            Compare::Fence(_) => None,
        }
    }

    fn payload_bytes(&self) -> usize {
        match self {
            Compare::Value { key, value }
            | Compare::Ordered {
                key,
                of: Operand::Value(value),
                ..
            } => key.len() + value.len(),
            Compare::Fence(f) => f.lock.len(),
            other => other.key().map_or(0, str::len),
        }
    }
}

impl TxnOp {
    /// The key or counter this op writes, if it writes one, tagged by what it is.
    fn written(&self) -> Option<(Kind, &str)> {
        match self {
            TxnOp::Put { key, .. } | TxnOp::PutKeeping { key, .. } | TxnOp::Delete { key } => {
                Some((Kind::Key, key))
            }
            TxnOp::Incr { counter, .. } => Some((Kind::Counter, counter)),
            TxnOp::Get { .. } | TxnOp::Range(_) | TxnOp::DeleteRange { .. } => None,
        }
    }

    /// The span a `DeleteRange` deletes.
    fn deleted_span(&self) -> Option<KeySpan> {
        match self {
            TxnOp::DeleteRange { start, end, .. } => {
                Some(KeySpan::bounds(start.clone(), end.clone()))
            }
            _ => None,
        }
    }

    fn payload_bytes(&self) -> usize {
        match self {
            TxnOp::Put { key, value, .. } => key.len() + value.len(),
            TxnOp::PutKeeping { key, value, .. } => {
                key.len() + value.as_ref().map_or(0, String::len)
            }
            TxnOp::Delete { key } | TxnOp::Get { key } => key.len(),
            TxnOp::Incr { counter, .. } => counter.len(),
            TxnOp::Range(span) => span.start.len() + span_end_len(&span.end),
            TxnOp::DeleteRange { start, end, .. } => start.len() + span_end_len(end),
        }
    }
}

fn span_end_len(end: &SpanEnd) -> usize {
    match end {
        SpanEnd::Before(end) => end.len(),
        SpanEnd::One | SpanEnd::All => 0,
    }
}

/// True if some key lies in both spans: the greater start lies in both.
fn spans_overlap(a: &KeySpan, b: &KeySpan) -> bool {
    let lo = a.start.as_str().max(b.start.as_str());
    a.holds(lo) && b.holds(lo)
}

/// What one range inside a transaction may answer (its scan is bounded by `check_branch`).
const TXN_RANGE_BOUNDS: SpanBounds = SpanBounds {
    scan_max: usize::MAX,
    items_max: limits::TXN_RANGE_ITEMS_MAX,
    bytes_max: limits::TXN_RANGE_BYTES_MAX,
};

/// What a `DeleteRange` reads of the keys it deletes: all of them (`check_branch` bounded
/// their count, and their bytes when they are answered).
const DELETE_RANGE_BOUNDS: SpanBounds = SpanBounds {
    scan_max: usize::MAX,
    items_max: usize::MAX,
    bytes_max: usize::MAX,
};

fn check_scanned(scanned: usize) -> Result<(), ApplyError> {
    if scanned > limits::TXN_RANGE_SCAN_MAX {
        return Err(invalid(format!(
            "the ranges of a transaction look at most at {} keys together: \
             narrow them (a prefix, a range end)",
            limits::TXN_RANGE_SCAN_MAX
        )));
    }
    Ok(())
}

/// Checks what does not depend on the state: counts, lengths, steps, payload bytes, and that
/// no branch writes one key (or counter) twice. The API runs it before proposing (`400`);
/// `apply` runs it again, so a bad entry changes nothing.
pub fn check_shape(
    compares: &[Compare],
    success: &[TxnOp],
    failure: &[TxnOp],
) -> Result<(), ApplyError> {
    if compares.len() > limits::TXN_COMPARES_MAX {
        return Err(invalid(format!(
            "a transaction has at most {} compares",
            limits::TXN_COMPARES_MAX
        )));
    }
    for c in compares {
        match c {
            Compare::Fence(f) => check_len("lock name", &f.lock, limits::LOCK_NAME_BYTES_MAX)?,
            Compare::Value { key, value }
            | Compare::Ordered {
                key,
                of: Operand::Value(value),
                ..
            } => {
                check_len("key", key, limits::KEY_BYTES_MAX)?;
                check_value(value)?;
            }
            other => check_len(
                "key",
                other.key().unwrap_or_default(),
                limits::KEY_BYTES_MAX,
            )?,
        }
    }
    for (branch, ops) in [("success", success), ("failure", failure)] {
        check_branch_shape(branch, ops)?;
    }
    let payload_bytes: usize = compares.iter().map(Compare::payload_bytes).sum::<usize>()
        + success
            .iter()
            .chain(failure)
            .map(TxnOp::payload_bytes)
            .sum::<usize>();
    if payload_bytes > limits::TXN_PAYLOAD_BYTES_MAX {
        return Err(invalid(format!(
            "a transaction carries at most {} bytes of keys, values and names",
            limits::TXN_PAYLOAD_BYTES_MAX
        )));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), ApplyError> {
    if value.len() > limits::VALUE_BYTES_MAX {
        return Err(invalid(format!(
            "value must be at most {} bytes",
            limits::VALUE_BYTES_MAX
        )));
    }
    Ok(())
}

fn check_branch_shape(branch: &str, ops: &[TxnOp]) -> Result<(), ApplyError> {
    if ops.len() > limits::TXN_OPS_PER_BRANCH_MAX {
        return Err(invalid(format!(
            "{branch} has more than {} ops",
            limits::TXN_OPS_PER_BRANCH_MAX
        )));
    }
    let ranges = ops
        .iter()
        .filter(|op| matches!(op, TxnOp::Range(_) | TxnOp::DeleteRange { .. }))
        .count();
    if ranges > limits::TXN_RANGES_PER_BRANCH_MAX {
        return Err(invalid(format!(
            "{branch} has more than {} ranges",
            limits::TXN_RANGES_PER_BRANCH_MAX
        )));
    }
    let mut written = BTreeSet::new();
    for op in ops {
        match op {
            TxnOp::Range(KeySpan { start, end, .. }) | TxnOp::DeleteRange { start, end, .. } => {
                check_len("range start", start, limits::KEY_BYTES_MAX)?;
                if let SpanEnd::Before(end) = end {
                    check_len("range end", end, limits::KEY_BYTES_MAX)?;
                }
            }
            TxnOp::Put { key, value, .. } => {
                check_len("key", key, limits::KEY_BYTES_MAX)?;
                check_value(value)?;
            }
            TxnOp::PutKeeping { key, value, .. } => {
                check_len("key", key, limits::KEY_BYTES_MAX)?;
                if let Some(value) = value {
                    check_value(value)?;
                }
            }
            TxnOp::Delete { key } | TxnOp::Get { key } => {
                check_len("key", key, limits::KEY_BYTES_MAX)?
            }
            TxnOp::Incr { counter, by } => {
                check_len("counter name", counter, limits::COUNTER_NAME_BYTES_MAX)?;
                if by.unsigned_abs() > limits::COUNTER_STEP_ABS_MAX.unsigned_abs() {
                    return Err(invalid("counter step too large".into()));
                }
            }
        }
        if let Some((kind, name)) = op.written() {
            if !written.insert((kind, name)) {
                return Err(invalid(format!(
                    "{branch} writes {} {name:?} more than once",
                    kind.as_str()
                )));
            }
        }
    }
    // A deleted span may hold no key another op of the branch writes, nor meet another
    // deleted span (etcd refuses a put inside a deleted range too): each key is still written
    // at most once, so the order of the ops cannot change what the branch does to it.
    let deleted: Vec<KeySpan> = ops.iter().filter_map(TxnOp::deleted_span).collect();
    for (i, span) in deleted.iter().enumerate() {
        if let Some((_, key)) = written
            .iter()
            .find(|(kind, key)| *kind == Kind::Key && span.holds(key))
        {
            return Err(invalid(format!(
                "{branch} writes key {key:?} inside a range it deletes"
            )));
        }
        if deleted[i + 1..]
            .iter()
            .any(|other| spans_overlap(span, other))
        {
            return Err(invalid(format!("{branch} deletes overlapping ranges")));
        }
    }
    Ok(())
}

impl State {
    /// Applies `Command::Txn` (see the module docs for the order of work) for `viewer`, the
    /// principal of an authenticated command (`None`: auth is off, every lease is seen).
    pub(crate) fn txn(
        &mut self,
        index: u64,
        viewer: Option<&str>,
        compares: &[Compare],
        success: &[TxnOp],
        failure: &[TxnOp],
    ) -> ApplyResult {
        check_shape(compares, success, failure)?;
        let succeeded = self.compares_hold(compares, viewer);
        let ops = if succeeded { success } else { failure };
        self.check_branch(ops)?;
        let results = ops.iter().map(|op| self.run_op(index, op)).collect();
        Ok(Outcome::Txn { succeeded, results })
    }

    /// True if every compare holds now (all of them: an empty list holds), as `viewer` sees
    /// the keys' leases (`None`: all of them).
    pub fn compares_hold(&self, compares: &[Compare], viewer: Option<&str>) -> bool {
        compares.iter().all(|c| {
            let key = c.key().and_then(|k| self.keys.get(k)).map(|r| &**r);
            let lease = key
                .and_then(|k| k.lease_id)
                .filter(|&id| viewer.is_none_or(|p| self.auth.owns_lease(p, id)))
                .unwrap_or(0);
            match c {
                Compare::Absent { .. } => key.is_none(),
                Compare::ModRevision { mod_revision, .. } => {
                    key.is_some_and(|k| k.mod_revision == *mod_revision)
                }
                Compare::Version { version, .. } => key.is_some_and(|k| k.version == *version),
                Compare::CreateRevision {
                    create_revision, ..
                } => key.is_some_and(|k| k.create_revision == *create_revision),
                Compare::Value { value, .. } => key.is_some_and(|k| &k.value == value),
                Compare::Ordered { order, of, .. } => {
                    of.judge(key, lease).is_some_and(|field| order.holds(field))
                }
                Compare::Fence(f) => self.exclusive_token(&f.lock) == Some(f.token),
            }
        })
    }

    /// Everything that could make an op of `ops` fail, judged before the first one runs.
    /// Caps are counted as if no delete of the branch frees room (a branch near `KEYS_MAX`
    /// may be refused that would just fit), which keeps the check independent of op order.
    fn check_branch(&self, ops: &[TxnOp]) -> Result<(), ApplyError> {
        let (mut new_keys, mut new_counters) = (0usize, 0usize);
        // Keys the branch's ranges look at: each counted on the state before the branch, plus
        // every put before it (each may add a key to its span).
        let (mut puts, mut scanned) = (0usize, 0usize);
        for op in ops {
            match op {
                TxnOp::Range(span) => {
                    let left = limits::TXN_RANGE_SCAN_MAX.saturating_sub(scanned);
                    scanned += key_span::count_at_most(&self.keys, span, left) + puts;
                    check_scanned(scanned)?;
                }
                TxnOp::DeleteRange { start, end, prev } => {
                    // No put of the branch lands inside it (`check_branch_shape`), so the
                    // state before the branch holds exactly the keys it will delete.
                    let span = KeySpan::bounds(start.clone(), end.clone());
                    let left = limits::TXN_RANGE_SCAN_MAX.saturating_sub(scanned);
                    scanned += key_span::count_at_most(&self.keys, &span, left);
                    check_scanned(scanned)?;
                    if *prev {
                        self.check_prev_fits(&span)?;
                    }
                }
                TxnOp::Put { key, lease_id, .. } => {
                    if let Some(lease_id) = lease_id.filter(|&id| !self.lease_is_live(id)) {
                        return Err(ApplyError::LeaseNotFound { lease_id });
                    }
                    new_keys += usize::from(!self.keys.contains_key(key));
                    puts += 1;
                }
                TxnOp::PutKeeping {
                    key,
                    lease_id,
                    keep_lease,
                    ..
                } => {
                    // No other op of the branch writes the key (`check_branch_shape`), so the
                    // state before the branch says whether it exists when this op runs.
                    if !self.keys.contains_key(key) {
                        return Err(invalid(format!(
                            "etcdserver: key not found: {key:?} (ignore_value and \
                             ignore_lease keep what an existing key has)"
                        )));
                    }
                    let lease_id = lease_id.filter(|_| !keep_lease);
                    if let Some(lease_id) = lease_id.filter(|&id| !self.lease_is_live(id)) {
                        return Err(ApplyError::LeaseNotFound { lease_id });
                    }
                }
                TxnOp::Incr { counter, by } => {
                    let current = self.counters.get(counter).copied();
                    new_counters += usize::from(current.is_none());
                    if current.unwrap_or(0).checked_add(*by).is_none() {
                        return Err(ApplyError::CounterOverflow {
                            name: counter.clone(),
                        });
                    }
                }
                TxnOp::Delete { .. } | TxnOp::Get { .. } => {}
            }
        }
        if new_keys > 0 && self.keys.len() + new_keys > limits::KEYS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "keys_max".into(),
            });
        }
        if new_counters > 0 && self.counters.len() + new_counters > limits::COUNTERS_MAX {
            return Err(ApplyError::LimitReached {
                limit: "counters_max".into(),
            });
        }
        Ok(())
    }

    /// Refuses a `DeleteRange` with `prev` whose deleted keys would not fit one answer
    /// (`TXN_RANGE_ITEMS_MAX` keys, `TXN_RANGE_BYTES_MAX` bytes): etcd's client expects every
    /// previous key, so they are refused whole rather than cut.
    fn check_prev_fits(&self, span: &KeySpan) -> Result<(), ApplyError> {
        let fits =
            key_span::read_bounded(&self.keys, span, 0, TXN_RANGE_BOUNDS).is_ok_and(|a| !a.more);
        if !fits {
            return Err(invalid(format!(
                "a range deleted with its previous keys holds at most {} keys and {} bytes: \
                 narrow it, or delete without them",
                limits::TXN_RANGE_ITEMS_MAX,
                limits::TXN_RANGE_BYTES_MAX
            )));
        }
        Ok(())
    }

    /// Runs one op of a checked branch. Cannot fail (`check_branch` ruled out every failure,
    /// and each key and counter is written at most once per branch).
    fn run_op(&mut self, index: u64, op: &TxnOp) -> TxnResult {
        match op {
            TxnOp::Put {
                key,
                value,
                lease_id,
            } => {
                let existed = self.keys.contains_key(key);
                self.write_key(index, key, value, *lease_id);
                TxnResult::Put {
                    revision: index,
                    existed,
                }
            }
            TxnOp::PutKeeping {
                key,
                value,
                lease_id,
                keep_lease,
            } => {
                // `check_branch` made sure the key exists; the fallback only keeps this total.
                let (current_value, current_lease) = self
                    .keys
                    .get(key)
                    .map(|r| (r.value.clone(), r.lease_id))
                    .unwrap_or_default();
                let value = value.clone().unwrap_or(current_value);
                let lease_id = if *keep_lease {
                    current_lease
                } else {
                    *lease_id
                };
                self.write_key(index, key, &value, lease_id);
                TxnResult::Put {
                    revision: index,
                    existed: true,
                }
            }
            TxnOp::Delete { key } => TxnResult::Delete {
                revision: index,
                existed: self.delete_key(index, key),
            },
            TxnOp::Get { key } => TxnResult::Get {
                key: key.clone(),
                record: self.keys.get(key).map(|r| KeyRecord::clone(r)),
            },
            TxnOp::Range(span) => {
                // `check_branch` bounded the scan, so the read cannot refuse; the empty answer
                // only keeps this total.
                let answer = key_span::read_bounded(&self.keys, span, index, TXN_RANGE_BOUNDS);
                match answer {
                    Ok(a) => TxnResult::Range {
                        kvs: a.kvs,
                        more: a.more,
                        count: a.count,
                    },
                    Err(_) => TxnResult::Range {
                        kvs: Vec::new(),
                        more: true,
                        count: 0,
                    },
                }
            }
            TxnOp::DeleteRange { start, end, prev } => {
                let span = KeySpan::bounds(start.clone(), end.clone());
                // Bounded by `check_branch` (at most `TXN_RANGE_SCAN_MAX` keys).
                let doomed = key_span::read_bounded(&self.keys, &span, index, DELETE_RANGE_BOUNDS)
                    .map(|a| a.kvs)
                    .unwrap_or_default();
                let deleted = doomed.len() as u64;
                for kv in &doomed {
                    self.delete_key(index, &kv.key);
                }
                TxnResult::DeleteRange {
                    revision: index,
                    deleted,
                    prev: if *prev { doomed } else { Vec::new() },
                }
            }
            TxnOp::Incr { counter, by } => {
                // Overflow was ruled out by `check_branch`; saturating only keeps this total.
                let value = self
                    .counters
                    .get(counter)
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(*by);
                self.counters.insert(counter.clone(), value);
                TxnResult::Incr {
                    counter: counter.clone(),
                    value,
                }
            }
        }
    }

    /// Judges a transaction for `principal`: read access to every key and lock its compares
    /// and gets name, write access to every key and counter it writes, in both branches (so
    /// which branch would run tells nothing the caller may not see), its own leases only, and
    /// the key quota for the keys the branch that will run creates.
    pub(crate) fn authorize_txn(
        &self,
        principal: &str,
        compares: &[Compare],
        success: &[TxnOp],
        failure: &[TxnOp],
    ) -> Result<(), ApplyError> {
        let auth = &self.auth;
        for c in compares {
            match c {
                Compare::Fence(f) => self.authorize_fence(principal, &f.lock, f.token)?,
                other => {
                    let key = other.key().unwrap_or_default();
                    auth.require(principal, Kind::Key, key, Access::Read)?
                }
            }
        }
        for op in success.iter().chain(failure) {
            match op {
                TxnOp::Put { key, lease_id, .. } => {
                    auth.require(principal, Kind::Key, key, Access::Write)?;
                    if let Some(id) = lease_id.filter(|&id| !auth.owns_lease(principal, id)) {
                        return Err(ApplyError::LeaseNotFound { lease_id: id });
                    }
                }
                TxnOp::PutKeeping {
                    key,
                    lease_id,
                    keep_lease,
                    ..
                } => {
                    // A kept lease stays whoever owns it, as any write of the key may keep it
                    // in place; a new one must be the principal's own.
                    auth.require(principal, Kind::Key, key, Access::Write)?;
                    let new_lease = lease_id.filter(|_| !keep_lease);
                    if let Some(id) = new_lease.filter(|&id| !auth.owns_lease(principal, id)) {
                        return Err(ApplyError::LeaseNotFound { lease_id: id });
                    }
                }
                TxnOp::Delete { key } => auth.require(principal, Kind::Key, key, Access::Write)?,
                TxnOp::Get { key } => auth.require(principal, Kind::Key, key, Access::Read)?,
                TxnOp::Range(span) => {
                    auth.require(principal, Kind::Key, span.guard_prefix(), Access::Read)?
                }
                TxnOp::DeleteRange { start, end, .. } => {
                    let span = KeySpan::bounds(start.clone(), end.clone());
                    auth.require(principal, Kind::Key, span.guard_prefix(), Access::Write)?
                }
                TxnOp::Incr { counter, .. } => {
                    auth.require(principal, Kind::Counter, counter, Access::Write)?
                }
            }
        }
        if principal == auth::ROOT {
            return Ok(());
        }
        // Nothing changes between this check and the run (same entry), so this is the branch
        // that will run.
        let ops = if self.compares_hold(compares, Some(principal)) {
            success
        } else {
            failure
        };
        let created = ops
            .iter()
            .filter(|op| matches!(op, TxnOp::Put { key, .. } if !self.keys.contains_key(key)))
            .count() as u64;
        let limit = auth.quotas(principal).keys();
        if created > 0 && auth.usage_of(principal).keys.saturating_add(created) > limit {
            return Err(auth::over("keys", limit));
        }
        Ok(())
    }

    /// After a transaction ran for `principal`: the keys it created are the principal's, and
    /// what its gets saw is shown as the principal may see it (lease ids of other principals'
    /// leases removed, as `GET /v1/kv/{key}` does).
    pub(crate) fn txn_as(
        &mut self,
        principal: &str,
        cmd: &Command,
        succeeded: bool,
        mut results: Vec<TxnResult>,
    ) -> Outcome {
        if let Command::Txn {
            success, failure, ..
        } = cmd
        {
            let ops = if succeeded { success } else { failure };
            for (op, result) in ops.iter().zip(&results) {
                if let (TxnOp::Put { key, .. }, TxnResult::Put { existed: false, .. }) =
                    (op, result)
                {
                    self.auth.own_key(principal, key);
                }
            }
        }
        let owns = |id: &u64| self.auth.owns_lease(principal, *id);
        for result in &mut results {
            match result {
                TxnResult::Get {
                    record: Some(record),
                    ..
                } => record.lease_id = record.lease_id.filter(owns),
                TxnResult::Range { kvs, .. } | TxnResult::DeleteRange { prev: kvs, .. } => {
                    for kv in kvs {
                        kv.lease_id = kv.lease_id.filter(owns);
                    }
                }
                _ => {}
            }
        }
        Outcome::Txn { succeeded, results }
    }
}

#[cfg(test)]
#[path = "txn_test.rs"]
mod txn_test;

#[cfg(test)]
#[path = "txn_test_support.rs"]
mod txn_test_support;

#[cfg(test)]
#[path = "txn_range_test.rs"]
mod txn_range_test;

#[cfg(test)]
#[path = "txn_etcd_ops_test.rs"]
mod txn_etcd_ops_test;
