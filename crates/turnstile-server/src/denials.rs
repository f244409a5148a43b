//! Refused callers: every denial is counted (`turnstile_auth_denials_total`) and logged at
//! WARN, at most [`DENIAL_LOGS_PER_INTERVAL`] lines per [`DENIAL_LOG_INTERVAL_MS`], so a hostile
//! client hammering a node cannot flood its logs. The next logged line says how many were
//! left out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Length of one log-rate window.
pub const DENIAL_LOG_INTERVAL_MS: u64 = 1_000;
/// Denial lines logged per window; the rest are counted and summarised.
pub const DENIAL_LOGS_PER_INTERVAL: u64 = 5;

/// The node's denial counter and log limiter.
#[derive(Debug)]
pub struct Denials {
    total: AtomicU64,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u64,
    suppressed: u64,
}

impl Default for Denials {
    fn default() -> Self {
        Denials {
            total: AtomicU64::new(0),
            window: Mutex::new(Window {
                started: Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }
}

impl Denials {
    /// Denials since the node started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// A client request refused for `reason` (no, bad or insufficient credential).
    pub fn client(&self, path: &str, principal: Option<&str>, reason: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.may_log() {
            tracing::warn!(
                path,
                principal,
                reason,
                suppressed,
                "client request refused"
            );
        }
    }

    /// A peer call refused for `reason` (no or wrong MAC).
    pub fn peer(&self, path: &str, from: Option<u64>, reason: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.may_log() {
            tracing::warn!(
                path,
                claimed_from = ?from,
                reason,
                suppressed,
                "peer call refused"
            );
        }
    }

    /// `Some(lines left out since the last logged one)` when this denial may be logged.
    fn may_log(&self) -> Option<u64> {
        let Ok(mut w) = self.window.lock() else {
            return None;
        };
        if w.started.elapsed().as_millis() as u64 >= DENIAL_LOG_INTERVAL_MS {
            w.started = Instant::now();
            w.logged = 0;
        }
        if w.logged >= DENIAL_LOGS_PER_INTERVAL {
            w.suppressed += 1;
            return None;
        }
        w.logged += 1;
        Some(std::mem::take(&mut w.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_counted_whole_but_logged_a_few_lines_a_second() {
        let d = Denials::default();
        let logged = (0..1_000).filter(|_| d.may_log().is_some()).count() as u64;
        assert_eq!(logged, DENIAL_LOGS_PER_INTERVAL);
        for _ in 0..10 {
            d.peer("/raft/append", Some(9), "test");
        }
        assert_eq!(d.total(), 10);
    }
}
