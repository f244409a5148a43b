//! `POST /v1/txn`: compares and two branches of key, counter and get ops, proposed as one
//! `Command::Txn` entry (`turnstile_core::txn`). The body is checked here with the same rules
//! `apply` uses (`txn::check_shape`), so a malformed transaction is a `400` and never reaches
//! the log.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use turnstile_core::txn::{self, Compare, TxnOp, TxnResult};
use turnstile_core::{ApplyError, Command, Fence, Outcome};
use utoipa::ToSchema;

use crate::api::answers::{TxnAnswer, TxnIncremented, TxnResultAnswer, TxnWritten};
use crate::api::extract::Body;
use crate::api::openapi::ErrorAnswer;
use crate::api::ops::unexpected;
use crate::api::validate;
use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::views::KeyView;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnBody {
    #[serde(default)]
    compare: Vec<CompareBody>,
    #[serde(default)]
    success: Vec<OpBody>,
    #[serde(default)]
    failure: Vec<OpBody>,
    request_id: Option<String>,
}

/// `{key, absent: true} | {key, mod_revision} | {key, version} | {key, value} | {fence}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareBody {
    key: Option<String>,
    absent: Option<bool>,
    mod_revision: Option<u64>,
    version: Option<u64>,
    value: Option<String>,
    fence: Option<FenceBody>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TxnFenceBody)]
pub struct FenceBody {
    lock: String,
    token: u64,
}

/// `{put: {key, value, lease_id?}} | {delete: {key}} | {get: {key}} | {incr: {counter, by}}`.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum OpBody {
    Put {
        key: String,
        value: String,
        lease_id: Option<u64>,
    },
    Delete {
        key: String,
    },
    Get {
        key: String,
    },
    Incr {
        counter: String,
        by: i64,
    },
}

const COMPARE_SHAPE: &str =
    "a compare is exactly one of {key, absent: true}, {key, mod_revision}, \
     {key, version}, {key, value}, {fence: {lock, token}}";

fn compare(c: CompareBody) -> Result<Compare, ApiError> {
    let bad = || ApiError::BadRequest(COMPARE_SHAPE.into());
    if let Some(f) = c.fence {
        let alone = c.key.is_none()
            && c.absent.is_none()
            && c.mod_revision.is_none()
            && c.version.is_none()
            && c.value.is_none();
        if !alone {
            return Err(bad());
        }
        validate::lock_name(&f.lock)?;
        validate::positive_id("fence token", f.token)?;
        return Ok(Compare::Fence(Fence {
            lock: f.lock,
            token: f.token,
        }));
    }
    let key = c.key.ok_or_else(bad)?;
    validate::key(&key)?;
    match (c.absent, c.mod_revision, c.version, c.value) {
        (Some(true), None, None, None) => Ok(Compare::Absent { key }),
        (None, Some(mod_revision), None, None) => Ok(Compare::ModRevision { key, mod_revision }),
        (None, None, Some(version), None) => Ok(Compare::Version { key, version }),
        (None, None, None, Some(value)) => {
            validate::value(&value)?;
            Ok(Compare::Value { key, value })
        }
        _ => Err(bad()),
    }
}

fn op(o: OpBody) -> Result<TxnOp, ApiError> {
    Ok(match o {
        OpBody::Put {
            key,
            value,
            lease_id,
        } => {
            validate::key(&key)?;
            validate::value(&value)?;
            if let Some(id) = lease_id {
                validate::positive_id("lease_id", id)?;
            }
            TxnOp::Put {
                key,
                value,
                lease_id,
            }
        }
        OpBody::Delete { key } => {
            validate::key(&key)?;
            TxnOp::Delete { key }
        }
        OpBody::Get { key } => {
            validate::key(&key)?;
            TxnOp::Get { key }
        }
        OpBody::Incr { counter, by } => {
            validate::counter_name(&counter)?;
            validate::counter_step(by)?;
            TxnOp::Incr { counter, by }
        }
    })
}

/// Parses and checks the body into a command; counts are checked before the items.
fn command(b: TxnBody) -> Result<Command, ApiError> {
    use turnstile_core::limits::{TXN_COMPARES_MAX, TXN_OPS_PER_BRANCH_MAX};
    if b.compare.len() > TXN_COMPARES_MAX
        || b.success.len() > TXN_OPS_PER_BRANCH_MAX
        || b.failure.len() > TXN_OPS_PER_BRANCH_MAX
    {
        return Err(ApiError::BadRequest(format!(
            "a transaction has at most {TXN_COMPARES_MAX} compares and \
             {TXN_OPS_PER_BRANCH_MAX} ops per branch"
        )));
    }
    let compares: Vec<Compare> = b
        .compare
        .into_iter()
        .map(compare)
        .collect::<Result<_, _>>()?;
    let success: Vec<TxnOp> = b.success.into_iter().map(op).collect::<Result<_, _>>()?;
    let failure: Vec<TxnOp> = b.failure.into_iter().map(op).collect::<Result<_, _>>()?;
    txn::check_shape(&compares, &success, &failure).map_err(|e| match e {
        ApplyError::Invalid { reason } => ApiError::BadRequest(reason),
        other => ApiError::Apply(other),
    })?;
    Ok(Command::Txn {
        compares,
        success,
        failure,
    })
}

/// One result as the HTTP API answers it. A range result cannot follow from an HTTP
/// transaction (only the etcd port makes range ops): a server bug, answered 500.
fn result_answer(r: TxnResult) -> Result<TxnResultAnswer, ApiError> {
    Ok(match r {
        TxnResult::Put { revision, existed } => {
            TxnResultAnswer::Put(TxnWritten { revision, existed })
        }
        TxnResult::Delete { revision, existed } => {
            TxnResultAnswer::Delete(TxnWritten { revision, existed })
        }
        TxnResult::Get { key, record } => {
            let view = record.map(|k| KeyView {
                key,
                value: k.value,
                create_revision: k.create_revision,
                mod_revision: k.mod_revision,
                version: k.version,
                lease_id: k.lease_id,
            });
            TxnResultAnswer::Get(view)
        }
        TxnResult::Incr { counter, value } => {
            TxnResultAnswer::Incr(TxnIncremented { counter, value })
        }
        // Only the etcd port makes these ops.
        TxnResult::Range { .. } | TxnResult::DeleteRange { .. } => {
            return Err(ApiError::Internal(
                "a range result for an HTTP transaction".into(),
            ))
        }
    })
}

/// Judges every compare together, then applies one branch, in one log entry.
#[utoipa::path(post, path = "/v1/txn", tag = "kv", request_body = TxnBody,
    responses((status = 200, description = "The branch that applied and its results", body = TxnAnswer),
        (status = 404, description = "`lease_not_found` (a put's lease)", body = ErrorAnswer),
        (status = 409, description = "`counter_overflow`, `request_id_reused`", body = ErrorAnswer)))]
pub async fn txn(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(b): Body<TxnBody>,
) -> Result<Json<TxnAnswer>, ApiError> {
    validate::request_id(b.request_id.as_deref())?;
    let request_id = b.request_id.clone();
    let command = command(b)?;
    let w = app.write(&caller, request_id, command).await?;
    match w.outcome {
        Outcome::Txn { succeeded, results } => Ok(Json(TxnAnswer {
            succeeded,
            results: results
                .into_iter()
                .map(result_answer)
                .collect::<Result<_, _>>()?,
            revision: w.revision,
        })),
        other => Err(unexpected(&other)),
    }
}

#[cfg(test)]
mod tests {
    use turnstile_core::limits::{
        TXN_COMPARES_MAX, TXN_OPS_PER_BRANCH_MAX, TXN_PAYLOAD_BYTES_MAX, VALUE_BYTES_MAX,
    };
    use turnstile_core::txn::{check_shape, Compare, TxnOp};
    use turnstile_core::{codec, Command, Envelope};
    use turnstile_raft::log_store::ENTRY_BYTES_MAX;

    /// The largest transaction the limits admit, with the most per-item overhead (every
    /// compare and op present, short names, the largest numbers) and the rest of the payload
    /// in two values, wrapped for a principal with the longest request id, encodes well
    /// under the log store's entry limit: a valid transaction can never be refused by storage.
    #[test]
    fn the_largest_transaction_fits_a_log_entry() {
        let name = |i: usize| format!("{}", char::from(b'a' + (i % 26) as u8));
        let compares: Vec<Compare> = (0..TXN_COMPARES_MAX)
            .map(|i| Compare::ModRevision {
                key: name(i),
                mod_revision: u64::MAX,
            })
            .collect();
        let put = |i: usize, value: String| TxnOp::Put {
            key: format!("{}{}", name(i), name(i / 26)),
            value,
            lease_id: Some(u64::MAX),
        };
        let mut success: Vec<TxnOp> = (0..TXN_OPS_PER_BRANCH_MAX)
            .map(|i| put(i, String::new()))
            .collect();
        let mut failure = success.clone();
        let used = TXN_COMPARES_MAX + 2 * TXN_OPS_PER_BRANCH_MAX * 2;
        let rest = TXN_PAYLOAD_BYTES_MAX - used - VALUE_BYTES_MAX;
        success[0] = put(0, "v".repeat(VALUE_BYTES_MAX));
        failure[0] = put(0, "v".repeat(rest));
        check_shape(&compares, &success, &failure).expect("the largest admitted shape");
        let env = Envelope {
            now_ms: u64::MAX,
            request_id: Some(format!("{} {}", "p".repeat(64), "r".repeat(128))),
            command: Command::As {
                principal: "p".repeat(64),
                token_id: Some("0".repeat(16)),
                command: Box::new(Command::Txn {
                    compares,
                    success,
                    failure,
                }),
            },
        };
        let bytes = codec::encode_envelope(&env).expect("encodes").len();
        // Room for the Raft entry around the envelope (log id, payload tag).
        assert!(bytes + 1024 <= ENTRY_BYTES_MAX, "{bytes} bytes");
    }
}
