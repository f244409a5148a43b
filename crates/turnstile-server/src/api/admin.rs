//! Operator endpoints: `POST /v1/admin/snapshot` (this node writes a snapshot now and compacts
//! its log behind it, keeping `snapshot-keep-logs` entries) and `GET /v1/admin/backup` (the leader's state after a ReadIndex round,
//! as a backup file for `turnstile restore`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::answers::SnapshotAnswer;
use crate::app::App;
use crate::auth::Caller;
use crate::backup::BackupFile;
use crate::error::ApiError;
use crate::proto::RouteError;
use turnstile_raft::snapshot_files::SnapshotFile;

/// How long a requested snapshot may take to be written.
const SNAPSHOT_WAIT_MS_MAX: u64 = 30_000;

/// Writes a snapshot covering at least everything applied when the call arrived.
#[utoipa::path(post, path = "/v1/admin/snapshot", tag = "admin",
    responses((status = 200, description = "The snapshot written", body = SnapshotAnswer)))]
pub async fn snapshot(
    State(app): State<Arc<App>>,
    caller: Caller,
) -> Result<Json<SnapshotAnswer>, ApiError> {
    caller.require_root("snapshots")?;
    let applied = app.sm.read().last_applied.map_or(0, |l| l.index);
    app.raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let timeout = Duration::from_millis(SNAPSHOT_WAIT_MS_MAX);
    let m = app
        .raft
        .wait(Some(timeout))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= applied),
            "snapshot",
        )
        .await
        .map_err(|e| {
            ApiError::Unavailable(format!("no snapshot at or above index {applied}: {e}"))
        })?;
    let index = m.snapshot.map_or(0, |s| s.index);
    // openraft purges on its own only in batches of `purge_batch_size`; an operator asking
    // for a snapshot expects the log behind it (minus the entries kept) to go now. Entries a
    // lagging follower still needs are purged once it no longer does.
    let upto = index.saturating_sub(app.cfg.snapshot_keep_logs);
    if upto > 0 {
        app.raft
            .trigger()
            .purge_log(upto)
            .await
            .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    }
    Ok(Json(SnapshotAnswer {
        node_id: app.node_id(),
        last_snapshot_index: index,
        purge_requested_upto: upto,
    }))
}

/// A consistent backup: only the leader answers (a follower says `no_quorum` and the client
/// moves on), after confirming with a quorum that it is still leader and applying up to the
/// read index, so the file holds every write acknowledged before the request.
#[utoipa::path(get, path = "/v1/admin/backup", tag = "admin",
    responses((status = 200, description = "The backup file, for `turnstile restore`",
        content_type = "application/octet-stream", body = String)))]
pub async fn backup(State(app): State<Arc<App>>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_root("backups")?;
    if !app.is_leader() {
        return Err(RouteError::NotLeader {
            leader_id: app.current_leader(),
        }
        .into());
    }
    app.read_barrier().await?;
    let (state, last_log_id, membership) = app.sm.read().copy_out();
    let index = last_log_id.map_or(0, |l| l.index);
    let encode = move || {
        let snapshot = SnapshotFile::of(&state, last_log_id, membership)?;
        BackupFile::new(state.cluster_id.clone(), snapshot).encode()
    };
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    tracing::info!(index, bytes = bytes.len(), "backup taken");
    let name = format!("attachment; filename=\"turnstile-{index}.backup\"");
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        bytes,
    )
        .into_response())
}
