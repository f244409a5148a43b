//! What the lock metrics remember between applied entries: when each current hold was granted
//! and each queued wait began, and of which kind. A release event or a waiter's final notice
//! says neither, and the core state has already forgotten both by then, so the books keep a
//! copy. They mirror the state's holders and tickets: rebuilt from the state whenever it is
//! loaded wholesale (at open, on snapshot install), so their size is bounded by the state's.

use std::collections::HashMap;

use turnstile_core::{LockMode, State};

/// The `kind` label of a hold or wait: how the lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    Exclusive,
    Shared,
    /// A hold of one permit of a lock with `permits > 1`.
    Semaphore,
}

impl LockKind {
    /// Every kind, so series can be created before the first event.
    pub const ALL: [LockKind; 3] = [LockKind::Exclusive, LockKind::Shared, LockKind::Semaphore];

    /// The kind of a hold or wait in `mode` on a lock of `permits`.
    pub fn of(permits: u32, mode: LockMode) -> LockKind {
        match mode {
            _ if permits > 1 => LockKind::Semaphore,
            LockMode::Exclusive => LockKind::Exclusive,
            LockMode::Shared => LockKind::Shared,
        }
    }

    /// The kind of a hold or wait in `mode` on lock `name` as `state` has it (a lock absent
    /// from the state is idle, so not a semaphore).
    pub fn in_state(state: &State, name: &str, mode: LockMode) -> LockKind {
        let permits = state.locks.get(name).map_or(1, |l| l.permits);
        LockKind::of(permits, mode)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Shared => "shared",
            LockKind::Semaphore => "semaphore",
        }
    }
}

/// A current hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldInfo {
    pub kind: LockKind,
    /// `sm_time_ms` at the grant.
    pub since_ms: u64,
}

/// A queued wait (one ticket, on one or several locks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitInfo {
    /// `sm_time_ms` at the enqueue.
    pub since_ms: u64,
    /// Each lock the ticket waits on, with the kind of the wait there.
    pub locks: Vec<(String, LockKind)>,
}

/// A hold is one acquisition: lock name, lease and token (shared holders admitted together
/// share a token but not a lease; one acquire-many shares it across names).
type HoldKey = (String, u64, u64);

/// Holds and waits by identity. Hash maps: nothing here is iterated into output.
#[derive(Debug, Default)]
pub struct Books {
    holds: HashMap<HoldKey, HoldInfo>,
    waits: HashMap<String, WaitInfo>,
}

impl Books {
    /// The books of every holder and ticket in `state`.
    pub fn from_state(state: &State) -> Books {
        let mut books = Books::default();
        for (name, lock) in &state.locks {
            for h in &lock.holders {
                let info = HoldInfo {
                    kind: LockKind::of(lock.permits, h.mode),
                    since_ms: h.since_ms,
                };
                books
                    .holds
                    .insert((name.clone(), h.lease_id, h.token), info);
            }
        }
        for waiter_id in state.tickets.keys() {
            if let Some(info) = WaitInfo::of_ticket(state, waiter_id) {
                books.waits.insert(waiter_id.clone(), info);
            }
        }
        books
    }

    pub fn hold_granted(&mut self, name: &str, lease_id: u64, token: u64, info: HoldInfo) {
        self.holds.insert((name.to_string(), lease_id, token), info);
    }

    /// Forgets a hold and returns what was known of it.
    pub fn hold_ended(&mut self, name: &str, lease_id: u64, token: u64) -> Option<HoldInfo> {
        self.holds.remove(&(name.to_string(), lease_id, token))
    }

    pub fn wait_queued(&mut self, waiter_id: &str, info: WaitInfo) {
        self.waits.insert(waiter_id.to_string(), info);
    }

    /// Forgets a wait and returns what was known of it.
    pub fn wait_ended(&mut self, waiter_id: &str) -> Option<WaitInfo> {
        self.waits.remove(waiter_id)
    }

    /// Number of holds and waits known.
    pub fn sizes(&self) -> (usize, usize) {
        (self.holds.len(), self.waits.len())
    }
}

impl WaitInfo {
    /// The wait of ticket `waiter_id` as `state` has it, if queued.
    pub fn of_ticket(state: &State, waiter_id: &str) -> Option<WaitInfo> {
        let ticket = state.tickets.get(waiter_id)?;
        let locks = ticket
            .names
            .iter()
            .map(|n| (n.clone(), LockKind::in_state(state, n, ticket.mode)))
            .collect();
        Some(WaitInfo {
            since_ms: ticket.since_ms,
            locks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_core::{Command, Envelope};

    fn apply(state: &mut State, index: u64, now_ms: u64, request_id: Option<&str>, cmd: Command) {
        let env = Envelope {
            now_ms,
            request_id: request_id.map(str::to_string),
            command: cmd,
        };
        state.apply(index, 1, &env);
    }

    fn acquire(names: &[&str], lease_id: u64, mode: LockMode, permits: Option<u32>) -> Command {
        Command::Acquire {
            names: names.iter().map(|n| n.to_string()).collect(),
            lease_id,
            mode,
            permits,
            wait: true,
        }
    }

    #[test]
    fn kinds_follow_permits_then_mode() {
        let table = [
            (1, LockMode::Exclusive, LockKind::Exclusive),
            (1, LockMode::Shared, LockKind::Shared),
            (3, LockMode::Exclusive, LockKind::Semaphore),
        ];
        for (permits, mode, kind) in table {
            assert_eq!(LockKind::of(permits, mode), kind, "{permits} {mode:?}");
        }
    }

    #[test]
    fn books_rebuilt_from_state_know_every_hold_and_ticket() {
        let mut s = State::default();
        let lease = |ttl_ms| Command::LeaseGrant { ttl_ms };
        apply(&mut s, 1, 100, None, lease(60_000));
        apply(&mut s, 2, 100, None, lease(60_000));
        apply(
            &mut s,
            3,
            200,
            Some("a"),
            acquire(&["x"], 1, LockMode::Exclusive, None),
        );
        apply(
            &mut s,
            4,
            300,
            Some("b"),
            acquire(&["sem"], 1, LockMode::Exclusive, Some(2)),
        );
        apply(
            &mut s,
            5,
            400,
            Some("c"),
            acquire(&["x", "y"], 2, LockMode::Exclusive, None),
        );

        let mut books = Books::from_state(&s);
        assert_eq!(books.sizes(), (2, 1));
        let x = books.hold_ended("x", 1, 3).expect("x held by lease 1");
        assert_eq!((x.kind, x.since_ms), (LockKind::Exclusive, 200));
        let sem = books.hold_ended("sem", 1, 4).expect("sem held");
        assert_eq!(sem.kind, LockKind::Semaphore);
        let c = books.wait_ended("c").expect("c queued");
        assert_eq!(c.since_ms, 400);
        let kinds: Vec<_> = c.locks.iter().map(|(n, k)| (n.as_str(), *k)).collect();
        assert_eq!(
            kinds,
            [("x", LockKind::Exclusive), ("y", LockKind::Exclusive)]
        );
        assert_eq!(books.sizes(), (0, 0));
    }
}
