//! The typed JSON answers of the client API. Each handler serializes one of these (or a read
//! model from `crate::views`), and `/v1/openapi.json` documents the very same type
//! (`api::openapi`), so the document cannot drift from what is served.

use serde::Serialize;
use utoipa::ToSchema;

use crate::auth_views::{QuotasView, RoleView, TokenView, WhoamiView};

/// The answer of a write that returns nothing but its place in the log.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionAnswer {
    /// The log index of the entry that applied the write.
    pub revision: u64,
}

/// `POST /v1/leases`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantAnswer {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub revision: u64,
}

/// `POST /v1/leases/{id}/keepalive`.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeepaliveAnswer {
    pub lease_id: u64,
    pub ttl_ms: u64,
    /// Time left by the leader's clock once the keepalive applied.
    pub remaining_ms: u64,
    pub revision: u64,
}

/// `POST /v1/locks/{name}/acquire`: the grant.
#[derive(Debug, Serialize, ToSchema)]
pub struct AcquireAnswer {
    pub name: String,
    /// The fencing token: the log index of the granting entry.
    pub token: u64,
    pub term: u64,
    pub cluster_id: Option<String>,
    pub lease_id: u64,
    /// `exclusive` or `shared`.
    pub mode: String,
    pub revision: u64,
}

/// `POST /v1/locks/acquire-many`: every lock granted by one entry, under one token.
#[derive(Debug, Serialize, ToSchema)]
pub struct AcquireManyAnswer {
    /// Each name with its token (all the same).
    pub tokens: std::collections::BTreeMap<String, u64>,
    pub token: u64,
    pub term: u64,
    pub cluster_id: Option<String>,
    pub lease_id: u64,
    pub revision: u64,
}

/// `POST /v1/fence/check`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FenceCheckAnswer {
    /// True if the token is the lock's current exclusive grant in this cluster.
    pub current: bool,
    pub current_token: Option<u64>,
}

/// `DELETE /v1/kv/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct KvDeleteAnswer {
    pub revision: u64,
    /// False if there was no such key (the delete still took a log entry).
    pub deleted: bool,
}

/// `POST /v1/counters/{name}/incr`.
#[derive(Debug, Serialize, ToSchema)]
pub struct IncrAnswer {
    /// The counter's value after the increment.
    pub value: i64,
    pub revision: u64,
}

/// `POST /v1/elections/{name}/campaign`: the caller leads.
#[derive(Debug, Serialize, ToSchema)]
pub struct CampaignAnswer {
    pub name: String,
    pub lease_id: u64,
    pub value: String,
    /// The leader's fencing token.
    pub token: u64,
    pub term: u64,
    pub cluster_id: Option<String>,
    pub revision: u64,
}

/// `POST /v1/txn`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TxnAnswer {
    /// True if every compare held (the `success` branch applied).
    pub succeeded: bool,
    /// One result per op of the branch that applied, in order.
    pub results: Vec<TxnResultAnswer>,
    pub revision: u64,
}

/// One op's result in a transaction.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TxnResultAnswer {
    Put(TxnWritten),
    Delete(TxnWritten),
    /// The key, or null if absent.
    Get(Option<crate::views::KeyView>),
    Incr(TxnIncremented),
}

/// A put or delete inside a transaction.
#[derive(Debug, Serialize, ToSchema)]
pub struct TxnWritten {
    pub revision: u64,
    pub existed: bool,
}

/// An increment inside a transaction.
#[derive(Debug, Serialize, ToSchema)]
pub struct TxnIncremented {
    pub counter: String,
    pub value: i64,
}

/// A change to users, roles or tokens.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuthChangeAnswer {
    pub revision: u64,
    /// The auth state's version after the change.
    pub auth_revision: u64,
}

/// `POST /v1/auth/tokens`: the token is shown in this answer alone.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenAnswer {
    pub token_id: String,
    /// `<token_id>.<secret>`, for `Authorization: Bearer`.
    pub token: String,
    pub user: String,
    pub expires_ms: Option<u64>,
    pub revision: u64,
}

/// `GET /v1/auth/roles`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RolesAnswer {
    pub items: Vec<RoleView>,
    pub auth_revision: u64,
}

/// One user of `GET /v1/auth/users`, with its token ids and expiry (never a secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct UserItem {
    pub name: String,
    pub roles: Vec<String>,
    pub quotas: QuotasView,
    pub tokens: Vec<TokenView>,
}

/// `GET /v1/auth/users`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsersAnswer {
    pub items: Vec<UserItem>,
    pub auth_revision: u64,
}

/// `GET /v1/auth/whoami`: the caller, or (authentication off) a note saying so.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum WhoamiAnswer {
    On(WhoamiView),
    Off(AuthOff),
}

/// `GET /v1/auth/whoami` on a node without authentication.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuthOff {
    /// Always null: nobody is authenticated.
    pub user: Option<String>,
    /// Always `off`.
    #[schema(pattern = "^off$")]
    pub authentication: &'static str,
}

/// One member of the cluster.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberItem {
    pub id: u64,
    pub addr: String,
    pub voter: bool,
    /// Acknowledged the leader within a few heartbeats; known only on the leader (null
    /// elsewhere).
    pub reachable: Option<bool>,
    /// The highest log index known to be on that member (its replication lag is the leader's
    /// last index less this); known only on the leader (null elsewhere).
    pub matched_index: Option<u64>,
}

/// `GET /v1/members` and the answer of every membership change: the membership after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MembersAnswer {
    pub leader_id: Option<u64>,
    pub members: Vec<MemberItem>,
}

/// Request-id records kept by the state machine.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecordsAnswer {
    pub total: u64,
    /// Records of requests still holding or waiting.
    pub pinned: u64,
    /// Records kept for the retry window.
    pub windowed: u64,
}

/// What the newest snapshot built on this node cost.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotStatsAnswer {
    pub index: u64,
    pub records: u64,
    pub bytes: u64,
    pub cpu_ms: u64,
    pub wall_ms: u64,
}

/// Snapshots built on this node since it started.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotsAnswer {
    pub built: u64,
    pub cpu_ms_total: u64,
    pub last: Option<SnapshotStatsAnswer>,
}

/// This node's Raft log.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogAnswer {
    pub first_index: u64,
    pub last_index: Option<u64>,
    pub entries: u64,
    pub disk_bytes: u64,
    pub snapshot_disk_bytes: u64,
    pub append_batches: u64,
    pub entries_appended: u64,
    pub fdatasyncs: u64,
    pub acked_batches: u64,
    pub entries_read_from_tail: u64,
    pub entries_read_from_tree: u64,
}

/// Client writes this node proposed as leader, and the messages to Raft that carried them
/// (`crate::proposer`): `writes / batches` is the mean batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposerAnswer {
    pub batches: u64,
    pub writes: u64,
    /// Log entries those writes went out as (several lock commands may share one).
    pub entries: u64,
}

/// `GET /v1/cluster`: this node's view (not a linearizable read).
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterAnswer {
    pub cluster_id: Option<String>,
    pub node_id: u64,
    pub leader_id: Option<u64>,
    /// The node's Raft role (`Leader`, `Follower`, `Candidate`, `Learner`, `Shutdown`).
    pub state: String,
    pub term: u64,
    pub commit_index: Option<u64>,
    pub applied_index: u64,
    /// A hash of the state machine at `applied_index`: equal on nodes with equal states.
    /// Absent with `?digest=false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_digest: Option<String>,
    pub sm_time_ms: u64,
    pub phase: crate::identity::Phase,
    pub members: Vec<MemberItem>,
    pub last_snapshot_index: Option<u64>,
    pub snapshots: SnapshotsAnswer,
    pub log: LogAnswer,
    pub fenced_rejections: u64,
    pub request_records: RecordsAnswer,
    pub acks_dropped: u64,
    /// The leaders of the last 32 terms this node knew a leader for, oldest first: terms it
    /// led, or in which it accepted an append from the leader.
    pub recent_leaders: Vec<crate::term_leaders::TermLeader>,
    pub proposer: ProposerAnswer,
}

/// `POST /v1/admin/snapshot`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotAnswer {
    pub node_id: u64,
    pub last_snapshot_index: u64,
    /// The log is compacted up to here (keeping `snapshot-keep-logs` entries).
    pub purge_requested_upto: u64,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthAnswer {
    /// Always true: the process answers.
    pub ok: bool,
}

/// `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadyAnswer {
    pub ready: bool,
    pub phase: crate::identity::Phase,
    pub leader_id: Option<u64>,
    /// Why the node is not ready (absent when it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::readiness::NotReady>,
}
