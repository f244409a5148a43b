//! `Command::Many`: what the leader gathers, and what apply does with each item.

use super::{answered, Batch, ITEMS_MAX, ITEM_BYTES_MAX};
use crate::command::{Command, Envelope, Item, LockMode};
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

/// `ITEM_BYTES_MAX` bounds the real encoding, not just the estimate: a batch filled with the
/// largest items the API lets through encodes to no more than the bound plus the envelope.
#[test]
fn a_full_batch_encodes_within_the_bound() {
    let max = |c: char, len: usize| std::iter::repeat_n(c, len).collect::<String>();
    for names_per_item in [1, 8, 64] {
        let mut batch = Batch::default();
        for i in 0..ITEMS_MAX {
            let names = (0..names_per_item)
                .map(|j| {
                    format!(
                        "{i:04}{j:02}{}",
                        max('n', crate::limits::LOCK_NAME_BYTES_MAX - 6)
                    )
                })
                .collect();
            let command = Command::As {
                principal: max('p', 256),
                token_id: Some(max('t', 64)),
                command: Box::new(Command::AcquireFor {
                    names,
                    lease_id: u64::MAX,
                    mode: LockMode::Shared,
                    permits: Some(u32::MAX),
                    wait_ms: u64::MAX,
                }),
            };
            let request_id = format!(
                "{i:04}{}",
                max('r', crate::limits::REQUEST_ID_BYTES_MAX - 4)
            );
            let _ = add(&mut batch, Some(request_id), command);
        }
        assert!(!batch.is_empty());
        let env = Envelope {
            now_ms: u64::MAX,
            request_id: None,
            command: Command::Many {
                items: batch.into_items(),
            },
        };
        let bytes = crate::codec::encode_envelope(&env).expect("encodes").len();
        assert!(
            bytes <= ITEM_BYTES_MAX + 64,
            "{names_per_item} names an item: {bytes} bytes"
        );
    }
}
