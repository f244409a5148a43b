//! The election read model (`GET /v1/elections/{name}`), returned as JSON and carried between
//! nodes as bincode. An election is the lock of its name (`turnstile_core::elections`).

use serde::{Deserialize, Serialize};
use turnstile_core::State;

/// The leader of an election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaderView {
    /// `None` (JSON null) when the lease is not the reader's (another tenant's).
    pub lease_id: Option<u64>,
    /// What the leader published (empty for a plain lock holder that never proclaimed).
    pub value: String,
    /// The fencing token; `None` (JSON null) when the lease is not the reader's.
    pub token: Option<u64>,
    /// `sm_time` when it became leader, in ms of cluster time.
    pub since_ms: u64,
}

/// `GET /v1/elections/{name}`: `leader` is null while nobody leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ElectionView {
    pub name: String,
    pub leader: Option<LeaderView>,
}

impl ElectionView {
    pub fn of(state: &State, name: &str) -> ElectionView {
        let leader = state.election_leader(name).map(|l| LeaderView {
            lease_id: Some(l.holder.lease_id),
            value: l.value.to_string(),
            token: Some(l.holder.token),
            since_ms: l.holder.since_ms,
        });
        ElectionView {
            name: name.to_string(),
            leader,
        }
    }

    /// The view as `principal` may see it: the value is public to readers of the lock; the
    /// lease id and token of another principal's lease are not.
    pub fn redacted(mut self, state: &State, principal: &str) -> ElectionView {
        if let Some(l) = &mut self.leader {
            if !l
                .lease_id
                .is_some_and(|id| state.auth.owns_lease(principal, id))
            {
                l.lease_id = None;
                l.token = None;
            }
        }
        self
    }
}
