//! etcd's KV service over Turnstile's keys: `Range` is a linearizable key span
//! (`crate::key_span`), and every write (`Put`, `DeleteRange`, `Txn`) is one `Command::Txn`
//! entry of its own; a write that asks for the previous value has a `get` before the write,
//! in the same entry, so the previous value is exactly the one replaced. Never a plain
//! `KvPut` or `KvDelete`: the leader lets concurrent plain key writes share an entry and its
//! revision (`turnstile_core::many`), and etcd clients expect a revision per write.
//!
//! A `Range` inside a `Txn` is read at apply, in the same entry (`TxnOp::Range`, bounded by
//! `turnstile_core::limits::TXN_RANGE_*`).
//!
//! A `DeleteRange` over a range is `TxnOp::DeleteRange` (bounded with the ranges), and a
//! compare other than equality is `Compare::Ordered`.
//!
//! A `Put` with `ignore_value` or `ignore_lease` is `TxnOp::PutKeeping`.
//!
//! Not served (`Unimplemented`, listed in docs/etcd-compat.md): nested transactions inside a
//! `Txn`, compares over a range of keys.
//! Reads at a past revision answer etcd's "compacted" error: Turnstile keeps no history.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use turnstile_core::txn::{Compare, Operand, Order, TxnOp, TxnResult};
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
        // A transaction, never a plain `KvPut`: the leader lets concurrent plain key writes
        // share an entry and so a revision (`turnstile_core::many`), and etcd's recipes rank
        // keys by `create_revision`, so every put here keeps a revision of its own.
        let ops = if r.prev_kv { get_then(op) } else { vec![op] };
        let (revision, mut results) = one_branch_txn(&self.app, &caller, ops).await?;
        Ok(Response::new(PutResponse {
            header: header(&self.app, revision),
            prev_kv: if r.prev_kv {
                take_get(&mut results)?
            } else {
                None
            },
        }))
    }

    async fn delete_range(
        &self,
        req: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let (revision, mut results) = one_branch_txn(&self.app, &caller, delete_ops(&r)?).await?;
        Ok(Response::new(delete_response(
            &self.app,
            revision,
            &r,
            &mut results,
        )?))
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

/// A put as a transaction op (its lease and value checked): `TxnOp::PutKeeping` when it
/// keeps the key's value or lease (etcd's `ignore_value`, `ignore_lease`, each refused as
/// etcd refuses it when the request also carries what it ignores).
fn put_op(r: &PutRequest) -> Result<TxnOp, Status> {
    if r.ignore_value && !r.value.is_empty() {
        return Err(Status::invalid_argument("etcdserver: value is provided"));
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(Status::invalid_argument("etcdserver: lease is provided"));
    }
    if r.ignore_value || r.ignore_lease {
        return Ok(TxnOp::PutKeeping {
            key: key(&r.key)?,
            value: if r.ignore_value {
                None
            } else {
                Some(common::value(&r.value)?)
            },
            lease_id: lease(r.lease)?,
            keep_lease: r.ignore_lease,
        });
    }
    Ok(TxnOp::Put {
        key: key(&r.key)?,
        value: common::value(&r.value)?,
        lease_id: lease(r.lease)?,
    })
}

/// A delete as a transaction op: of one key (`TxnOp::Delete`, after a `get` of it when
/// `prev_kv`), or of a range (`TxnOp::DeleteRange`, which answers its previous keys itself).
fn delete_ops(r: &DeleteRangeRequest) -> Result<Vec<TxnOp>, Status> {
    if r.range_end.is_empty() {
        let del = TxnOp::Delete { key: key(&r.key)? };
        return Ok(if r.prev_kv { get_then(del) } else { vec![del] });
    }
    let (start, end) = bounds(&r.key, &r.range_end)?;
    Ok(vec![TxnOp::DeleteRange {
        start,
        end,
        prev: r.prev_kv,
    }])
}

/// The response to a delete made by [`delete_ops`], from its results (taken from the front).
fn delete_response(
    app: &App,
    revision: u64,
    r: &DeleteRangeRequest,
    results: &mut Vec<TxnResult>,
) -> Result<DeleteRangeResponse, Status> {
    let one_prev = if r.range_end.is_empty() && r.prev_kv {
        Some(take_get(results)?)
    } else {
        None
    };
    if results.is_empty() {
        return Err(unexpected(&"no results"));
    }
    let (deleted, prev_kvs) = match results.remove(0) {
        TxnResult::Delete { existed, .. } => {
            (i64::from(existed), one_prev.flatten().into_iter().collect())
        }
        TxnResult::DeleteRange { deleted, prev, .. } => (
            common::signed(deleted),
            prev.into_iter().map(|k| key_value(k.into())).collect(),
        ),
        other => return Err(unexpected(&other)),
    };
    Ok(DeleteRangeResponse {
        header: header(app, revision),
        deleted,
        prev_kvs,
    })
}

/// `op` (a put or a delete) preceded by a `get` of its key, for its previous value.
fn get_then(op: TxnOp) -> Vec<TxnOp> {
    match &op {
        TxnOp::Put { key, .. } | TxnOp::PutKeeping { key, .. } | TxnOp::Delete { key } => {
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

/// An etcd compare as Turnstile's: equality on version, create and mod revision and value as
/// the HTTP API's compares ("absent" for version, create or mod revision 0), every other
/// compare (other orders, and any on `lease`) as [`Compare::Ordered`]. A missing or
/// mismatched operand is etcd's zero (0, or the empty value), as etcd reads it.
fn compare_of(c: &turnstile_etcd_proto::etcdserverpb::Compare) -> Result<Compare, Status> {
    use compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    if !c.range_end.is_empty() {
        return Err(unsupported("a Compare over a range of keys"));
    }
    let key = key(&c.key)?;
    let number = |what: &str| -> Result<u64, Status> {
        let n = match (c.target(), &c.target_union) {
            (T::Version, Some(U::Version(n)))
            | (T::Create, Some(U::CreateRevision(n)))
            | (T::Mod, Some(U::ModRevision(n)))
            | (T::Lease, Some(U::Lease(n))) => *n,
            _ => 0,
        };
        unsigned(what, n)
    };
    let of = match c.target() {
        T::Version => Operand::Version(number("version")?),
        T::Create => Operand::CreateRevision(number("create_revision")?),
        T::Mod => Operand::ModRevision(number("mod_revision")?),
        T::Value => Operand::Value(match &c.target_union {
            Some(U::Value(v)) => common::value(v)?,
            _ => String::new(),
        }),
        T::Lease => Operand::Lease(number("lease")?),
    };
    let order = match c.result() {
        R::Equal => Order::Equal,
        R::NotEqual => Order::NotEqual,
        R::Greater => Order::Greater,
        R::Less => Order::Less,
    };
    Ok(match (order, of) {
        (Order::Equal, Operand::Version(0))
        | (Order::Equal, Operand::CreateRevision(0))
        | (Order::Equal, Operand::ModRevision(0)) => Compare::Absent { key },
        (Order::Equal, Operand::Version(version)) => Compare::Version { key, version },
        (Order::Equal, Operand::ModRevision(mod_revision)) => {
            Compare::ModRevision { key, mod_revision }
        }
        (Order::Equal, Operand::CreateRevision(create_revision)) => Compare::CreateRevision {
            key,
            create_revision,
        },
        (Order::Equal, Operand::Value(value)) => Compare::Value { key, value },
        (order, of) => Compare::Ordered { key, order, of },
    })
}

/// How one etcd op of a branch maps onto the results of Turnstile's ops.
#[derive(Debug, Clone, Copy)]
enum Shape<'a> {
    /// One `get` (a single key, no options).
    Range,
    /// One key span (`TxnOp::Range`).
    Span,
    /// A put, after a `get` when `prev`.
    Put { prev: bool },
    /// A delete (of one key or of a range).
    Delete(&'a DeleteRangeRequest),
}

/// A branch's ops as Turnstile's, with the shape of each.
fn branch(ops: &[RequestOp]) -> Result<(Vec<TxnOp>, Vec<Shape<'_>>), Status> {
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
                out.extend(delete_ops(d)?);
                shapes.push(Shape::Delete(d));
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
    shapes: &[Shape<'_>],
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
            Shape::Delete(d) => {
                let mut taken = vec![next()?];
                if d.range_end.is_empty() && d.prev_kv {
                    taken.push(next()?);
                }
                response_op::Response::ResponseDeleteRange(delete_response(
                    app, revision, d, &mut taken,
                )?)
            }
        };
        out.push(ResponseOp {
            response: Some(response),
        });
    }
    Ok(out)
}
