//! `Command::Many`: what the leader gathers, and what apply does with each item.

use super::{answered, Batch, Kind, ITEMS_MAX, ITEM_BYTES_MAX};
use crate::command::{Command, Condition, Envelope, Fence, Item, LockMode};
use crate::events::Event;
use crate::response::{ApplyError, Outcome, Response};
use crate::state::State;

/// Applies entries at consecutive indexes (from 1), term 1, checking invariants each time.
struct Sm {
    state: State,
    index: u64,
}

impl Sm {
    fn new() -> Self {
        Sm {
            state: State::default(),
            index: 0,
        }
    }

    fn apply(&mut self, request_id: Option<&str>, command: Command) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms: 1,
            request_id: request_id.map(str::to_string),
            command,
        };
        let response = self.state.apply(self.index, 1, &env);
        if let Err(e) = self.state.check_invariants() {
            panic!("after {env:?}: {e}");
        }
        response
    }

    /// Applies `items` as one `Command::Many` entry; returns the items' responses.
    fn many(&mut self, items: Vec<(Option<&str>, Command)>) -> Vec<Response> {
        let items = items
            .into_iter()
            .map(|(request_id, command)| Item {
                request_id: request_id.map(str::to_string),
                command,
            })
            .collect();
        match self.apply(None, Command::Many { items }).outcome {
            Ok(Outcome::Many { responses }) => responses,
            other => panic!("a many entry answered {other:?}"),
        }
    }

    fn lease(&mut self) -> u64 {
        match self
            .apply(None, Command::LeaseGrant { ttl_ms: 60_000 })
            .outcome
        {
            Ok(Outcome::LeaseGranted { lease_id, .. }) => lease_id,
            other => panic!("lease grant failed: {other:?}"),
        }
    }

    /// Exclusive grants the entry at `index` made, by lock name (from the watch history).
    fn exclusive_grants_at(&self, index: u64) -> Vec<String> {
        self.state
            .events
            .range((index, 0)..(index + 1, 0))
            .filter_map(|(_, e)| match &**e {
                Event::LockGranted {
                    name,
                    mode: LockMode::Exclusive,
                    ..
                } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

fn acquire(name: &str, lease_id: u64) -> Command {
    Command::LockAcquire {
        name: name.into(),
        lease_id,
    }
}

fn release(name: &str, lease_id: u64, token: u64) -> Command {
    Command::LockRelease {
        name: name.into(),
        lease_id,
        token,
    }
}

fn wait_for(names: &[&str], lease_id: u64) -> Command {
    Command::AcquireFor {
        names: names.iter().map(|n| n.to_string()).collect(),
        lease_id,
        mode: LockMode::Exclusive,
        permits: None,
        wait_ms: 60_000,
    }
}

/// `Batch::try_add` of the item made of `request_id` and `command`.
fn add(batch: &mut Batch, request_id: Option<String>, command: Command) -> Result<(), Box<Item>> {
    batch.try_add(Item {
        request_id,
        command,
    })
}

#[test]
fn the_leader_batches_lock_commands_on_distinct_locks_only() {
    let mut batch = Batch::default();
    assert!(add(&mut batch, Some("r1".into()), acquire("a", 1)).is_ok());
    assert!(add(&mut batch, None, release("b", 1, 7)).is_ok());
    let as_root = Command::As {
        principal: "alice".into(),
        token_id: None,
        command: Box::new(wait_for(&["c", "d"], 2)),
    };
    assert!(add(&mut batch, Some("r2".into()), as_root).is_ok());
    // A lock named again, by any kind of item: refused, and given back whole.
    let again = add(&mut batch, Some("r3".into()), wait_for(&["e", "a"], 3));
    assert_eq!(
        again.map_err(|item| item.request_id),
        Err(Some("r3".into()))
    );
    assert!(add(&mut batch, None, release("d", 2, 9)).is_err());
    // Anything but an acquire or a release: refused.
    assert!(add(&mut batch, None, Command::LeaseGrant { ttl_ms: 5_000 }).is_err());
    assert!(add(&mut batch, None, Command::LeaseRevoke { lease_id: 1 }).is_err());
    assert!(add(
        &mut batch,
        None,
        Command::Cancel {
            waiter_id: "r2".into()
        }
    )
    .is_err());
    assert_eq!(batch.len(), 3);
}

#[test]
fn a_batch_is_bounded_in_items_and_bytes() {
    let mut batch = Batch::default();
    for i in 0..ITEMS_MAX + 10 {
        let _ = add(&mut batch, None, acquire(&format!("l{i}"), 1));
    }
    assert_eq!(batch.len(), ITEMS_MAX);

    let long = |i: usize| format!("{i:0>250}");
    let mut batch = Batch::default();
    let mut taken = 0;
    for i in 0..1_000 {
        let names: Vec<String> = (0..64).map(|j| long(i * 64 + j)).collect();
        let cmd = Command::Acquire {
            names,
            lease_id: 1,
            mode: LockMode::Exclusive,
            permits: None,
            wait: false,
        };
        if add(&mut batch, None, cmd).is_ok() {
            taken += 1;
        }
    }
    // Each carries about 16.5 KB of names: one fits under ITEM_BYTES_MAX, not two.
    assert_eq!((taken, ITEM_BYTES_MAX), (1, 32 * 1024));
}

#[test]
fn items_apply_in_order_each_with_its_own_response_and_record() {
    let mut sm = Sm::new();
    let (l1, l2) = (sm.lease(), sm.lease());
    let responses = sm.many(vec![
        (Some("r1"), acquire("a", l1)),
        (Some("r2"), acquire("b", l2)),
        (Some("r3"), wait_for(&["c"], l1)),
    ]);
    let index = sm.index;
    assert_eq!(responses.len(), 3);
    for r in &responses {
        assert_eq!((r.revision, r.term, r.replayed), (index, 1, false));
    }
    // Different locks granted by one entry share its index as their token.
    assert_eq!(responses[0].token(), Some(index));
    assert_eq!(responses[1].token(), Some(index));
    assert_eq!(sm.exclusive_grants_at(index), ["a", "b", "c"]);
    // Each item's record is its own: a retry in a later, plain entry replays it.
    let replay = sm.apply(Some("r2"), acquire("b", l2));
    assert!(replay.replayed);
    assert_eq!(replay.token(), Some(index));
    // And a holder releases with that token as usual.
    let released = sm.apply(None, release("a", l1, index));
    assert!(released.outcome.is_ok(), "{released:?}");
}

#[test]
fn apply_refuses_items_the_rule_does_not_admit_and_runs_the_rest() {
    let mut sm = Sm::new();
    let l1 = sm.lease();
    let responses = sm.many(vec![
        (None, acquire("a", l1)),
        (None, Command::LeaseRevoke { lease_id: l1 }),
        (None, release("a", l1, 1)),
        (None, acquire("b", l1)),
    ]);
    assert!(responses[0].token().is_some());
    assert!(
        matches!(&responses[1].outcome, Err(ApplyError::Invalid { reason }) if reason.contains("lease_revoke"))
    );
    assert!(
        matches!(&responses[2].outcome, Err(ApplyError::Invalid { reason }) if reason.contains("named twice"))
    );
    assert!(responses[3].token().is_some());
    assert!(sm.state.lease_is_live(l1));
}

/// The third rule of `crate::many`, and its negative control. A release of `a` hands both `a`
/// and `b` to a waiter; a second item releasing `b` with the entry's own index (a token no
/// client has been told) must not free `b` for the next waiter, or `b` would be granted twice
/// with one token by one entry.
#[test]
fn a_hold_made_by_the_entry_cannot_be_released_within_it() {
    let mut sm = Sm::new();
    let (holder, waiter, next) = (sm.lease(), sm.lease(), sm.lease());
    let token_a = sm
        .apply(None, acquire("a", holder))
        .token()
        .expect("granted");
    assert!(matches!(
        sm.apply(Some("w"), wait_for(&["a", "b"], waiter)).outcome,
        Ok(Outcome::Queued { .. })
    ));
    assert!(matches!(
        sm.apply(Some("n"), wait_for(&["b"], next)).outcome,
        Ok(Outcome::Queued { .. })
    ));

    let index = sm.index + 1;
    // Negative control: the two releases applied at the same index without the rule (as two
    // plain entries numbered alike) do grant `b` twice with one token.
    let mut unruled = sm.state.clone();
    for command in [release("a", holder, token_a), release("b", waiter, index)] {
        let env = Envelope {
            now_ms: 1,
            request_id: None,
            command,
        };
        assert!(unruled.apply(index, 1, &env).outcome.is_ok());
    }
    let unruled = Sm {
        state: unruled,
        index,
    };
    assert_eq!(unruled.exclusive_grants_at(index), ["a", "b", "b"]);

    let responses = sm.many(vec![
        (None, release("a", holder, token_a)),
        (None, release("b", waiter, index)),
    ]);
    assert!(responses[0].outcome.is_ok());
    assert!(
        matches!(&responses[1].outcome, Err(ApplyError::NotHolder { token, .. }) if *token == index)
    );
    assert_eq!(sm.exclusive_grants_at(index), ["a", "b"]);
    let b = sm.state.locks.get("b").expect("b is held");
    assert_eq!(b.holders.len(), 1);
    assert_eq!((b.holders[0].lease_id, b.holders[0].token), (waiter, index));

    // Control: the same release in a later entry is an ordinary release by the holder, and
    // hands `b` on with that entry's token. The refusal above was the rule, not the release.
    let later = sm.apply(None, release("b", waiter, index));
    assert!(later.outcome.is_ok(), "{later:?}");
    let b = sm.state.locks.get("b").expect("b is held");
    assert_eq!(
        (b.holders[0].lease_id, b.holders[0].token),
        (next, sm.index)
    );
}

#[test]
fn nested_many_is_refused() {
    let mut sm = Sm::new();
    let nested = Command::As {
        principal: "alice".into(),
        token_id: None,
        command: Box::new(Command::Many { items: vec![] }),
    };
    let response = sm.apply(None, nested);
    assert!(response.outcome.is_err(), "{response:?}");
}

#[test]
fn answered_pairs_each_item_with_its_response() {
    let mut sm = Sm::new();
    let l1 = sm.lease();
    let items = vec![
        Item {
            request_id: None,
            command: acquire("a", l1),
        },
        Item {
            request_id: None,
            command: acquire("b", l1),
        },
    ];
    let many = Command::Many { items };
    let response = sm.apply(None, many.clone());
    let pairs = answered(&many, &response);
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[1].0, &acquire("b", l1));
    assert_eq!(pairs[1].1.token(), Some(sm.index));
    let plain = acquire("c", l1);
    let response = sm.apply(None, plain.clone());
    assert_eq!(answered(&plain, &response), vec![(&plain, &response)]);
}

/// A string of `len` copies of `c`.
fn max(c: char, len: usize) -> String {
    std::iter::repeat_n(c, len).collect()
}

/// The encoded size of a batch filled with `ITEMS_MAX` of `command(i)`, each inside `As` with
/// the longest principal, token id and request id.
fn full_batch_bytes(command: impl Fn(usize) -> Command) -> usize {
    let mut batch = Batch::default();
    for i in 0..ITEMS_MAX {
        let command = Command::As {
            principal: max('p', 256),
            token_id: Some(max('t', 64)),
            command: Box::new(command(i)),
        };
        let request_id = format!(
            "{i:04}{}",
            max('r', crate::limits::REQUEST_ID_BYTES_MAX - 4)
        );
        let _ = add(&mut batch, Some(request_id), command);
    }
    let (kind, items) = batch.into_entry().expect("not empty");
    let env = Envelope {
        now_ms: u64::MAX,
        request_id: None,
        command: kind.command(items),
    };
    crate::codec::encode_envelope(&env).expect("encodes").len()
}

/// `ITEM_BYTES_MAX` bounds the real encoding, not just the estimate: a batch filled with the
/// largest items the API lets through encodes to no more than the bound plus the envelope.
#[test]
fn a_full_batch_encodes_within_the_bound() {
    for names_per_item in [1, 8, 64] {
        let bytes = full_batch_bytes(|i| Command::AcquireFor {
            names: (0..names_per_item)
                .map(|j| {
                    format!(
                        "{i:04}{j:02}{}",
                        max('n', crate::limits::LOCK_NAME_BYTES_MAX - 6)
                    )
                })
                .collect(),
            lease_id: u64::MAX,
            mode: LockMode::Shared,
            permits: Some(u32::MAX),
            wait_ms: u64::MAX,
        });
        assert!(
            bytes <= ITEM_BYTES_MAX + 64,
            "{names_per_item} names an item: {bytes} bytes"
        );
    }
}

/// The same bound for key writes, whose values are most of their bytes: a full batch of the
/// largest puts (key, value, a value condition and a fence, all at their limits for the size
/// asked) stays within the bound, and a value over it goes alone.
#[test]
fn a_full_batch_of_key_writes_encodes_within_the_bound() {
    for value_bytes in [0, 100, 4_000, 15_000] {
        let bytes = full_batch_bytes(|i| Command::KvPut {
            key: format!("{i:04}{}", max('k', crate::limits::KEY_BYTES_MAX - 4)),
            value: max('v', value_bytes),
            lease_id: Some(u64::MAX),
            condition: Some(Condition::Value(max('c', value_bytes))),
            fence: Some(Fence {
                lock: max('l', crate::limits::LOCK_NAME_BYTES_MAX),
                token: u64::MAX,
            }),
        });
        assert!(
            bytes <= ITEM_BYTES_MAX + 64,
            "values of {value_bytes} bytes: {bytes} bytes"
        );
    }
    let mut batch = Batch::default();
    let big = put("k", &max('v', ITEM_BYTES_MAX));
    assert!(add(&mut batch, None, big).is_err());
}

fn put(key: &str, value: &str) -> Command {
    Command::KvPut {
        key: key.into(),
        value: value.into(),
        lease_id: None,
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

#[test]
fn the_leader_batches_key_writes_of_distinct_keys_and_never_with_lock_commands() {
    let mut batch = Batch::default();
    assert!(add(&mut batch, Some("r1".into()), put("a", "1")).is_ok());
    assert!(add(&mut batch, None, delete("b")).is_ok());
    let as_alice = Command::As {
        principal: "alice".into(),
        token_id: None,
        command: Box::new(put("c", "3")),
    };
    assert!(add(&mut batch, Some("r2".into()), as_alice).is_ok());
    // A key written again, by a put or a delete: refused.
    assert!(add(&mut batch, None, put("a", "again")).is_err());
    assert!(add(&mut batch, None, delete("c")).is_err());
    // Lock commands go in `Many` entries, not here; and a lock named like a key is no clash
    // for a batch of locks.
    assert!(add(&mut batch, None, acquire("d", 1)).is_err());
    assert!(add(
        &mut batch,
        None,
        Command::CounterIncr {
            name: "n".into(),
            by: 1
        }
    )
    .is_err());
    let txn = Command::Txn {
        compares: vec![],
        success: vec![],
        failure: vec![],
    };
    assert!(add(&mut batch, None, txn).is_err());
    assert_eq!(batch.len(), 3);
    assert_eq!(batch.into_entry().map(|(kind, _)| kind), Some(Kind::Keys));

    let mut locks = Batch::default();
    assert!(add(&mut locks, None, acquire("a", 1)).is_ok());
    assert!(add(&mut locks, None, put("b", "1")).is_err());
    assert_eq!(locks.into_entry().map(|(kind, _)| kind), Some(Kind::Locks));
}

/// Applies `items` as one `Command::KeyWrites` entry; returns the items' responses.
fn key_writes(sm: &mut Sm, items: Vec<(Option<&str>, Command)>) -> Vec<Response> {
    let items = items
        .into_iter()
        .map(|(request_id, command)| Item {
            request_id: request_id.map(str::to_string),
            command,
        })
        .collect();
    match sm.apply(None, Command::KeyWrites { items }).outcome {
        Ok(Outcome::Many { responses }) => responses,
        other => panic!("a key-writes entry answered {other:?}"),
    }
}

fn guarded_put(key: &str, condition: Option<Condition>, fence: Option<Fence>) -> Command {
    Command::KvPut {
        key: key.into(),
        value: "v".into(),
        lease_id: None,
        condition,
        fence,
    }
}

#[test]
fn key_writes_apply_as_if_alone_at_the_entry_index() {
    let mut sm = Sm::new();
    let holder = sm.lease();
    let token = sm
        .apply(None, acquire("f", holder))
        .token()
        .expect("granted");
    let x_revision = sm.apply(None, put("x", "0")).revision;
    let fence = |token| {
        Some(Fence {
            lock: "f".into(),
            token,
        })
    };
    let responses = key_writes(
        &mut sm,
        vec![
            (Some("r1"), put("a", "1")),
            (
                None,
                guarded_put("x", Some(Condition::ModRevision(x_revision)), None),
            ),
            (
                None,
                guarded_put("y", Some(Condition::ModRevision(999)), None),
            ),
            (Some("r4"), guarded_put("z", None, fence(token))),
            (None, guarded_put("w", None, fence(token + 100))),
            (None, delete("gone")),
        ],
    );
    let index = sm.index;
    assert!(responses.iter().all(|r| r.revision == index));
    let ok: Vec<bool> = responses.iter().map(|r| r.outcome.is_ok()).collect();
    assert_eq!(ok, [true, true, false, true, false, true]);
    assert!(matches!(
        responses[2].outcome,
        Err(ApplyError::CompareFailed { .. })
    ));
    assert!(matches!(
        responses[4].outcome,
        Err(ApplyError::Fenced { .. })
    ));
    for key in ["a", "x", "z"] {
        let record = sm.state.keys.get(key).expect("written");
        assert_eq!(record.mod_revision, index, "{key}");
    }
    assert_eq!(sm.state.keys.get("a").expect("a").create_revision, index);
    assert_eq!(
        sm.state.keys.get("x").expect("x").create_revision,
        x_revision
    );
    assert!(sm.state.keys.get("y").is_none() && sm.state.keys.get("w").is_none());
    // One event per write that changed a key, numbered within the entry's revision.
    let events: Vec<(u64, u32)> = sm
        .state
        .events
        .range((index, 0)..(index + 1, 0))
        .map(|(position, _)| *position)
        .collect();
    assert_eq!(events, [(index, 0), (index, 1), (index, 2)]);
    // Each item's record is its own: a retry in a later, plain entry replays it.
    sm.apply(None, put("a", "2"));
    let replay = sm.apply(Some("r1"), put("a", "1"));
    assert!(replay.replayed, "{replay:?}");
    assert_eq!(replay.revision, index);
    assert_eq!(sm.state.keys.get("a").expect("a").value, "2");
}

/// What "as if alone" means, checked whole: the state after a `KeyWrites` entry equals the
/// state after its items applied as plain entries numbered alike.
#[test]
fn a_key_writes_entry_leaves_the_state_its_items_alone_would() {
    let mut sm = Sm::new();
    let lease = sm.lease();
    sm.apply(None, put("b", "old"));
    let items: Vec<Item> = [
        (Some("r1"), put("a", "1")),
        (None, delete("b")),
        (
            Some("r3"),
            Command::KvPut {
                key: "c".into(),
                value: "3".into(),
                lease_id: Some(lease),
                condition: Some(Condition::Absent),
                fence: None,
            },
        ),
        (
            None,
            guarded_put("d", Some(Condition::Value("no".into())), None),
        ),
    ]
    .into_iter()
    .map(|(request_id, command)| Item {
        request_id: request_id.map(str::to_string),
        command,
    })
    .collect();
    let index = sm.index + 1;
    let mut alone = sm.state.clone();
    for item in &items {
        let env = Envelope {
            now_ms: 1,
            request_id: item.request_id.clone(),
            command: item.command.clone(),
        };
        alone.apply(index, 1, &env);
    }
    sm.apply(None, Command::KeyWrites { items });
    assert_eq!(sm.state, alone);
}

#[test]
fn apply_refuses_in_key_writes_what_the_rule_does_not_admit() {
    let mut sm = Sm::new();
    let lease = sm.lease();
    let responses = key_writes(
        &mut sm,
        vec![
            (None, put("a", "1")),
            (None, delete("a")),
            (None, acquire("b", lease)),
            (None, put("c", "3")),
        ],
    );
    assert!(responses[0].outcome.is_ok());
    assert!(
        matches!(&responses[1].outcome, Err(ApplyError::Invalid { reason }) if reason.contains("named twice"))
    );
    assert!(
        matches!(&responses[2].outcome, Err(ApplyError::Invalid { reason }) if reason.contains("lock_acquire"))
    );
    assert!(responses[3].outcome.is_ok());
    assert!(sm.state.locks.get("b").is_none());
    assert_eq!(sm.state.keys.get("a").expect("a").value, "1");
    // And a key write is no item of a lock entry.
    let responses = sm.many(vec![(None, put("d", "4"))]);
    assert!(
        matches!(&responses[0].outcome, Err(ApplyError::Invalid { reason }) if reason.contains("kv_put"))
    );
    let nested = Command::As {
        principal: "alice".into(),
        token_id: None,
        command: Box::new(Command::KeyWrites { items: vec![] }),
    };
    assert!(sm.apply(None, nested).outcome.is_err());
}
