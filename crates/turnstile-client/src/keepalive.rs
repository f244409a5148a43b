//! A session's keepalive task and its local deadline.
//!
//! **The deadline.** After a keepalive sent at instant `s` (this machine's monotonic clock) is
//! confirmed, the lease lives on the cluster until at least `s + TTL`: the renewal was applied
//! after it was sent, and cluster time (`sm_time`, the leader's monotonic clock since its
//! election) advances no faster than real time. So the task keeps
//! `deadline = s + TTL - margin` for the last *confirmed* keepalive, measured from when it was
//! *sent*, not when its answer came back (the answer can arrive long after the renewal was
//! applied). The margin, `max(TTL / 10, 100 ms)` ([`safety_margin`]), covers clock-rate
//! differences between this machine and the leader, and leaves the holder a moment to stop.
//!
//! **The schedule.** A keepalive goes out every TTL/3 after the last confirmed one. A failed
//! one (no leader during an election, a dead node, a timeout) is retried quickly on the next
//! endpoint; nothing fires while the deadline has not passed, so an election that ends in time
//! goes unnoticed. The task fires [`Lost`](crate::Lost) at once on a definite
//! `lease_not_found`, and at the deadline otherwise, and then stops (the lease, no longer
//! renewed, expires on the cluster).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lost::{LostReason, LostSender};
use crate::{Client, Error};

/// Smallest safety margin subtracted from the TTL.
pub const SAFETY_MARGIN_MS_MIN: u64 = 100;
/// Shortest HTTP timeout of one keepalive attempt. An attempt may last a third of the TTL
/// (no less than this, no more than the client's request timeout, never past the deadline):
/// long enough for a slow commit, short enough to try another node in time.
const KEEPALIVE_ATTEMPT_MS_MIN: u64 = 1_000;
/// Pauses between failed keepalive attempts: from the first to the last, doubling.
const KEEPALIVE_RETRY_MS_MIN: u64 = 50;
const KEEPALIVE_RETRY_MS_MAX: u64 = 400;

/// The margin subtracted from the TTL for the local deadline: `max(ttl / 10, 100 ms)`.
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(SAFETY_MARGIN_MS_MIN))
}

/// The local deadline after a keepalive (or grant) sent at `sent` was confirmed.
pub fn local_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(safety_margin(ttl))
}

/// The deadline, shared between the task (the only writer) and the session's readers. A std
/// mutex: held for a copy, never across an await.
#[derive(Debug, Clone)]
pub(crate) struct Deadline(Arc<Mutex<Instant>>);

impl Deadline {
    pub(crate) fn new(at: Instant) -> Deadline {
        Deadline(Arc::new(Mutex::new(at)))
    }

    pub(crate) fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }
}

/// What the keepalive task needs.
pub(crate) struct Keeper {
    pub client: Client,
    pub lease_id: u64,
    pub ttl: Duration,
    pub deadline: Deadline,
    pub lost: LostSender,
    /// When the lease was granted (the grant's first send); the first keepalive is due one
    /// interval later.
    pub granted_sent: Instant,
}

impl Keeper {
    /// Runs until the session is lost (or the task is aborted with its session).
    pub(crate) async fn run(self) {
        let reason = self.keep().await;
        self.lost.fire(reason);
    }

    async fn keep(&self) -> LostReason {
        let interval = self.ttl / 3;
        let attempt = interval
            .max(Duration::from_millis(KEEPALIVE_ATTEMPT_MS_MIN))
            .min(self.client.config.request_timeout);
        let req = self.client.prepare_keepalive(self.lease_id);
        let mut next = self.granted_sent + interval;
        let mut retry_ms = KEEPALIVE_RETRY_MS_MIN;
        loop {
            let deadline = self.deadline.get();
            if next >= deadline {
                tokio::time::sleep_until(deadline.into()).await;
                return LostReason::DeadlinePassed;
            }
            tokio::time::sleep_until(next.into()).await;
            let sent = Instant::now();
            let timeout = deadline.saturating_duration_since(sent).min(attempt);
            let answer = tokio::select! {
                a = self.client.send_once(&req, timeout) => a,
                () = tokio::time::sleep_until(deadline.into()) => return LostReason::DeadlinePassed,
            };
            match answer {
                Ok(_) => {
                    self.deadline.set(local_deadline(sent, self.ttl));
                    next = sent + interval;
                    retry_ms = KEEPALIVE_RETRY_MS_MIN;
                }
                Err(f) if matches!(f.error, Error::LeaseNotFound { .. }) => {
                    return LostReason::LeaseNotFound;
                }
                Err(f) => {
                    tracing::debug!(lease_id = self.lease_id, error = %f.error, "keepalive failed; retrying");
                    // An attempt that failed slowly (a timeout) has waited already.
                    next = sent + Duration::from_millis(retry_ms);
                    retry_ms = (retry_ms * 2).min(KEEPALIVE_RETRY_MS_MAX);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_and_deadline() {
        let table = [(1_000, 100), (1_500, 150), (3_000, 300), (60_000, 6_000)];
        for (ttl_ms, margin_ms) in table {
            let ttl = Duration::from_millis(ttl_ms);
            assert_eq!(safety_margin(ttl), Duration::from_millis(margin_ms));
            let t0 = Instant::now();
            assert_eq!(
                local_deadline(t0, ttl),
                t0 + Duration::from_millis(ttl_ms - margin_ms)
            );
        }
        assert_eq!(
            safety_margin(Duration::from_millis(500)),
            Duration::from_millis(SAFETY_MARGIN_MS_MIN)
        );
    }
}
