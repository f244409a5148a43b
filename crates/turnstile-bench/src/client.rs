//! `Client`: one workload client that speaks to either system, so every workload is written
//! once and sends the same requests, with the same concurrency, to Turnstile and to etcd.
//! Also `Keeper` (renews one lease) and `Watcher` (one watch stream of put values).

use std::time::Duration;

use anyhow::{bail, Context};
use etcd_client::{EventType, LeaseKeepAliveStream, LeaseKeeper, WatchStream};
use serde_json::Value;

use crate::etcd_api::{EtcdApi, EtcdHeld};
use crate::sse::SseBuffer;
use crate::turnstile_api::TurnstileApi;

/// A client of one system.
#[derive(Clone)]
pub enum Client {
    Turnstile(TurnstileApi),
    /// Boxed: the etcd client is a few KiB, Turnstile's a pointer or two.
    Etcd(Box<EtcdApi>),
}

/// A held lock, as the system identifies it for release.
#[derive(Clone, Debug)]
pub enum Held {
    /// Turnstile names a hold by lock, lease and token (the granting entry's index).
    Turnstile {
        name: String,
        lease: u64,
        token: u64,
    },
    Etcd(EtcdHeld),
}

impl Held {
    /// Turnstile's token, etcd's revision of the owner key.
    pub fn token(&self) -> u64 {
        match self {
            Held::Turnstile { token, .. } => *token,
            Held::Etcd(h) => u64::try_from(h.revision).unwrap_or(0),
        }
    }
}

fn turnstile_lease(lease: i64) -> anyhow::Result<u64> {
    u64::try_from(lease).context("negative Turnstile lease id")
}

impl Client {
    pub async fn lease_grant(&mut self, ttl_ms: u64) -> anyhow::Result<i64> {
        match self {
            Client::Turnstile(c) => {
                i64::try_from(c.lease_grant(ttl_ms).await?).context("lease id past i64")
            }
            Client::Etcd(c) => c.lease_grant(ttl_ms).await,
        }
    }

    pub async fn lease_revoke(&mut self, lease: i64) -> anyhow::Result<()> {
        match self {
            Client::Turnstile(c) => c.lease_revoke(turnstile_lease(lease)?).await,
            Client::Etcd(c) => c.lease_revoke(lease).await,
        }
    }

    /// A blocking acquire of `name` for `lease`, waiting at most `wait_ms`. Turnstile waits
    /// server-side with `wait_ms` and a `request_id`; etcd's `Lock` has no timeout of its own,
    /// so the client gives up after `wait_ms` (cancelling the call withdraws its owner key).
    pub async fn lock(
        &mut self,
        name: &str,
        lease: i64,
        wait_ms: u64,
        request_id: &str,
    ) -> anyhow::Result<Held> {
        match self {
            Client::Turnstile(c) => {
                let lease = turnstile_lease(lease)?;
                let token = c.acquire(name, lease, wait_ms, request_id).await?;
                Ok(Held::Turnstile {
                    name: name.to_string(),
                    lease,
                    token,
                })
            }
            Client::Etcd(c) => {
                let wait = Duration::from_millis(wait_ms);
                match tokio::time::timeout(wait, c.lock(name, lease)).await {
                    Ok(held) => Ok(Held::Etcd(held?)),
                    Err(_) => bail!("lock {name}: not granted within {wait_ms} ms"),
                }
            }
        }
    }

    /// Releases a hold; returns the revision of the releasing entry.
    pub async fn unlock(&mut self, held: &Held) -> anyhow::Result<u64> {
        match (self, held) {
            (Client::Turnstile(c), Held::Turnstile { name, lease, token }) => {
                c.release(name, *lease, *token).await
            }
            (Client::Etcd(c), Held::Etcd(h)) => {
                u64::try_from(c.unlock(h).await?).context("negative etcd revision")
            }
            _ => bail!("a hold of one system released on the other"),
        }
    }

    /// Requests queued behind the holders of `name` (etcd: owner keys beyond the holder's).
    pub async fn waiters(&mut self, name: &str) -> anyhow::Result<usize> {
        match self {
            Client::Turnstile(c) => c.lock_waiters(name).await,
            Client::Etcd(c) => {
                let keys = c.count_prefix(&format!("{name}/")).await?;
                Ok(usize::try_from(keys.saturating_sub(1)).unwrap_or(0))
            }
        }
    }

    /// Compare-and-set put: if absent (`expect: None`) or if the key's mod_revision is `expect`.
    pub async fn put_if(
        &mut self,
        key: &str,
        value: &str,
        expect: Option<u64>,
    ) -> anyhow::Result<u64> {
        match self {
            Client::Turnstile(c) => c.put_if(key, value, expect).await,
            Client::Etcd(c) => {
                let expect = expect
                    .map(i64::try_from)
                    .transpose()
                    .context("revision past i64")?;
                u64::try_from(c.put_if(key, value, expect).await?).context("negative revision")
            }
        }
    }

    pub async fn put(&mut self, key: &str, value: &str) -> anyhow::Result<u64> {
        match self {
            Client::Turnstile(c) => c.put(key, value).await,
            Client::Etcd(c) => u64::try_from(c.put(key, value).await?).context("negative revision"),
        }
    }

    /// Prepares to renew `lease` (etcd opens its keepalive stream here).
    pub async fn keeper(&mut self, lease: i64) -> anyhow::Result<Keeper> {
        match self {
            Client::Turnstile(c) => Ok(Keeper::Turnstile {
                api: c.clone(),
                lease: turnstile_lease(lease)?,
            }),
            Client::Etcd(c) => {
                let (keeper, stream) = c.keepalive_stream(lease).await?;
                Ok(Keeper::Etcd {
                    keeper,
                    stream: Box::new(stream),
                })
            }
        }
    }

    /// Opens a watch on `key` and returns once the system has registered it.
    pub async fn watcher(&mut self, key: &str, stream_ms: u64) -> anyhow::Result<Watcher> {
        match self {
            Client::Turnstile(c) => Ok(Watcher::Turnstile {
                resp: c.watch(key, stream_ms).await?,
                sse: SseBuffer::default(),
            }),
            Client::Etcd(c) => Ok(Watcher::Etcd(c.watch(key).await?)),
        }
    }
}

/// Renews one lease.
pub enum Keeper {
    /// `POST /v1/leases/{id}/keepalive`: a replicated entry in Turnstile.
    Turnstile { api: TurnstileApi, lease: u64 },
    /// A `LeaseKeepAlive` stream: the etcd leader renews in memory, without a Raft entry.
    Etcd {
        keeper: LeaseKeeper,
        stream: Box<LeaseKeepAliveStream>,
    },
}

impl Keeper {
    pub async fn renew(&mut self) -> anyhow::Result<()> {
        match self {
            Keeper::Turnstile { api, lease } => api.keepalive(*lease).await,
            Keeper::Etcd { keeper, stream } => EtcdApi::keepalive_once(keeper, stream).await,
        }
    }
}

/// One watch stream, read as the values of put events.
pub enum Watcher {
    Turnstile {
        resp: reqwest::Response,
        sse: SseBuffer,
    },
    Etcd(WatchStream),
}

impl Watcher {
    /// Values of the put events in the next message; `None` when the stream has ended.
    pub async fn next_puts(&mut self) -> anyhow::Result<Option<Vec<String>>> {
        match self {
            Watcher::Turnstile { resp, sse } => {
                let Some(chunk) = resp.chunk().await.context("watch stream")? else {
                    return Ok(None);
                };
                let datas = sse.push(&chunk).context("watch event too large")?;
                Ok(Some(datas.iter().filter_map(|d| put_value(d)).collect()))
            }
            Watcher::Etcd(stream) => {
                let Some(resp) = stream.message().await? else {
                    return Ok(None);
                };
                let values = resp
                    .events()
                    .iter()
                    .filter(|e| e.event_type() == EventType::Put)
                    .filter_map(|e| e.kv())
                    .filter_map(|kv| kv.value_str().ok())
                    .map(str::to_string)
                    .collect();
                Ok(Some(values))
            }
        }
    }
}

/// The `value` of a Turnstile `put` event's JSON data.
fn put_value(data: &str) -> Option<String> {
    let v: Value = serde_json::from_str(data).ok()?;
    if v.get("kind")?.as_str()? != "put" {
        return None;
    }
    Some(v.get("value")?.as_str()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_values_are_taken_from_put_events_only() {
        let put = r#"{"key":"k","kind":"put","lease_id":null,"revision":7,"seq":0,"value":"42"}"#;
        assert_eq!(put_value(put), Some("42".to_string()));
        assert_eq!(put_value(r#"{"key":"k","kind":"delete"}"#), None);
        assert_eq!(put_value("not json"), None);
    }
}
