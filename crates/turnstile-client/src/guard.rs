//! [`LockGuard`]: one hold of a lock under a [`Session`]. It carries what the holder must pass
//! to protected resources (the fencing token and the cluster id), the session's [`Lost`]
//! signal, and releases the hold when dropped.

use crate::types::{Fence, Grant};
use crate::{Error, Lost, Session, Written};

/// A held lock. Dropping it releases the hold in a spawned task (best effort; if that fails
/// the hold ends with the session's lease). [`LockGuard::release`] releases and reports.
#[derive(Debug)]
pub struct LockGuard {
    session: Session,
    grant: Grant,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(session: Session, grant: Grant) -> LockGuard {
        LockGuard {
            session,
            grant,
            released: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.grant.name
    }

    /// The fencing token: greater than every earlier grant's token.
    pub fn token(&self) -> u64 {
        self.grant.token
    }

    /// The issuing cluster, for resources that refuse foreign tokens.
    pub fn cluster_id(&self) -> Option<&str> {
        self.grant.cluster_id.as_deref()
    }

    pub fn lease_id(&self) -> u64 {
        self.grant.lease_id
    }

    /// The whole grant (token, term, cluster id, lease, revision).
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The guard for a fenced write (`PutOptions::fence`, `DeleteOptions::fence`): applied
    /// only while this hold is the lock's current grant.
    pub fn fence(&self) -> Fence {
        Fence {
            lock: self.grant.name.clone(),
            token: self.grant.token,
        }
    }

    /// The session's lost signal: stop working under this lock when it fires.
    pub fn lost(&self) -> Lost {
        self.session.lost()
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Releases the hold now.
    pub async fn release(mut self) -> Result<Written, Error> {
        self.released = true;
        let g = &self.grant;
        self.session
            .client()
            .release(&g.name, g.token, g.lease_id)
            .await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.session.client().clone();
        let Grant {
            name,
            token,
            lease_id,
            ..
        } = self.grant.clone();
        rt.spawn(async move {
            if let Err(e) = client.release(&name, token, lease_id).await {
                tracing::debug!(lock = %name, token, error = %e, "release on drop failed");
            }
        });
    }
}
