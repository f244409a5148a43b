//! `/v1/cluster` (this node's view, not a linearizable read), `/healthz` and `/readyz`.

use openraft::async_runtime::WatchReceiver;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::answers::{
    ClusterAnswer, HealthAnswer, LogAnswer, ProposerAnswer, ReadyAnswer, RecordsAnswer,
    SnapshotStatsAnswer, SnapshotsAnswer,
};
use crate::app::App;
use crate::error::ApiError;

/// `?digest=false` of `GET /v1/cluster`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClusterQuery {
    /// `false`: leave `state_digest` out. A poller that does not compare states (a dashboard,
    /// a monitor) spares the node a hash of its whole state at every new applied index.
    digest: Option<bool>,
}

/// This node's view of the cluster (not a linearizable read).
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster", params(ClusterQuery),
    responses((status = 200, description = "This node's view", body = ClusterAnswer)))]
pub async fn cluster(
    State(app): State<Arc<App>>,
    query: Result<Query<ClusterQuery>, QueryRejection>,
) -> Result<Json<ClusterAnswer>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::BadRequest(format!("invalid query: {}", e.body_text())))?;
    let m = app.raft.metrics().borrow_watched().clone();
    let members = crate::api::members::members(&app, &m);
    let (applied_index, state_digest) = if query.digest == Some(false) {
        (app.sm.read().state.applied_index, None)
    } else {
        // Digest and applied index describe one state: a copy taken in O(1) under the state
        // lock, encoded and hashed after it is released (and only once per applied index).
        // Hashing a large state takes tens of ms of CPU: off the async workers.
        let sm = app.sm.clone();
        match tokio::task::spawn_blocking(move || sm.digest()).await {
            Ok((index, digest)) => (index, Some(digest)),
            Err(e) => {
                tracing::error!(error = %e, "the state digest task failed");
                (app.sm.read().state.applied_index, Some(String::new()))
            }
        }
    };
    let (cluster_id, sm_time_ms, records) = {
        let inner = app.sm.read();
        let s = &inner.state;
        let total = s.requests.len() as u64;
        let windowed = s.request_expiries.len() as u64;
        (
            s.cluster_id.clone(),
            s.sm_time_ms,
            RecordsAnswer {
                total,
                pinned: total.saturating_sub(windowed),
                windowed,
            },
        )
    };
    let log = app.log_sync_stats();
    let history = app.sm.snapshot_history();
    let purged = m.purged.map_or(0, |p| p.index);
    Ok(Json(ClusterAnswer {
        cluster_id,
        node_id: app.node_id(),
        leader_id: m.current_leader,
        state: format!("{:?}", m.state),
        term: m.current_term,
        commit_index: m.cluster_committed.map(|l| l.index),
        applied_index,
        state_digest,
        sm_time_ms,
        phase: app.phase(),
        members,
        last_snapshot_index: m.snapshot.map(|l| l.index),
        snapshots: SnapshotsAnswer {
            built: history.built,
            cpu_ms_total: history.cpu_ms_total,
            last: history.last.map(|l| SnapshotStatsAnswer {
                index: l.index,
                records: l.records,
                bytes: l.bytes,
                cpu_ms: l.cpu_ms,
                wall_ms: l.wall_ms,
            }),
        },
        log: LogAnswer {
            first_index: purged + 1,
            last_index: m.last_log_index,
            entries: m.last_log_index.map_or(0, |l| l.saturating_sub(purged)),
            disk_bytes: dir_bytes(&app.cfg.data_dir.join(crate::node::LOG_DIR)),
            snapshot_disk_bytes: dir_bytes(&app.cfg.data_dir.join(crate::node::SNAPSHOT_DIR)),
            append_batches: log.append_batches,
            entries_appended: log.entries_appended,
            fdatasyncs: log.fdatasyncs,
            acked_batches: log.acked_batches,
            entries_read_from_tail: log.entries_read_from_tail,
            entries_read_from_tree: log.entries_read_from_tree,
        },
        fenced_rejections: app.stats.fenced_rejections.load(Ordering::Relaxed),
        request_records: records,
        acks_dropped: app.acks.dropped(),
        recent_leaders: app.term_leaders.recent(),
        proposer: {
            let counts = app.proposer.counts();
            ProposerAnswer {
                batches: counts.batches,
                writes: counts.writes,
                entries: counts.entries,
            }
        },
    }))
}

/// Bytes of the files under `dir`, recursively; 0 if unreadable. sled's and the snapshot dir
/// hold a handful of files, so this is a few `stat`s: cheap enough for a status call.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Liveness: the process answers (no credential needed).
#[utoipa::path(get, path = "/healthz", tag = "cluster", security(()),
    responses((status = 200, description = "Alive", body = HealthAnswer)))]
pub async fn healthz() -> Json<HealthAnswer> {
    Json(HealthAnswer { ok: true })
}

/// Ready when this node can serve a linearizable request now (`crate::readiness`); otherwise
/// 503 with the reason.
#[utoipa::path(get, path = "/readyz", tag = "cluster", security(()),
    responses((status = 200, description = "Ready", body = ReadyAnswer),
        (status = 503, description = "Not ready, with the reason", body = ReadyAnswer)))]
pub async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, Json<ReadyAnswer>) {
    let result = app.readiness.check(&app).await;
    let status = if result.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = ReadyAnswer {
        ready: result.is_ok(),
        phase: app.phase(),
        leader_id: app.current_leader(),
        reason: result.err(),
    };
    (status, Json(body))
}
