//! etcd's KV service over Turnstile's keys: `Range` is a linearizable key span
//! (`crate::key_span`), `Put` and `DeleteRange` of one key are `KvPut` and `KvDelete`, and a
//! write that asks for the previous value, or a `Txn`, is one `Command::Txn` entry (a `get`
//! before the write, in the same entry, so the previous value is exactly the one replaced).
//!
//! A `Range` inside a `Txn` is read at apply, in the same entry (`TxnOp::Range`, bounded by
//! `turnstile_core::limits::TXN_RANGE_*`).
//!
//! Not served (`Unimplemented`, listed in docs/etcd-compat.md): deleting a range of keys,
//! nested transactions inside a `Txn`, compares other than equality (and on `lease`),
//! `ignore_value` and `ignore_lease`. Reads at a past
//! revision answer etcd's "compacted" error: Turnstile keeps no history.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use turnstile_core::txn::{Compare, TxnOp, TxnResult};
use turnstile_core::{Command, Outcome};
use turnstile_etcd_proto::etcdserverpb::{
    compare, kv_server::Kv, range_request, request_op, response_op, CompactionRequest,
    CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, RequestOp, ResponseOp, TxnRequest, TxnResponse,
};
use turnstile_etcd_proto::mvccpb::KeyValue;

use crate::app::App;
use crate::auth::Caller;
use crate::etcd::common::{
    self, caller, header, key, key_value, lease, status, unexpected, unsigned, unsupported,
};
use crate::key_span::{KeySpan, SortBy, SpanAnswer, SpanEnd};
use crate::proto::{ReadAnswer, ReadQuery};
use crate::views::KeyView;

/// etcd's answer to a read at a revision it no longer keeps.
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
/// etcd's answer to a read at a revision it has not reached.
const FUTURE_REVISION: &str = "etcdserver: mvcc: required revision is a future revision";

/// The KV service.
pub struct KvService {
    pub app: Arc<App>,
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, req: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let at = unsigned("revision", r.revision)?;
        let a = read_span(&self.app, &caller, span(&r)?).await?;
        at_revision(at, a.revision)?;
        Ok(Response::new(RangeResponse {
            header: header(&self.app, a.revision),
            count: common::signed(a.count),
            more: a.more,
            kvs: a.kvs.into_iter().map(|k| key_value(k.into())).collect(),
        }))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let op = put_op(&r)?;
        if !r.prev_kv {
            let TxnOp::Put {
                key,
                value,
                lease_id,
            } = op
            else {
                return Err(unexpected(&op));
            };
            let command = Command::KvPut {
                key,
                value,
                lease_id,
                condition: None,
                fence: None,
            };
            let w = write(&self.app, &caller, command).await?;
            return Ok(Response::new(PutResponse {
                header: header(&self.app, w.revision),
                prev_kv: None,
            }));
        }
        let (revision, mut results) = one_branch_txn(&self.app, &caller, get_then(op)).await?;
        Ok(Response::new(PutResponse {
            header: header(&self.app, revision),
            prev_kv: take_get(&mut results)?,
        }))
    }

    async fn delete_range(
        &self,
        req: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let op = delete_op(&r)?;
        let (revision, mut results) = if r.prev_kv {
            one_branch_txn(&self.app, &caller, get_then(op)).await?
        } else {
            one_branch_txn(&self.app, &caller, vec![op]).await?
        };
        let prev_kvs = if r.prev_kv {
            take_get(&mut results)?.into_iter().collect()
        } else {
            Vec::new()
        };
        let deleted = match results.pop() {
            Some(TxnResult::Delete { existed, .. }) => i64::from(existed),
            other => return Err(unexpected(&other)),
        };
        Ok(Response::new(DeleteRangeResponse {
            header: header(&self.app, revision),
            deleted,
            prev_kvs,
        }))
    }

    async fn txn(&self, req: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let compares = r
            .compare
            .iter()
            .map(compare_of)
            .collect::<Result<Vec<_>, _>>()?;
        let (success, success_shapes) = branch(&r.success)?;
        let (failure, failure_shapes) = branch(&r.failure)?;
        turnstile_core::txn::check_shape(&compares, &success, &failure)
            .map_err(|e| status(&e.into()))?;
        let command = Command::Txn {
            compares,
            success,
            failure,
        };
        let w = write(&self.app, &caller, command).await?;
        let Outcome::Txn { succeeded, results } = w.outcome else {
            return Err(unexpected(&w.outcome));
        };
        let shapes = if succeeded {
            success_shapes
        } else {
            failure_shapes
        };
        let responses = responses(&self.app, w.revision, &shapes, results)?;
        Ok(Response::new(TxnResponse {
            header: header(&self.app, w.revision),
            succeeded,
            responses,
        }))
    }

    /// Turnstile keeps no history, so there is nothing to compact: reads at any past revision
    /// already answer "compacted". Only a revision not yet reached is refused, as etcd does.
    async fn compact(
        &self,
        req: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        caller.require_root("Compact").map_err(|e| status(&e))?;
        let at = unsigned("revision", req.into_inner().revision)?;
        let probe = KeySpan {
            count_only: true,
            ..KeySpan::bounds(String::new(), SpanEnd::One)
        };
        let a = read_span(&self.app, &caller, probe).await?;
        if at > a.revision {
            return Err(Status::out_of_range(FUTURE_REVISION));
        }
        Ok(Response::new(CompactionResponse {
            header: header(&self.app, a.revision),
        }))
    }
}

/// A write routed like the client API's, its refusals as etcd's statuses.
async fn write(
    app: &App,
    caller: &Caller,
    command: Command,
) -> Result<crate::api::ops::Written, Status> {
    app.write(caller, None, command)
        .await
        .map_err(|e| status(&e))
}

/// `ops` as the success branch of a transaction with no compares; its entry's index and the
/// ops' results.
async fn one_branch_txn(
    app: &App,
    caller: &Caller,
    ops: Vec<TxnOp>,
) -> Result<(u64, Vec<TxnResult>), Status> {
    let command = Command::Txn {
        compares: Vec::new(),
        success: ops,
        failure: Vec::new(),
    };
    let w = write(app, caller, command).await?;
    match w.outcome {
        Outcome::Txn {
            succeeded: true,
            results,
        } => Ok((w.revision, results)),
        other => Err(unexpected(&other)),
    }
}

/// A key span read through the leader.
async fn read_span(app: &App, caller: &Caller, span: KeySpan) -> Result<SpanAnswer, Status> {
    let answer = app
        .read(caller, ReadQuery::KeySpan(span))
        .await
        .map_err(|e| status(&e))?;
    match answer {
        ReadAnswer::KeySpan(Ok(a)) => Ok(a),
        ReadAnswer::KeySpan(Err(e)) => Err(Status::resource_exhausted(e.to_string())),
        other => Err(unexpected(&other)),
    }
}

/// etcd answers a read at `at` (0: the newest) only while it keeps that revision; Turnstile
/// keeps only the newest.
fn at_revision(at: u64, newest: u64) -> Result<(), Status> {
    match at {
        0 => Ok(()),
        at if at < newest => Err(Status::out_of_range(COMPACTED)),
        at if at > newest => Err(Status::out_of_range(FUTURE_REVISION)),
        _ => Ok(()),
    }
}

/// etcd's `[key, range_end)` as a key span: an empty `range_end` is the key alone, `"\0"` is
/// every key from `key` on, and a `key` of `"\0"` is the first key there is.
fn span(r: &RangeRequest) -> Result<KeySpan, Status> {
    let (start, end) = bounds(&r.key, &r.range_end)?;
    let limit = usize::try_from(unsigned("limit", r.limit)?).unwrap_or(usize::MAX);
    use range_request::{SortOrder, SortTarget};
    let target = match r.sort_target() {
        SortTarget::Key => SortBy::Key,
        SortTarget::Version => SortBy::Version,
        SortTarget::Create => SortBy::CreateRevision,
        SortTarget::Mod => SortBy::ModRevision,
        SortTarget::Value => SortBy::Value,
    };
    // As etcd: no order means key order, and ascending for any other target.
    let sort = match (r.sort_order(), target) {
        (SortOrder::None, SortBy::Key) | (SortOrder::Ascend, SortBy::Key) => None,
        (SortOrder::None, by) | (SortOrder::Ascend, by) => Some((by, false)),
        (SortOrder::Descend, by) => Some((by, true)),
    };
    Ok(KeySpan {
        start,
        end,
        limit,
        sort,
        min_mod_revision: unsigned("min_mod_revision", r.min_mod_revision)?,
        max_mod_revision: unsigned("max_mod_revision", r.max_mod_revision)?,
        min_create_revision: unsigned("min_create_revision", r.min_create_revision)?,
        max_create_revision: unsigned("max_create_revision", r.max_create_revision)?,
        keys_only: r.keys_only,
        count_only: r.count_only,
    })
}

/// A range's start key and end.
pub(crate) fn bounds(key_bytes: &[u8], range_end: &[u8]) -> Result<(String, SpanEnd), Status> {
    if key_bytes.is_empty() {
        return Err(Status::invalid_argument("etcdserver: key is not provided"));
    }
    let start = if key_bytes == [0] {
        String::new()
    } else if range_end.is_empty() {
        key(key_bytes)?
    } else {
        // A range may start at any text, even one no key could be.
        common::utf8("key", key_bytes)?
    };
    let end = match range_end {
        [] => SpanEnd::One,
        [0] => SpanEnd::All,
        end => SpanEnd::Before(common::utf8("range_end", end)?),
    };
    Ok((start, end))
}

/// A put as a transaction op (its lease and value checked).
fn put_op(r: &PutRequest) -> Result<TxnOp, Status> {
    if r.ignore_value {
        return Err(unsupported("Put with ignore_value"));
    }
    if r.ignore_lease {
        return Err(unsupported("Put with ignore_lease"));
    }
    Ok(TxnOp::Put {
        key: key(&r.key)?,
        value: common::value(&r.value)?,
        lease_id: lease(r.lease)?,
    })
}

/// A delete of one key as a transaction op.
fn delete_op(r: &DeleteRangeRequest) -> Result<TxnOp, Status> {
    if !r.range_end.is_empty() {
        return Err(unsupported(
            "DeleteRange of more than one key (a range_end or --prefix)",
        ));
    }
    Ok(TxnOp::Delete { key: key(&r.key)? })
}

/// `op` (a put or a delete) preceded by a `get` of its key, for its previous value.
fn get_then(op: TxnOp) -> Vec<TxnOp> {
    match &op {
        TxnOp::Put { key, .. } | TxnOp::Delete { key } => {
            let key = key.clone();
            vec![TxnOp::Get { key }, op]
        }
        _ => vec![op],
    }
}

/// Removes the first result, which must be a `get`, as etcd's `prev_kv`.
fn take_get(results: &mut Vec<TxnResult>) -> Result<Option<KeyValue>, Status> {
    if results.is_empty() {
        return Err(unexpected(&"no results"));
    }
    match results.remove(0) {
        TxnResult::Get { key, record } => Ok(record.map(|r| {
            key_value(KeyView {
                key,
                value: r.value,
                create_revision: r.create_revision,
                mod_revision: r.mod_revision,
                version: r.version,
                lease_id: r.lease_id,
            })
        })),
        other => Err(unexpected(&other)),
    }
}

/// An etcd compare as Turnstile's: equality on version, create and mod revision and value,
/// and "absent" (version, create or mod revision equal to 0).
fn compare_of(c: &turnstile_etcd_proto::etcdserverpb::Compare) -> Result<Compare, Status> {
    use compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    if !c.range_end.is_empty() {
        return Err(unsupported("a Compare over a range of keys"));
    }
    let key = key(&c.key)?;
    match (c.result(), c.target(), &c.target_union) {
        (R::Equal, T::Version, Some(U::Version(0)))
        | (R::Equal, T::Create, Some(U::CreateRevision(0)))
        | (R::Equal, T::Mod, Some(U::ModRevision(0))) => Ok(Compare::Absent { key }),
        (R::Equal, T::Version, Some(U::Version(v))) => Ok(Compare::Version {
            key,
            version: unsigned("version", *v)?,
        }),
        (R::Equal, T::Mod, Some(U::ModRevision(m))) => Ok(Compare::ModRevision {
            key,
            mod_revision: unsigned("mod_revision", *m)?,
        }),
        (R::Equal, T::Create, Some(U::CreateRevision(c))) => Ok(Compare::CreateRevision {
            key,
            create_revision: unsigned("create_revision", *c)?,
        }),
        (R::Equal, T::Value, Some(U::Value(v))) => Ok(Compare::Value {
            key,
            value: common::value(v)?,
        }),
        (result, target, _) => Err(unsupported(&format!(
            "Compare {} on {} (supported: EQUAL on VERSION, CREATE, MOD or VALUE)",
            result.as_str_name(),
            target.as_str_name()
        ))),
    }
}

/// How one etcd op of a branch maps onto the results of Turnstile's ops.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// One `get` (a single key, no options).
    Range,
    /// One key span (`TxnOp::Range`).
    Span,
    /// A put, after a `get` when `prev`.
    Put { prev: bool },
    /// A delete, after a `get` when `prev`.
    Delete { prev: bool },
}

/// A branch's ops as Turnstile's, with the shape of each.
fn branch(ops: &[RequestOp]) -> Result<(Vec<TxnOp>, Vec<Shape>), Status> {
    let mut out = Vec::new();
    let mut shapes = Vec::new();
    for op in ops {
        match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                if r.revision != 0 {
                    return Err(unsupported("a Range at a revision inside a Txn"));
                }
                if is_plain_get(r) {
                    out.push(TxnOp::Get { key: key(&r.key)? });
                    shapes.push(Shape::Range);
                } else {
                    out.push(TxnOp::Range(span(r)?));
                    shapes.push(Shape::Span);
                }
            }
            Some(request_op::Request::RequestPut(p)) => {
                let put = put_op(p)?;
                if p.prev_kv {
                    out.extend(get_then(put));
                } else {
                    out.push(put);
                }
                shapes.push(Shape::Put { prev: p.prev_kv });
            }
            Some(request_op::Request::RequestDeleteRange(d)) => {
                let del = delete_op(d)?;
                if d.prev_kv {
                    out.extend(get_then(del));
                } else {
                    out.push(del);
                }
                shapes.push(Shape::Delete { prev: d.prev_kv });
            }
            Some(request_op::Request::RequestTxn(_)) => {
                return Err(unsupported("a Txn inside a Txn"));
            }
            None => return Err(Status::invalid_argument("a RequestOp with no request")),
        }
    }
    Ok((out, shapes))
}

/// True for a `Range` of one key with nothing that shapes its answer: a plain `get`.
fn is_plain_get(r: &RangeRequest) -> bool {
    r.range_end.is_empty()
        && r.limit == 0
        && !r.keys_only
        && !r.count_only
        && r.min_mod_revision == 0
        && r.max_mod_revision == 0
        && r.min_create_revision == 0
        && r.max_create_revision == 0
}

/// The branch's results as etcd's responses, one per etcd op.
fn responses(
    app: &App,
    revision: u64,
    shapes: &[Shape],
    results: Vec<TxnResult>,
) -> Result<Vec<ResponseOp>, Status> {
    let mut results = results;
    results.reverse();
    let mut next = || results.pop().ok_or_else(|| unexpected(&"too few results"));
    let mut out = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let response = match *shape {
            Shape::Range => {
                let mut one = vec![next()?];
                let kv = take_get(&mut one)?;
                response_op::Response::ResponseRange(RangeResponse {
                    header: header(app, revision),
                    count: i64::from(kv.is_some()),
                    more: false,
                    kvs: kv.into_iter().collect(),
                })
            }
            Shape::Span => match next()? {
                TxnResult::Range { kvs, more, count } => {
                    response_op::Response::ResponseRange(RangeResponse {
                        header: header(app, revision),
                        count: common::signed(count),
                        more,
                        kvs: kvs.into_iter().map(|k| key_value(k.into())).collect(),
                    })
                }
                other => return Err(unexpected(&other)),
            },
            Shape::Put { prev } => {
                let prev_kv = if prev {
                    take_get(&mut vec![next()?])?
                } else {
                    None
                };
                match next()? {
                    TxnResult::Put { .. } => {}
                    other => return Err(unexpected(&other)),
                }
                response_op::Response::ResponsePut(PutResponse {
                    header: header(app, revision),
                    prev_kv,
                })
            }
            Shape::Delete { prev } => {
                let prev_kv = if prev {
                    take_get(&mut vec![next()?])?
                } else {
                    None
                };
                let deleted = match next()? {
                    TxnResult::Delete { existed, .. } => i64::from(existed),
                    other => return Err(unexpected(&other)),
                };
                response_op::Response::ResponseDeleteRange(DeleteRangeResponse {
                    header: header(app, revision),
                    deleted,
                    prev_kvs: prev_kv.into_iter().collect(),
                })
            }
        };
        out.push(ResponseOp {
            response: Some(response),
        });
    }
    Ok(out)
}
