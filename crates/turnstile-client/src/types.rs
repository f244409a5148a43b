//! The values the client API takes and returns: JSON shapes of the HTTP API contract
//! (DESIGN.md), typed. Answers ignore fields they do not know, so a newer server stays readable.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub revision: u64,
}

/// A confirmed keepalive: the lease's deadline was renewed to the entry's time plus `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keepalive {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub remaining_ms: u64,
    pub revision: u64,
}

/// `GET /v1/leases/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub remaining_ms: u64,
    #[serde(default)]
    pub locks: Vec<String>,
    #[serde(default)]
    pub keys: Vec<String>,
}

/// Lock mode: exclusive (the default) excludes everyone; shared admits other shared holders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        })
    }
}

/// Options of [`crate::Client::acquire`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireOptions {
    /// The lease the hold is bound to.
    pub lease_id: u64,
    /// How long the server may queue the request; zero is a try-acquire (`lock_held` if held).
    pub wait: Duration,
    pub mode: Mode,
    /// Semaphore permits; `None` leaves it to the server (1 for a new lock).
    pub permits: Option<u32>,
}

/// Options of [`crate::Session::lock`]: [`AcquireOptions`] without the lease, which is the
/// session's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptions {
    pub wait: Duration,
    pub mode: Mode,
    pub permits: Option<u32>,
}

/// A lock grant. `token` is the fencing token: the log index of the entry that granted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub name: String,
    pub token: u64,
    pub term: u64,
    /// The issuing cluster; `None` only in the first moments of a brand-new cluster.
    pub cluster_id: Option<String>,
    pub lease_id: u64,
    pub revision: u64,
}

/// The grant of [`crate::Client::acquire_many`]: every lock granted by one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiGrant {
    pub tokens: BTreeMap<String, u64>,
    #[serde(default)]
    pub term: Option<u64>,
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub lease_id: Option<u64>,
    pub revision: u64,
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// `None` when the lease is another principal's (a secure cluster hides it).
    pub lease_id: Option<u64>,
    /// `None` when the lease is another principal's.
    pub token: Option<u64>,
    #[serde(default)]
    pub term: Option<u64>,
    pub mode: Mode,
    /// Cluster time of the grant, in ms.
    pub since_ms: u64,
}

/// One queued waiter of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// `None` when the lease is another principal's.
    pub lease_id: Option<u64>,
    pub mode: Mode,
    pub since_ms: u64,
}

/// `GET /v1/locks/{name}`: holders and the waiter queue, in order (both empty when idle).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub name: String,
    pub permits: u32,
    pub holders: Vec<Holder>,
    #[serde(default)]
    pub waiters: Vec<Waiter>,
}

/// A guard on a fenced write: applied only while `token` is `lock`'s current exclusive grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub lock: String,
    pub token: u64,
}

/// The `if` condition of a key write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The key must not exist.
    Absent,
    /// The key must exist with this `mod_revision`.
    ModRevision(u64),
    /// The key must exist with this value.
    Value(String),
}

impl Serialize for Condition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            Condition::Absent => m.serialize_entry("absent", &true)?,
            Condition::ModRevision(r) => m.serialize_entry("mod_revision", r)?,
            Condition::Value(v) => m.serialize_entry("value", v)?,
        }
        m.end()
    }
}

/// Options of [`crate::Client::put`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// Binds the key to a lease: deleted when the lease ends.
    pub lease_id: Option<u64>,
    pub condition: Option<Condition>,
    pub fence: Option<Fence>,
}

/// Options of [`crate::Client::delete`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub condition: Option<Condition>,
    pub fence: Option<Fence>,
}

/// `GET /v1/kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    pub lease_id: Option<u64>,
}

/// The answer to a write that carries no other data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub revision: u64,
}

/// The answer to a key delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub revision: u64,
    /// False when the key did not exist.
    #[serde(default)]
    pub deleted: bool,
}

/// A counter after an increment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterValue {
    pub value: i64,
    pub revision: u64,
}

/// `POST /v1/fence/check` (a diagnostic: check-then-act has the gap fencing closes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceCheck {
    pub current: bool,
    pub current_token: Option<u64>,
}

/// One member in [`ClusterInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    pub addr: String,
    pub voter: bool,
    /// On the leader: whether this member acknowledged it within a few heartbeats. `None`
    /// from a follower (or an older server), which cannot tell.
    #[serde(default)]
    pub reachable: Option<bool>,
}

/// `GET /v1/cluster`: the answering node's own view (not a linearizable read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub cluster_id: Option<String>,
    pub node_id: u64,
    pub leader_id: Option<u64>,
    #[serde(default)]
    pub state: String,
    pub term: u64,
    pub commit_index: Option<u64>,
    pub applied_index: u64,
    #[serde(default)]
    pub state_digest: String,
    #[serde(default)]
    pub phase: String,
    #[serde(default)]
    pub members: Vec<Member>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_serialize_to_the_if_forms() {
        let table = [
            (Condition::Absent, json!({"absent": true})),
            (Condition::ModRevision(4), json!({"mod_revision": 4})),
            (Condition::Value("v".into()), json!({"value": "v"})),
        ];
        for (c, want) in table {
            assert_eq!(serde_json::to_value(&c).ok(), Some(want));
        }
    }

    #[test]
    fn lock_info_reads_the_documented_shape() -> Result<(), serde_json::Error> {
        let v = json!({"name": "demo", "permits": 1,
            "holders": [{"lease_id": 4, "token": 14, "term": 1, "mode": "exclusive", "since_ms": 3358}],
            "waiters": [{"lease_id": 5, "mode": "shared", "since_ms": 4000}]});
        let info: LockInfo = serde_json::from_value(v)?;
        assert_eq!(info.holders[0].token, Some(14));
        assert_eq!(info.waiters[0].mode, Mode::Shared);
        Ok(())
    }
}
