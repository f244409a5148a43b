//! Lock metrics derived from applied entries: grants, releases, expiries by cause, queued waits
//! and their ends, hold and wait durations, and request-id replays. [`LockMetrics`] is the
//! state machine's `ApplyObserver`; it reads what each entry produced (its watch events, its
//! waiter notices, its response) and never touches `turnstile_core`'s logic.
//!
//! Every node applies the same log, so every node reports the same figures (the HELP texts
//! say so). Durations are in `sm_time`, the replicated clock, so they agree across nodes too.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use turnstile_core::{
    many, Applied, ApplyError, Envelope, Event, Outcome, ReleaseCause, Response, State,
};
use turnstile_raft::apply_observer::ApplyObserver;

use super::books::{Books, HoldInfo, LockKind, WaitInfo};
use super::labels::{CommandLabels, ExpiryCause, ExpiryLabels, LockLabels, Lost, NameCap};

/// Buckets of hold and wait durations, in seconds: 1 ms to 1 h (the longest lease TTL).
const LOCK_SECONDS_BUCKETS: [f64; 13] = [
    0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3_600.0,
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn lock_seconds_histogram() -> Histogram {
    Histogram::new(LOCK_SECONDS_BUCKETS)
}

/// How a queued wait ended, from its final notice.
enum WaitEnd {
    Granted,
    TimedOut,
    Lost(ExpiryCause),
}

/// What the observer keeps between entries, behind one lock taken only by apply.
#[derive(Debug)]
struct Ledger {
    books: Books,
    names: NameCap,
}

/// Lock metric families plus the books they are derived with.
#[derive(Debug)]
pub struct LockMetrics {
    grants: Family<LockLabels, Counter>,
    releases: Family<LockLabels, Counter>,
    expiries: Family<ExpiryLabels, Counter>,
    waits: Family<LockLabels, Counter>,
    wait_timeouts: Family<LockLabels, Counter>,
    hold_seconds: HistogramFamily<LockLabels>,
    wait_seconds: HistogramFamily<LockLabels>,
    replays: Family<CommandLabels, Counter>,
    ledger: Mutex<Ledger>,
}

/// Note appended to the HELP of every apply-derived metric.
const SAME_ON_EVERY_NODE: &str =
    "derived from applied entries, so every node reports the same figure";

impl LockMetrics {
    /// Lock metrics with up to `lock_names_max` per-name series (0: no `name` label).
    pub fn new(lock_names_max: usize) -> LockMetrics {
        let m = LockMetrics {
            grants: Family::default(),
            releases: Family::default(),
            expiries: Family::default(),
            waits: Family::default(),
            wait_timeouts: Family::default(),
            hold_seconds: Family::new_with_constructor(lock_seconds_histogram),
            wait_seconds: Family::new_with_constructor(lock_seconds_histogram),
            replays: Family::default(),
            ledger: Mutex::new(Ledger {
                books: Books::default(),
                names: NameCap::new(lock_names_max),
            }),
        };
        if lock_names_max == 0 {
            m.create_kind_series();
        }
        m
    }

    /// Creates every per-kind series at zero, so a rate over them exists before the first
    /// event (with `name` labels the series are only known once a name is seen).
    fn create_kind_series(&self) {
        let lost = [
            (ExpiryCause::Ttl, Lost::Held),
            (ExpiryCause::Ttl, Lost::Waiting),
            (ExpiryCause::Revoke, Lost::Held),
            (ExpiryCause::Revoke, Lost::Waiting),
            (ExpiryCause::DeadlockVictim, Lost::Waiting),
        ];
        for kind in LockKind::ALL {
            let lock = LockLabels { kind, name: None };
            let _ = self.grants.get_or_create(&lock);
            let _ = self.releases.get_or_create(&lock);
            let _ = self.waits.get_or_create(&lock);
            let _ = self.wait_timeouts.get_or_create(&lock);
            let _ = self.hold_seconds.get_or_create(&lock);
            let _ = self.wait_seconds.get_or_create(&lock);
            for (cause, state) in lost {
                let labels = ExpiryLabels {
                    lock: lock.clone(),
                    cause,
                    state,
                };
                let _ = self.expiries.get_or_create(&labels);
            }
        }
    }

    /// Registers every family (they share their series with `self`).
    pub fn register(&self, r: &mut Registry) {
        let help = |what: &str| format!("{what}; {SAME_ON_EVERY_NODE}");
        r.register(
            "lock_grants",
            help("Lock holds granted (one per lock name, immediate or from the queue)"),
            self.grants.clone(),
        );
        r.register(
            "lock_releases",
            help("Lock holds ended by their holder (release, or a cancelled wait whose grant had already won)"),
            self.releases.clone(),
        );
        r.register(
            "lock_expiries",
            help("Lock holds (state=held) and queued waits (state=waiting) lost without the holder letting go, by cause: ttl, revoke, deadlock_victim"),
            self.expiries.clone(),
        );
        r.register(
            "lock_waits",
            help("Acquires that joined a lock's queue (one per lock name)"),
            self.waits.clone(),
        );
        r.register(
            "lock_wait_timeouts",
            help("Queued waits withdrawn by a committed cancel (wait_ms passed, client gone)"),
            self.wait_timeouts.clone(),
        );
        r.register(
            "lock_hold_duration_seconds",
            help("Time from grant to the end of a hold, in sm_time"),
            self.hold_seconds.clone(),
        );
        r.register(
            "lock_wait_duration_seconds",
            help("Time a queued acquire waited until its grant, in sm_time (immediate grants are not in it)"),
            self.wait_seconds.clone(),
        );
        r.register(
            "request_replays",
            help("Requests answered from their request_id record instead of acting again, by command"),
            self.replays.clone(),
        );
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // Only counts and copies live behind it; a panic mid-update leaves usable books.
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants, releases and expiries of holds, from the entry's watch events. Returns the
    /// leases the entry expired by TTL, which tells a waiter's `lease_not_found` apart.
    fn on_events(&self, ledger: &mut Ledger, state: &State, index: u64) -> BTreeSet<u64> {
        let now_ms = state.sm_time_ms;
        let mut ttl_expired = BTreeSet::new();
        for (_, event) in state.events.range((index, 0)..=(index, u32::MAX)) {
            match &**event {
                Event::LockGranted {
                    name,
                    lease_id,
                    token,
                    mode,
                } => {
                    let kind = LockKind::in_state(state, name, *mode);
                    let labels = lock_labels(ledger, name, kind);
                    self.grants.get_or_create(&labels).inc();
                    let hold = HoldInfo {
                        kind,
                        since_ms: now_ms,
                    };
                    ledger.books.hold_granted(name, *lease_id, *token, hold);
                }
                Event::LockReleased {
                    name,
                    lease_id,
                    token,
                    cause,
                } => {
                    let Some(hold) = ledger.books.hold_ended(name, *lease_id, *token) else {
                        tracing::debug!(lock = %name, token, "metrics: release of an unknown hold");
                        continue;
                    };
                    self.hold_ended(ledger, name, hold, *cause, now_ms);
                }
                Event::LeaseExpired { lease_id } => {
                    ttl_expired.insert(*lease_id);
                }
                // An election's hold is counted by its lock events.
                Event::Put { .. }
                | Event::Delete { .. }
                | Event::ElectionLeader { .. }
                | Event::ElectionResigned { .. } => {}
            }
        }
        ttl_expired
    }

    fn hold_ended(
        &self,
        ledger: &mut Ledger,
        name: &str,
        hold: HoldInfo,
        cause: ReleaseCause,
        now_ms: u64,
    ) {
        let labels = lock_labels(ledger, name, hold.kind);
        let held_s = seconds(now_ms.saturating_sub(hold.since_ms));
        self.hold_seconds.get_or_create(&labels).observe(held_s);
        let lost = match cause {
            ReleaseCause::Released | ReleaseCause::Cancelled => {
                self.releases.get_or_create(&labels).inc();
                return;
            }
            ReleaseCause::Expired => ExpiryCause::Ttl,
            ReleaseCause::Revoked => ExpiryCause::Revoke,
        };
        self.count_expiry(labels, lost, Lost::Held);
    }

    fn count_expiry(&self, lock: LockLabels, cause: ExpiryCause, state: Lost) {
        let labels = ExpiryLabels { lock, cause, state };
        self.expiries.get_or_create(&labels).inc();
    }

    /// Ends of queued waits, from the entry's waiter notices.
    fn on_notices(
        &self,
        ledger: &mut Ledger,
        state: &State,
        applied: &Applied,
        ttl_expired: &BTreeSet<u64>,
    ) {
        for notice in &applied.notices {
            // Not in the books: a grant that had already won and is now withdrawn by a
            // cancel. Its hold's end was counted from the release event.
            let Some(wait) = ledger.books.wait_ended(&notice.waiter_id) else {
                continue;
            };
            let end = match &notice.response.outcome {
                Ok(Outcome::Granted { .. }) => WaitEnd::Granted,
                Err(ApplyError::LeaseNotFound { lease_id }) if ttl_expired.contains(lease_id) => {
                    WaitEnd::Lost(ExpiryCause::Ttl)
                }
                Err(ApplyError::LeaseNotFound { .. }) => WaitEnd::Lost(ExpiryCause::Revoke),
                Err(ApplyError::DeadlockVictim { .. }) => {
                    WaitEnd::Lost(ExpiryCause::DeadlockVictim)
                }
                _ => WaitEnd::TimedOut,
            };
            let waited_s = seconds(state.sm_time_ms.saturating_sub(wait.since_ms));
            for (name, kind) in &wait.locks {
                let labels = lock_labels(ledger, name, *kind);
                match end {
                    WaitEnd::Granted => self.wait_seconds.get_or_create(&labels).observe(waited_s),
                    WaitEnd::TimedOut => {
                        self.wait_timeouts.get_or_create(&labels).inc();
                    }
                    WaitEnd::Lost(cause) => self.count_expiry(labels, cause, Lost::Waiting),
                }
            }
        }
    }

    /// A new queued wait, from the entry's own response.
    fn on_response(&self, ledger: &mut Ledger, state: &State, response: &Response) {
        let Ok(Outcome::Queued { waiter_id }) = &response.outcome else {
            return;
        };
        let Some(wait) = WaitInfo::of_ticket(state, waiter_id) else {
            return;
        };
        for (name, kind) in &wait.locks {
            let labels = lock_labels(ledger, name, *kind);
            self.waits.get_or_create(&labels).inc();
        }
        ledger.books.wait_queued(waiter_id, wait);
    }
}

impl ApplyObserver for LockMetrics {
    fn entry_applied(&self, state: &State, index: u64, env: &Envelope, applied: &Applied) {
        let mut ledger = self.ledger();
        let ttl_expired = self.on_events(&mut ledger, state, index);
        self.on_notices(&mut ledger, state, applied, &ttl_expired);
        // Each command of the entry (every item of a `Command::Many`). A wait that a later
        // item of the same entry ended (queued, then handed the lock by a release beside it)
        // has no ticket left here and is not counted as a wait: it lasted no time.
        for (command, response) in many::answered(&env.command, &applied.response) {
            if response.replayed {
                // The stored first outcome: whatever it did was counted when it happened.
                let labels = CommandLabels {
                    command: command.kind(),
                };
                self.replays.get_or_create(&labels).inc();
            } else {
                self.on_response(&mut ledger, state, response);
            }
        }
        // An entry with more events than the watch history holds lost its oldest ones: some
        // grants or releases went unseen, so re-read holds and waits from the state itself.
        if state
            .events_dropped_through
            .is_some_and(|(revision, _)| revision >= index)
        {
            tracing::warn!(
                index,
                "metrics: entry overflowed the watch history; lock books rebuilt"
            );
            ledger.books = Books::from_state(state);
        }
    }

    fn state_loaded(&self, state: &State) {
        self.ledger().books = Books::from_state(state);
    }
}

fn lock_labels(ledger: &mut Ledger, name: &str, kind: LockKind) -> LockLabels {
    LockLabels {
        kind,
        name: ledger.names.label(name),
    }
}

fn seconds(ms: u64) -> f64 {
    // Exact for any duration below 2^53 ms (285 000 years).
    ms as f64 / 1_000.0
}

#[cfg(test)]
#[path = "locks_test.rs"]
mod locks_test;
