//! Request records stay bounded: a lease that lives for ever and acquires and releases with a
//! fresh id each time keeps only what it holds, waits for and has not acknowledged within the
//! window; retries inside the window still get their first outcome.

use super::{acquire, release, Sm};
use crate::command::{Command, LockMode};
use crate::limits::REQUEST_RECORD_WINDOW_MS;
use crate::response::Outcome;

fn wait_acquire(name: &str, lease_id: u64) -> Command {
    Command::Acquire {
        names: vec![name.into()],
        lease_id,
        mode: LockMode::Exclusive,
        permits: None,
        wait: true,
    }
}

/// `cycles` acquire/release pairs on one long-lived lease, each with a fresh id, one ms apart.
fn cycle(sm: &mut Sm, lease: u64, from_ms: u64, cycles: u64, ack: bool) -> u64 {
    let mut now = from_ms;
    for i in 0..cycles {
        let acq = format!("acq-{from_ms}-{i}");
        let rel = format!("rel-{from_ms}-{i}");
        let token = sm
            .with_id(now, Some(&acq), acquire("hot", lease))
            .token()
            .expect("granted");
        let r = sm.with_id(now, Some(&rel), release("hot", lease, token));
        assert!(r.outcome.is_ok(), "{r:?}");
        if ack {
            sm.at(
                now,
                Command::Ack {
                    request_ids: vec![acq, rel],
                },
            );
        }
        now += 1;
    }
    now
}

#[test]
fn a_long_lived_lease_keeps_no_records_of_finished_requests_past_the_window() {
    let mut sm = Sm::new();
    let lease = sm.lease(0, 3_600_000);
    // Keep the lease alive through it all with keepalives.
    let mut now = cycle(&mut sm, lease, 1, 500, false);
    assert_eq!(sm.state.requests.len(), 2 * 500, "all in the window");
    // Nothing is pinned: finished acquires do not ride on the lease.
    assert!(sm.state.leases[&lease].request_ids.is_empty());
    now += REQUEST_RECORD_WINDOW_MS;
    sm.at(
        now,
        Command::LeaseKeepalive {
            lease_ids: vec![lease],
        },
    );
    now = cycle(&mut sm, lease, now, 10, false);
    assert!(sm.state.lease_is_live(lease));
    // The first 1,000 records left with the window, though their lease still lives; the
    // negative control is the old rule (records live as long as their lease), under which
    // all 1,020 would still be here.
    assert_eq!(sm.state.requests.len(), 2 * 10);
    assert!(now > REQUEST_RECORD_WINDOW_MS);
}

#[test]
fn acknowledged_records_go_at_once() {
    let mut sm = Sm::new();
    let lease = sm.lease(0, 3_600_000);
    cycle(&mut sm, lease, 1, 1_000, true);
    assert!(sm.state.requests.is_empty());
    assert!(sm.state.request_expiries.is_empty());
}

#[test]
fn a_held_grant_keeps_its_record_and_a_release_starts_its_window() {
    let mut sm = Sm::new();
    let lease = sm.lease(0, 3_600_000);
    let first = sm.with_id(1, Some("acq"), acquire("x", lease));
    let token = first.token().expect("granted");
    // Held long past the window: a retry still gets the same token.
    let later = 1 + 2 * REQUEST_RECORD_WINDOW_MS;
    sm.at(
        later,
        Command::LeaseKeepalive {
            lease_ids: vec![lease],
        },
    );
    let retry = sm.with_id(later, Some("acq"), acquire("x", lease));
    assert!(retry.replayed);
    assert_eq!(retry.token(), Some(token));
    // Released: the record moves to the window, and a retry inside it still replays.
    sm.with_id(later + 1, Some("rel"), release("x", lease, token));
    let retry = sm.with_id(later + 2, Some("acq"), acquire("x", lease));
    assert!(retry.replayed && retry.token() == Some(token));
    assert!(sm.state.leases[&lease].request_ids.is_empty());
    // After the window, the id may act again (a new grant with a new token).
    let after = later + 2 + REQUEST_RECORD_WINDOW_MS;
    sm.at(
        after,
        Command::LeaseKeepalive {
            lease_ids: vec![lease],
        },
    );
    let again = sm.with_id(after, Some("acq"), acquire("x", lease));
    assert!(!again.replayed);
    assert!(again.token().is_some_and(|t| t > token));
}

#[test]
fn a_queued_wait_stays_pinned_until_it_is_answered() {
    let mut sm = Sm::new();
    let a = sm.lease(0, 3_600_000);
    let b = sm.lease(0, 3_600_000);
    let held = sm.with_id(1, Some("a-acq"), acquire("x", a)).token();
    let queued = sm.with_id(2, Some("b-wait"), wait_acquire("x", b));
    assert!(matches!(queued.outcome, Ok(Outcome::Queued { .. })));
    // A retry re-attaches to the queue entry.
    let retry = sm.with_id(3, Some("b-wait"), wait_acquire("x", b));
    assert!(retry.replayed);
    assert!(sm.state.leases[&b].request_ids.contains("b-wait"));
    // The release hands the lock over: b's record is now its held grant's.
    sm.at(4, release("x", a, held.expect("held")));
    let record = &sm.state.requests["b-wait"];
    assert_eq!(record.lease_id, Some(b));
    assert!(matches!(
        record.response.outcome,
        Ok(Outcome::Granted { .. })
    ));
    // Revoking b ends the hold: the record goes to the window.
    sm.at(5, Command::LeaseRevoke { lease_id: b });
    assert_eq!(sm.state.requests["b-wait"].lease_id, None);
    assert!(sm.state.grant_requests.is_empty());
}

#[test]
fn one_entry_granting_two_waits_of_one_lease_unpins_each_on_its_own_release() {
    let mut sm = Sm::new();
    let a = sm.lease(0, 3_600_000);
    let b = sm.lease(0, 3_600_000);
    sm.at(1, acquire("x", a));
    sm.at(1, acquire("y", a));
    sm.with_id(2, Some("bx"), wait_acquire("x", b));
    sm.with_id(2, Some("by"), wait_acquire("y", b));
    // Revoking a frees both locks in one entry: both of b's waits get the same token.
    sm.at(3, Command::LeaseRevoke { lease_id: a });
    let token = sm.state.requests["bx"].response.token().expect("granted");
    assert_eq!(sm.state.requests["by"].response.token(), Some(token));
    assert_eq!(sm.state.grant_requests.len(), 2);
    sm.at(4, release("x", b, token));
    assert_eq!(sm.state.requests["bx"].lease_id, None);
    assert_eq!(sm.state.requests["by"].lease_id, Some(b));
    sm.at(5, release("y", b, token));
    assert_eq!(sm.state.requests["by"].lease_id, None);
}

#[test]
fn the_grant_index_survives_an_encode_and_decode() {
    let mut sm = Sm::new();
    let lease = sm.lease(0, 3_600_000);
    sm.with_id(1, Some("acq"), acquire("x", lease));
    assert_eq!(sm.state.grant_requests.len(), 1);
    let bytes = crate::codec::encode_state(&sm.state).expect("encodes");
    let decoded = crate::codec::decode_state(&bytes).expect("decodes");
    assert_eq!(decoded, sm.state);
}

#[test]
fn reusing_a_queued_acquires_id_with_another_wait_is_refused() {
    let mut sm = Sm::new();
    let a = sm.lease(0, 3_600_000);
    let b = sm.lease(0, 3_600_000);
    sm.at(1, acquire("x", a));
    let wait = |wait_ms| Command::AcquireFor {
        names: vec!["x".into()],
        lease_id: b,
        mode: LockMode::Exclusive,
        permits: None,
        wait_ms,
    };
    let first = sm.with_id(2, Some("w"), wait(30_000));
    assert!(matches!(first.outcome, Ok(Outcome::Queued { .. })));
    // The same request again re-attaches; another wait under the same id is refused.
    assert!(sm.with_id(3, Some("w"), wait(30_000)).replayed);
    let other = sm.with_id(3, Some("w"), wait(1));
    assert!(
        matches!(
            other.outcome,
            Err(crate::response::ApplyError::RequestIdReused { .. })
        ),
        "{other:?}"
    );
    assert!(sm.state.tickets.contains_key("w"));
    // Control: `Acquire` does not carry the wait, so the same reuse passed for a retry and
    // re-attached (which is how a shorter wait could cancel the first one's queue entry).
    let old = |sm: &mut Sm| {
        sm.with_id(
            4,
            Some("old"),
            Command::Acquire {
                names: vec!["x".into()],
                lease_id: b,
                mode: LockMode::Exclusive,
                permits: None,
                wait: true,
            },
        )
    };
    assert!(!old(&mut sm).replayed);
    assert!(old(&mut sm).replayed);
}
