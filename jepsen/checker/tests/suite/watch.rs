//! The watch check accepts watchers that each saw a contiguous part of one shared log, and
//! rejects gaps, duplicates, reordering and watchers that disagree about an event.
#![allow(clippy::unwrap_used)]

use turnstile_checker::history::{WatchDelivery, WatchEnd};
use turnstile_checker::watch::watch_check;
use turnstile_checker::{CheckResult, Validity};

/// The shared log: `(revision, seq, kind, name, lease)`.
const LOG: [(u64, u32, &str, &str, Option<u64>); 6] = [
    (1, 0, "put", "k", None),
    (2, 0, "lock_granted", "l", Some(5)),
    (3, 0, "lease_expired", "", Some(5)),
    (3, 1, "lock_released", "l", Some(5)),
    (3, 2, "lock_granted", "l", Some(6)),
    (4, 0, "put", "k", None),
];

/// Watcher `watcher` receiving the shared log's events `from..to`, in order.
fn deliveries(watcher: u64, from: usize, to: usize) -> Vec<WatchDelivery> {
    LOG[from..to]
        .iter()
        .map(|&(revision, seq, kind, name, lease_id)| WatchDelivery {
            watcher,
            time_ns: revision * 1_000_000 + u64::from(seq),
            revision,
            seq,
            kind: kind.into(),
            name: name.into(),
            lease_id,
            token: (kind != "put" && kind != "lease_expired").then_some(revision),
        })
        .collect()
}

fn good() -> Vec<WatchDelivery> {
    let mut all = deliveries(1, 0, 6);
    // Started later.
    all.extend(deliveries(2, 2, 6));
    // Compacted after revision 2.
    all.extend(deliveries(3, 0, 2));
    all
}

fn ends() -> Vec<WatchEnd> {
    vec![WatchEnd {
        watcher: 3,
        compacted: true,
    }]
}

fn assert_rejected(r: &CheckResult, text: &str) {
    assert_eq!(r.validity, Validity::Invalid, "{r:#?}");
    assert!(
        r.problems.iter().any(|p| p.contains(text)),
        "{text}: {r:#?}"
    );
}

#[test]
fn accepts_watchers_that_start_late_and_stop_early() {
    let r = watch_check(&good(), &ends());
    assert_eq!(r.validity, Validity::Valid, "{r:#?}");
    assert!(r.checked.contains("3 watchers"), "{}", r.checked);
    assert!(r.checked.contains("6 events (1.0..4.0)"), "{}", r.checked);
    assert!(r.checked.contains("1 compacted watchers"), "{}", r.checked);
}

#[test]
fn accepts_no_deliveries() {
    assert_eq!(watch_check(&[], &[]).validity, Validity::Valid);
}

#[test]
fn rejects_a_gap() {
    let watch: Vec<WatchDelivery> = good()
        .into_iter()
        .filter(|d| !(d.watcher == 2 && d.revision == 3 && d.seq == 1))
        .collect();
    assert_rejected(
        &watch_check(&watch, &ends()),
        "watcher 2 missed event 3.1 (received by watcher 1)",
    );
}

#[test]
fn rejects_a_run_of_missed_events_as_one_problem() {
    let mut watch = deliveries(1, 0, 6);
    watch.extend(deliveries(2, 0, 1));
    watch.extend(deliveries(2, 5, 6));
    let r = watch_check(&watch, &[]);
    assert_rejected(&r, "watcher 2 missed 4 events 2.0..3.2");
    assert_eq!(r.problems.len(), 1, "{r:#?}");
}

#[test]
fn rejects_a_duplicate() {
    let mut watch = deliveries(1, 0, 3);
    watch.extend(deliveries(1, 2, 6));
    assert_rejected(
        &watch_check(&watch, &[]),
        "watcher 1 received event 3.0 twice",
    );
}

#[test]
fn rejects_reordered_events() {
    let mut watch = deliveries(1, 0, 6);
    watch.swap(1, 2);
    assert_rejected(&watch_check(&watch, &[]), "watcher 1 received event 2.0");
}

#[test]
fn rejects_watchers_that_disagree() {
    let mut watch = good();
    let odd = watch
        .iter_mut()
        .find(|d| d.watcher == 2 && d.revision == 3 && d.seq == 2)
        .unwrap();
    odd.lease_id = Some(7);
    assert_rejected(
        &watch_check(&watch, &ends()),
        "watchers 1 and 2 disagree on event 3.2",
    );
}

#[test]
fn rejects_an_event_no_watcher_received() {
    let watch: Vec<WatchDelivery> = good()
        .into_iter()
        .filter(|d| !(d.revision == 3 && d.seq == 1))
        .collect();
    assert_rejected(
        &watch_check(&watch, &ends()),
        "no watcher received event 3.1 (before 3.2)",
    );
}

#[test]
fn rejects_a_revision_whose_first_event_no_watcher_received() {
    let watch: Vec<WatchDelivery> = good()
        .into_iter()
        .filter(|d| !(d.revision == 3 && d.seq == 0))
        .collect();
    // Watcher 2 now starts at 3.1, but watcher 1 spans revision 3 from its start.
    assert_rejected(
        &watch_check(&watch, &ends()),
        "no watcher received event 3.0 (before 3.1)",
    );
}
