//! [`Client`]: the typed HTTP API. Each mutating call is a [`Prepared`] request with a fresh
//! `request_id`, sent with retries (see `request.rs`); each `prepare_*` method returns the
//! request itself, for callers that want to resend it after an [`Error::Indeterminate`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::endpoints::Endpoints;
use crate::types::{
    AcquireOptions, ClusterInfo, Condition, CounterValue, Deleted, Fence, FenceCheck, Grant,
    Keepalive, KeyValue, LeaseGrant, LeaseInfo, LockInfo, MultiGrant, PutOptions, Written,
};
use crate::{DeleteOptions, Error, Prepared, Security};

/// HTTP timeout of one attempt, above the server's own write deadline (5 s) plus a
/// follower's forwarding margin (0.5 s), so the server's answer (even `504 indeterminate`)
/// normally arrives before the client gives up.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 7_000;
/// How long a call keeps retrying (beyond a blocking acquire's own wait).
pub const RETRY_BUDGET_MS_DEFAULT: u64 = 10_000;
/// TCP connect timeout: a dead endpoint is skipped quickly.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// How long an idle pooled connection is kept: below the node's default idle timeout (60 s),
/// so the client drops it before the node closes it under a request.
pub const POOL_IDLE_MS: u64 = 30_000;

/// Timeouts and security of a [`Client`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// HTTP timeout of one attempt (a blocking acquire adds its wait).
    pub request_timeout: Duration,
    /// How long a call retries before giving up (a blocking acquire adds its wait).
    pub retry_budget: Duration,
    pub connect_timeout: Duration,
    /// TLS trust, client certificate and bearer token (none by default: plain HTTP).
    pub security: Security,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT),
            retry_budget: Duration::from_millis(RETRY_BUDGET_MS_DEFAULT),
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            security: Security::default(),
        }
    }
}

/// A Turnstile client. Cheap to clone; clones share the connection pool and the endpoint
/// preference.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) config: ClientConfig,
    /// Answered request ids to acknowledge; shared by clones.
    pub(crate) acks: Arc<crate::acks::PendingAcks>,
}

/// The answer of `GET /v1/counters/{name}`.
#[derive(Deserialize)]
struct CounterRead {
    value: i64,
}

impl Client {
    /// A client with the default [`ClientConfig`] (plain HTTP, no credentials). Endpoints are
    /// `ip:port` or `http://...`.
    pub fn new(endpoints: Vec<String>) -> Result<Client, Error> {
        Client::with_config(endpoints, ClientConfig::default())
    }

    /// A client with these timeouts and this [`Security`]. With a CA bundle, endpoints are
    /// `https://...` or bare `ip:port` (meaning https). A token is refused (before anything is
    /// sent) if an endpoint is plain `http://` to a host other than loopback.
    pub fn with_config(endpoints: Vec<String>, config: ClientConfig) -> Result<Client, Error> {
        let endpoints = Endpoints::new(endpoints, config.security.tls())?;
        if config.security.has_token() {
            if let Some(url) = endpoints.plain_non_loopback() {
                return Err(Error::Config {
                    message: format!(
                        "refusing to send a token over plain HTTP to {url}: anyone on the path \
                         could read it; use https:// with a CA bundle"
                    ),
                });
            }
        }
        let builder = reqwest::Client::builder()
            .no_proxy()
            // The API is HTTP/1.1; nodes refuse h2 and h2c.
            .http1_only()
            // Nodes never redirect; following one could carry the token elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_MS));
        let http = config
            .security
            .configure(builder)?
            .build()
            .map_err(|e| Error::Config {
                message: format!("cannot build the HTTP client: {}", crate::error::chain(&e)),
            })?;
        Ok(Client {
            http,
            endpoints: Arc::new(endpoints),
            config,
            acks: Default::default(),
        })
    }

    /// The same client (shared pool and endpoint preference) with another retry budget.
    pub fn with_retry_budget(&self, retry_budget: Duration) -> Client {
        let mut c = self.clone();
        c.config.retry_budget = retry_budget;
        c
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The endpoints' base URLs.
    pub fn endpoints(&self) -> &[String] {
        self.endpoints.urls()
    }

    // Leases.

    pub fn prepare_grant_lease(&self, ttl: Duration) -> Prepared<LeaseGrant> {
        let body = json!({"ttl_ms": duration_ms(ttl)});
        Prepared::write(Method::POST, "/v1/leases".into(), body)
    }

    /// Grants a lease of `ttl` (1 s to 1 h).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<LeaseGrant, Error> {
        self.send(&self.prepare_grant_lease(ttl)).await
    }

    pub(crate) fn prepare_keepalive(&self, lease_id: u64) -> Prepared<Keepalive> {
        Prepared::idempotent_write(Method::POST, format!("/v1/leases/{lease_id}/keepalive"))
    }

    /// Renews a lease once. Sessions do this in the background; see [`crate::Session`].
    pub async fn keepalive(&self, lease_id: u64) -> Result<Keepalive, Error> {
        self.send(&self.prepare_keepalive(lease_id)).await
    }

    pub fn prepare_revoke_lease(&self, lease_id: u64) -> Prepared<Written> {
        Prepared::write(Method::DELETE, format!("/v1/leases/{lease_id}"), json!({}))
    }

    /// Ends a lease now: releases its locks and deletes its keys.
    pub async fn revoke_lease(&self, lease_id: u64) -> Result<Written, Error> {
        self.send(&self.prepare_revoke_lease(lease_id)).await
    }

    /// A linearizable read of a lease.
    pub async fn lease(&self, lease_id: u64) -> Result<LeaseInfo, Error> {
        self.send(&Prepared::read(format!("/v1/leases/{lease_id}")))
            .await
    }

    // Locks.

    pub fn prepare_acquire(&self, name: &str, opts: &AcquireOptions) -> Prepared<Grant> {
        let mut body = json!({"lease_id": opts.lease_id, "wait_ms": duration_ms(opts.wait)});
        if opts.mode != crate::Mode::Exclusive {
            body["mode"] = json!(opts.mode);
        }
        if let Some(p) = opts.permits {
            body["permits"] = json!(p);
        }
        let path = format!("/v1/locks/{}/acquire", encode_path(name));
        Prepared::write(Method::POST, path, body).with_server_wait(opts.wait)
    }

    /// Acquires a lock, waiting on the server's queue up to `opts.wait`. A retry after an
    /// unknown outcome reuses the request id, so it never acquires twice.
    pub async fn acquire(&self, name: &str, opts: AcquireOptions) -> Result<Grant, Error> {
        self.send(&self.prepare_acquire(name, &opts)).await
    }

    pub fn prepare_release(&self, name: &str, token: u64, lease_id: u64) -> Prepared<Written> {
        let path = format!("/v1/locks/{}/release", encode_path(name));
        Prepared::write(
            Method::POST,
            path,
            json!({"token": token, "lease_id": lease_id}),
        )
    }

    /// Releases the hold `{token, lease_id}` of `name`.
    pub async fn release(&self, name: &str, token: u64, lease_id: u64) -> Result<Written, Error> {
        self.send(&self.prepare_release(name, token, lease_id))
            .await
    }

    pub fn prepare_acquire_many(
        &self,
        names: &[String],
        lease_id: u64,
        wait: Duration,
    ) -> Prepared<MultiGrant> {
        let body = json!({"names": names, "lease_id": lease_id, "wait_ms": duration_ms(wait)});
        Prepared::write(Method::POST, "/v1/locks/acquire-many".into(), body).with_server_wait(wait)
    }

    /// Acquires several locks atomically (all granted by one entry, sharing its token).
    pub async fn acquire_many(
        &self,
        names: &[String],
        lease_id: u64,
        wait: Duration,
    ) -> Result<MultiGrant, Error> {
        self.send(&self.prepare_acquire_many(names, lease_id, wait))
            .await
    }

    /// A linearizable read of a lock: holders and waiters.
    pub async fn locks(&self, name: &str) -> Result<LockInfo, Error> {
        self.send(&Prepared::read(format!("/v1/locks/{}", encode_path(name))))
            .await
    }

    /// Asks whether `token` is the current grant of `name` in cluster `cluster_id`. A
    /// diagnostic only: the answer can be stale by the time it is acted on.
    pub async fn fence_check(
        &self,
        name: &str,
        token: u64,
        cluster_id: &str,
    ) -> Result<FenceCheck, Error> {
        let body = json!({"name": name, "token": token, "cluster_id": cluster_id});
        self.send(&Prepared::query("/v1/fence/check".into(), body))
            .await
    }

    // Keys and counters.

    /// A linearizable read of a key; `None` if absent.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, Error> {
        let req = Prepared::read(format!("/v1/kv/{}", encode_path(key)));
        match self.send(&req).await {
            Ok(kv) => Ok(Some(kv)),
            Err(Error::KeyNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn prepare_put(&self, key: &str, value: &str, opts: &PutOptions) -> Prepared<Written> {
        let mut body = json!({"value": value});
        if let Some(l) = opts.lease_id {
            body["lease_id"] = json!(l);
        }
        guards(&mut body, opts.condition.as_ref(), opts.fence.as_ref());
        Prepared::write(Method::PUT, format!("/v1/kv/{}", encode_path(key)), body)
    }

    /// Writes a key, under an optional `if` condition and `fence` guard.
    pub async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<Written, Error> {
        self.send(&self.prepare_put(key, value, &opts)).await
    }

    pub fn prepare_delete(&self, key: &str, opts: &DeleteOptions) -> Prepared<Deleted> {
        let mut body = json!({});
        guards(&mut body, opts.condition.as_ref(), opts.fence.as_ref());
        Prepared::write(Method::DELETE, format!("/v1/kv/{}", encode_path(key)), body)
    }

    /// Deletes a key (succeeds with `deleted: false` if it was absent).
    pub async fn delete(&self, key: &str, opts: DeleteOptions) -> Result<Deleted, Error> {
        self.send(&self.prepare_delete(key, &opts)).await
    }

    pub fn prepare_incr(&self, name: &str, by: i64) -> Prepared<CounterValue> {
        let path = format!("/v1/counters/{}/incr", encode_path(name));
        Prepared::write(Method::POST, path, json!({"by": by}))
    }

    /// Adds `by` to a counter and returns the new value.
    pub async fn incr(&self, name: &str, by: i64) -> Result<CounterValue, Error> {
        self.send(&self.prepare_incr(name, by)).await
    }

    /// A linearizable read of a counter (0 if never incremented).
    pub async fn counter(&self, name: &str) -> Result<i64, Error> {
        let req: Prepared<CounterRead> =
            Prepared::read(format!("/v1/counters/{}", encode_path(name)));
        Ok(self.send(&req).await?.value)
    }

    // Cluster.

    /// The answering node's view of the cluster (not linearizable).
    pub async fn cluster(&self) -> Result<ClusterInfo, Error> {
        self.send(&Prepared::read("/v1/cluster".into())).await
    }

    /// `GET /v1/cluster` as raw JSON (every field, including the ones [`ClusterInfo`] omits).
    pub async fn cluster_raw(&self) -> Result<Value, Error> {
        self.send(&Prepared::read("/v1/cluster".into())).await
    }
}

fn guards(body: &mut Value, condition: Option<&Condition>, fence: Option<&Fence>) {
    if let Some(c) = condition {
        body["if"] = json!(c);
    }
    if let Some(f) = fence {
        body["fence"] = json!(f);
    }
}

/// Milliseconds of a duration, saturating.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Percent-encodes a name or key for a URL path, keeping `/` (keys may contain it; the server
/// reads `/v1/kv/a/b` as key `a/b`) and RFC 3986's unreserved characters.
pub(crate) fn encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_encoded() {
        let table = [
            ("job", "job"),
            ("a/b c", "a/b%20c"),
            ("50%", "50%25"),
            ("é?#", "%C3%A9%3F%23"),
            ("ns:lock-1.x_y~", "ns:lock-1.x_y~"),
        ];
        for (raw, want) in table {
            assert_eq!(encode_path(raw), want, "{raw}");
        }
    }

    #[test]
    fn acquire_body_carries_wait_mode_permits_and_id() -> Result<(), Error> {
        let c = Client::new(vec!["127.0.0.1:1".into()])?;
        let opts = AcquireOptions {
            lease_id: 3,
            wait: Duration::from_millis(1500),
            mode: crate::Mode::Shared,
            permits: Some(2),
        };
        let p = c.prepare_acquire("job", &opts);
        let body = p.body.clone().unwrap_or_default();
        assert_eq!(body["lease_id"], 3);
        assert_eq!(body["wait_ms"], 1500);
        assert_eq!(body["mode"], "shared");
        assert_eq!(body["permits"], 2);
        assert_eq!(body["request_id"].as_str(), p.request_id());
        assert_eq!(p.server_wait, Duration::from_millis(1500));
        Ok(())
    }
}
