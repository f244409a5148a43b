//! Lock, fencing, set, counter and convergence checks over a paired history ([`pair`]'s `Op`s)
//! and the side records of a run (watch deliveries, nemesis windows, leaders, final node states).
//!
//! A fencing token is the Raft log index of the entry that granted the lock, so these checks
//! compare tokens with watch revisions and with each other. Each check returns one
//! [`CheckResult`]; a check that lacks the evidence it needs answers `Unknown`, never `Valid`.
//!
//! [`pair`]: crate::history::pair

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{
    EventType, FinalNodeState, LeaderObservation, NemesisWindow, Op, OpValue, TimeNs,
    WatchDelivery, WatchEnd,
};
use crate::{CheckResult, Validity, PROBLEMS_LISTED_MAX};

/// Operations named in one problem line; the rest are counted.
const OPS_PER_PROBLEM_MAX: usize = 4;
const NS_PER_MS: f64 = 1e6;

/// `ns` as milliseconds since the run started, for problem lines.
pub(crate) fn ms(ns: TimeNs) -> String {
    format!("{:.3}ms", ns as f64 / NS_PER_MS)
}

/// "op 12 (process 3, node 1, 10.000ms..12.500ms)": what a problem line names an op by.
pub(crate) fn describe(op: &Op) -> String {
    match op.ret_ns {
        Some(ret) => format!(
            "op {} (process {}, node {}, {}..{})",
            op.id,
            op.process,
            op.node,
            ms(op.call_ns),
            ms(ret)
        ),
        None => format!(
            "op {} (process {}, node {}, invoked {}, outcome unknown)",
            op.id,
            op.process,
            op.node,
            ms(op.call_ns)
        ),
    }
}

/// Collects a check's violations and reasons for doubt, keeping at most
/// [`PROBLEMS_LISTED_MAX`] of each in memory (a broken run can produce thousands).
#[derive(Default)]
pub(crate) struct Findings {
    violations: Vec<String>,
    violations_total: usize,
    unknowns: Vec<String>,
    unknowns_total: usize,
}

impl Findings {
    pub(crate) fn violation(&mut self, problem: String) {
        self.violations_total += 1;
        if self.violations.len() < PROBLEMS_LISTED_MAX {
            self.violations.push(problem);
        }
    }

    pub(crate) fn unknown(&mut self, reason: String) {
        self.unknowns_total += 1;
        if self.unknowns.len() < PROBLEMS_LISTED_MAX {
            self.unknowns.push(reason);
        }
    }

    /// Invalid if anything was violated, else Unknown if anything was undecided. Violations
    /// are listed first; reasons for doubt follow, marked, only as room allows.
    pub(crate) fn finish(self, name: &str, checked: String) -> CheckResult {
        let validity = if self.violations_total > 0 {
            Validity::Invalid
        } else if self.unknowns_total > 0 {
            Validity::Unknown
        } else {
            Validity::Valid
        };
        let invalid = validity == Validity::Invalid;
        let mut problems = self.violations;
        problems.extend(self.unknowns.into_iter().map(|u| {
            if invalid {
                format!("undecided: {u}")
            } else {
                u
            }
        }));
        let total = self.violations_total + self.unknowns_total;
        problems.truncate(PROBLEMS_LISTED_MAX);
        if total > problems.len() {
            problems.push(format!("... and {} more", total - problems.len()));
        }
        CheckResult {
            name: name.to_string(),
            validity,
            checked,
            problems,
        }
    }
}

/// Names up to [`OPS_PER_PROBLEM_MAX`] ops and counts the rest.
fn list_ops<'a>(ops: impl IntoIterator<Item = &'a Op>) -> String {
    let all: Vec<&Op> = ops.into_iter().collect();
    let mut text: Vec<String> = all
        .iter()
        .take(OPS_PER_PROBLEM_MAX)
        .map(|op| describe(op))
        .collect();
    if all.len() > OPS_PER_PROBLEM_MAX {
        text.push(format!("{} more", all.len() - OPS_PER_PROBLEM_MAX));
    }
    text.join(", ")
}

/// An `ok` acquire with its results unpacked.
struct Grant<'a> {
    op: &'a Op,
    lock: &'a str,
    request_id: &'a str,
    lease_id: Option<u64>,
    token: u64,
    term: Option<u64>,
    ret_ns: TimeNs,
}

fn ok_grants(ops: &[Op]) -> Vec<Grant<'_>> {
    ops.iter()
        .filter_map(|op| match (&op.status, &op.value, op.ret_ns) {
            (
                EventType::Ok,
                OpValue::Acquire {
                    lock,
                    request_id,
                    lease_id,
                    token: Some(token),
                    term,
                },
                Some(ret_ns),
            ) => Some(Grant {
                op,
                lock,
                request_id,
                lease_id: *lease_id,
                token: *token,
                term: *term,
                ret_ns,
            }),
            _ => None,
        })
        .collect()
}

fn lock_count(grants: &[Grant<'_>]) -> usize {
    grants.iter().map(|g| g.lock).collect::<BTreeSet<_>>().len()
}

/// The earliest invocation of each `(lock, request_id)` that may have taken effect (not
/// `fail`). A retry of a request answers the grant its first attempt may have made, so that
/// grant can be as old as the first attempt, not the retry.
fn first_calls(ops: &[Op]) -> BTreeMap<(&str, &str), TimeNs> {
    let mut first: BTreeMap<(&str, &str), TimeNs> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.status != EventType::Fail) {
        if let OpValue::Acquire {
            lock, request_id, ..
        } = &op.value
        {
            let at = first.entry((lock, request_id)).or_insert(op.call_ns);
            *at = (*at).min(op.call_ns);
        }
    }
    first
}

/// When `g`'s grant may have been made at the earliest: its request's first attempt.
fn first_call(first: &BTreeMap<(&str, &str), TimeNs>, g: &Grant<'_>) -> TimeNs {
    first
        .get(&(g.lock, g.request_id))
        .map_or(g.op.call_ns, |&t| t.min(g.op.call_ns))
}

/// Per lock, `ok` acquire tokens are unique, and one request (`request_id`) is granted at most
/// once. Ops that share a request id and a token are one grant answered twice (a retry).
pub fn token_uniqueness(ops: &[Op]) -> CheckResult {
    let mut found = Findings::default();
    for op in ops {
        if let (
            EventType::Ok,
            OpValue::Acquire {
                lock, token: None, ..
            },
        ) = (op.status, &op.value)
        {
            found.violation(format!(
                "lock {lock}: ok acquire {} has no token",
                describe(op)
            ));
        }
    }
    let grants = ok_grants(ops);
    let mut by_token: BTreeMap<(&str, u64), Vec<&Grant<'_>>> = BTreeMap::new();
    let mut by_request: BTreeMap<(&str, &str), Vec<&Grant<'_>>> = BTreeMap::new();
    for g in &grants {
        by_token.entry((g.lock, g.token)).or_default().push(g);
        by_request
            .entry((g.lock, g.request_id))
            .or_default()
            .push(g);
    }
    for ((lock, token), gs) in &by_token {
        let requests: BTreeSet<&str> = gs.iter().map(|g| g.request_id).collect();
        if requests.len() > 1 {
            found.violation(format!(
                "lock {lock}: token {token} granted to {} requests ({}): {}",
                requests.len(),
                requests.into_iter().collect::<Vec<_>>().join(", "),
                list_ops(gs.iter().map(|g| g.op))
            ));
        }
    }
    for ((lock, request), gs) in &by_request {
        let tokens: BTreeSet<u64> = gs.iter().map(|g| g.token).collect();
        if tokens.len() > 1 {
            found.violation(format!(
                "lock {lock}: request {request} granted {} times, tokens {tokens:?}: {}",
                tokens.len(),
                list_ops(gs.iter().map(|g| g.op))
            ));
        }
    }
    let checked = format!(
        "{} ok acquires ({} distinct grants) on {} locks",
        grants.len(),
        by_request.len(),
        lock_count(&grants)
    );
    found.finish("lock-token-unique", checked)
}

/// One grant, with the widest interval it may have been made in: from the first attempt of
/// its request to the first `ok` answer carrying it.
struct Span<'a> {
    grant: &'a Grant<'a>,
    call_ns: TimeNs,
    ret_ns: TimeNs,
}

/// Grants by lock, one [`Span`] per `(request_id, token)`.
fn spans_by_lock<'a>(ops: &[Op], grants: &'a [Grant<'a>]) -> BTreeMap<&'a str, Vec<Span<'a>>> {
    let first = first_calls(ops);
    let mut merged: BTreeMap<(&str, &str, u64), Span<'a>> = BTreeMap::new();
    for g in grants {
        let call_ns = first_call(&first, g);
        let span = merged
            .entry((g.lock, g.request_id, g.token))
            .or_insert(Span {
                grant: g,
                call_ns,
                ret_ns: g.ret_ns,
            });
        if g.ret_ns < span.ret_ns {
            span.grant = g;
            span.ret_ns = g.ret_ns;
        }
    }
    let mut by_lock: BTreeMap<&str, Vec<Span<'a>>> = BTreeMap::new();
    for ((lock, _, _), span) in merged {
        by_lock.entry(lock).or_default().push(span);
    }
    by_lock
}

/// Per lock, for grants A and B: A returned before B was invoked ⇒ token(A) < token(B).
///
/// O(n log n): grants sorted by invocation, and a running maximum over the grants that
/// returned before the current invocation. A retried request counts once, from its first
/// attempt (a retry answers the original grant, with its original, older token).
pub fn token_real_time_order(ops: &[Op]) -> CheckResult {
    let grants = ok_grants(ops);
    let by_lock = spans_by_lock(ops, &grants);
    let mut found = Findings::default();
    let mut pairs = 0usize;
    for (lock, spans) in &by_lock {
        let mut by_call: Vec<&Span<'_>> = spans.iter().collect();
        by_call.sort_by_key(|s| (s.call_ns, s.grant.op.id));
        let mut by_ret: Vec<&Span<'_>> = spans.iter().collect();
        by_ret.sort_by_key(|s| (s.ret_ns, s.grant.op.id));
        let mut returned = 0usize;
        let mut highest: Option<&Span<'_>> = None;
        for b in by_call {
            while let Some(a) = by_ret.get(returned).filter(|a| a.ret_ns < b.call_ns) {
                if highest.is_none_or(|h| a.grant.token > h.grant.token) {
                    highest = Some(a);
                }
                returned += 1;
            }
            pairs += returned;
            if let Some(a) = highest.filter(|a| a.grant.token >= b.grant.token) {
                found.violation(format!(
                    "lock {lock}: token {} of {} (request {}) is not above token {} of {} \
                     (request {}), which returned before it was invoked",
                    b.grant.token,
                    describe(b.grant.op),
                    b.grant.request_id,
                    a.grant.token,
                    describe(a.grant.op),
                    a.grant.request_id,
                ));
            }
        }
    }
    let grants_total: usize = by_lock.values().map(Vec::len).sum();
    let checked = format!(
        "{grants_total} grants on {} locks, {pairs} real-time ordered pairs",
        by_lock.len()
    );
    found.finish("lock-token-order", checked)
}

/// The span of ids one watcher's log covers: its smallest id and its largest revision.
struct WatchSpan {
    first: (u64, u32),
    last_revision: u64,
}

fn watch_spans(watch: &[WatchDelivery]) -> Vec<WatchSpan> {
    let mut spans: BTreeMap<u64, WatchSpan> = BTreeMap::new();
    for d in watch {
        let span = spans.entry(d.watcher).or_insert(WatchSpan {
            first: (d.revision, d.seq),
            last_revision: d.revision,
        });
        span.first = span.first.min((d.revision, d.seq));
        span.last_revision = span.last_revision.max(d.revision);
    }
    spans.into_values().collect()
}

/// Whether some watcher's log holds every event of `revision`: it starts at or before the
/// revision's first event and goes on past the revision (a log ending inside the revision may
/// have stopped before the event sought).
fn covered(spans: &[WatchSpan], revision: u64) -> bool {
    spans
        .iter()
        .any(|s| s.first <= (revision, 0) && s.last_revision > revision)
}

/// Every `ok` acquire's token is a committed grant: some watcher saw a `lock_granted` event at
/// revision == token, for the same lock and lease. Without such an event, the result is
/// Invalid if some watcher's log spans that revision, and Unknown if none does.
pub fn grant_provenance(
    ops: &[Op],
    watch: &[WatchDelivery],
    watch_ends: &[WatchEnd],
) -> CheckResult {
    let grants = ok_grants(ops);
    let spans = watch_spans(watch);
    let mut granted: BTreeMap<(u64, &str), BTreeSet<Option<u64>>> = BTreeMap::new();
    for d in watch.iter().filter(|d| d.kind == "lock_granted") {
        granted
            .entry((d.revision, &d.name))
            .or_default()
            .insert(d.lease_id);
    }
    let mut found = Findings::default();
    let mut matched = 0usize;
    for g in &grants {
        let leases = granted.get(&(g.token, g.lock));
        // An acquire without a lease id in its answer matches a grant to any lease.
        if leases.is_some_and(|l| g.lease_id.is_none() || l.contains(&g.lease_id)) {
            matched += 1;
        } else if let Some(leases) = leases {
            found.violation(format!(
                "lock {}: {} got token {} for lease {:?}, but the grant at revision {} went to \
                 lease(s) {:?}",
                g.lock,
                describe(g.op),
                g.token,
                g.lease_id,
                g.token,
                leases
            ));
        } else if covered(&spans, g.token) {
            found.violation(format!(
                "lock {}: {} got token {} (lease {:?}), but no watcher saw a lock_granted at \
                 revision {} although their logs span it",
                g.lock,
                describe(g.op),
                g.token,
                g.lease_id,
                g.token
            ));
        } else {
            found.unknown(format!(
                "lock {}: no watcher log spans revision {} of {}'s token",
                g.lock,
                g.token,
                describe(g.op)
            ));
        }
    }
    let compacted = watch_ends.iter().filter(|e| e.compacted).count();
    let checked = format!(
        "{} ok acquires, {matched} matched to lock_granted events from {} watchers \
         ({compacted} compacted, their logs used up to their last delivery)",
        grants.len(),
        spans.len()
    );
    found.finish("lock-grant-provenance", checked)
}

/// No `ok` acquire (lock, token T, lease L) where a `lease_expired` for L has revision <= T.
///
/// The correct server fails every due lease's waiters before it frees locks in an entry, so a
/// grant to a lease that expired at or before the granting entry is the etcd#11456 bug. Only
/// expiries some watcher saw can be checked: Unknown if no grant lies inside any watcher's span.
pub fn no_grant_to_expired_lease(ops: &[Op], watch: &[WatchDelivery]) -> CheckResult {
    let grants = ok_grants(ops);
    let mut expired_at: BTreeMap<u64, u64> = BTreeMap::new();
    for d in watch.iter().filter(|d| d.kind == "lease_expired") {
        if let Some(lease) = d.lease_id {
            let at = expired_at.entry(lease).or_insert(d.revision);
            *at = (*at).min(d.revision);
        }
    }
    let spans = watch_spans(watch);
    let mut found = Findings::default();
    let mut inside = 0usize;
    for g in &grants {
        if covered(&spans, g.token) {
            inside += 1;
        }
        let Some(lease) = g.lease_id else { continue };
        if let Some(&revision) = expired_at.get(&lease).filter(|&&r| r <= g.token) {
            found.violation(format!(
                "lock {}: {} was granted token {} for lease {lease}, which expired at revision \
                 {revision}",
                g.lock,
                describe(g.op),
                g.token
            ));
        }
    }
    if !grants.is_empty() && inside == 0 {
        found.unknown(format!(
            "none of the {} grants lies inside a watcher's log: lease expiries unknown",
            grants.len()
        ));
    }
    let checked = format!(
        "{} ok acquires ({inside} inside a watched range) against {} observed lease expiries",
        grants.len(),
        expired_at.len()
    );
    found.finish("lock-no-grant-to-expired-lease", checked)
}

/// Per lock, an `ok` `SetAdd` with token t was not invoked after an `ok` acquire of a larger
/// token had returned: a fenced write applies only while its token is the lock's current grant.
pub fn fence_never_accepts_superseded(ops: &[Op]) -> CheckResult {
    let grants = ok_grants(ops);
    let mut acquires: BTreeMap<&str, Vec<&Grant<'_>>> = BTreeMap::new();
    for g in &grants {
        acquires.entry(g.lock).or_default().push(g);
    }
    let mut adds: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.status == EventType::Ok) {
        if let OpValue::SetAdd { lock, token, .. } = &op.value {
            adds.entry(lock).or_default().push((op, *token));
        }
    }
    let mut found = Findings::default();
    for (lock, adds) in &mut adds {
        adds.sort_by_key(|(op, _)| (op.call_ns, op.id));
        let mut acq = acquires.remove(lock).unwrap_or_default();
        acq.sort_by_key(|g| (g.ret_ns, g.op.id));
        let mut returned = 0usize;
        let mut highest: Option<&Grant<'_>> = None;
        for &(add, token) in adds.iter() {
            while let Some(g) = acq.get(returned).filter(|g| g.ret_ns < add.call_ns) {
                if highest.is_none_or(|h| g.token > h.token) {
                    highest = Some(g);
                }
                returned += 1;
            }
            if let Some(g) = highest.filter(|g| g.token > token) {
                found.violation(format!(
                    "lock {lock}: set_add {} with token {token} was accepted although {} had \
                     already returned token {}",
                    describe(add),
                    describe(g.op),
                    g.token
                ));
            }
        }
    }
    let adds_total: usize = adds.values().map(Vec::len).sum();
    let checked = format!(
        "{adds_total} ok fenced set adds on {} locks against {} ok acquires",
        adds.len(),
        grants.len()
    );
    found.finish("fence-superseded", checked)
}

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

/// `node` was on the minority side of one nemesis window for all of `[call_ns, ret_ns]`.
fn cut_off_window(
    nemesis: &[NemesisWindow],
    node: u64,
    call_ns: TimeNs,
    ret_ns: TimeNs,
) -> Option<&NemesisWindow> {
    nemesis.iter().find(|w| {
        w.minority.contains(&node) && w.start_ns <= call_ns && w.end_ns.is_none_or(|e| e >= ret_ns)
    })
}

/// The one node observed leading each term. Raft elects at most one leader per term, so a
/// term observed with several is a violation, and its grants stay unattributed.
fn term_leaders(leaders: &[LeaderObservation], found: &mut Findings) -> BTreeMap<u64, u64> {
    let mut nodes_of: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for o in leaders {
        nodes_of.entry(o.term).or_default().insert(o.node);
    }
    let mut leader_of = BTreeMap::new();
    for (term, nodes) in nodes_of {
        match (nodes.first(), nodes.len()) {
            (Some(&node), 1) => {
                leader_of.insert(term, node);
            }
            _ => found.violation(format!("term {term} was led by several nodes: {nodes:?}")),
        }
    }
    leader_of
}

/// No grant was committed by a leader cut off from the majority. An `ok` acquire's `term`
/// names the leader that proposed its grant (from the leader observations); the grant entry is
/// created after the request's first attempt and committed before the answer, so if that
/// leader sat in one window's `minority` for the whole interval it could not have committed it.
/// An acquire answered by that same cut-off node is named so. Acquires whose term has no
/// (or an ambiguous) observed leader are skipped and counted as unattributed.
pub fn minority_grants(
    ops: &[Op],
    nemesis: &[NemesisWindow],
    leaders: &[LeaderObservation],
) -> CheckResult {
    let mut found = Findings::default();
    let term_leader = term_leaders(leaders, &mut found);
    let grants = ok_grants(ops);
    let first = first_calls(ops);
    let (mut attributed, mut unattributed) = (0usize, 0usize);
    for g in &grants {
        let call_ns = first_call(&first, g);
        let Some(&leader) = g.term.and_then(|t| term_leader.get(&t)) else {
            unattributed += 1;
            // Undecided only if the grant could have been a violation at all.
            if nemesis.iter().any(|w| {
                !w.minority.is_empty()
                    && w.start_ns <= call_ns
                    && w.end_ns.is_none_or(|e| e >= g.ret_ns)
            }) {
                found.unknown(format!(
                    "lock {}: no single observed leader for term {:?} of {}, inside a \
                     minority window",
                    g.lock,
                    g.term,
                    describe(g.op)
                ));
            }
            continue;
        };
        attributed += 1;
        if let Some(w) = cut_off_window(nemesis, leader, call_ns, g.ret_ns) {
            let answered = if g.op.node == leader {
                ", and answered by that node itself"
            } else {
                ""
            };
            found.violation(format!(
                "lock {}: {} got token {} from term {:?}, led by node {leader}, which was in \
                 the minority of {} (from {}) for the whole request{answered}",
                g.lock,
                describe(g.op),
                g.token,
                g.term,
                w.kind,
                ms(w.start_ns)
            ));
        }
    }
    let windows = nemesis.iter().filter(|w| !w.minority.is_empty()).count();
    let checked = format!(
        "{} ok acquires: {attributed} attributed to a term's leader, {unattributed} \
         unattributed; {windows} nemesis windows with a minority",
        grants.len()
    );
    found.finish("lock-minority-grants", checked)
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
