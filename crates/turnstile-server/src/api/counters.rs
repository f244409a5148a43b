//! `/v1/counters/{name}`: increment (returns the new value) and a linearizable get.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::{Command, Outcome};
use utoipa::ToSchema;

use crate::api::answers::IncrAnswer;
use crate::api::extract::{Body, Param};
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::{unexpected, unexpected_answer};
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ReadAnswer, ReadQuery};
use crate::views::CounterView;

fn one() -> i64 {
    1
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IncrBody {
    /// The step, negative to decrement; 1 when absent.
    #[serde(default = "one")]
    by: i64,
    request_id: Option<String>,
}

/// Adds `by` to a counter (a counter never incremented is 0).
#[utoipa::path(post, path = "/v1/counters/{name}/incr", tag = "counters",
    params(("name" = String, Path, description = "The counter name")),
    request_body(content = Option<IncrBody>, description = "Optional; an empty body adds 1"),
    responses((status = 200, description = "The new value", body = IncrAnswer),
        (status = 409, description = "`counter_overflow`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn incr(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
    Body(b): Body<IncrBody>,
) -> Result<Json<IncrAnswer>, ApiError> {
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
        Outcome::Counter { value, .. } => Ok(Json(IncrAnswer {
            value,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// A linearizable read of a counter.
#[utoipa::path(get, path = "/v1/counters/{name}", tag = "counters",
    params(("name" = String, Path, description = "The counter name")),
    responses((status = 200, description = "The counter", body = CounterView)))]
pub async fn get(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(name): Param<String>,
) -> Result<Json<CounterView>, ApiError> {
    validate::counter_name(&name)?;
    match app.read(&caller, ReadQuery::Counter { name }).await? {
        ReadAnswer::Counter(view) => Ok(Json(view)),
        other => Err(unexpected_answer(&other)),
    }
}
