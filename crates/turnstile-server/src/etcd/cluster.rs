//! etcd's Cluster (`MemberList`) and Maintenance (`Status`) services, answered from this
//! node's Raft view; the same struct serves the Auth service (`crate::etcd::auth`).
//!
//! - `MemberList` is root-only, like `GET /v1/members` (etcd lets any user list members). A
//!   member's `clientURLs` holds this node's own etcd URL; other nodes' etcd ports are not in
//!   the membership, so theirs is empty. Membership changes go through `turnstile member`.
//! - `Status` reports version `3.5.0` (the etcd API this port speaks), the Raft figures, and
//!   the data directory's size on disk as `dbSize`.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use tonic::{Request, Response, Status};
use turnstile_etcd_proto::etcdserverpb::{
    cluster_server::Cluster, maintenance_server::Maintenance, Member, MemberListRequest,
    MemberListResponse, StatusRequest, StatusResponse,
};

use crate::app::App;
use crate::auth::Caller;
use crate::etcd::common::{caller, header, status};

/// The etcd API version this port reports.
pub const ETCD_API_VERSION: &str = "3.5.0";
/// Files of the data directory whose sizes `Status` adds up at most (sled keeps a handful).
const DB_FILES_MAX: usize = 1_000;

/// The Cluster, Maintenance and Auth services (one struct: they share nothing but the app;
/// Auth is in `crate::etcd::auth`).
pub struct ClusterService {
    pub app: Arc<App>,
    /// This node's etcd URL, as clients reach it.
    pub own_url: String,
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_list(
        &self,
        req: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        caller.require_root("MemberList").map_err(|e| status(&e))?;
        let m = self.app.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let scheme = if self.app.cfg.tls_enabled() {
            "https"
        } else {
            "http"
        };
        let members = membership
            .nodes()
            .map(|(id, node)| Member {
                id: *id,
                name: format!("node-{id}"),
                peer_ur_ls: vec![format!("{scheme}://{}", node.addr)],
                client_ur_ls: if *id == self.app.node_id() {
                    vec![self.own_url.clone()]
                } else {
                    Vec::new()
                },
                is_learner: !voters.contains(id),
            })
            .collect();
        let revision = self.app.sm.read().state.applied_index;
        Ok(Response::new(MemberListResponse {
            header: header(&self.app, revision),
            members,
        }))
    }
}

#[tonic::async_trait]
impl Maintenance for ClusterService {
    async fn status(
        &self,
        req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let _caller: Caller = caller(&self.app, &req).await?;
        let m = self.app.raft.metrics().borrow_watched().clone();
        let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
        let voters: std::collections::BTreeSet<u64> =
            m.membership_config.membership().voter_ids().collect();
        let db_size = db_bytes(&self.app.cfg.data_dir);
        Ok(Response::new(StatusResponse {
            header: header(&self.app, applied),
            version: ETCD_API_VERSION.into(),
            db_size,
            leader: m.current_leader.unwrap_or(0),
            raft_index: m.last_log_index.unwrap_or(0),
            raft_term: m.current_term,
            raft_applied_index: applied,
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner: !voters.contains(&self.app.node_id()),
            storage_version: String::new(),
            db_size_quota: 0,
            downgrade_info: None,
        }))
    }
}

/// Bytes of the files directly in `dir` and one level below (sled's files), bounded.
fn db_bytes(dir: &std::path::Path) -> i64 {
    let mut total: u64 = 0;
    let mut seen = 0usize;
    let mut dirs = vec![(dir.to_path_buf(), 0u8)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > DB_FILES_MAX {
                return crate::etcd::common::signed(total);
            }
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() && depth < 2 {
                dirs.push((e.path(), depth + 1));
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    crate::etcd::common::signed(total)
}
