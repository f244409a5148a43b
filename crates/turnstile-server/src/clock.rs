//! Time for the state machine, from the leader's monotonic clock.
//!
//! A leader stamps each entry with `sm_time` at its election plus the monotonic time elapsed
//! since (`LeaderClock`). It never reads the wall clock, so a wall-clock step or skew cannot
//! expire a lease early. If entries applied after the election carry a later `sm_time` (the
//! new leader was still catching up), the clock re-anchors there, so stamps never fall behind
//! the state machine. `WallClock` exists only for the test hook that jumps it (`/debug/clock`,
//! with the `test-hooks` feature only); without the feature nothing can move it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
struct Anchor {
    term: u64,
    sm_ms: u64,
    at: Instant,
}

/// The leader's `sm_time` source.
#[derive(Debug, Default)]
pub struct LeaderClock {
    anchor: Mutex<Option<Anchor>>,
}

impl LeaderClock {
    /// Current cluster time for a leader of `term` whose state machine is at `sm_time_ms`.
    pub fn now_ms(&self, term: u64, sm_time_ms: u64) -> u64 {
        let now = Instant::now();
        let mut guard = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        let ahead = guard.filter(|a| a.term == term).map(|a| {
            let elapsed_ms =
                u64::try_from(now.duration_since(a.at).as_millis()).unwrap_or(u64::MAX);
            a.sm_ms.saturating_add(elapsed_ms)
        });
        match ahead {
            Some(t) if t >= sm_time_ms => t,
            _ => {
                *guard = Some(Anchor {
                    term,
                    sm_ms: sm_time_ms,
                    at: now,
                });
                sm_time_ms
            }
        }
    }
}

/// Wall-clock time with a test-only offset. Nothing that decides expiry reads it.
#[derive(Debug, Default)]
pub struct WallClock {
    offset_ms: AtomicI64,
}

impl WallClock {
    /// Milliseconds since the Unix epoch, plus the test offset.
    pub fn now_ms(&self) -> i64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        real.saturating_add(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Test hook: jump this node's wall clock by `offset_ms`.
    #[cfg(feature = "test-hooks")]
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_clock_is_monotonic_and_follows_the_state_machine() {
        let c = LeaderClock::default();
        let a = c.now_ms(1, 1_000);
        assert!(a >= 1_000);
        // State machine ahead of us (entries from the old term applied late): re-anchor.
        assert_eq!(c.now_ms(1, 50_000), 50_000);
        // State machine behind: our own elapsed time counts.
        assert!(c.now_ms(1, 10) >= 50_000);
        // A new term re-anchors at that term's sm_time.
        assert_eq!(c.now_ms(2, 60_000), 60_000);
    }
}
