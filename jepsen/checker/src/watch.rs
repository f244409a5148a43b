//! The watch check: every watcher receives one shared event log, in order, without gaps or
//! duplicates, from wherever it started to wherever it stopped.
//!
//! Every node emits the same events under the same `revision.seq` ids, so the union of all
//! watchers' logs is the canonical log (the longest log is read first, so it supplies each
//! event's content). Logs must agree event by event where they overlap, and each watcher's log
//! must be exactly the canonical log between its first and its last delivery. A watcher that
//! started later starts at a later id; a compacted watcher stopped early and is checked up to
//! its last delivery, which the same rule covers.

use std::collections::{BTreeMap, BTreeSet};

use crate::findings::{ms, Findings};
use crate::history::{WatchDelivery, WatchEnd};
use crate::CheckResult;

/// `revision.seq`: the entry's log index and the event's place within the entry.
type EventId = (u64, u32);

/// The parts of an event every watcher must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Content<'a> {
    kind: &'a str,
    name: &'a str,
    lease_id: Option<u64>,
    token: Option<u64>,
}

impl<'a> Content<'a> {
    fn of(d: &'a WatchDelivery) -> Self {
        Content {
            kind: &d.kind,
            name: &d.name,
            lease_id: d.lease_id,
            token: d.token,
        }
    }
}

fn id(d: &WatchDelivery) -> EventId {
    (d.revision, d.seq)
}

fn show(id: EventId) -> String {
    format!("{}.{}", id.0, id.1)
}

/// Checks the deliveries of all watchers (see the module docs). `ends` tells which watchers
/// stopped because their history was compacted; it only changes what `checked` reports.
pub fn watch_check(watch: &[WatchDelivery], ends: &[WatchEnd]) -> CheckResult {
    let mut logs: BTreeMap<u64, Vec<&WatchDelivery>> = BTreeMap::new();
    for d in watch {
        logs.entry(d.watcher).or_default().push(d);
    }
    let mut found = Findings::default();
    for (watcher, log) in &logs {
        check_order(*watcher, log, &mut found);
    }
    let canonical = canonical_log(&logs, &mut found);
    let spans: Vec<(EventId, EventId)> = logs
        .values()
        .filter_map(|log| {
            let ids = log.iter().map(|d| id(d));
            Some((ids.clone().min()?, ids.max()?))
        })
        .collect();
    check_dense_revisions(&canonical, &spans, &mut found);
    for (watcher, log) in &logs {
        check_complete(*watcher, log, &canonical, &mut found);
    }
    let compacted: BTreeSet<u64> = ends
        .iter()
        .filter(|e| e.compacted)
        .map(|e| e.watcher)
        .collect();
    let range = match (canonical.keys().next(), canonical.keys().next_back()) {
        (Some(first), Some(last)) => format!(" ({}..{})", show(*first), show(*last)),
        _ => String::new(),
    };
    let checked = format!(
        "{} watchers, {} deliveries, canonical log of {} events{range}; {} compacted watchers \
         checked up to their last delivery",
        logs.len(),
        watch.len(),
        canonical.len(),
        compacted.len()
    );
    found.finish("watch", checked)
}

/// Ids strictly increase along one watcher's deliveries.
fn check_order(watcher: u64, log: &[&WatchDelivery], found: &mut Findings) {
    for pair in log.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if id(b) == id(a) {
            found.violation(format!(
                "watcher {watcher} received event {} twice (at {} and {})",
                show(id(a)),
                ms(a.time_ns),
                ms(b.time_ns)
            ));
        } else if id(b) < id(a) {
            found.violation(format!(
                "watcher {watcher} received event {} at {} after event {} at {}: out of order",
                show(id(b)),
                ms(b.time_ns),
                show(id(a)),
                ms(a.time_ns)
            ));
        }
    }
}

/// The union of all logs, longest log first; reports events two watchers saw differently.
fn canonical_log<'a>(
    logs: &'a BTreeMap<u64, Vec<&'a WatchDelivery>>,
    found: &mut Findings,
) -> BTreeMap<EventId, (Content<'a>, u64)> {
    let mut order: Vec<(&u64, &Vec<&WatchDelivery>)> = logs.iter().collect();
    order.sort_by_key(|(watcher, log)| (std::cmp::Reverse(log.len()), **watcher));
    let mut canonical: BTreeMap<EventId, (Content<'a>, u64)> = BTreeMap::new();
    for (watcher, log) in order {
        for d in log {
            let content = Content::of(d);
            let (seen, by) = *canonical.entry(id(d)).or_insert((content, *watcher));
            if seen != content {
                found.violation(format!(
                    "watchers {by} and {watcher} disagree on event {}: {seen:?} vs {content:?}",
                    show(id(d))
                ));
            }
        }
    }
    canonical
}

/// Within one revision the events are numbered 0, 1, 2...: a seq missing between two that were
/// delivered, or before the first one delivered while some watcher's log spans the revision's
/// start up to it, was received by no watcher at all.
fn check_dense_revisions(
    canonical: &BTreeMap<EventId, (Content<'_>, u64)>,
    spans: &[(EventId, EventId)],
    found: &mut Findings,
) {
    let mut seqs: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (revision, seq) in canonical.keys() {
        seqs.entry(*revision).or_default().push(*seq);
    }
    for (revision, seqs) in &seqs {
        let first_seen = (*revision, seqs.first().copied().unwrap_or(0));
        let whole = spans
            .iter()
            .any(|(first, last)| *first <= (*revision, 0) && *last >= first_seen);
        let mut expected = if whole {
            0
        } else {
            seqs.first().copied().unwrap_or(0)
        };
        for seq in seqs {
            if *seq > expected {
                let missing = if *seq - 1 == expected {
                    format!("event {}", show((*revision, expected)))
                } else {
                    format!(
                        "events {}..{}",
                        show((*revision, expected)),
                        show((*revision, seq - 1))
                    )
                };
                found.violation(format!(
                    "no watcher received {missing} (before {})",
                    show((*revision, *seq))
                ));
            }
            expected = seq.saturating_add(1);
        }
    }
}

/// The watcher's log holds every canonical event between its first and its last delivery.
/// Consecutive missed events are reported as one range.
fn check_complete(
    watcher: u64,
    log: &[&WatchDelivery],
    canonical: &BTreeMap<EventId, (Content<'_>, u64)>,
    found: &mut Findings,
) {
    let ids: BTreeSet<EventId> = log.iter().map(|d| id(d)).collect();
    let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
        return;
    };
    // A run of consecutive missed events: first, last, count, and who saw the first.
    let mut missed: Option<Missed> = None;
    for (event, (_, by)) in canonical.range(*first..=*last) {
        if !ids.contains(event) {
            missed = Some(match missed {
                Some(run) => Missed {
                    to: *event,
                    count: run.count + 1,
                    ..run
                },
                None => Missed {
                    from: *event,
                    to: *event,
                    count: 1,
                    seen_by: *by,
                },
            });
        } else if let Some(run) = missed.take() {
            report_missed(watcher, &run, found);
        }
    }
    if let Some(run) = missed {
        report_missed(watcher, &run, found);
    }
}

/// Consecutive canonical events one watcher did not receive.
struct Missed {
    from: EventId,
    to: EventId,
    count: usize,
    /// A watcher that did receive `from`.
    seen_by: u64,
}

fn report_missed(watcher: u64, run: &Missed, found: &mut Findings) {
    if run.count == 1 {
        found.violation(format!(
            "watcher {watcher} missed event {} (received by watcher {})",
            show(run.from),
            run.seen_by
        ));
    } else {
        found.violation(format!(
            "watcher {watcher} missed {} events {}..{} (the first received by watcher {})",
            run.count,
            show(run.from),
            show(run.to),
            run.seen_by
        ));
    }
}
