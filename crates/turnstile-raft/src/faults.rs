//! In-process fault injection for node-to-node traffic (Raft RPCs and leader proxying).
//!
//! Each node owns a [`Faults`] table listing the peers it cannot reach. Outbound calls to a
//! blocked peer fail as unreachable at once, and inbound calls from a blocked peer are
//! refused, so blocking both directions behaves like a cut link. Real-process tests cut links
//! with nftables instead; this is the in-process equivalent for the integration suites.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use crate::types::NodeId;

/// The set of peers this node cannot exchange messages with.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    blocked: Arc<RwLock<BTreeSet<NodeId>>>,
}

impl Faults {
    /// True if traffic to or from `peer` is cut.
    pub fn is_blocked(&self, peer: NodeId) -> bool {
        self.blocked
            .read()
            .map(|b| b.contains(&peer))
            .unwrap_or(false)
    }

    /// Cuts traffic with every peer in `peers`.
    pub fn block(&self, peers: impl IntoIterator<Item = NodeId>) {
        if let Ok(mut b) = self.blocked.write() {
            b.extend(peers);
        }
    }

    /// Restores traffic with every peer.
    pub fn heal(&self) {
        if let Ok(mut b) = self.blocked.write() {
            b.clear();
        }
    }
}
