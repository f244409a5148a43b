//! [`Session`]: a lease kept alive in the background, the [`Lost`] signal that says when it
//! can no longer be trusted, and locks taken under it ([`crate::LockGuard`]). See
//! `keepalive.rs` for the local deadline and why it is measured from send times.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::keepalive::{local_deadline, safety_margin, Deadline, Keeper};
use crate::lost::{LostReason, LostSender};
use crate::types::{AcquireOptions, LockOptions};
use crate::{Client, Error, LockGuard, Lost, Written};

/// TTL of a session's lease when none is given.
pub const SESSION_TTL_MS_DEFAULT: u64 = 10_000;

/// Options of [`Session::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// The lease's TTL (1 s to 1 h). Keepalives go out every TTL/3.
    pub ttl: Duration,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            ttl: Duration::from_millis(SESSION_TTL_MS_DEFAULT),
        }
    }
}

/// A lease with a background keepalive task. Cheap to clone; the lease is revoked (best
/// effort) when the last clone, including those inside [`LockGuard`]s, is dropped, or at once
/// by [`Session::close`]. Needs a tokio runtime.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    lease_id: u64,
    ttl: Duration,
    deadline: Deadline,
    lost_tx: LostSender,
    lost: Lost,
    task: JoinHandle<()>,
}

impl Client {
    /// Starts a session with a lease of `ttl`.
    pub async fn session(&self, ttl: Duration) -> Result<Session, Error> {
        Session::new(self, SessionOptions { ttl }).await
    }
}

impl Session {
    /// Grants the lease and starts keeping it alive.
    pub async fn new(client: &Client, opts: SessionOptions) -> Result<Session, Error> {
        let req = client.prepare_grant_lease(opts.ttl);
        // The lease began when the first attempt that landed was applied: after this instant.
        let sent = Instant::now();
        let grant = client.send(&req).await?;
        let ttl = Duration::from_millis(grant.ttl_ms);
        let deadline = Deadline::new(local_deadline(sent, ttl));
        let (lost_tx, lost) = LostSender::new();
        let keeper = Keeper {
            client: client.clone(),
            lease_id: grant.lease_id,
            ttl,
            deadline: deadline.clone(),
            lost: lost_tx.clone(),
            granted_sent: sent,
        };
        let task = tokio::spawn(keeper.run());
        Ok(Session {
            inner: Arc::new(Inner {
                client: client.clone(),
                lease_id: grant.lease_id,
                ttl,
                deadline,
                lost_tx,
                lost,
                task,
            }),
        })
    }

    pub fn lease_id(&self) -> u64 {
        self.inner.lease_id
    }

    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// `max(TTL / 10, 100 ms)`: how much earlier than the TTL the local deadline falls.
    pub fn safety_margin(&self) -> Duration {
        safety_margin(self.inner.ttl)
    }

    /// The local deadline: send time of the last confirmed keepalive + TTL − margin. Before it
    /// the lease is certainly alive on the cluster (barring pauses of this process, which is
    /// what fencing tokens are for).
    pub fn deadline(&self) -> Instant {
        self.inner.deadline.get()
    }

    /// The signal that fires when the lease is gone or no longer trusted.
    pub fn lost(&self) -> Lost {
        self.inner.lost.clone()
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Lost already, or past the local deadline (the task fires at the deadline; this also
    /// covers the instant between).
    fn lost_now(&self) -> Option<LostReason> {
        self.inner
            .lost
            .reason()
            .or_else(|| (Instant::now() >= self.deadline()).then_some(LostReason::DeadlinePassed))
    }

    /// Acquires `name` under this session's lease. Gives up with [`Error::SessionLost`] if the
    /// session is lost while waiting; a grant that arrives after the local deadline is
    /// released and answered with [`Error::LostBeforeGrant`].
    pub async fn lock(&self, name: &str, opts: LockOptions) -> Result<LockGuard, Error> {
        if let Some(reason) = self.lost_now() {
            return Err(Error::SessionLost { reason });
        }
        let acquire = AcquireOptions {
            lease_id: self.lease_id(),
            wait: opts.wait,
            mode: opts.mode,
            permits: opts.permits,
        };
        let lost = self.lost();
        // Dropping the acquire (when the session is lost first) cancels the server-side wait.
        let grant = tokio::select! {
            g = self.inner.client.acquire(name, acquire) => g,
            reason = lost.wait() => return Err(Error::SessionLost { reason }),
        };
        let grant = match grant {
            Ok(g) => g,
            Err(e @ Error::LeaseNotFound { .. }) => {
                self.inner.lost_tx.fire(LostReason::LeaseNotFound);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if self.lost_now().is_some() {
            let released = self
                .inner
                .client
                .release(&grant.name, grant.token, grant.lease_id)
                .await;
            tracing::warn!(lock = %grant.name, token = grant.token, ?released, "grant arrived after the session was lost; released");
            return Err(Error::LostBeforeGrant);
        }
        Ok(LockGuard::new(self.clone(), grant))
    }

    /// Stops the keepalives, fires [`Lost`] with [`LostReason::Closed`] and revokes the lease
    /// (releasing its locks).
    pub async fn close(self) -> Result<Written, Error> {
        self.inner.task.abort();
        self.inner.lost_tx.fire(LostReason::Closed);
        self.inner.client.revoke_lease(self.inner.lease_id).await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
        let before = self.lost.reason();
        self.lost_tx.fire(LostReason::Closed);
        // Closed already revoked; a lease the cluster said is gone needs nothing.
        if matches!(before, Some(LostReason::Closed | LostReason::LeaseNotFound)) {
            return;
        }
        // Best effort: without a runtime the lease simply expires.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let lease_id = self.lease_id;
            rt.spawn(async move {
                if let Err(e) = client.revoke_lease(lease_id).await {
                    tracing::debug!(lease_id, error = %e, "revoke on session drop failed");
                }
            });
        }
    }
}
