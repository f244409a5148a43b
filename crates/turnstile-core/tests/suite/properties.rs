//! Property tests: random command sequences keep every invariant, and two replicas applying
//! the same log end byte-identical (same encoding, same digest). Seeds are proptest's; a
//! failure prints the minimal sequence and is persisted under `proptest-regressions/`.

use proptest::prelude::*;
use turnstile_core::codec;
use turnstile_core::key_span::SpanEnd;
use turnstile_core::txn::{Compare, Operand, Order, TxnOp};
use turnstile_core::{many, Command, Condition, Envelope, Fence, Item, LockMode, State};

const NAMES: &[&str] = &["a", "b", "c"];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES).prop_map(str::to_string)
}

/// Lease ids and tokens are small log indexes, so picking from 1..64 hits real ones often.
fn id() -> impl Strategy<Value = u64> {
    1u64..64
}

fn condition() -> impl Strategy<Value = Option<Condition>> {
    prop_oneof![
        Just(None),
        Just(Some(Condition::Absent)),
        id().prop_map(|r| Some(Condition::ModRevision(r))),
        name().prop_map(|v| Some(Condition::Value(v))),
    ]
}

fn fence() -> impl Strategy<Value = Option<Fence>> {
    prop_oneof![
        Just(None),
        (name(), id()).prop_map(|(lock, token)| Some(Fence { lock, token }))
    ]
}

fn compare() -> impl Strategy<Value = Compare> {
    prop_oneof![
        name().prop_map(|key| Compare::Absent { key }),
        (name(), id()).prop_map(|(key, mod_revision)| Compare::ModRevision { key, mod_revision }),
        (name(), 1u64..4).prop_map(|(key, version)| Compare::Version { key, version }),
        (name(), name()).prop_map(|(key, value)| Compare::Value { key, value }),
        (name(), id()).prop_map(|(lock, token)| Compare::Fence(Fence { lock, token })),
        (name(), order(), 0u64..4).prop_map(|(key, order, version)| Compare::Ordered {
            key,
            order,
            of: Operand::Version(version),
        }),
        (name(), order(), name()).prop_map(|(key, order, value)| Compare::Ordered {
            key,
            order,
            of: Operand::Value(value),
        }),
        (name(), order(), 0u64..4).prop_map(|(key, order, lease)| Compare::Ordered {
            key,
            order,
            of: Operand::Lease(lease),
        }),
    ]
}

fn order() -> impl Strategy<Value = Order> {
    prop::sample::select(&[Order::Equal, Order::NotEqual, Order::Greater, Order::Less][..])
}

/// Branches often name a key twice (refused whole) and name leases that are gone.
fn txn_op() -> impl Strategy<Value = TxnOp> {
    prop_oneof![
        (name(), name(), prop::option::of(id())).prop_map(|(key, value, lease_id)| TxnOp::Put {
            key,
            value,
            lease_id
        }),
        name().prop_map(|key| TxnOp::Delete { key }),
        name().prop_map(|key| TxnOp::Get { key }),
        (name(), -5i64..5).prop_map(|(counter, by)| TxnOp::Incr { counter, by }),
        (
            name(),
            prop::option::of(name()),
            prop::option::of(id()),
            any::<bool>()
        )
            .prop_map(|(key, value, lease_id, keep_lease)| TxnOp::PutKeeping {
                key,
                value,
                lease_id,
                keep_lease,
            }),
        // Between two names, or from one on; often over a key another op writes (refused).
        (name(), prop::option::of(name()), any::<bool>()).prop_map(|(start, end, prev)| {
            TxnOp::DeleteRange {
                start,
                end: end.map_or(SpanEnd::All, SpanEnd::Before),
                prev,
            }
        }),
    ]
}

fn waiter() -> impl Strategy<Value = String> {
    prop::sample::select(&["r1", "r2", "r3", "r4", "r5"][..]).prop_map(str::to_string)
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just(Command::Tick),
        name().prop_map(|cluster_id| Command::InitCluster { cluster_id }),
        (1_000u64..5_000).prop_map(|ttl_ms| Command::LeaseGrant { ttl_ms }),
        prop::collection::vec(id(), 0..4)
            .prop_map(|lease_ids| Command::LeaseKeepalive { lease_ids }),
        id().prop_map(|lease_id| Command::LeaseRevoke { lease_id }),
        prop::collection::vec(id(), 0..4).prop_map(|lease_ids| Command::Expire { lease_ids }),
        lock_acquire(),
        lock_release(id()),
        kv_put(),
        kv_delete(),
        (name(), -5i64..5).prop_map(|(name, by)| Command::CounterIncr { name, by }),
        (
            prop::collection::vec(name(), 1..3),
            id(),
            prop::bool::ANY,
            prop::option::of(1u32..3),
            prop::bool::ANY
        )
            .prop_map(
                |(names, lease_id, shared, permits, wait)| Command::Acquire {
                    names,
                    lease_id,
                    mode: if shared {
                        LockMode::Shared
                    } else {
                        LockMode::Exclusive
                    },
                    permits,
                    wait,
                }
            ),
        waiter().prop_map(|waiter_id| Command::Cancel { waiter_id }),
        (waiter(), prop::collection::vec(id(), 0..3))
            .prop_map(|(waiter_id, cycle)| Command::AbortWaiter { waiter_id, cycle }),
        prop::collection::vec(waiter(), 0..3).prop_map(|request_ids| Command::Ack { request_ids }),
        (name(), id(), name(), 0u64..3).prop_map(|(name, lease_id, value, wait_ms)| {
            Command::Campaign {
                name,
                lease_id,
                value,
                wait_ms,
            }
        }),
        (name(), id(), id(), name()).prop_map(|(name, lease_id, token, value)| {
            Command::Proclaim {
                name,
                lease_id,
                token,
                value,
            }
        }),
        (name(), id(), id()).prop_map(|(name, lease_id, token)| Command::Resign {
            name,
            lease_id,
            token
        }),
        (
            prop::collection::vec(compare(), 0..3),
            prop::collection::vec(txn_op(), 0..4),
            prop::collection::vec(txn_op(), 0..3)
        )
            .prop_map(|(compares, success, failure)| Command::Txn {
                compares,
                success,
                failure
            }),
        acquire_for(),
    ]
}

fn lock_acquire() -> impl Strategy<Value = Command> {
    (name(), id()).prop_map(|(name, lease_id)| Command::LockAcquire { name, lease_id })
}

fn lock_release(token: impl Strategy<Value = u64>) -> impl Strategy<Value = Command> {
    (name(), id(), token).prop_map(|(name, lease_id, token)| Command::LockRelease {
        name,
        lease_id,
        token,
    })
}

fn acquire_for() -> impl Strategy<Value = Command> {
    (prop::collection::vec(name(), 1..3), id(), 0u64..3).prop_map(|(names, lease_id, wait_ms)| {
        Command::AcquireFor {
            names,
            lease_id,
            mode: LockMode::Exclusive,
            permits: None,
            wait_ms,
        }
    })
}

fn kv_put() -> impl Strategy<Value = Command> {
    (name(), name(), prop::option::of(id()), condition(), fence()).prop_map(
        |(key, value, lease_id, condition, fence)| Command::KvPut {
            key,
            value,
            lease_id,
            condition,
            fence,
        },
    )
}

fn kv_delete() -> impl Strategy<Value = Command> {
    (name(), condition(), fence()).prop_map(|(key, condition, fence)| Command::KvDelete {
        key,
        condition,
        fence,
    })
}

/// Two to four items of `item`, each with a request id from the small pool or none.
fn items(item: impl Strategy<Value = Command>) -> impl Strategy<Value = Vec<Item>> {
    prop::collection::vec((prop::option::of(waiter()), item), 2..5).prop_map(|items| {
        items
            .into_iter()
            .map(|(request_id, command)| Item {
                request_id,
                command,
            })
            .collect()
    })
}

/// A `Command::KeyWrites` entry of random key writes: often naming a key twice (apply
/// refuses the later item), sometimes with an item it does not admit.
fn key_writes() -> impl Strategy<Value = Command> {
    let item = prop_oneof![
        5 => kv_put(),
        3 => kv_delete(),
        1 => lock_acquire(),
    ];
    items(item).prop_map(|items| Command::KeyWrites { items })
}

/// A lock command `Command::Many` admits. A release's token 0 stands for the index of its
/// own entry (`replay` puts it in): a release of a hold made by the same entry, which no
/// client can know yet and the rule refuses.
fn lock_command() -> impl Strategy<Value = Command> {
    let token = prop_oneof![2 => id(), 1 => Just(0)];
    prop_oneof![lock_acquire(), lock_release(token), acquire_for()]
}

/// A `Command::Many` entry of random lock commands: often naming a lock twice (apply refuses
/// the later item), sometimes with an item `Many` does not admit.
fn many() -> impl Strategy<Value = Command> {
    let item = prop_oneof![
        9 => lock_command(),
        1 => id().prop_map(|lease_id| Command::LeaseRevoke { lease_id }),
    ];
    items(item).prop_map(|items| Command::Many { items })
}

/// A command, or sometimes several lock commands or key writes in one entry.
fn entry_command() -> impl Strategy<Value = Command> {
    prop_oneof![5 => command(), 1 => many(), 1 => key_writes()]
}

/// One log entry: time step, optional request id from a tiny pool (to force replays and
/// reuse), the command, and whether it is a blank entry instead.
fn entry() -> impl Strategy<Value = (u64, Option<String>, Command, bool)> {
    (
        0u64..1_500,
        prop::option::of(waiter()),
        entry_command(),
        prop::bool::weighted(0.05),
    )
}

/// `command` with each release token 0 of a `Command::Many` item replaced by `index`.
fn own_index_tokens(command: &Command, index: u64) -> Command {
    let mut command = command.clone();
    if let Command::Many { items } = &mut command {
        for item in items {
            if let Command::LockRelease {
                token: token @ 0, ..
            } = &mut item.command
            {
                *token = index;
            }
        }
    }
    command
}

fn replay(log: &[(u64, Option<String>, Command, bool)]) -> (State, Vec<turnstile_core::Response>) {
    let mut state = State::default();
    let mut now_ms = 0;
    let mut responses = Vec::new();
    for (i, (step_ms, request_id, command, blank)) in log.iter().enumerate() {
        let index = i as u64 + 1;
        now_ms += step_ms;
        if *blank {
            state.apply_blank(index);
        } else {
            let env = Envelope {
                now_ms,
                request_id: request_id.clone(),
                command: own_index_tokens(command, index),
            };
            let command = &env.command;
            // What the entry would leave if its command did nothing (expiry still runs).
            let idle = matches!(command, Command::Txn { .. }).then(|| {
                let mut idle = state.clone();
                let tick = Envelope {
                    now_ms,
                    request_id: None,
                    command: Command::Tick,
                };
                idle.apply(index, 1 + index / 20, &tick);
                idle
            });
            let applied = state.apply_full(index, 1 + index / 20, &env);
            // A refused transaction changes nothing: no op of its branch half-applied.
            if let (Some(idle), Err(e)) = (idle, &applied.response.outcome) {
                assert!(
                    idle.keys == state.keys
                        && idle.counters == state.counters
                        && idle.events == state.events
                        && idle.leases == state.leases,
                    "entry {index}: refused txn ({e}) changed the state"
                );
            }
            // Every grant this entry announced (to its requester or to a waiter) is a hold
            // that exists once the entry has applied: nothing is granted and taken back in
            // one entry, so a granted token is always the lock's real grant.
            let notices = applied.notices.iter().map(|n| &n.response);
            let answers = many::answered(command, &applied.response);
            for r in answers
                .iter()
                .map(|(_, r)| *r)
                .chain(notices)
                .filter(|r| !r.replayed)
            {
                if let Ok(turnstile_core::Outcome::Granted {
                    names,
                    token,
                    lease_id,
                    ..
                }) = &r.outcome
                {
                    for n in names {
                        let held = state.locks.get(n).is_some_and(|l| {
                            l.holders
                                .iter()
                                .any(|h| h.token == *token && h.lease_id == *lease_id)
                        });
                        assert!(held, "entry {index} granted {n}@{token} to lease {lease_id} but the hold is gone");
                    }
                }
            }
            // One entry of several lock commands never grants an exclusive lock twice, so
            // its index stays a unique token (`turnstile_core::many`).
            if matches!(command, Command::Many { .. }) {
                let mut granted = std::collections::BTreeSet::new();
                for (_, event) in state.events.range((index, 0)..(index + 1, 0)) {
                    if let turnstile_core::Event::LockGranted {
                        name,
                        mode: LockMode::Exclusive,
                        ..
                    } = &**event
                    {
                        assert!(
                            granted.insert(name.clone()),
                            "entry {index} granted {name} twice"
                        );
                    }
                }
            }
            responses.extend(answers.into_iter().map(|(_, r)| r.clone()));
        }
        if let Err(e) = state.check_invariants() {
            panic!("entry {index} {command:?}: {e}");
        }
    }
    (state, responses)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_logs_keep_invariants_and_replicas_agree(log in prop::collection::vec(entry(), 1..200)) {
        let (a, ra) = replay(&log);
        let (b, rb) = replay(&log);
        prop_assert_eq!(&ra, &rb);
        let ea = codec::encode_state(&a).expect("encodes");
        let eb = codec::encode_state(&b).expect("encodes");
        prop_assert_eq!(&ea, &eb);
        prop_assert_eq!(codec::state_digest(&a), codec::state_digest(&b));
        // A snapshot round trip is lossless.
        let back = codec::decode_state(&ea).expect("decodes");
        prop_assert_eq!(&back, &a);
    }

    #[test]
    fn exclusive_tokens_only_grow(log in prop::collection::vec(entry(), 1..200)) {
        let (_, responses) = replay(&log);
        let mut last: std::collections::BTreeMap<String, u64> = Default::default();
        for r in responses.iter().filter(|r| !r.replayed) {
            if let Ok(turnstile_core::Outcome::Granted { names, token, mode: turnstile_core::LockMode::Exclusive, .. }) = &r.outcome {
                let name = &names[0];
                let prev = last.insert(name.clone(), *token);
                prop_assert!(prev.is_none_or(|p| p < *token), "token {} after {:?} on {}", token, prev, name);
                prop_assert_eq!(*token, r.revision);
            }
        }
    }
}
