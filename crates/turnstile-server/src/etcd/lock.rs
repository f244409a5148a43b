//! etcd's Lock service (v3lock) over Turnstile's own locks: `Lock(name, lease)` is a waiting
//! exclusive acquire of the lock `name` for `lease`, queued first-come first-served, and its
//! answer's `header.revision` is the grant's fencing token (the index of the granting entry,
//! which Turnstile's fenced writes and `/v1/fence` check). The returned key is etcd's own shape,
//! `<name>/<lease id in hex>`, which `Unlock` takes back; it names the grant and is not a key
//! of the KV store (docs/etcd-compat.md).
//!
//! A `Lock` waits at most `WAIT_MS_MAX` (five minutes; etcd waits for ever) and then answers
//! `DeadlineExceeded`, its place in the queue cancelled. A client that goes away while waiting
//! cancels its wait the same way (`crate::api::acquire`).

use std::sync::Arc;

use tonic::{Request, Response, Status};
use turnstile_core::{ApplyError, Command, LockMode, Outcome};
use turnstile_etcd_proto::v3lockpb::{
    lock_server::Lock, LockRequest, LockResponse, UnlockRequest, UnlockResponse,
};

use crate::api::acquire::{self, AcquireArgs, WAIT_MS_MAX};
use crate::api::validate;
use crate::app::App;
use crate::error::ApiError;
use crate::etcd::common::{caller, header, lease, status, unexpected, utf8};
use crate::proto::{ReadAnswer, ReadQuery};

/// The Lock service.
pub struct LockService {
    pub app: Arc<App>,
}

/// etcd's lock key: the lock's name, `/`, the lease id in hex.
pub fn lock_key(name: &str, lease_id: u64) -> String {
    format!("{name}/{lease_id:x}")
}

/// A lock key's name and lease id.
fn parse_lock_key(key: &[u8]) -> Result<(String, u64), Status> {
    let key = utf8("key", key)?;
    let bad =
        || Status::invalid_argument("a lock key is `<name>/<lease id in hex>`, as Lock answers");
    let (name, hex) = key.rsplit_once('/').ok_or_else(bad)?;
    let lease_id = u64::from_str_radix(hex, 16).map_err(|_| bad())?;
    validate::lock_name(name).map_err(|e| status(&e))?;
    Ok((name.to_string(), lease_id))
}

impl LockService {
    /// The token `lease_id` holds on `name` in this node's applied state, if any.
    fn local_token(&self, name: &str, lease_id: u64) -> Option<u64> {
        let inner = self.app.sm.read();
        let lock = inner.state.locks.get(name)?;
        lock.holders
            .iter()
            .find(|h| h.lease_id == lease_id)
            .map(|h| h.token)
    }

    async fn release(
        &self,
        caller: &crate::auth::Caller,
        name: &str,
        lease_id: u64,
        token: u64,
    ) -> Result<Response<UnlockResponse>, ApiError> {
        let command = Command::LockRelease {
            name: name.to_string(),
            lease_id,
            token,
        };
        let w = self.app.write(caller, None, command).await?;
        Ok(Response::new(UnlockResponse {
            header: header(&self.app, w.revision),
        }))
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, req: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let name = utf8("name", &r.name)?;
        validate::lock_name(&name).map_err(|e| status(&e))?;
        let lease_id = lease(r.lease)?
            .ok_or_else(|| Status::invalid_argument("Lock needs a lease (etcd: a session)"))?;
        let args = AcquireArgs {
            names: vec![name.clone()],
            lease_id,
            mode: LockMode::Exclusive,
            permits: None,
            wait_ms: WAIT_MS_MAX,
            request_id: None,
        };
        let w = acquire::run(self.app.clone(), caller, args)
            .await
            .map_err(|e| match e {
                ApiError::Apply(turnstile_core::ApplyError::WaitTimeout { .. }) => {
                    Status::deadline_exceeded(format!(
                        "waited {} s for the lock; the wait was cancelled",
                        WAIT_MS_MAX / 1_000
                    ))
                }
                e => status(&e),
            })?;
        let Outcome::Granted { token, .. } = w.outcome else {
            return Err(unexpected(&w.outcome));
        };
        Ok(Response::new(LockResponse {
            header: header(&self.app, token),
            key: lock_key(&name, lease_id).into_bytes(),
        }))
    }

    /// Releases the grant the key names. Like etcd's (a delete of the key), unlocking a lock
    /// the lease does not hold (any more) succeeds and changes nothing.
    async fn unlock(
        &self,
        req: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let (name, lease_id) = parse_lock_key(&req.get_ref().key)?;
        // Usually this node's applied state already holds the grant (it answered the `Lock`
        // or replicated it): release that token, and apply judges it. Only when the state
        // here knows no grant for the lease, or apply says that token is no longer the
        // current one, ask the leader which grant the lease holds (a ReadIndex round).
        if let Some(token) = self.local_token(&name, lease_id) {
            match self.release(&caller, &name, lease_id, token).await {
                Err(ApiError::Apply(
                    ApplyError::NotHolder { .. } | ApplyError::LeaseNotFound { .. },
                )) => {}
                done => return done.map_err(|e| status(&e)),
            }
        }
        let answer = self
            .app
            .read(&caller, ReadQuery::Lock { name: name.clone() })
            .await
            .map_err(|e| status(&e))?;
        let ReadAnswer::Lock(view) = answer else {
            return Err(unexpected(&answer));
        };
        let held = view
            .holders
            .iter()
            .find(|h| h.lease_id == Some(lease_id))
            .and_then(|h| h.token);
        let Some(token) = held else {
            let revision = self.app.sm.read().state.applied_index;
            return Ok(Response::new(UnlockResponse {
                header: header(&self.app, revision),
            }));
        };
        match self.release(&caller, &name, lease_id, token).await {
            // Released or expired since the read: gone either way, as a deleted key is.
            Err(ApiError::Apply(
                ApplyError::NotHolder { .. } | ApplyError::LeaseNotFound { .. },
            )) => {
                let revision = self.app.sm.read().state.applied_index;
                Ok(Response::new(UnlockResponse {
                    header: header(&self.app, revision),
                }))
            }
            done => done.map_err(|e| status(&e)),
        }
    }
}
