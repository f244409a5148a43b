//! Operator calls: membership (`/v1/members`), snapshots (`/v1/admin/snapshot`) and backups
//! (`/v1/admin/backup`). Membership changes carry no `request_id`: a resent add or remove
//! whose first attempt went through is refused as "already a member" / "not a member", which
//! says what happened.

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::types::Member;
use crate::{Client, Error, Prepared};

/// How long the server may take to add a learner (it waits for the learner to catch up).
const MEMBER_CHANGE_MS_MAX: u64 = 60_000;
/// How long a snapshot or a backup may take on the server.
const SNAPSHOT_MS_MAX: u64 = 60_000;

/// `GET /v1/members` and the answer of every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    pub leader_id: Option<u64>,
    pub members: Vec<Member>,
}

/// `POST /v1/admin/snapshot`: the node's snapshot after the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotTaken {
    pub node_id: u64,
    pub last_snapshot_index: u64,
}

impl Client {
    pub async fn members(&self) -> Result<Members, Error> {
        self.send(&Prepared::read("/v1/members".into())).await
    }

    /// Adds node `id` at `addr` (`ip:port`) as a learner; returns once it has caught up.
    pub async fn add_member(&self, id: u64, addr: &str) -> Result<Members, Error> {
        let body = json!({"id": id, "addr": addr});
        let req = Prepared::admin(Method::POST, "/v1/members".into(), Some(body));
        self.send(&req.with_server_wait(Duration::from_millis(MEMBER_CHANGE_MS_MAX)))
            .await
    }

    /// Makes learner `id` a voter.
    pub async fn promote_member(&self, id: u64) -> Result<Members, Error> {
        let req = Prepared::admin(Method::POST, format!("/v1/members/{id}/promote"), None);
        self.send(&req.with_server_wait(Duration::from_millis(MEMBER_CHANGE_MS_MAX)))
            .await
    }

    /// Removes node `id` (voter or learner).
    pub async fn remove_member(&self, id: u64) -> Result<Members, Error> {
        let req = Prepared::admin(Method::DELETE, format!("/v1/members/{id}"), None);
        self.send(&req.with_server_wait(Duration::from_millis(MEMBER_CHANGE_MS_MAX)))
            .await
    }

    /// Makes the answering node write a snapshot of everything it has applied, and compact
    /// its log behind it. Use a client with one endpoint to choose the node.
    pub async fn snapshot(&self) -> Result<SnapshotTaken, Error> {
        let req = Prepared::admin(Method::POST, "/v1/admin/snapshot".into(), None);
        self.send(&req.with_server_wait(Duration::from_millis(SNAPSHOT_MS_MAX)))
            .await
    }

    /// A backup file: the leader's state after a linearizable read barrier, so it holds every
    /// write acknowledged before the call. Restore it with `turnstile restore`.
    pub async fn backup(&self) -> Result<Vec<u8>, Error> {
        let req: Prepared<Vec<u8>> = Prepared::read("/v1/admin/backup".into())
            .with_answer_bytes_max(crate::request::BACKUP_BYTES_MAX);
        self.send_bytes(&req.with_server_wait(Duration::from_millis(SNAPSHOT_MS_MAX)))
            .await
    }
}
