//! `/v1/counters/{name}`: increment (returns the new value) and a linearizable get.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use turnstile_core::{Command, Outcome};

use crate::api::extract::{Body, Param};
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};

fn one() -> i64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncrBody {
    #[serde(default = "one")]
    by: i64,
    request_id: Option<String>,
}

pub async fn incr(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<IncrBody>,
) -> Result<Json<Value>, ApiError> {
    validate::counter_name(&name)?;
    validate::counter_step(b.by)?;
    validate::request_id(b.request_id.as_deref())?;
    let w = app
        .write(
            &caller,
            b.request_id,
            Command::CounterIncr { name, by: b.by },
        )
        .await?;
    match w.outcome {
        Outcome::Counter { value, .. } => Ok(Json(json!({"value": value, "revision": w.revision}))),
        other => Err(unexpected(&other)),
    }
}

pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
) -> Result<Json<Value>, ApiError> {
    validate::counter_name(&name)?;
    match app.read(&caller, ReadQuery::Counter { name }).await? {
        ReadAnswer::Counter(view) => Ok(Json(serde_json::to_value(view).unwrap_or_default())),
        other => Err(unexpected_answer(&other)),
    }
}
