//! Elections over `State::apply`: FIFO hand-over, tokens, stale leaders, fencing, events, and
//! the campaign records' life. Invariants are checked after every entry.

use crate::command::{Command, Envelope, Fence};
use crate::events::{Event, ReleaseCause};
use crate::response::{ApplyError, Notice, Outcome, Response};
use crate::state::State;

/// Applies commands at consecutive indexes (from 1), term 1, checking invariants each time.
#[derive(Default)]
struct Sm {
    state: State,
    index: u64,
    notices: Vec<Notice>,
}

impl Sm {
    fn apply(&mut self, now_ms: u64, request_id: Option<&str>, command: Command) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms,
            request_id: request_id.map(str::to_string),
            command,
        };
        let applied = self.state.apply_full(self.index, 1, &env);
        if let Err(e) = self.state.check_invariants() {
            panic!("after {env:?}: {e}");
        }
        self.notices.extend(applied.notices);
        applied.response
    }

    fn lease(&mut self, ttl_ms: u64) -> u64 {
        match self.apply(0, None, Command::LeaseGrant { ttl_ms }).outcome {
            Ok(Outcome::LeaseGranted { lease_id, .. }) => lease_id,
            other => panic!("lease grant failed: {other:?}"),
        }
    }

    fn campaign(&mut self, name: &str, lease_id: u64, value: &str, wait_ms: u64) -> Response {
        let rid = format!("c-{lease_id}-{}", self.index + 1);
        let cmd = Command::Campaign {
            name: name.into(),
            lease_id,
            value: value.into(),
            wait_ms,
        };
        self.apply(0, Some(&rid), cmd)
    }

    /// `(lease_id, token, value)` of the leader of `name`.
    fn leader(&self, name: &str) -> Option<(u64, u64, String)> {
        let l = self.state.election_leader(name)?;
        Some((l.holder.lease_id, l.holder.token, l.value.to_string()))
    }

    /// Election events at `index`, as `(kind, lease_id, token)`.
    fn election_events(&self, index: u64) -> Vec<(&'static str, u64, u64)> {
        self.state
            .events
            .range((index, 0)..=(index, u32::MAX))
            .filter_map(|(_, e)| match &**e {
                Event::ElectionLeader {
                    lease_id, token, ..
                } => Some(("leader", *lease_id, *token)),
                Event::ElectionResigned {
                    lease_id, token, ..
                } => Some(("resigned", *lease_id, *token)),
                _ => None,
            })
            .collect()
    }
}

fn resign(name: &str, lease_id: u64, token: u64) -> Command {
    Command::Resign {
        name: name.into(),
        lease_id,
        token,
    }
}

fn proclaim(name: &str, lease_id: u64, token: u64, value: &str) -> Command {
    Command::Proclaim {
        name: name.into(),
        lease_id,
        token,
        value: value.into(),
    }
}

fn granted_token(r: &Response) -> u64 {
    match &r.outcome {
        Ok(Outcome::Granted { token, .. }) => *token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Three campaigners: the first leads at once, the others queue, and each way a leadership
/// can end (resign, revoke, expiry) hands it to the next in FIFO order, with the index of
/// the handing-over entry as the new token.
#[test]
fn leadership_passes_in_fifo_order_with_growing_tokens() {
    let mut sm = Sm::default();
    let (a, b, c) = (sm.lease(60_000), sm.lease(60_000), sm.lease(2_000));
    let d = sm.lease(60_000);
    let r = sm.campaign("e", a, "va", 1_000);
    let ta = granted_token(&r);
    assert_eq!(ta, r.revision);
    assert_eq!(sm.leader("e"), Some((a, ta, "va".into())));
    assert_eq!(sm.election_events(ta), [("leader", a, ta)]);
    for (lease, value) in [(b, "vb"), (c, "vc"), (d, "vd")] {
        let r = sm.campaign("e", lease, value, 1_000);
        assert!(matches!(r.outcome, Ok(Outcome::Queued { .. })), "{r:?}");
    }
    // Resign: b leads from the resigning entry.
    let r = sm.apply(0, None, resign("e", a, ta));
    assert!(
        matches!(r.outcome, Ok(Outcome::LockReleased { .. })),
        "{r:?}"
    );
    let tb = sm.index;
    assert_eq!(sm.leader("e"), Some((b, tb, "vb".into())));
    assert_eq!(
        sm.election_events(tb),
        [("resigned", a, ta), ("leader", b, tb)]
    );
    assert_eq!(sm.notices.last().and_then(|n| n.response.token()), Some(tb));
    // Revoke: c leads.
    sm.apply(0, None, Command::LeaseRevoke { lease_id: b });
    let tc = sm.index;
    assert_eq!(sm.leader("e"), Some((c, tc, "vc".into())));
    // Expiry of c's 2 s lease: d leads, and the resignation says why.
    sm.apply(5_000, None, Command::Tick);
    let td = sm.index;
    assert_eq!(sm.leader("e"), Some((d, td, "vd".into())));
    let cause = sm.state.events.values().find_map(|e| match &**e {
        Event::ElectionResigned {
            lease_id, cause, ..
        } if *lease_id == c => Some(*cause),
        _ => None,
    });
    assert_eq!(cause, Some(ReleaseCause::Expired));
    assert!(ta < tb && tb < tc && tc < td);
    // Only the leader's campaign remains.
    assert_eq!(sm.state.campaigns.len(), 1);
}

/// A deposed leader's proclaim and resign are `not_leader` and change nothing; its fenced
/// write is refused while the new leader's is applied.
#[test]
fn a_deposed_leader_is_refused_and_fenced() {
    let mut sm = Sm::default();
    let (a, b) = (sm.lease(60_000), sm.lease(60_000));
    let ta = granted_token(&sm.campaign("e", a, "va", 0));
    sm.campaign("e", b, "vb", 1_000);
    sm.apply(0, None, resign("e", a, ta));
    let tb = sm.index;
    let before = (sm.state.locks.clone(), sm.state.campaigns.clone());
    let events_before = sm.state.events.len();
    let table = [
        proclaim("e", a, ta, "stale"),
        resign("e", a, ta),
        // The right token under the wrong lease, and the right lease with a wrong token.
        proclaim("e", a, tb, "stale"),
        resign("e", b, ta),
        proclaim("other", b, tb, "x"),
    ];
    for cmd in table {
        let r = sm.apply(0, None, cmd.clone());
        assert!(
            matches!(r.outcome, Err(ApplyError::NotLeader { .. })),
            "{cmd:?}: {r:?}"
        );
    }
    assert_eq!((sm.state.locks.clone(), sm.state.campaigns.clone()), before);
    assert_eq!(sm.state.events.len(), events_before);
    let put = |token| Command::KvPut {
        key: "k".into(),
        value: "v".into(),
        lease_id: None,
        condition: None,
        fence: Some(Fence {
            lock: "e".into(),
            token,
        }),
    };
    let r = sm.apply(0, None, put(ta));
    assert!(
        matches!(r.outcome, Err(ApplyError::Fenced { current_token: Some(t), .. }) if t == tb),
        "{r:?}"
    );
    assert!(sm.apply(0, None, put(tb)).outcome.is_ok());
}

#[test]
fn proclaim_publishes_a_value_and_an_event_under_the_same_token() {
    let mut sm = Sm::default();
    let a = sm.lease(60_000);
    let ta = granted_token(&sm.campaign("e", a, "v1", 0));
    let r = sm.apply(0, None, proclaim("e", a, ta, "v2"));
    assert_eq!(
        r.outcome,
        Ok(Outcome::Proclaimed {
            name: "e".into(),
            token: ta
        })
    );
    assert_eq!(sm.leader("e"), Some((a, ta, "v2".into())));
    assert_eq!(sm.election_events(sm.index), [("leader", a, ta)]);
}

/// Every refusal of a campaign leaves no campaign record behind.
#[test]
fn refused_campaigns_leave_nothing() {
    let mut sm = Sm::default();
    let (a, b) = (sm.lease(60_000), sm.lease(60_000));
    let sem = Command::Acquire {
        names: vec!["sem".into()],
        lease_id: a,
        mode: crate::LockMode::Exclusive,
        permits: Some(3),
        wait: false,
    };
    assert!(sm.apply(0, None, sem).outcome.is_ok());
    let ta = granted_token(&sm.campaign("e", a, "va", 0));
    let big = "x".repeat(crate::limits::ELECTION_VALUE_BYTES_MAX + 1);
    type Check = fn(&ApplyError) -> bool;
    let table: [(&str, u64, &str, u64, Check); 6] = [
        ("e", b, "vb", 0, |e| {
            matches!(e, ApplyError::LockHeld { .. })
        }),
        ("e", a, "again", 1_000, |e| {
            matches!(e, ApplyError::LockHeld { .. })
        }),
        ("sem", b, "v", 0, |e| {
            matches!(e, ApplyError::ModeMismatch { .. })
        }),
        ("e", b, &big, 1_000, |e| {
            matches!(e, ApplyError::Invalid { .. })
        }),
        ("", b, "v", 0, |e| matches!(e, ApplyError::Invalid { .. })),
        ("e", 999, "v", 1_000, |e| {
            matches!(e, ApplyError::LeaseNotFound { .. })
        }),
    ];
    for (name, lease, value, wait_ms, want) in table {
        let r = sm.campaign(name, lease, value, wait_ms);
        match &r.outcome {
            Err(e) if want(e) => {}
            other => panic!("campaign {name:?} by {lease}: {other:?}"),
        }
        assert_eq!(sm.state.campaigns.len(), 1, "after {name:?} by {lease}");
    }
    // The leader's own record is untouched by its refused second campaign.
    assert_eq!(sm.leader("e"), Some((a, ta, "va".into())));
}

/// A cancelled (timed-out) campaign leaves the queue and its record; a leader cancelled
/// after its grant won the race resigns with cause `cancelled`.
#[test]
fn cancelled_campaigns_leave_the_queue_and_their_records() {
    let mut sm = Sm::default();
    let (a, b) = (sm.lease(60_000), sm.lease(60_000));
    let ta = granted_token(&sm.campaign("e", a, "va", 0));
    sm.apply(0, Some("wb"), campaign_cmd("e", b, "vb"));
    assert_eq!(sm.state.campaigns.len(), 2);
    let cancel = |w: &str| Command::Cancel {
        waiter_id: w.into(),
    };
    sm.apply(0, None, cancel("wb"));
    assert_eq!(sm.state.campaigns.len(), 1);
    // Again, but now the grant wins before the cancel.
    sm.apply(0, Some("wb2"), campaign_cmd("e", b, "vb"));
    sm.apply(0, None, resign("e", a, ta));
    let tb = sm.index;
    assert_eq!(sm.leader("e").map(|l| l.1), Some(tb));
    sm.apply(0, None, cancel("wb2"));
    assert_eq!(sm.leader("e"), None);
    assert!(sm.state.campaigns.is_empty());
    assert_eq!(sm.election_events(sm.index), [("resigned", b, tb)]);
}

fn campaign_cmd(name: &str, lease_id: u64, value: &str) -> Command {
    Command::Campaign {
        name: name.into(),
        lease_id,
        value: value.into(),
        wait_ms: 1_000,
    }
}

/// A plain lock acquire of the election's name competes in the same queue and leads with
/// an empty value; a campaigner behind it leads when it releases.
#[test]
fn a_plain_lock_holder_leads_with_an_empty_value() {
    let mut sm = Sm::default();
    let (a, b) = (sm.lease(60_000), sm.lease(60_000));
    let r = sm.apply(
        0,
        None,
        Command::LockAcquire {
            name: "e".into(),
            lease_id: a,
        },
    );
    let ta = granted_token(&r);
    assert_eq!(sm.leader("e"), Some((a, ta, String::new())));
    sm.campaign("e", b, "vb", 1_000);
    let release = Command::LockRelease {
        name: "e".into(),
        lease_id: a,
        token: ta,
    };
    sm.apply(0, None, release);
    // No `election_resigned` for a holder that never campaigned.
    assert_eq!(sm.election_events(sm.index), [("leader", b, sm.index)]);
}

/// A retried campaign (same request id) returns the first answer and adds nothing.
#[test]
fn a_retried_campaign_is_replayed() {
    let mut sm = Sm::default();
    let a = sm.lease(60_000);
    let first = sm.apply(0, Some("r"), campaign_cmd("e", a, "va"));
    let again = sm.apply(0, Some("r"), campaign_cmd("e", a, "va"));
    assert!(again.replayed);
    assert_eq!(granted_token(&again), granted_token(&first));
    let other = sm.apply(0, Some("r"), campaign_cmd("e", a, "changed"));
    assert!(matches!(
        other.outcome,
        Err(ApplyError::RequestIdReused { .. })
    ));
    assert_eq!(sm.state.campaigns.len(), 1);
}

/// Campaigns survive a snapshot round trip, and a version-2 frame decodes with none.
#[test]
fn campaigns_survive_a_snapshot_round_trip() {
    let mut sm = Sm::default();
    let (a, b) = (sm.lease(60_000), sm.lease(60_000));
    sm.campaign("e", a, "va", 0);
    sm.campaign("e", b, "vb", 1_000);
    let bytes = crate::codec::encode_state(&sm.state).expect("encodes");
    let back = crate::codec::decode_state(&bytes).expect("decodes");
    assert_eq!(back, sm.state);
    assert_eq!(back.campaigns.len(), 2);
    assert_eq!(
        crate::codec::state_digest(&back),
        crate::codec::state_digest(&sm.state)
    );
}
