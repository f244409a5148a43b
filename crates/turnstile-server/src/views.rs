//! Read models returned by the HTTP API (JSON) and carried between nodes (bincode). Field names
//! are the public contract in DESIGN.md.

use serde::{Deserialize, Serialize};
use turnstile_core::State;

/// `GET /v1/leases/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseView {
    pub lease_id: u64,
    pub ttl_ms: u64,
    /// Time left by the leader's clock when the read was served.
    pub remaining_ms: u64,
    pub locks: Vec<String>,
    pub keys: Vec<String>,
}

/// One holder in `GET /v1/locks/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HolderView {
    /// `None` (JSON null) when the lease is not the reader's (another tenant's).
    pub lease_id: Option<u64>,
    /// `None` (JSON null) when the lease is not the reader's.
    pub token: Option<u64>,
    pub term: u64,
    pub mode: String,
    /// `sm_time` of the grant, in ms of cluster time.
    pub since_ms: u64,
}

/// One queued waiter in `GET /v1/locks/{name}` (queues arrive with blocking acquire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaiterView {
    /// `None` (JSON null) when the lease is not the reader's.
    pub lease_id: Option<u64>,
    pub mode: String,
    pub since_ms: u64,
}

/// `GET /v1/locks/{name}`; empty holders and waiters when the lock is idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LockView {
    pub name: String,
    pub permits: u32,
    pub holders: Vec<HolderView>,
    pub waiters: Vec<WaiterView>,
}

/// `GET /v1/kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyView {
    pub key: String,
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    pub lease_id: Option<u64>,
}

/// `GET /v1/counters/{name}`; a counter never incremented reads 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CounterView {
    pub name: String,
    pub value: i64,
}

/// `POST /v1/fence/check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FenceView {
    pub current: bool,
    pub current_token: Option<u64>,
    pub cluster_id: Option<String>,
}

impl LeaseView {
    pub fn of(state: &State, lease_id: u64, now_ms: u64) -> Option<LeaseView> {
        let lease = state.leases.get(&lease_id)?;
        Some(LeaseView {
            lease_id,
            ttl_ms: lease.ttl_ms,
            remaining_ms: lease
                .deadline_ms
                .saturating_sub(now_ms.max(state.sm_time_ms)),
            locks: lease.locks.iter().cloned().collect(),
            keys: lease.keys.iter().cloned().collect(),
        })
    }
}

impl LockView {
    pub fn of(state: &State, name: &str) -> LockView {
        let Some(lock) = state.locks.get(name) else {
            return LockView {
                name: name.to_string(),
                permits: 1,
                holders: Vec::new(),
                waiters: Vec::new(),
            };
        };
        let holders = lock
            .holders
            .iter()
            .map(|h| HolderView {
                lease_id: Some(h.lease_id),
                token: Some(h.token),
                term: h.term,
                mode: h.mode.as_str().into(),
                since_ms: h.since_ms,
            })
            .collect();
        let waiters = lock
            .queue
            .iter()
            .filter_map(|w| state.tickets.get(w))
            .map(|t| WaiterView {
                lease_id: Some(t.lease_id),
                mode: t.mode.as_str().into(),
                since_ms: t.since_ms,
            })
            .collect();
        LockView {
            name: name.to_string(),
            permits: lock.permits,
            holders,
            waiters,
        }
    }
}

impl KeyView {
    pub fn of(state: &State, key: &str) -> Option<KeyView> {
        let k = state.keys.get(key)?;
        Some(KeyView {
            key: key.to_string(),
            value: k.value.clone(),
            create_revision: k.create_revision,
            mod_revision: k.mod_revision,
            version: k.version,
            lease_id: k.lease_id,
        })
    }
}

impl CounterView {
    pub fn of(state: &State, name: &str) -> CounterView {
        CounterView {
            name: name.to_string(),
            value: state.counters.get(name).copied().unwrap_or(0),
        }
    }
}

impl FenceView {
    pub fn of(state: &State, name: &str, token: u64) -> FenceView {
        let current_token = state.exclusive_token(name);
        FenceView {
            current: current_token == Some(token),
            current_token,
            cluster_id: state.cluster_id.clone(),
        }
    }
}

impl LockView {
    /// The view as `principal` may see it: lease ids and tokens of leases that are not its
    /// own are hidden.
    pub fn redacted(mut self, state: &State, principal: &str) -> LockView {
        let mine = |id: Option<u64>| id.filter(|id| state.auth.owns_lease(principal, *id));
        for h in &mut self.holders {
            if mine(h.lease_id).is_none() {
                h.lease_id = None;
                h.token = None;
            }
        }
        for w in &mut self.waiters {
            w.lease_id = mine(w.lease_id);
        }
        self
    }
}
