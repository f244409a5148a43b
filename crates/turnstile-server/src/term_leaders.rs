//! The leaders this node has known, term by term: the last [`TERMS_KEPT`] `(term, leader)`
//! pairs from Raft's metrics, shown by `/v1/cluster` as `recent_leaders`.
//!
//! Why: a poller sees only the role a node has at the moment of each poll, so a term that
//! began and ended between two polls went unseen, and the chaos harness could not say who
//! led the term of a grant made in it (an `Unknown` in lock-minority-grants, 2026-12-02).
//! Raft metrics name a leader only once this node's vote for that term is committed (it led
//! the term, or accepted an append from its leader), so every pair names the term's one
//! leader, and a term that committed anything was known to a majority of nodes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use utoipa::ToSchema;

/// Terms remembered: far more than a poller every 100 ms can miss, and a few hundred bytes.
pub const TERMS_KEPT: usize = 32;

/// One term and the node that led it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct TermLeader {
    pub term: u64,
    pub leader_id: u64,
}

/// The shared, bounded record: written by the metrics watch, read by `/v1/cluster`.
#[derive(Debug, Clone, Default)]
pub struct TermLeaders(Arc<Mutex<VecDeque<TermLeader>>>);

impl TermLeaders {
    /// Notes that `leader_id` leads `term`; a repeat of the newest pair is not stored again.
    pub fn record(&self, term: u64, leader_id: u64) {
        let seen = TermLeader { term, leader_id };
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.back() == Some(&seen) {
            return;
        }
        if kept.len() == TERMS_KEPT {
            kept.pop_front();
        }
        kept.push_back(seen);
    }

    /// The pairs kept, oldest first.
    pub fn recent(&self) -> Vec<TermLeader> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_terms_once_each_oldest_first() {
        let leaders = TermLeaders::default();
        leaders.record(1, 1);
        leaders.record(1, 1);
        leaders.record(2, 3);
        assert_eq!(
            leaders.recent(),
            [
                TermLeader {
                    term: 1,
                    leader_id: 1
                },
                TermLeader {
                    term: 2,
                    leader_id: 3
                }
            ]
        );
        for term in 3..100 {
            leaders.record(term, term % 3);
        }
        let recent = leaders.recent();
        assert_eq!(recent.len(), TERMS_KEPT);
        assert_eq!(recent[0].term, 100 - TERMS_KEPT as u64);
        assert_eq!(recent[TERMS_KEPT - 1].term, 99);
    }
}
