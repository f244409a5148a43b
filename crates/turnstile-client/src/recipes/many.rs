//! [`ManyGuard`]: several locks granted together by one entry (`acquire-many`: all or none,
//! so two holders of overlapping sets cannot deadlock each other), held under a
//! [`Session`] and released as one. Every lock of the set carries the same fencing token, the
//! index of the granting entry; a fenced write names one of the locks with that token.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::types::Fence;
use crate::{Error, Lost, LostReason, MultiGrant, Session, Written};

/// Held locks of one acquire-many. Dropping it releases them in a spawned task (best effort;
/// otherwise they end with the session's lease). [`ManyGuard::release`] releases and reports.
#[derive(Debug)]
pub struct ManyGuard {
    session: Session,
    tokens: BTreeMap<String, u64>,
    cluster_id: Option<String>,
    released: bool,
}

impl Session {
    /// Acquires every lock in `names` at once under this session's lease (exclusive), waiting
    /// up to `wait` in their queues. Like [`Session::lock`], it gives up when the session is
    /// lost, and a grant that arrives after the local deadline is released and answered with
    /// [`Error::LostBeforeGrant`].
    pub async fn lock_many(&self, names: &[String], wait: Duration) -> Result<ManyGuard, Error> {
        if let Some(reason) = self.lost_or_late() {
            return Err(Error::SessionLost { reason });
        }
        let lost = self.lost();
        let grant: MultiGrant = tokio::select! {
            g = self.client().acquire_many(names, self.lease_id(), wait) => g?,
            reason = lost.wait() => return Err(Error::SessionLost { reason }),
        };
        let guard = ManyGuard {
            session: self.clone(),
            tokens: grant.tokens,
            cluster_id: grant.cluster_id,
            released: false,
        };
        if self.lost_or_late().is_some() {
            let released = guard.release().await;
            tracing::warn!(
                ?released,
                "grant arrived after the session was lost; released"
            );
            return Err(Error::LostBeforeGrant);
        }
        Ok(guard)
    }

    fn lost_or_late(&self) -> Option<LostReason> {
        self.lost()
            .reason()
            .or_else(|| (Instant::now() >= self.deadline()).then_some(LostReason::DeadlinePassed))
    }
}

impl ManyGuard {
    /// The names held, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tokens.keys().map(String::as_str)
    }

    /// The fencing token of the whole set (one entry granted them all).
    pub fn token(&self) -> u64 {
        self.tokens.values().copied().max().unwrap_or_default()
    }

    /// The fence of a write guarded by lock `name` of the set, if it is one of them.
    pub fn fence(&self, name: &str) -> Option<Fence> {
        self.tokens.get(name).map(|&token| Fence {
            lock: name.to_string(),
            token,
        })
    }

    pub fn lease_id(&self) -> u64 {
        self.session.lease_id()
    }

    /// The issuing cluster, which travels with the token to fenced resources.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Fires when the session is lost: the holds can no longer be trusted.
    pub fn lost(&self) -> Lost {
        self.session.lost()
    }

    /// Releases every lock of the set; the first failure is returned after trying them all.
    pub async fn release(mut self) -> Result<Written, Error> {
        self.released = true;
        let client = self.session.client();
        let lease_id = self.session.lease_id();
        let mut last = None;
        let mut first_error = None;
        for (name, &token) in &self.tokens {
            match client.release(name, token, lease_id).await {
                Ok(w) => last = Some(w),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (first_error, last) {
            (Some(e), _) => Err(e),
            (None, Some(w)) => Ok(w),
            (None, None) => Err(Error::Protocol {
                message: "an acquire-many grant named no lock".into(),
            }),
        }
    }
}

impl Drop for ManyGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.session.client().clone();
        let lease_id = self.session.lease_id();
        let tokens = std::mem::take(&mut self.tokens);
        rt.spawn(async move {
            for (name, token) in tokens {
                if let Err(e) = client.release(&name, token, lease_id).await {
                    tracing::debug!(lock = %name, token, error = %e, "release on drop failed");
                }
            }
        });
    }
}
