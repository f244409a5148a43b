//! Test-only hooks under `/debug/`. Compiled only with the `test-hooks` feature, and routed
//! (`api::router`) only on a node whose test hooks are on, so they need no check of their own.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::extract::Body;
use crate::app::App;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockBody {
    offset_ms: i64,
}

/// Jumps this node's wall clock by `offset_ms`. Lease expiry must not notice: it runs on the
/// leader's monotonic clock.
pub async fn set_clock(State(app): State<Arc<App>>, Body(b): Body<ClockBody>) -> Json<Value> {
    app.wall.set_offset_ms(b.offset_ms);
    tracing::warn!(offset_ms = b.offset_ms, "test hook: wall clock offset set");
    Json(json!({"wall_time_ms": app.wall.now_ms()}))
}
