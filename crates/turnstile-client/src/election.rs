//! [`Election`]: one named election. Campaigning waits in the election's FIFO queue (on the
//! server, like a blocking lock acquire) and returns a [`Leadership`]; `get` reads the
//! current leader; `observe` streams the election's leader changes. An election is the lock
//! of its name plus a published value, so a leader's token fences writes like a lock token.

use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::{duration_ms, encode_path};
use crate::watch::{EventKind, WatchEvent, WatchOptions};
use crate::{Client, Error, Leadership, Prepared, Session, Written};

/// A campaign's answer: this lease leads, from the entry at `token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaigned {
    pub name: String,
    pub lease_id: u64,
    pub value: String,
    /// The fencing token: the index of the entry that made this lease leader.
    pub token: u64,
    pub term: u64,
    pub cluster_id: Option<String>,
    pub revision: u64,
}

/// The leader in `GET /v1/elections/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionLeader {
    /// `None` when the lease is another principal's (a secure cluster hides it).
    pub lease_id: Option<u64>,
    pub value: String,
    /// `None` when the lease is another principal's.
    pub token: Option<u64>,
    /// Cluster time when it became leader, in ms.
    pub since_ms: u64,
}

/// `GET /v1/elections/{name}`: `leader` is `None` while nobody leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionInfo {
    pub name: String,
    pub leader: Option<ElectionLeader>,
}

/// One named election, bound to a client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    name: String,
}

impl Client {
    /// The election `name` (1..=256 bytes of `[A-Za-z0-9._:-]`; the lock of the same name).
    pub fn election(&self, name: &str) -> Election {
        Election {
            client: self.clone(),
            name: name.to_string(),
        }
    }

    pub fn prepare_campaign(
        &self,
        name: &str,
        lease_id: u64,
        value: &str,
        wait: Duration,
    ) -> Prepared<Campaigned> {
        let body = json!({"lease_id": lease_id, "value": value, "wait_ms": duration_ms(wait)});
        let path = format!("/v1/elections/{}/campaign", encode_path(name));
        Prepared::write(Method::POST, path, body).with_server_wait(wait)
    }

    pub fn prepare_proclaim(
        &self,
        name: &str,
        lease_id: u64,
        token: u64,
        value: &str,
    ) -> Prepared<Written> {
        let body = json!({"lease_id": lease_id, "token": token, "value": value});
        let path = format!("/v1/elections/{}/proclaim", encode_path(name));
        Prepared::write(Method::POST, path, body)
    }

    pub fn prepare_resign(&self, name: &str, lease_id: u64, token: u64) -> Prepared<Written> {
        let body = json!({"lease_id": lease_id, "token": token});
        let path = format!("/v1/elections/{}/resign", encode_path(name));
        Prepared::write(Method::POST, path, body)
    }
}

impl Election {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Campaigns under `session`'s lease, waiting in FIFO order up to `wait`, and returns the
    /// leadership. Gives up with [`Error::SessionLost`] if the session is lost while waiting
    /// (dropping the wait cancels it on the server); a win that arrives after the session's
    /// local deadline is resigned and answered with [`Error::LostBeforeGrant`].
    pub async fn campaign(
        &self,
        session: &Session,
        value: &str,
        wait: Duration,
    ) -> Result<Leadership, Error> {
        let lost = session.lost();
        if let Some(reason) = lost.reason() {
            return Err(Error::SessionLost { reason });
        }
        let req = self
            .client
            .prepare_campaign(&self.name, session.lease_id(), value, wait);
        let won = tokio::select! {
            w = self.client.send(&req) => w?,
            reason = lost.wait() => return Err(Error::SessionLost { reason }),
        };
        if lost.is_lost() || std::time::Instant::now() >= session.deadline() {
            let resigned = self.resign_token(won.lease_id, won.token).await;
            tracing::warn!(election = %self.name, token = won.token, ?resigned, "leadership arrived after the session was lost; resigned");
            return Err(Error::LostBeforeGrant);
        }
        Ok(Leadership::new(session.clone(), won))
    }

    async fn resign_token(&self, lease_id: u64, token: u64) -> Result<Written, Error> {
        let req = self.client.prepare_resign(&self.name, lease_id, token);
        self.client.send(&req).await
    }

    /// A linearizable read of the current leader and its value.
    pub async fn get(&self) -> Result<ElectionInfo, Error> {
        let path = format!("/v1/elections/{}", encode_path(&self.name));
        self.client.send(&Prepared::read(path)).await
    }

    /// The election's `election_leader` and `election_resigned` events from `from_revision`
    /// (inclusive; 0 = from now), resuming by itself like any [`crate::Watch`].
    pub fn observe(
        &self,
        from_revision: u64,
    ) -> impl Stream<Item = Result<WatchEvent, Error>> + Send + Unpin + 'static {
        let opts = WatchOptions::key(self.name.clone()).from_revision(from_revision);
        self.client.watch(opts).filter(|e| {
            let keep = match e {
                Ok(e) => matches!(
                    e.kind,
                    EventKind::ElectionLeader | EventKind::ElectionResigned
                ),
                Err(_) => true,
            };
            std::future::ready(keep)
        })
    }
}
