//! Golden encodings. The files under `tests/golden/` were written by this version of the
//! binary; every later version must keep decoding them to the same values, or logs and
//! snapshots on users' disks become unreadable. Regenerate (only when adding new goldens, never
//! to "fix" a failure) with `TURNSTILE_BLESS=1 cargo test -p turnstile-core --test suite golden`;
//! blessing writes only files that do not exist yet, so an old golden is never overwritten.

use std::path::PathBuf;

use turnstile_core::auth::{Access, Kind, Permission, Quotas, ROOT};
use turnstile_core::codec;
use turnstile_core::key_span::SpanEnd;
use turnstile_core::txn::{Compare, Operand, Order, TxnOp};
use turnstile_core::{Command, Condition, Envelope, Fence, Item, LockMode, State};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn sample_envelopes() -> Vec<(&'static str, Envelope)> {
    let env = |request_id: Option<&str>, command| Envelope {
        now_ms: 123_456,
        request_id: request_id.map(str::to_string),
        command,
    };
    vec![
        (
            "v1_as",
            env(
                Some("alice r1"),
                Command::As {
                    principal: "alice".into(),
                    token_id: Some("0123456789abcdef".into()),
                    command: Box::new(Command::LeaseGrant { ttl_ms: 5_000 }),
                },
            ),
        ),
        ("v1_auth_put_role", env(None, auth_put_role())),
        ("v1_auth_put_user", env(None, auth_put_user())),
        ("v1_auth_create_token", env(None, auth_create_token())),
        (
            "v1_auth_delete_token",
            env(
                None,
                Command::AuthDeleteToken {
                    token_id: "0123456789abcdef".into(),
                },
            ),
        ),
        (
            "v1_auth_delete_user",
            env(
                None,
                Command::AuthDeleteUser {
                    user: "alice".into(),
                },
            ),
        ),
        (
            "v1_auth_delete_role",
            env(
                None,
                Command::AuthDeleteRole {
                    role: "rw-a".into(),
                },
            ),
        ),
        ("v1_tick", env(None, Command::Tick)),
        (
            "v1_init_cluster",
            env(
                None,
                Command::InitCluster {
                    cluster_id: "c0ffee".into(),
                },
            ),
        ),
        (
            "v1_lease_grant",
            env(Some("req-1"), Command::LeaseGrant { ttl_ms: 10_000 }),
        ),
        (
            "v1_lease_keepalive",
            env(
                None,
                Command::LeaseKeepalive {
                    lease_ids: vec![3, 4],
                },
            ),
        ),
        (
            "v1_lease_revoke",
            env(None, Command::LeaseRevoke { lease_id: 3 }),
        ),
        (
            "v1_expire",
            env(None, Command::Expire { lease_ids: vec![3] }),
        ),
        (
            "v1_lock_acquire",
            env(
                Some("req-2"),
                Command::LockAcquire {
                    name: "jobs".into(),
                    lease_id: 3,
                },
            ),
        ),
        (
            "v1_lock_release",
            env(
                None,
                Command::LockRelease {
                    name: "jobs".into(),
                    lease_id: 3,
                    token: 7,
                },
            ),
        ),
        (
            "v1_kv_put",
            env(
                None,
                Command::KvPut {
                    key: "k".into(),
                    value: "v".into(),
                    lease_id: Some(3),
                    condition: Some(Condition::ModRevision(5)),
                    fence: Some(Fence {
                        lock: "jobs".into(),
                        token: 7,
                    }),
                },
            ),
        ),
        (
            "v1_kv_put_absent",
            env(
                None,
                Command::KvPut {
                    key: "k".into(),
                    value: "v".into(),
                    lease_id: None,
                    condition: Some(Condition::Absent),
                    fence: None,
                },
            ),
        ),
        (
            "v1_kv_delete",
            env(
                None,
                Command::KvDelete {
                    key: "k".into(),
                    condition: Some(Condition::Value("v".into())),
                    fence: None,
                },
            ),
        ),
        (
            "v1_counter_incr",
            env(
                None,
                Command::CounterIncr {
                    name: "seq".into(),
                    by: -2,
                },
            ),
        ),
        (
            "v1_acquire_many_wait",
            env(
                Some("w-1"),
                Command::Acquire {
                    names: vec!["a".into(), "b".into()],
                    lease_id: 3,
                    mode: LockMode::Exclusive,
                    permits: None,
                    wait: true,
                },
            ),
        ),
        (
            "v1_acquire_shared",
            env(
                Some("w-2"),
                Command::Acquire {
                    names: vec!["a".into()],
                    lease_id: 3,
                    mode: LockMode::Shared,
                    permits: Some(1),
                    wait: false,
                },
            ),
        ),
        (
            "v1_cancel",
            env(
                None,
                Command::Cancel {
                    waiter_id: "w-1".into(),
                },
            ),
        ),
        (
            "v1_abort_waiter",
            env(
                None,
                Command::AbortWaiter {
                    waiter_id: "w-1".into(),
                    cycle: vec![3, 4],
                },
            ),
        ),
        (
            "v1_acquire_for",
            env(
                Some("req-3"),
                Command::AcquireFor {
                    names: vec!["a".into(), "b".into()],
                    lease_id: 3,
                    mode: LockMode::Shared,
                    permits: Some(2),
                    wait_ms: 30_000,
                },
            ),
        ),
        (
            "v3_campaign",
            env(
                Some("req-4"),
                Command::Campaign {
                    name: "primary".into(),
                    lease_id: 3,
                    value: "db-1:5432".into(),
                    wait_ms: 30_000,
                },
            ),
        ),
        (
            "v3_proclaim",
            env(
                None,
                Command::Proclaim {
                    name: "primary".into(),
                    lease_id: 3,
                    token: 7,
                    value: "db-2:5432".into(),
                },
            ),
        ),
        (
            "v3_resign",
            env(
                None,
                Command::Resign {
                    name: "primary".into(),
                    lease_id: 3,
                    token: 7,
                },
            ),
        ),
        (
            "v1_txn",
            env(
                Some("req-4"),
                Command::Txn {
                    compares: vec![
                        Compare::Absent { key: "a".into() },
                        Compare::ModRevision {
                            key: "k".into(),
                            mod_revision: 5,
                        },
                        Compare::Version {
                            key: "k".into(),
                            version: 2,
                        },
                        Compare::Value {
                            key: "k".into(),
                            value: "v".into(),
                        },
                        Compare::Fence(Fence {
                            lock: "jobs".into(),
                            token: 7,
                        }),
                    ],
                    success: vec![
                        TxnOp::Put {
                            key: "k".into(),
                            value: "w".into(),
                            lease_id: Some(3),
                        },
                        TxnOp::Delete { key: "a".into() },
                        TxnOp::Get { key: "k".into() },
                        TxnOp::Incr {
                            counter: "seq".into(),
                            by: -2,
                        },
                    ],
                    failure: vec![TxnOp::Get { key: "k".into() }],
                },
            ),
        ),
        (
            "v1_ack",
            env(
                None,
                Command::Ack {
                    request_ids: vec!["req-1".into(), "req-2".into()],
                },
            ),
        ),
        (
            "v2_txn_create_revision",
            env(
                None,
                Command::Txn {
                    compares: vec![Compare::CreateRevision {
                        key: "svc/1a".into(),
                        create_revision: 12,
                    }],
                    success: vec![TxnOp::Delete {
                        key: "svc/1a".into(),
                    }],
                    failure: vec![],
                },
            ),
        ),
        (
            "v4_auth_change_if",
            env(
                None,
                Command::AuthChangeIf {
                    auth_revision: 41,
                    change: Box::new(Command::AuthPutUser {
                        user: "alice".into(),
                        roles: vec!["etcd-r".into()],
                        quotas: Quotas::default(),
                    }),
                },
            ),
        ),
        (
            "v5_many",
            env(
                None,
                Command::Many {
                    items: vec![
                        Item {
                            request_id: Some("alice r7".into()),
                            command: Command::AcquireFor {
                                names: vec!["jobs/a".into(), "jobs/b".into()],
                                lease_id: 17,
                                mode: LockMode::Exclusive,
                                permits: None,
                                wait_ms: 2_000,
                            },
                        },
                        Item {
                            request_id: None,
                            command: Command::As {
                                principal: "bob".into(),
                                token_id: None,
                                command: Box::new(Command::LockRelease {
                                    name: "jobs/c".into(),
                                    lease_id: 18,
                                    token: 42,
                                }),
                            },
                        },
                    ],
                },
            ),
        ),
        (
            "v6_key_writes",
            env(
                None,
                Command::KeyWrites {
                    items: vec![
                        Item {
                            request_id: Some("alice w1".into()),
                            command: Command::As {
                                principal: "alice".into(),
                                token_id: Some("t9".into()),
                                command: Box::new(Command::KvPut {
                                    key: "cfg/a".into(),
                                    value: "v1".into(),
                                    lease_id: Some(17),
                                    condition: Some(Condition::ModRevision(12)),
                                    fence: Some(Fence {
                                        lock: "cfg".into(),
                                        token: 40,
                                    }),
                                }),
                            },
                        },
                        Item {
                            request_id: None,
                            command: Command::KvDelete {
                                key: "cfg/b".into(),
                                condition: Some(Condition::Absent),
                                fence: None,
                            },
                        },
                    ],
                },
            ),
        ),
        (
            "v4_auth_set_user_roles",
            env(
                None,
                Command::AuthSetUserRoles {
                    user: "alice".into(),
                    roles: vec!["etcd-r".into(), "etcd-w".into()],
                },
            ),
        ),
        (
            "v3_txn_etcd_ops",
            env(
                None,
                Command::Txn {
                    compares: vec![
                        Compare::Ordered {
                            key: "cfg/a".into(),
                            order: Order::Less,
                            of: Operand::ModRevision(9),
                        },
                        Compare::Ordered {
                            key: "cfg/b".into(),
                            order: Order::NotEqual,
                            of: Operand::Value("x".into()),
                        },
                        Compare::Ordered {
                            key: "cfg0".into(),
                            order: Order::Greater,
                            of: Operand::Lease(0),
                        },
                    ],
                    success: vec![
                        TxnOp::DeleteRange {
                            start: "cfg/".into(),
                            end: SpanEnd::Before("cfg0".into()),
                            prev: true,
                        },
                        TxnOp::PutKeeping {
                            key: "cfg0".into(),
                            value: None,
                            lease_id: Some(4),
                            keep_lease: false,
                        },
                    ],
                    failure: vec![TxnOp::DeleteRange {
                        start: "old".into(),
                        end: SpanEnd::All,
                        prev: false,
                    }],
                },
            ),
        ),
    ]
}

/// A state with one of everything, built by applying entries.
fn sample_state() -> State {
    let cmds = vec![
        (
            None,
            Command::InitCluster {
                cluster_id: "c0ffee".into(),
            },
        ),
        (Some("grant"), Command::LeaseGrant { ttl_ms: 60_000 }), // lease 2
        (
            Some("acq"),
            Command::LockAcquire {
                name: "jobs".into(),
                lease_id: 2,
            },
        ),
        (
            None,
            Command::KvPut {
                key: "bound".into(),
                value: "v".into(),
                lease_id: Some(2),
                condition: None,
                fence: None,
            },
        ),
        (
            None,
            Command::KvPut {
                key: "plain".into(),
                value: "v".into(),
                lease_id: None,
                condition: Some(Condition::Absent),
                fence: None,
            },
        ),
        (
            Some("incr"),
            Command::CounterIncr {
                name: "seq".into(),
                by: 41,
            },
        ),
        (None, Command::LeaseGrant { ttl_ms: 1_000 }), // lease 7, expires below
        (None, Command::Tick),
        (Some("grant2"), Command::LeaseGrant { ttl_ms: 60_000 }), // lease 9
        (
            Some("wait"),
            Command::Acquire {
                names: vec!["jobs".into()],
                lease_id: 9,
                mode: LockMode::Exclusive,
                permits: None,
                wait: true,
            },
        ),
        (
            None,
            Command::Acquire {
                names: vec!["sem".into()],
                lease_id: 9,
                mode: LockMode::Exclusive,
                permits: Some(3),
                wait: false,
            },
        ),
    ];
    let mut state = State::default();
    for (i, (request_id, command)) in cmds.into_iter().enumerate() {
        let index = i as u64 + 1;
        let env = Envelope {
            now_ms: 1_000 + 200 * index,
            request_id: request_id.map(str::to_string),
            command,
        };
        state.apply(index, 1, &env);
    }
    state
}

fn bless() -> bool {
    std::env::var_os("TURNSTILE_BLESS").is_some()
}

#[test]
fn envelopes_decode_from_golden_files() {
    for (name, env) in sample_envelopes() {
        let path = golden_dir().join(format!("{name}.bin"));
        if bless() && !path.exists() {
            std::fs::write(&path, codec::encode_envelope(&env).expect("encodes"))
                .expect("write golden");
        }
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let decoded = codec::decode_envelope(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, env, "{name}");
    }
}

#[test]
fn state_decodes_from_golden_file() {
    let path = golden_dir().join("v1_state.bin");
    let state = sample_state();
    assert!(
        !state.locks.is_empty()
            && state.keys.len() == 2
            && state.requests.len() == 5
            && state.tickets.len() == 1
            && !state.events.is_empty(),
        "sample state is not trivial: {state:?}"
    );
    // Written by a version-1 binary (before auth); never blessed again.
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let decoded = codec::decode_state(&bytes).expect("golden state decodes");
    assert_eq!(decoded, state);
    decoded
        .check_invariants()
        .expect("golden state is consistent");
}

/// The version-2 frame: the sample state plus users, roles, a token and owned leases and keys.
#[test]
fn state_with_auth_decodes_from_golden_file() {
    let path = golden_dir().join("v2_state.bin");
    let mut state = sample_state();
    let as_ = |principal: &str, command| Command::As {
        principal: principal.into(),
        token_id: None,
        command: Box::new(command),
    };
    let cmds = [
        as_(ROOT, auth_put_role()),
        as_(ROOT, auth_put_user()),
        as_(ROOT, auth_create_token()),
        as_("alice", Command::LeaseGrant { ttl_ms: 60_000 }),
        as_(
            "alice",
            Command::KvPut {
                key: "a/k".into(),
                value: "v".into(),
                lease_id: None,
                condition: None,
                fence: None,
            },
        ),
    ];
    let first = state.applied_index + 1;
    for (i, command) in cmds.into_iter().enumerate() {
        let index = first + i as u64;
        let env = Envelope {
            now_ms: 10_000 + index,
            request_id: Some(format!("alice r{i}")),
            command,
        };
        let r = state.apply(index, 2, &env);
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    assert_eq!(state.auth.leases_of("alice"), 1);
    if bless() && !path.exists() {
        std::fs::write(&path, codec::encode_state(&state).expect("encodes")).expect("write golden");
    }
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let decoded = codec::decode_state(&bytes).expect("golden state decodes");
    assert_eq!(decoded, state);
    decoded
        .check_invariants()
        .expect("golden state is consistent");
}

/// The version-3 frame: the sample state plus an election with a leader (who proclaimed) and
/// a queued candidate, and their events.
#[test]
fn state_with_campaigns_decodes_from_golden_file() {
    let path = golden_dir().join("v3_state.bin");
    let mut state = sample_state();
    let first = state.applied_index + 1;
    let campaign = |lease_id, value: &str| Command::Campaign {
        name: "primary".into(),
        lease_id,
        value: value.into(),
        wait_ms: 30_000,
    };
    let cmds = [
        (None, Command::LeaseGrant { ttl_ms: 60_000 }),
        (None, Command::LeaseGrant { ttl_ms: 60_000 }),
        (Some("c1"), campaign(first, "db-1")),
        (Some("c2"), campaign(first + 1, "db-2")),
        (
            None,
            Command::Proclaim {
                name: "primary".into(),
                lease_id: first,
                token: first + 2,
                value: "db-1b".into(),
            },
        ),
    ];
    for (i, (request_id, command)) in cmds.into_iter().enumerate() {
        let index = first + i as u64;
        let env = Envelope {
            now_ms: 20_000 + index,
            request_id: request_id.map(str::to_string),
            command,
        };
        let r = state.apply(index, 3, &env);
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    assert_eq!(state.campaigns.len(), 2);
    if bless() && !path.exists() {
        std::fs::write(&path, codec::encode_state(&state).expect("encodes")).expect("write golden");
    }
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let decoded = codec::decode_state(&bytes).expect("golden state decodes");
    assert_eq!(decoded, state);
    let leader = decoded.election_leader("primary").expect("a leader");
    assert_eq!((leader.holder.token, leader.value), (first + 2, "db-1b"));
    decoded
        .check_invariants()
        .expect("golden state is consistent");
}

fn auth_put_role() -> Command {
    Command::AuthPutRole {
        role: "rw-a".into(),
        permissions: vec![Permission {
            kind: Kind::Key,
            prefix: "a/".into(),
            access: Access::Write,
        }],
        metrics: true,
    }
}

fn auth_put_user() -> Command {
    Command::AuthPutUser {
        user: "alice".into(),
        roles: vec!["rw-a".into()],
        quotas: Quotas {
            leases: Some(5),
            ..Quotas::default()
        },
    }
}

fn auth_create_token() -> Command {
    Command::AuthCreateToken {
        token_id: "0123456789abcdef".into(),
        user: "alice".into(),
        secret_sha256: [9; 32],
        ttl_ms: Some(3_600_000),
    }
}

#[test]
fn newer_state_versions_are_refused_not_misread() {
    let mut bytes = codec::encode(&(codec::STATE_FORMAT_VERSION + 1, 0u8)).expect("encodes");
    bytes.extend_from_slice(&[0; 16]);
    assert!(matches!(
        codec::decode_state(&bytes),
        Err(codec::CodecError::UnknownStateVersion { .. })
    ));
}
