//! etcd's Lease service over Turnstile's leases. TTLs are whole seconds in etcd and
//! milliseconds here; a lease is granted for at least `TTL_MS_MIN` and at most `TTL_MS_MAX`
//! (an hour: etcd's "too large lease TTL" past it). Turnstile assigns lease ids (the index of
//! the granting entry), so a `LeaseGrant` that names its own `ID` is refused.
//!
//! Each keep-alive on the stream is one replicated `LeaseKeepalive` entry, as on the client
//! API: a renewal survives a leader change. A lease that is gone answers `TTL: 0` on the
//! stream and `TTL: -1` from `LeaseTimeToLive`, as etcd does.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};
use turnstile_core::limits::{TTL_MS_MAX, TTL_MS_MIN};
use turnstile_core::{Command, Outcome};
use turnstile_etcd_proto::etcdserverpb::{
    lease_server::Lease, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};

use crate::app::App;
use crate::auth::{Caller, NodeQuota, NodeUsage};
use crate::etcd::common::{
    caller, header, signed, status, unexpected, unsigned, unsupported, StreamSlot,
};
use crate::proto::{ReadAnswer, ReadQuery};
use crate::ranges::{Range, LIST_LIMIT_MAX};

/// Keep-alive answers buffered per stream before its reader must catch up.
const KEEPALIVE_STREAM_BUFFER: usize = 16;
/// Keep-alive streams one node serves at once (each also takes one of its principal's
/// `watches` quota, like a watch stream: both are long-lived streams).
pub const KEEPALIVE_STREAMS_PER_NODE_MAX: usize = 10_000;

static KEEPALIVE_STREAMS: AtomicUsize = AtomicUsize::new(0);

/// Leases one `LeaseLeases` answer lists at most (pages of `LIST_LIMIT_MAX`).
pub const LEASES_LISTED_MAX: usize = 100_000;

/// The Lease service.
pub struct LeaseService {
    pub app: Arc<App>,
}

/// Whole seconds, rounded up, of a TTL in milliseconds.
fn seconds(ms: u64) -> i64 {
    signed(ms.div_ceil(1_000))
}

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        req: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        if r.id != 0 {
            return Err(unsupported(
                "LeaseGrant with an ID chosen by the client (Turnstile assigns lease ids)",
            ));
        }
        // etcd raises a TTL below its minimum to the minimum; so does this port.
        let ttl_ms = unsigned("TTL", r.ttl)?
            .saturating_mul(1_000)
            .max(TTL_MS_MIN);
        if ttl_ms > TTL_MS_MAX {
            return Err(Status::out_of_range(format!(
                "etcdserver: too large lease TTL (at most {} s here)",
                TTL_MS_MAX / 1_000
            )));
        }
        let w = self
            .app
            .write(&caller, None, Command::LeaseGrant { ttl_ms })
            .await
            .map_err(|e| status(&e))?;
        let Outcome::LeaseGranted { lease_id, ttl_ms } = w.outcome else {
            return Err(unexpected(&w.outcome));
        };
        Ok(Response::new(LeaseGrantResponse {
            header: header(&self.app, w.revision),
            id: signed(lease_id),
            ttl: seconds(ttl_ms),
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        req: Request<LeaseRevokeRequest>,
    ) -> Result<Response<LeaseRevokeResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let lease_id = unsigned("ID", req.into_inner().id)?;
        let w = self
            .app
            .write(&caller, None, Command::LeaseRevoke { lease_id })
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(LeaseRevokeResponse {
            header: header(&self.app, w.revision),
        }))
    }

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<BoxStream<LeaseKeepAliveResponse>>, Status> {
        let caller = caller(&self.app, &req).await?;
        let node_slot = StreamSlot::take(
            &KEEPALIVE_STREAMS,
            KEEPALIVE_STREAMS_PER_NODE_MAX,
            "keep-alive",
        )?;
        let quota_slot =
            NodeUsage::take(&self.app, &caller, NodeQuota::Watches).map_err(|e| status(&e))?;
        let mut incoming = req.into_inner();
        let (tx, rx) = mpsc::channel(KEEPALIVE_STREAM_BUFFER);
        let app = self.app.clone();
        // One renewal at a time per stream, in the order asked: a client sends the next when
        // the last is answered (etcd's clients renew each lease every TTL/3).
        tokio::spawn(async move {
            let _slots = (node_slot, quota_slot);
            loop {
                let next = match incoming.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "etcd keep-alive stream ended");
                        break;
                    }
                };
                let answer = renew(&app, &caller, next.id).await;
                if tx.send(answer).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let lease_id = unsigned("ID", r.id)?;
        let answer = self
            .app
            .read(&caller, ReadQuery::Lease { lease_id })
            .await
            .map_err(|e| status(&e))?;
        let ReadAnswer::Lease(view) = answer else {
            return Err(unexpected(&answer));
        };
        let revision = self.app.sm.read().state.applied_index;
        let response = match view {
            Some(v) => LeaseTimeToLiveResponse {
                header: header(&self.app, revision),
                id: r.id,
                ttl: seconds(v.remaining_ms),
                granted_ttl: seconds(v.ttl_ms),
                keys: if r.keys {
                    v.keys.into_iter().map(String::into_bytes).collect()
                } else {
                    Vec::new()
                },
            },
            None => LeaseTimeToLiveResponse {
                header: header(&self.app, revision),
                id: r.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            },
        };
        Ok(Response::new(response))
    }

    async fn lease_leases(
        &self,
        req: Request<LeaseLeasesRequest>,
    ) -> Result<Response<LeaseLeasesResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let mut leases = Vec::new();
        let mut after = None;
        let mut revision = 0;
        // Pages of one read each; a lease granted between pages may be missed, as a lease
        // granted just after the call would be.
        while leases.len() < LEASES_LISTED_MAX {
            let range = Range {
                prefix: String::new(),
                after,
                limit: LIST_LIMIT_MAX,
            };
            let answer = self
                .app
                .read(&caller, ReadQuery::Leases(range))
                .await
                .map_err(|e| status(&e))?;
            let ReadAnswer::Leases(page) = answer else {
                return Err(unexpected(&answer));
            };
            revision = page.revision;
            after = page.items.last().map(|l| l.lease_id);
            leases.extend(page.items.iter().map(|l| LeaseStatus {
                id: signed(l.lease_id),
            }));
            if !page.more {
                break;
            }
        }
        Ok(Response::new(LeaseLeasesResponse {
            header: header(&self.app, revision),
            leases,
        }))
    }
}

/// One renewal on a keep-alive stream: the lease's TTL, or `TTL: 0` when it is gone.
async fn renew(app: &App, caller: &Caller, id: i64) -> Result<LeaseKeepAliveResponse, Status> {
    let lease_id = unsigned("ID", id)?;
    let w = app
        .write(
            caller,
            None,
            Command::LeaseKeepalive {
                lease_ids: vec![lease_id],
            },
        )
        .await
        .map_err(|e| status(&e))?;
    let Outcome::LeasesKept { results } = &w.outcome else {
        return Err(unexpected(&w.outcome));
    };
    let ttl = match results.first() {
        Some(r) if r.lease_id == lease_id && r.remaining_ms.is_some() => seconds(r.ttl_ms),
        _ => 0,
    };
    Ok(LeaseKeepAliveResponse {
        header: header(app, w.revision),
        id,
        ttl,
    })
}
