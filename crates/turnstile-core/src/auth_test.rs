//! Tenancy in `apply`: permissions judged at apply time, ownership of leases and tokens,
//! redaction of what another tenant holds, per-principal quotas, and the auth state's place
//! in the encoded state. Invariants are checked after every entry.

use crate::auth::{scoped_request_id, Access, Kind, Permission, Quotas, ROOT};
use crate::codec;
use crate::command::{Command, Envelope, Fence};
use crate::events::Event;
use crate::response::{ApplyError, Outcome, Response};
use crate::state::State;

struct Sm {
    state: State,
    index: u64,
}

impl Sm {
    fn new() -> Sm {
        Sm {
            state: State::default(),
            index: 0,
        }
    }

    fn apply(&mut self, request_id: Option<String>, command: Command) -> Response {
        self.index += 1;
        let env = Envelope {
            now_ms: self.index * 10,
            request_id,
            command,
        };
        let r = self.state.apply(self.index, 1, &env);
        if let Err(e) = self.state.check_invariants() {
            panic!("after {env:?}: {e}");
        }
        r
    }

    fn run(&mut self, principal: &str, command: Command) -> Result<Outcome, ApplyError> {
        self.apply(None, as_(principal, command)).outcome
    }

    fn ok(&mut self, principal: &str, command: Command) -> Outcome {
        match self.run(principal, command.clone()) {
            Ok(o) => o,
            Err(e) => panic!("{principal} {command:?}: {e}"),
        }
    }

    fn lease(&mut self, principal: &str) -> u64 {
        match self.ok(principal, Command::LeaseGrant { ttl_ms: 60_000 }) {
            Outcome::LeaseGranted { lease_id, .. } => lease_id,
            other => panic!("{other:?}"),
        }
    }

    fn lock(&mut self, principal: &str, name: &str, lease_id: u64) -> u64 {
        match self.ok(principal, acquire(name, lease_id)) {
            Outcome::Granted { token, .. } => token,
            other => panic!("{other:?}"),
        }
    }

    /// Root makes role `rw-a` (write on locks, keys and counters under `a/`), `r-a` (read
    /// on the same) and users alice (rw-a), bob (rw-b: write under `b/`), reader (r-a).
    fn tenants() -> Sm {
        let mut sm = Sm::new();
        for (role, prefix, access) in [
            ("rw-a", "a/", Access::Write),
            ("rw-b", "b/", Access::Write),
            ("r-a", "a/", Access::Read),
        ] {
            let permissions = [Kind::Lock, Kind::Key, Kind::Counter]
                .into_iter()
                .map(|kind| Permission {
                    kind,
                    prefix: prefix.into(),
                    access,
                })
                .collect();
            sm.ok(
                ROOT,
                Command::AuthPutRole {
                    role: role.into(),
                    permissions,
                    metrics: false,
                },
            );
        }
        for (user, role) in [("alice", "rw-a"), ("bob", "rw-b"), ("reader", "r-a")] {
            sm.ok(ROOT, user_cmd(user, role, Quotas::default()));
        }
        sm
    }
}

fn as_(principal: &str, command: Command) -> Command {
    Command::As {
        principal: principal.into(),
        token_id: None,
        command: Box::new(command),
    }
}

fn user_cmd(user: &str, role: &str, quotas: Quotas) -> Command {
    Command::AuthPutUser {
        user: user.into(),
        roles: vec![role.into()],
        quotas,
    }
}

fn acquire(name: &str, lease_id: u64) -> Command {
    Command::LockAcquire {
        name: name.into(),
        lease_id,
    }
}

fn put(key: &str, fence: Option<Fence>) -> Command {
    Command::KvPut {
        key: key.into(),
        value: "v".into(),
        lease_id: None,
        condition: None,
        fence,
    }
}

fn denied(r: Result<Outcome, ApplyError>) -> bool {
    matches!(r, Err(ApplyError::PermissionDenied { .. }))
}

#[test]
fn only_root_manages_auth() {
    let mut sm = Sm::tenants();
    let change = Command::AuthDeleteUser { user: "bob".into() };
    assert!(denied(sm.run("alice", change.clone())));
    // Unwrapped (no authenticated principal), an auth change is not a client command.
    let r = sm.apply(None, change.clone()).outcome;
    assert!(matches!(r, Err(ApplyError::Invalid { .. })), "{r:?}");
    assert!(matches!(sm.ok(ROOT, change), Outcome::AuthChanged { .. }));
    assert!(!sm.state.auth.users.contains_key("bob"));
}

/// A change computed from an auth revision applies only at that revision: of two
/// read-modify-writes from the same revision, the second is refused, not lost in silence.
#[test]
fn a_conditional_auth_change_applies_only_at_its_revision() {
    let mut sm = Sm::tenants();
    let seen = sm.state.auth.revision;
    let grant = |role: &str| Command::AuthChangeIf {
        auth_revision: seen,
        change: Box::new(user_cmd("alice", role, Quotas::default())),
    };
    assert!(denied(sm.run("alice", grant("rw-b"))));
    assert!(matches!(
        sm.ok(ROOT, grant("rw-b")),
        Outcome::AuthChanged { .. }
    ));
    assert_eq!(sm.state.auth.users["alice"].roles, vec!["rw-b".to_string()]);
    let r = sm.run(ROOT, grant("r-a"));
    assert!(
        matches!(&r, Err(ApplyError::CompareFailed { key }) if key == "auth_revision"),
        "{r:?}"
    );
    assert_eq!(sm.state.auth.users["alice"].roles, vec!["rw-b".to_string()]);
    // A user's roles alone: its quotas stay.
    let quotas = Quotas {
        keys: Some(7),
        ..Quotas::default()
    };
    sm.ok(ROOT, user_cmd("carol", "r-a", quotas));
    let both = Command::AuthSetUserRoles {
        user: "carol".into(),
        roles: vec!["r-a".into(), "rw-b".into()],
    };
    sm.ok(ROOT, both);
    let carol = &sm.state.auth.users["carol"];
    assert_eq!((carol.roles.len(), carol.quotas), (2, quotas));
    let nobody = Command::AuthSetUserRoles {
        user: "nobody".into(),
        roles: vec![],
    };
    assert!(matches!(
        sm.run(ROOT, nobody),
        Err(ApplyError::AuthNotFound { .. })
    ));
    // Only role and user changes may be conditional.
    let token = Command::AuthChangeIf {
        auth_revision: sm.state.auth.revision,
        change: Box::new(Command::AuthDeleteToken {
            token_id: "t".into(),
        }),
    };
    assert!(matches!(
        sm.run(ROOT, token),
        Err(ApplyError::Invalid { .. })
    ));
}

#[test]
fn permissions_follow_prefixes_and_write_implies_read() {
    let sm = Sm::tenants();
    let auth = &sm.state.auth;
    assert!(auth.allowed("alice", Kind::Key, "a/x", Access::Write));
    assert!(auth.allowed("alice", Kind::Key, "a/x", Access::Read));
    assert!(!auth.allowed("alice", Kind::Key, "b/x", Access::Read));
    assert!(auth.allowed("reader", Kind::Lock, "a/x", Access::Read));
    assert!(!auth.allowed("reader", Kind::Lock, "a/x", Access::Write));
    assert!(!auth.allowed("nobody", Kind::Lock, "a/x", Access::Read));
    assert!(auth.allowed(ROOT, Kind::Counter, "anything", Access::Write));
}

#[test]
fn a_permission_revoked_before_apply_is_not_honoured() {
    let mut sm = Sm::tenants();
    let lease = sm.lease("alice");
    sm.lock("alice", "a/1", lease);
    // Root takes alice's role away; her next acquire, already accepted by a node under
    // the old permissions, is judged at apply against the new ones.
    sm.ok(ROOT, user_cmd("alice", "r-a", Quotas::default()));
    assert!(denied(sm.run("alice", acquire("a/2", lease))));
    assert!(denied(sm.run("reader", put("a/k", None))));
}

#[test]
fn a_deleted_token_authenticates_nothing() {
    let mut sm = Sm::tenants();
    let token = Command::AuthCreateToken {
        token_id: "00112233445566aa".into(),
        user: "alice".into(),
        secret_sha256: [7; 32],
        ttl_ms: None,
    };
    assert!(matches!(sm.ok(ROOT, token), Outcome::TokenCreated { .. }));
    assert_eq!(
        sm.state.auth.token_user("00112233445566aa", &[7; 32], 0),
        Some("alice")
    );
    assert_eq!(
        sm.state.auth.token_user("00112233445566aa", &[8; 32], 0),
        None
    );
    let with_token = |cmd| Command::As {
        principal: "alice".into(),
        token_id: Some("00112233445566aa".into()),
        command: Box::new(cmd),
    };
    let ok = sm.apply(None, with_token(Command::LeaseGrant { ttl_ms: 5_000 }));
    assert!(ok.outcome.is_ok(), "{ok:?}");
    sm.ok(
        ROOT,
        Command::AuthDeleteToken {
            token_id: "00112233445566aa".into(),
        },
    );
    let r = sm.apply(None, with_token(Command::LeaseGrant { ttl_ms: 5_000 }));
    assert!(
        matches!(r.outcome, Err(ApplyError::Unauthenticated { .. })),
        "{r:?}"
    );
}

#[test]
fn another_tenants_lease_is_as_good_as_absent() {
    let mut sm = Sm::tenants();
    let lease = sm.lease("alice");
    let token = sm.lock("alice", "a/1", lease);
    // Give bob write on a/ too: ownership, not permissions, is what stops him.
    sm.ok(
        ROOT,
        Command::AuthPutUser {
            user: "bob".into(),
            roles: vec!["rw-a".into(), "rw-b".into()],
            quotas: Quotas::default(),
        },
    );
    let not_found = |r: Result<Outcome, ApplyError>| matches!(r, Err(ApplyError::LeaseNotFound { lease_id }) if lease_id == lease);
    let attempts = [
        Command::LeaseKeepalive {
            lease_ids: vec![lease],
        },
        Command::LeaseRevoke { lease_id: lease },
        Command::LockRelease {
            name: "a/1".into(),
            lease_id: lease,
            token,
        },
        acquire("a/2", lease),
        Command::KvPut {
            key: "a/k".into(),
            value: "v".into(),
            lease_id: Some(lease),
            condition: None,
            fence: None,
        },
    ];
    for cmd in attempts {
        assert!(not_found(sm.run("bob", cmd.clone())), "bob {cmd:?}");
    }
    // Fencing with alice's token guards nothing for bob.
    let fence = Fence {
        lock: "a/1".into(),
        token,
    };
    assert!(denied(sm.run("bob", put("a/k", Some(fence.clone())))));
    // Bob's refusal does not show alice's token; alice's own does.
    let bob_lease = sm.lease("bob");
    let r = sm.run("bob", acquire("a/1", bob_lease));
    assert_eq!(
        r,
        Err(ApplyError::LockHeld {
            name: "a/1".into(),
            holder_token: 0
        })
    );
    let stale = Fence {
        lock: "a/1".into(),
        token: token - 1,
    };
    let r = sm.run("bob", put("a/k", Some(stale)));
    assert!(
        matches!(
            r,
            Err(ApplyError::Fenced {
                current_token: None,
                ..
            })
        ),
        "{r:?}"
    );
    // Alice still holds everything and can use it.
    assert!(sm.state.lease_is_live(lease));
    assert!(sm.run("alice", put("a/k", Some(fence))).is_ok());
    // Root may use any lease.
    assert!(sm
        .run(ROOT, Command::LeaseRevoke { lease_id: lease })
        .is_ok());
}

#[test]
fn watch_events_show_a_tenant_only_its_own() {
    let mut sm = Sm::tenants();
    let lease = sm.lease("alice");
    sm.lock("alice", "a/1", lease);
    let granted = sm
        .state
        .events
        .values()
        .find(|e| matches!(&***e, Event::LockGranted { .. }))
        .map(|e| Event::clone(e))
        .expect("a grant event");
    assert_eq!(sm.state.event_for("alice", &granted), Some(granted.clone()));
    assert_eq!(sm.state.event_for("bob", &granted), None);
    match sm.state.event_for("reader", &granted) {
        Some(Event::LockGranted {
            lease_id: 0,
            token: 0,
            ..
        }) => {}
        other => panic!("reader sees {other:?}"),
    }
}

#[test]
fn quotas_refuse_one_principal_and_no_other() {
    let mut sm = Sm::tenants();
    let tight = Quotas {
        leases: Some(2),
        locks: Some(2),
        keys: Some(1),
        request_records: Some(2),
        ..Quotas::default()
    };
    sm.ok(ROOT, user_cmd("alice", "rw-a", tight));
    let quota = |r: Result<Outcome, ApplyError>, name: &str| matches!(&r, Err(ApplyError::QuotaExceeded { quota, .. }) if quota == name);
    let l1 = sm.lease("alice");
    let l2 = sm.lease("alice");
    assert!(quota(
        sm.run("alice", Command::LeaseGrant { ttl_ms: 5_000 }),
        "leases"
    ));
    sm.lock("alice", "a/1", l1);
    sm.lock("alice", "a/2", l2);
    assert!(quota(sm.run("alice", acquire("a/3", l1)), "locks"));
    assert!(sm.run("alice", put("a/k1", None)).is_ok());
    assert!(
        sm.run("alice", put("a/k1", None)).is_ok(),
        "overwriting adds no key"
    );
    assert!(quota(sm.run("alice", put("a/k2", None)), "keys"));
    // Request records: scoped ids count against the principal they name.
    for i in 0..2 {
        let id = scoped_request_id("alice", &format!("r{i}"));
        let r = sm.apply(
            Some(id),
            as_(
                "alice",
                Command::CounterIncr {
                    name: "a/c".into(),
                    by: 1,
                },
            ),
        );
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    let id = scoped_request_id("alice", "r2");
    let r = sm.apply(
        Some(id),
        as_(
            "alice",
            Command::CounterIncr {
                name: "a/c".into(),
                by: 1,
            },
        ),
    );
    assert!(quota(r.outcome, "request_records"));
    // Bob, on the same cluster, is refused nothing.
    for _ in 0..3 {
        let lease = sm.lease("bob");
        sm.lock("bob", &format!("b/{lease}"), lease);
        assert!(sm.run("bob", put(&format!("b/k{lease}"), None)).is_ok());
        let id = scoped_request_id("bob", &format!("r{lease}"));
        let r = sm.apply(
            Some(id),
            as_(
                "bob",
                Command::CounterIncr {
                    name: "b/c".into(),
                    by: 1,
                },
            ),
        );
        assert!(r.outcome.is_ok(), "{r:?}");
    }
    // Ending a lease gives its quota back.
    sm.ok("alice", Command::LeaseRevoke { lease_id: l1 });
    assert_eq!(sm.state.locks_of("alice"), 1);
    sm.lease("alice");
}

#[test]
fn the_auth_state_survives_encoding_and_old_frames_still_decode() {
    let mut sm = Sm::tenants();
    let lease = sm.lease("alice");
    sm.ok("alice", put("a/k", None));
    let id = scoped_request_id("alice", "r1");
    sm.apply(Some(id), as_("alice", acquire("a/1", lease)));
    let bytes = codec::encode_state(&sm.state).expect("encode");
    let decoded = codec::decode_state(&bytes).expect("decode");
    assert_eq!(
        decoded, sm.state,
        "derived indexes are rebuilt after a decode"
    );
    assert_eq!(decoded.auth.usage_of("alice").keys, 1);
    assert_eq!(decoded.auth.usage_of("alice").request_records, 1);
    assert_eq!(decoded.auth.leases_of("alice"), 1);

    // A version-1 frame (written before auth existed) decodes with no auth at all.
    #[derive(serde::Serialize)]
    struct V1<'a> {
        version: u32,
        state: &'a State,
    }
    let v1 = codec::encode(&V1 {
        version: 1,
        state: &sm.state,
    })
    .expect("encode v1");
    let old = codec::decode_state(&v1).expect("decode v1");
    assert_eq!(old.keys, sm.state.keys);
    assert!(old.auth.users.is_empty() && old.auth.lease_owners.is_empty());
    assert_eq!(
        old.auth.usage_of("alice").request_records,
        1,
        "records count by their ids"
    );
}
