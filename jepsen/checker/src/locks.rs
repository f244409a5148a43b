//! Lock and fencing checks over a paired history ([`pair`]'s `Op`s) and the side records of a
//! run (watch deliveries, nemesis windows, leaders): token uniqueness and order, provenance,
//! grants to expired leases, superseded fenced writes, minority grants. The set, counter and
//! convergence checks are in [`crate::outcomes`] (re-exported here).
//!
//! A fencing token is the Raft log index of the entry that granted the lock, so these checks
//! compare tokens with watch revisions and with each other. Each check returns one
//! [`CheckResult`]; a check that lacks the evidence it needs answers `Unknown`, never `Valid`.
//!
//! [`pair`]: crate::history::pair

use std::collections::{BTreeMap, BTreeSet};

use crate::findings::{describe, list_ops, ms, Findings};
use crate::history::{
    EventType, LeaderObservation, NemesisWindow, Op, OpValue, TimeNs, WatchDelivery, WatchEnd,
};
use crate::CheckResult;

pub use crate::outcomes::{counter_bounds, digests_converged, set_no_lost_adds};

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
