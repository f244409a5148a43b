//! The key changes kept beside the watch history: what each put and delete records, that
//! they leave with their events, that a decoded state knows none before it, and that they
//! never make two states differ.

use crate::command::{Command, Envelope};
use crate::key_changes::KeyChange;
use crate::limits::WATCH_HISTORY_EVENTS_MAX;
use crate::state::{KeyRecord, State};
use crate::{codec, Outcome};

fn apply(state: &mut State, index: u64, now_ms: u64, command: Command) -> Outcome {
    let env = Envelope {
        now_ms,
        request_id: None,
        command,
    };
    let r = state.apply(index, 1, &env);
    if let Err(e) = state.check_invariants() {
        panic!("after {env:?}: {e}");
    }
    r.outcome.expect("applies")
}

fn put(key: &str, value: &str, lease_id: Option<u64>) -> Command {
    Command::KvPut {
        key: key.into(),
        value: value.into(),
        lease_id,
        condition: None,
        fence: None,
    }
}

fn delete(key: &str) -> Command {
    Command::KvDelete {
        key: key.into(),
        condition: None,
        fence: None,
    }
}

fn record(value: &str, create: u64, modified: u64, version: u64) -> KeyRecord {
    KeyRecord {
        value: value.into(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease_id: None,
    }
}

#[test]
fn puts_and_deletes_record_what_etcd_shows() {
    let mut s = State::default();
    apply(&mut s, 1, 0, put("a", "1", None));
    apply(&mut s, 2, 0, put("a", "2", None));
    apply(&mut s, 3, 0, delete("a"));
    apply(&mut s, 4, 0, put("a", "3", None));
    assert_eq!(s.key_changes.from_revision(), 0);
    assert_eq!(
        s.key_changes.get((1, 0)),
        Some(&KeyChange {
            create_revision: 1,
            version: 1,
            prev: None
        })
    );
    assert_eq!(
        s.key_changes.get((2, 0)),
        Some(&KeyChange {
            create_revision: 1,
            version: 2,
            prev: Some(record("1", 1, 1, 1).into()),
        })
    );
    assert_eq!(
        s.key_changes.get((3, 0)),
        Some(&KeyChange {
            create_revision: 0,
            version: 0,
            prev: Some(record("2", 1, 2, 2).into()),
        })
    );
    // Created again: a new create revision, version 1, nothing before.
    assert_eq!(
        s.key_changes.get((4, 0)),
        Some(&KeyChange {
            create_revision: 4,
            version: 1,
            prev: None
        })
    );
}

#[test]
fn a_lease_ending_records_the_delete_of_its_keys() {
    let mut s = State::default();
    let Outcome::LeaseGranted { lease_id, .. } =
        apply(&mut s, 1, 0, Command::LeaseGrant { ttl_ms: 1_000 })
    else {
        panic!("no lease");
    };
    apply(&mut s, 2, 0, put("k", "v", Some(lease_id)));
    apply(&mut s, 3, 0, Command::LeaseRevoke { lease_id });
    let deletes: Vec<_> = s
        .events
        .iter()
        .filter(|(_, e)| matches!(&***e, crate::Event::Delete { .. }))
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(deletes.len(), 1, "{:?}", s.events);
    let change = s.key_changes.get(deletes[0]).expect("recorded");
    let mut before = record("v", 2, 2, 1);
    before.lease_id = Some(lease_id);
    assert_eq!(change.prev, Some(before.into()));
    assert_eq!((change.create_revision, change.version), (0, 0));
}

#[test]
fn changes_leave_with_their_events() {
    let mut s = State::default();
    let n = WATCH_HISTORY_EVENTS_MAX as u64 + 5;
    for i in 1..=n {
        apply(&mut s, i, 0, put("k", "v", None));
    }
    assert_eq!(s.events.len(), WATCH_HISTORY_EVENTS_MAX);
    assert_eq!(s.key_changes.len(), WATCH_HISTORY_EVENTS_MAX);
    assert!(s.key_changes.get((5, 0)).is_none());
    assert_eq!(s.key_changes.get((6, 0)).map(|c| c.version), Some(6));
}

#[test]
fn a_decoded_state_knows_no_change_before_it_and_compares_equal() {
    let mut s = State::default();
    apply(&mut s, 1, 0, put("a", "1", None));
    apply(&mut s, 2, 0, put("a", "2", None));
    let bytes = codec::encode_state(&s).expect("encodes");
    let mut back = codec::decode_state(&bytes).expect("decodes");
    assert_eq!(back, s, "key changes are not part of the replicated state");
    assert!(back.key_changes.is_empty());
    assert_eq!(back.key_changes.from_revision(), 3);
    // What it applies from there on is recorded as usual, and encodes as the original does.
    apply(&mut back, 3, 0, put("a", "3", None));
    apply(&mut s, 3, 0, put("a", "3", None));
    assert_eq!(back.key_changes.get((3, 0)).map(|c| c.version), Some(3));
    assert_eq!(codec::state_digest(&back), codec::state_digest(&s));
}
