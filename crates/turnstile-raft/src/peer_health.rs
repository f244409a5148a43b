//! One log line when a peer stops answering and one when it answers again, instead of one per
//! failed call. A cut peer fails every heartbeat and every append retry (openraft logged 543
//! identical WARNs in 23 s of one outage); what an operator needs is when it went, why, and
//! when it came back. openraft's own per-call warnings (heartbeat and replication) are filtered
//! to errors by the default log filter (`turnstile` `main.rs`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::network::PeerError;
use crate::types::NodeId;

/// Most peers tracked; a membership is far smaller. Past it, outages are not logged.
const PEERS_TRACKED_MAX: usize = 1_024;

/// Peers that are not answering, since when and how many calls failed.
#[derive(Debug, Default)]
pub struct PeerHealth {
    down: Mutex<BTreeMap<NodeId, Down>>,
    /// Calls that did not reach their peer or got no answer, since start (`/metrics`).
    failed_calls_total: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    failed_calls: u64,
}

impl PeerHealth {
    /// Notes the outcome of one call to `peer`.
    pub fn observe<T>(&self, peer: NodeId, result: &Result<T, PeerError>) {
        match result {
            Err(e) if unreachable(e) => self.failed(peer, e),
            // The peer answered (a refusal or a remote error is an answer).
            _ => self.answered(peer),
        }
    }

    fn failed(&self, peer: NodeId, error: &PeerError) {
        self.failed_calls_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = down.get_mut(&peer) {
            d.failed_calls += 1;
            return;
        }
        if down.len() >= PEERS_TRACKED_MAX {
            return;
        }
        down.insert(
            peer,
            Down {
                since: Instant::now(),
                failed_calls: 1,
            },
        );
        tracing::warn!(peer, error = %error, "peer stopped answering; further failures are counted, not logged, until it answers");
    }

    /// An authenticated call from `peer` arrived: it is reachable again.
    pub fn heard_from(&self, peer: NodeId) {
        self.answered(peer);
    }

    fn answered(&self, peer: NodeId) {
        let gone = {
            let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
            down.remove(&peer)
        };
        if let Some(d) = gone {
            tracing::info!(
                peer,
                down_ms = d.since.elapsed().as_millis() as u64,
                failed_calls = d.failed_calls,
                "peer answers again"
            );
        }
    }

    /// Calls that did not reach their peer or got no answer, since start.
    pub fn failed_calls_total(&self) -> u64 {
        self.failed_calls_total
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Peers not answering now.
    pub fn down(&self) -> Vec<NodeId> {
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        down.keys().copied().collect()
    }
}

/// Failures that say the peer could not be reached or did not answer.
fn unreachable(e: &PeerError) -> bool {
    matches!(
        e,
        PeerError::Blocked { .. }
            | PeerError::Connect { .. }
            | PeerError::Dial { .. }
            | PeerError::Timeout { .. }
            | PeerError::Http { .. }
            | PeerError::Transport { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_one_entry_until_the_peer_answers() {
        let h = PeerHealth::default();
        let cut: Result<(), PeerError> = Err(PeerError::Blocked { peer: 2 });
        for _ in 0..100 {
            h.observe(2, &cut);
        }
        assert_eq!(h.down(), vec![2]);
        assert_eq!(h.failed_calls_total(), 100);
        assert_eq!(
            h.down.lock().expect("lock").get(&2).map(|d| d.failed_calls),
            Some(100)
        );
        let refused: Result<(), PeerError> = Err(PeerError::Refused {
            peer: 2,
            status: 503,
            body: String::new(),
        });
        h.observe(2, &refused);
        assert!(h.down().is_empty(), "a refusal is an answer");
    }
}
