//! The lock, fencing, set, counter and digest checks accept known-good histories, reject
//! known-bad ones and answer Unknown when the evidence is missing.
#![allow(clippy::unwrap_used)]

use turnstile_checker::history::{
    EventType, FinalNodeState, LeaderObservation, NemesisWindow, Op, OpValue, WatchDelivery,
    WatchEnd,
};
use turnstile_checker::locks::{
    counter_bounds, digests_converged, fence_never_accepts_superseded, grant_provenance,
    minority_grants, no_grant_to_expired_lease, set_no_lost_adds, token_real_time_order,
    token_uniqueness,
};
use turnstile_checker::{CheckResult, Validity, PROBLEMS_LISTED_MAX};

const MS: u64 = 1_000_000;

fn op(
    id: u64,
    process: u64,
    call_ms: u64,
    ret_ms: Option<u64>,
    status: EventType,
    value: OpValue,
) -> Op {
    Op {
        id,
        process,
        node: 1,
        call_ns: call_ms * MS,
        ret_ns: ret_ms.map(|r| r * MS),
        status,
        value,
        error: None,
    }
}

/// An ok acquire of `lock` by request `req` for lease `lease`, granted `token` in `term`.
fn grant(id: u64, call_ms: u64, ret_ms: u64, req: &str, lease: u64, token: u64, term: u64) -> Op {
    op(
        id,
        id,
        call_ms,
        Some(ret_ms),
        EventType::Ok,
        OpValue::Acquire {
            lock: "l".into(),
            request_id: req.into(),
            lease_id: Some(lease),
            token: Some(token),
            term: Some(term),
        },
    )
}

fn set_add(
    id: u64,
    call_ms: u64,
    ret_ms: Option<u64>,
    status: EventType,
    element: u64,
    token: u64,
) -> Op {
    op(
        id,
        id,
        call_ms,
        ret_ms,
        status,
        OpValue::SetAdd {
            lock: "l".into(),
            element,
            token,
        },
    )
}

fn set_read(id: u64, call_ms: u64, ret_ms: u64, elements: &[u64]) -> Op {
    op(
        id,
        id,
        call_ms,
        Some(ret_ms),
        EventType::Ok,
        OpValue::SetRead {
            lock: "l".into(),
            elements: Some(elements.to_vec()),
        },
    )
}

fn delivery(
    watcher: u64,
    revision: u64,
    seq: u32,
    kind: &str,
    name: &str,
    lease: u64,
) -> WatchDelivery {
    WatchDelivery {
        watcher,
        time_ns: revision * MS,
        revision,
        seq,
        kind: kind.into(),
        name: name.into(),
        lease_id: Some(lease),
        token: (kind == "lock_granted").then_some(revision),
    }
}

fn assert_validity(r: &CheckResult, v: Validity) {
    assert_eq!(r.validity, v, "{r:#?}");
}

fn mentions(r: &CheckResult, text: &str) -> bool {
    r.problems.iter().any(|p| p.contains(text))
}

#[test]
fn token_uniqueness_accepts_distinct_tokens_and_a_retried_grant() {
    let ops = [
        grant(1, 0, 10, "a", 1, 5, 1),
        grant(2, 20, 30, "b", 2, 9, 1),
        // A retry of request "a" answers its original grant.
        grant(3, 40, 50, "a", 1, 5, 1),
    ];
    let r = token_uniqueness(&ops);
    assert_validity(&r, Validity::Valid);
    assert!(r.checked.contains("2 distinct grants"), "{}", r.checked);
}

#[test]
fn token_uniqueness_rejects_a_token_granted_to_two_requests() {
    let ops = [grant(1, 0, 10, "a", 1, 5, 1), grant(2, 0, 10, "b", 2, 5, 1)];
    let r = token_uniqueness(&ops);
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "token 5 granted to 2 requests"), "{r:#?}");
    assert!(mentions(&r, "op 1 (process 1"), "{r:#?}");
}

#[test]
fn token_uniqueness_rejects_a_request_granted_twice() {
    let ops = [
        grant(1, 0, 10, "a", 1, 5, 1),
        grant(2, 20, 30, "a", 1, 8, 1),
    ];
    let r = token_uniqueness(&ops);
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "request a granted 2 times"), "{r:#?}");
}

#[test]
fn problems_are_capped_with_a_count_of_the_rest() {
    let ops: Vec<Op> = (0..60)
        .map(|i| grant(i, 0, 10, &format!("r{i}"), i, 100 + i / 2, 1))
        .collect();
    let r = token_uniqueness(&ops);
    assert_validity(&r, Validity::Invalid);
    assert_eq!(r.problems.len(), PROBLEMS_LISTED_MAX + 1);
    assert_eq!(r.problems.last().unwrap(), "... and 10 more");
}

#[test]
fn token_order_accepts_increasing_and_concurrent_grants() {
    let ops = [
        grant(1, 0, 10, "a", 1, 5, 1),
        grant(2, 20, 30, "b", 2, 9, 1),
        // Concurrent with both: any token order is fine.
        grant(3, 5, 25, "c", 3, 7, 1),
    ];
    assert_validity(&token_real_time_order(&ops), Validity::Valid);
}

#[test]
fn token_order_rejects_an_inversion() {
    let ops = [
        grant(1, 0, 10, "a", 1, 9, 1),
        grant(2, 20, 30, "b", 2, 5, 1),
    ];
    let r = token_real_time_order(&ops);
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "token 5 of op 2"), "{r:#?}");
    assert!(mentions(&r, "token 9 of op 1"), "{r:#?}");
}

#[test]
fn token_order_dates_a_retried_grant_from_its_first_attempt() {
    let first = op(
        1,
        1,
        0,
        None,
        EventType::Info,
        OpValue::Acquire {
            lock: "l".into(),
            request_id: "a".into(),
            lease_id: Some(1),
            token: None,
            term: None,
        },
    );
    // "b" returned before the retry of "a" was invoked, but "a" was granted during its first
    // attempt, so its smaller token is fine.
    let ops = [
        first,
        grant(2, 5, 30, "b", 2, 9, 1),
        grant(3, 50, 60, "a", 1, 5, 1),
    ];
    assert_validity(&token_real_time_order(&ops), Validity::Valid);
}

#[test]
fn token_order_handles_many_grants() {
    let ops: Vec<Op> = (0..50_000)
        .map(|i| grant(i, 2 * i, 2 * i + 1, &format!("r{i}"), i, i + 1, 1))
        .collect();
    let r = token_real_time_order(&ops);
    assert_validity(&r, Validity::Valid);
    assert!(r.checked.starts_with("50000 grants"), "{}", r.checked);
}

#[test]
fn provenance_accepts_grants_seen_by_a_watcher() {
    let ops = [grant(1, 0, 10, "a", 7, 5, 1)];
    let watch = [
        delivery(1, 3, 0, "put", "k", 0),
        delivery(1, 5, 0, "lock_granted", "l", 7),
        delivery(1, 6, 0, "put", "k", 0),
    ];
    let r = grant_provenance(&ops, &watch, &[]);
    assert_validity(&r, Validity::Valid);
}

#[test]
fn provenance_rejects_a_token_without_a_grant_event() {
    let ops = [grant(1, 0, 10, "a", 7, 5, 1)];
    let watch = [
        delivery(1, 3, 0, "put", "k", 0),
        delivery(1, 9, 0, "put", "k", 0),
    ];
    let r = grant_provenance(&ops, &watch, &[]);
    assert_validity(&r, Validity::Invalid);
    assert!(
        mentions(&r, "no watcher saw a lock_granted at revision 5"),
        "{r:#?}"
    );
}

#[test]
fn provenance_rejects_a_grant_to_another_lease() {
    let ops = [grant(1, 0, 10, "a", 7, 5, 1)];
    let watch = [delivery(1, 5, 0, "lock_granted", "l", 8)];
    assert_validity(&grant_provenance(&ops, &watch, &[]), Validity::Invalid);
}

#[test]
fn provenance_is_unknown_when_no_log_spans_the_token() {
    let ops = [grant(1, 0, 10, "a", 7, 5, 1)];
    // The only watcher was compacted at revision 3.
    let watch = [
        delivery(1, 2, 0, "put", "k", 0),
        delivery(1, 3, 0, "put", "k", 0),
    ];
    let ends = [WatchEnd {
        watcher: 1,
        compacted: true,
    }];
    let r = grant_provenance(&ops, &watch, &ends);
    assert_validity(&r, Validity::Unknown);
    assert!(r.checked.contains("1 compacted"), "{}", r.checked);
}

#[test]
fn expired_lease_grant_is_rejected_at_the_expiry_revision() {
    // The etcd#11456 shape: lease 2 expires in entry 7, and entry 7 still grants to it.
    let ops = [grant(1, 0, 10, "a", 2, 7, 1)];
    let watch = [
        delivery(1, 6, 0, "put", "k", 0),
        delivery(1, 7, 0, "lease_expired", "", 2),
        delivery(1, 7, 1, "lock_granted", "l", 2),
        delivery(1, 8, 0, "put", "k", 0),
    ];
    let r = no_grant_to_expired_lease(&ops, &watch);
    assert_validity(&r, Validity::Invalid);
    assert!(
        mentions(&r, "lease 2, which expired at revision 7"),
        "{r:#?}"
    );
}

#[test]
fn expired_lease_check_accepts_a_grant_before_the_expiry() {
    let ops = [grant(1, 0, 10, "a", 2, 7, 1)];
    let watch = [
        delivery(1, 6, 0, "put", "k", 0),
        delivery(1, 7, 0, "lock_granted", "l", 2),
        delivery(1, 8, 0, "lease_expired", "", 2),
    ];
    assert_validity(&no_grant_to_expired_lease(&ops, &watch), Validity::Valid);
}

#[test]
fn expired_lease_check_is_unknown_without_a_watch_log() {
    let ops = [grant(1, 0, 10, "a", 2, 7, 1)];
    assert_validity(&no_grant_to_expired_lease(&ops, &[]), Validity::Unknown);
}

#[test]
fn fence_accepts_current_tokens_and_rejections_of_superseded_ones() {
    let ops = [
        grant(1, 0, 10, "a", 1, 5, 1),
        set_add(2, 11, Some(12), EventType::Ok, 100, 5),
        grant(3, 20, 30, "b", 2, 9, 1),
        // Concurrent with the newer grant: may still apply.
        set_add(4, 25, Some(26), EventType::Ok, 101, 5),
        set_add(5, 40, Some(41), EventType::Fail, 102, 5),
        set_add(6, 40, Some(41), EventType::Ok, 103, 9),
    ];
    assert_validity(&fence_never_accepts_superseded(&ops), Validity::Valid);
}

#[test]
fn fence_rejects_an_add_with_a_superseded_token() {
    let ops = [
        grant(1, 0, 10, "a", 1, 5, 1),
        grant(2, 20, 30, "b", 2, 9, 1),
        set_add(3, 40, Some(41), EventType::Ok, 102, 5),
    ];
    let r = fence_never_accepts_superseded(&ops);
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "set_add op 3"), "{r:#?}");
    assert!(mentions(&r, "already returned token 9"), "{r:#?}");
}

fn set_history(read: &[u64]) -> Vec<Op> {
    vec![
        set_add(1, 0, Some(5), EventType::Ok, 1, 5),
        set_add(2, 0, Some(5), EventType::Ok, 2, 5),
        set_add(3, 0, None, EventType::Info, 3, 5),
        set_add(4, 0, Some(5), EventType::Fail, 4, 5),
        set_read(5, 10, 11, &[1]),
        set_read(6, 100, 101, read),
    ]
}

#[test]
fn set_accepts_a_final_read_with_every_ok_add() {
    let r = set_no_lost_adds(&set_history(&[1, 2, 3]));
    assert_validity(&r, Validity::Valid);
    assert!(
        r.checked.contains("1 of 1 info adds recovered"),
        "{}",
        r.checked
    );
}

#[test]
fn set_rejects_a_lost_add() {
    let r = set_no_lost_adds(&set_history(&[1, 3]));
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "element 2 of ok op 2"), "{r:#?}");
    assert!(r.checked.contains("1 lost"), "{}", r.checked);
}

#[test]
fn set_rejects_unexpected_and_failed_elements() {
    let r = set_no_lost_adds(&set_history(&[1, 2, 4, 99]));
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "element 99, which no set_add tried"), "{r:#?}");
    assert!(
        mentions(&r, "element 4, although every add of it failed"),
        "{r:#?}"
    );
}

#[test]
fn set_is_unknown_without_a_final_read() {
    let ops = [set_add(1, 0, Some(5), EventType::Ok, 1, 5)];
    assert_validity(&set_no_lost_adds(&ops), Validity::Unknown);
}

fn partition() -> Vec<NemesisWindow> {
    vec![NemesisWindow {
        kind: "partition-majority".into(),
        start_ns: 100 * MS,
        end_ns: None,
        targets: vec![3],
        minority: vec![3],
    }]
}

fn leaders() -> Vec<LeaderObservation> {
    vec![
        LeaderObservation {
            time_ns: 0,
            node: 1,
            term: 2,
        },
        LeaderObservation {
            time_ns: 50 * MS,
            node: 3,
            term: 3,
        },
    ]
}

#[test]
fn minority_check_accepts_majority_grants() {
    let ops = [
        grant(1, 150, 160, "a", 1, 5, 2),
        // Invoked before node 3 was cut off: it may have committed in time.
        grant(2, 60, 160, "b", 2, 6, 3),
    ];
    let r = minority_grants(&ops, &partition(), &leaders());
    assert_validity(&r, Validity::Valid);
    assert!(r.checked.contains("2 attributed"), "{}", r.checked);
}

#[test]
fn minority_check_rejects_a_grant_from_a_cut_off_leader() {
    let mut answered_by_leader = grant(2, 150, 160, "b", 2, 7, 3);
    answered_by_leader.node = 3;
    let ops = [grant(1, 150, 160, "a", 1, 6, 3), answered_by_leader];
    let r = minority_grants(&ops, &partition(), &leaders());
    assert_validity(&r, Validity::Invalid);
    assert_eq!(r.problems.len(), 2, "{r:#?}");
    assert!(
        mentions(&r, "led by node 3, which was in the minority"),
        "{r:#?}"
    );
    assert!(mentions(&r, "answered by that node itself"), "{r:#?}");
}

#[test]
fn minority_check_is_unknown_for_an_unattributed_grant_inside_a_window() {
    let ops = [grant(1, 150, 160, "a", 1, 6, 9)];
    let r = minority_grants(&ops, &partition(), &leaders());
    assert_validity(&r, Validity::Unknown);
    assert!(r.checked.contains("1 unattributed"), "{}", r.checked);
}

fn counter_history(final_value: i64) -> Vec<Op> {
    let incr = |id, status, ret: Option<u64>| {
        op(
            id,
            id,
            0,
            ret,
            status,
            OpValue::Incr {
                counter: "c".into(),
                by: 1,
                value: None,
            },
        )
    };
    vec![
        incr(1, EventType::Ok, Some(5)),
        incr(2, EventType::Ok, Some(5)),
        incr(3, EventType::Ok, Some(5)),
        incr(4, EventType::Info, None),
        incr(5, EventType::Fail, Some(5)),
        op(
            6,
            6,
            100,
            Some(101),
            EventType::Ok,
            OpValue::CounterRead {
                counter: "c".into(),
                value: Some(final_value),
            },
        ),
    ]
}

#[test]
fn counter_accepts_values_within_bounds() {
    assert_validity(&counter_bounds(&counter_history(3)), Validity::Valid);
    assert_validity(&counter_bounds(&counter_history(4)), Validity::Valid);
}

#[test]
fn counter_rejects_a_double_increment_and_a_lost_one() {
    let r = counter_bounds(&counter_history(5));
    assert_validity(&r, Validity::Invalid);
    assert!(mentions(&r, "outside [3, 4]"), "{r:#?}");
    assert!(mentions(&r, "applied more than once"), "{r:#?}");
    assert_validity(&counter_bounds(&counter_history(2)), Validity::Invalid);
}

#[test]
fn counter_is_unknown_without_a_final_read() {
    let mut ops = counter_history(3);
    ops.pop();
    assert_validity(&counter_bounds(&ops), Validity::Unknown);
}

fn node(node: u64, applied_index: u64, digest: &str) -> FinalNodeState {
    FinalNodeState {
        node,
        applied_index,
        state_digest: digest.into(),
    }
}

#[test]
fn digests_accept_converged_nodes() {
    let nodes = [node(1, 90, "ab"), node(2, 90, "ab"), node(3, 90, "ab")];
    assert_validity(&digests_converged(&nodes), Validity::Valid);
}

#[test]
fn digests_reject_a_diverged_node() {
    let nodes = [node(1, 90, "ab"), node(2, 90, "ab"), node(3, 90, "cd")];
    let r = digests_converged(&nodes);
    assert_validity(&r, Validity::Invalid);
    assert_eq!(r.problems.len(), 1);
    assert!(
        mentions(&r, "nodes [3] at applied_index 90 with digest cd"),
        "{r:#?}"
    );
}

#[test]
fn digests_are_unknown_with_one_node() {
    assert_validity(&digests_converged(&[node(1, 90, "ab")]), Validity::Unknown);
}
