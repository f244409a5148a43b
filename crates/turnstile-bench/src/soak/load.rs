//! The soak's two loops per client, both bounded by the run's end, a count, and a stop signal
//! (raised when sampling fails): `cycles` alternates try-acquire and release of the client's
//! own lock, each call with a fresh `request_id`; `keepalives` renews the client's lease every
//! `SOAK_KEEPALIVE_INTERVAL_MS`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::counters::Counters;
use super::session::Session;
use crate::plan::{SOAK_CALLS_PER_CLIENT_MAX, SOAK_KEEPALIVE_INTERVAL_MS};
use crate::workloads::common::ERROR_BACKOFF_MS;

/// One client's share of the run.
#[derive(Clone)]
pub struct Load {
    pub session: Arc<Session>,
    pub counters: Arc<Counters>,
    pub client: usize,
    pub lease: u64,
    pub end: Instant,
    pub stop: watch::Receiver<bool>,
}

/// A fresh request id: 32 hex digits, the length of the Rust client's random ids (so records
/// weigh what they weigh for its users), unique within the run by client and sequence number.
pub fn request_id(client: usize, seq: u64) -> String {
    format!("{client:016x}{seq:016x}")
}

/// Runs `fut` unless the run ends (or is stopped) first; `None` then, and the call is
/// abandoned uncounted.
async fn before_end<T>(
    end: Instant,
    stop: &mut watch::Receiver<bool>,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(end)) => None,
        // An error means the run dropped its sender: stop as well.
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// Try-acquire then release of lock `soak-{client}`, over and over. The lock is the client's
/// own, so every acquire is granted unless something is wrong. A refused acquire is tried
/// again (fresh id), except that `lock_held` names the client's own hold (an earlier acquire
/// applied without its answer arriving), which is then released; a release refused with a
/// 4xx means the hold is gone, so the next call is an acquire; after a 5xx or no answer the
/// release is tried again.
pub async fn cycles(l: Load) {
    let Load {
        session,
        counters,
        client,
        lease,
        end,
        mut stop,
    } = l;
    let name = format!("soak-{client}");
    let mut held: Option<u64> = None;
    for seq in 1..=SOAK_CALLS_PER_CLIENT_MAX {
        if Instant::now() >= end || *stop.borrow() {
            break;
        }
        let rid = request_id(client, seq);
        let failed = match held {
            None => match before_end(end, &mut stop, session.acquire(&name, lease, &rid)).await {
                None => break,
                Some(Ok(token)) => {
                    held = Some(token);
                    false
                }
                Some(Err(f)) => {
                    held = f.held_by();
                    true
                }
            },
            Some(token) => {
                let release = session.release(&name, lease, token, &rid);
                match before_end(end, &mut stop, release).await {
                    None => break,
                    Some(Ok(())) => {
                        held = None;
                        counters.cycle();
                        false
                    }
                    Some(Err(f)) => {
                        if f.is_final() {
                            held = None;
                        }
                        true
                    }
                }
            }
        };
        if failed {
            // A failing cluster is not hammered in a tight loop.
            tokio::time::sleep(Duration::from_millis(ERROR_BACKOFF_MS)).await;
        }
    }
}

/// Renews the client's lease every [`SOAK_KEEPALIVE_INTERVAL_MS`] until the run ends.
pub async fn keepalives(l: Load) {
    let Load {
        session,
        lease,
        end,
        mut stop,
        ..
    } = l;
    let interval = Duration::from_millis(SOAK_KEEPALIVE_INTERVAL_MS);
    let run = end.saturating_duration_since(Instant::now());
    let renewals_max = run.as_millis() / interval.as_millis() + 1;
    let mut next = Instant::now() + interval;
    for _ in 0..renewals_max {
        let at = tokio::time::Instant::from_std(next);
        if before_end(end, &mut stop, tokio::time::sleep_until(at))
            .await
            .is_none()
        {
            break;
        }
        // A failed renewal is counted by the session; the next one comes an interval later,
        // and two may fail before the lease is in danger.
        if before_end(end, &mut stop, session.keepalive(lease))
            .await
            .is_none()
        {
            break;
        }
        next += interval;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique_and_as_long_as_the_rust_clients() {
        let a = request_id(3, 1);
        assert_eq!(a.len(), 32);
        assert_ne!(a, request_id(3, 2));
        assert_ne!(a, request_id(4, 1));
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
