//! `TurnstileApi`: the few Turnstile HTTP calls the workloads make (docs/api.md), on one node,
//! over a shared pooled `reqwest` client so connections are reused across requests.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::plan::REQUEST_MS_MAX;

/// Added to a waiting acquire's `wait_ms` for the client-side timeout of its request.
const WAIT_MARGIN_MS: u64 = 5_000;
/// Client-side timeout of `POST /v1/admin/snapshot`: the server itself gives a snapshot 30 s
/// to be written, then purges the log behind it.
const ADMIN_SNAPSHOT_MS_MAX: u64 = 60_000;

/// Calls to one Turnstile node. Cloning shares the connection pool.
#[derive(Clone)]
pub struct TurnstileApi {
    http: reqwest::Client,
    base: String,
}

/// The `log` counters of `/v1/cluster`: the node's durability counters since it started.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LogCounters {
    pub append_batches: u64,
    pub entries_appended: u64,
    pub fdatasyncs: u64,
    pub acked_batches: u64,
}

impl LogCounters {
    pub fn delta(self, before: LogCounters) -> LogCounters {
        LogCounters {
            append_batches: self.append_batches.saturating_sub(before.append_batches),
            entries_appended: self
                .entries_appended
                .saturating_sub(before.entries_appended),
            fdatasyncs: self.fdatasyncs.saturating_sub(before.fdatasyncs),
            acked_batches: self.acked_batches.saturating_sub(before.acked_batches),
        }
    }
}

/// The `request_records` of `/v1/cluster`: request-id records in the node's state.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RequestRecords {
    pub total: u64,
    /// Kept while a hold, wait or lease they concern lives.
    pub pinned: u64,
    /// On the retry window.
    pub windowed: u64,
}

/// The newest snapshot's figures in `/v1/cluster` `snapshots.last` (turnstile-raft's
/// `SnapshotStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct SnapshotStats {
    /// Last log index it covers.
    pub index: u64,
    /// Records of the state it holds (keys, leases, locks, request records, ...).
    pub records: u64,
    pub bytes: u64,
    /// CPU time of the node's snapshot thread: walk, encode, checksum and write.
    pub cpu_ms: u64,
    pub wall_ms: u64,
}

/// `snapshots` of `/v1/cluster`: snapshots this node built since it started, and the newest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct SnapshotHistory {
    pub built: u64,
    pub cpu_ms_total: u64,
    pub last: Option<SnapshotStats>,
}

/// What `/v1/cluster` says about this node.
#[derive(Clone, Copy, Debug)]
pub struct NodeView {
    pub leader_id: Option<u64>,
    /// `None` from a server too old to report it.
    pub term: Option<u64>,
    pub applied_index: u64,
    /// The first index the log still holds (everything below is in the snapshot); `None`
    /// from a server too old to report it.
    pub log_first_index: Option<u64>,
    pub log: LogCounters,
    /// `None` from a server too old to report them.
    pub request_records: Option<RequestRecords>,
    /// Acknowledged ids the node dropped (its queue was full); `None` from an older server.
    pub acks_dropped: Option<u64>,
    /// `None` from a server too old to report them.
    pub snapshots: Option<SnapshotHistory>,
}

/// A `/v1` answer as it came: the status, and the body as JSON (`null` if empty or not JSON).
#[derive(Clone, Debug)]
pub struct Exchange {
    pub status: u16,
    pub body: Value,
}

impl Exchange {
    /// The error body's `code` (`limit_reached`, ...), or `""`.
    pub fn code(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("")
    }
}

/// A shared HTTP client: no proxy, no overall timeout (watch streams are long), Nagle off.
pub fn http_client() -> anyhow::Result<reqwest::Client> {
    client_builder()
        .build()
        .context("cannot build the HTTP client")
}

/// A shared HTTPS client like [`http_client`] that trusts only the cluster's CA (`ca_pem`)
/// and presents a client certificate (`cert_pem`, `key_pem`), which authenticates every
/// request as that certificate's user.
pub fn https_client(
    ca_pem: &[u8],
    cert_pem: &[u8],
    key_pem: &[u8],
) -> anyhow::Result<reqwest::Client> {
    let ca = reqwest::Certificate::from_pem(ca_pem).context("the cluster CA is not PEM")?;
    // rustls wants the key and the certificate chain in one PEM.
    let identity = reqwest::Identity::from_pem(&[key_pem, cert_pem].concat())
        .context("the client certificate or key is not PEM")?;
    client_builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .identity(identity)
        .https_only(true)
        .build()
        .context("cannot build the HTTPS client")
}

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
}

impl TurnstileApi {
    /// Calls to the node at `addr` over `scheme` (`http` or `https`, as `http` was built).
    pub fn new(http: reqwest::Client, scheme: &str, addr: SocketAddr) -> TurnstileApi {
        TurnstileApi {
            http,
            base: format!("{scheme}://{addr}"),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        timeout_ms: u64,
    ) -> anyhow::Result<Value> {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .timeout(Duration::from_millis(timeout_ms));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.with_context(|| path.to_string())?;
        let status = resp.status();
        let text = resp.text().await.with_context(|| format!("{path}: body"))?;
        if !status.is_success() {
            bail!("{path}: HTTP {}: {text}", status.as_u16());
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{path}: not JSON: {text}"))
    }

    /// One request with extra headers, answered with whatever status: for callers that sort
    /// answers themselves (the soak counts every refusal by code). `Err` means no answer came
    /// (connection failure or timeout).
    pub async fn exchange(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Exchange> {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .timeout(Duration::from_millis(REQUEST_MS_MAX));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.with_context(|| path.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .with_context(|| format!("{path}: body"))?;
        Ok(Exchange {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(reqwest::Method::POST, path, Some(body), REQUEST_MS_MAX)
            .await
    }

    pub async fn lease_grant(&self, ttl_ms: u64) -> anyhow::Result<u64> {
        let v = self.post("/v1/leases", json!({ "ttl_ms": ttl_ms })).await?;
        field_u64(&v, "lease_id")
    }

    pub async fn lease_revoke(&self, lease: u64) -> anyhow::Result<()> {
        let path = format!("/v1/leases/{lease}");
        self.send(reqwest::Method::DELETE, &path, None, REQUEST_MS_MAX)
            .await?;
        Ok(())
    }

    pub async fn keepalive(&self, lease: u64) -> anyhow::Result<()> {
        let path = format!("/v1/leases/{lease}/keepalive");
        self.send(reqwest::Method::POST, &path, None, REQUEST_MS_MAX)
            .await?;
        Ok(())
    }

    /// A waiting acquire with a `request_id`, as docs/api.md asks of every waiting acquire.
    /// Returns the token.
    pub async fn acquire(
        &self,
        name: &str,
        lease: u64,
        wait_ms: u64,
        request_id: &str,
    ) -> anyhow::Result<u64> {
        let path = format!("/v1/locks/{name}/acquire");
        let body = json!({ "lease_id": lease, "wait_ms": wait_ms, "request_id": request_id });
        let v = self
            .send(
                reqwest::Method::POST,
                &path,
                Some(body),
                wait_ms + WAIT_MARGIN_MS,
            )
            .await?;
        field_u64(&v, "token")
    }

    /// Releases the hold `{token, lease}`; returns the release entry's revision.
    pub async fn release(&self, name: &str, lease: u64, token: u64) -> anyhow::Result<u64> {
        let path = format!("/v1/locks/{name}/release");
        let v = self
            .post(&path, json!({ "lease_id": lease, "token": token }))
            .await?;
        field_u64(&v, "revision")
    }

    /// Number of requests queued on a lock.
    pub async fn lock_waiters(&self, name: &str) -> anyhow::Result<usize> {
        let path = format!("/v1/locks/{name}");
        let v = self
            .send(reqwest::Method::GET, &path, None, REQUEST_MS_MAX)
            .await?;
        Ok(v.get("waiters")
            .and_then(Value::as_array)
            .map_or(0, Vec::len))
    }

    /// `PUT /v1/kv/{key}`, with `if: {absent}` (`expect: None`) or `if: {mod_revision}`.
    pub async fn put_if(&self, key: &str, value: &str, expect: Option<u64>) -> anyhow::Result<u64> {
        let cond = match expect {
            None => json!({ "absent": true }),
            Some(rev) => json!({ "mod_revision": rev }),
        };
        self.put_body(key, json!({ "value": value, "if": cond }))
            .await
    }

    pub async fn put(&self, key: &str, value: &str) -> anyhow::Result<u64> {
        self.put_body(key, json!({ "value": value })).await
    }

    async fn put_body(&self, key: &str, body: Value) -> anyhow::Result<u64> {
        let path = format!("/v1/kv/{key}");
        let v = self
            .send(reqwest::Method::PUT, &path, Some(body), REQUEST_MS_MAX)
            .await?;
        field_u64(&v, "revision")
    }

    /// Opens `GET /v1/watch?key=K` (server-sent events); the stream lasts up to `timeout_ms`.
    pub async fn watch(&self, key: &str, timeout_ms: u64) -> anyhow::Result<reqwest::Response> {
        let resp = self
            .http
            .get(format!("{}/v1/watch", self.base))
            .query(&[("key", key)])
            .timeout(Duration::from_millis(timeout_ms))
            .send()
            .await
            .context("/v1/watch")?;
        if !resp.status().is_success() {
            bail!("/v1/watch: HTTP {}", resp.status().as_u16());
        }
        Ok(resp)
    }

    /// `GET /readyz` answered 200.
    pub async fn ready(&self) -> bool {
        self.send(reqwest::Method::GET, "/readyz", None, 1_000)
            .await
            .is_ok()
    }

    /// The leader this node knows, from `GET /readyz` (answered whether ready or not). Unlike
    /// `/v1/cluster`, which encodes and hashes the whole state for its digest, it costs the
    /// node the same at any state size, so finding the leader does not load a large node.
    pub async fn leader_id(&self) -> anyhow::Result<Option<u64>> {
        let answer = self
            .exchange(reqwest::Method::GET, "/readyz", None, &[])
            .await?;
        if answer.body.get("leader_id").is_none() {
            bail!("/readyz: HTTP {}: no leader_id", answer.status);
        }
        Ok(answer.body.get("leader_id").and_then(Value::as_u64))
    }

    /// This node's `/v1/cluster` view.
    pub async fn view(&self) -> anyhow::Result<NodeView> {
        let v = self
            .send(reqwest::Method::GET, "/v1/cluster", None, REQUEST_MS_MAX)
            .await?;
        let log = v.get("log").context("/v1/cluster has no log counters")?;
        let request_records = v.get("request_records").and_then(|r| {
            Some(RequestRecords {
                total: r.get("total")?.as_u64()?,
                pinned: r.get("pinned")?.as_u64()?,
                windowed: r.get("windowed")?.as_u64()?,
            })
        });
        let snapshots = match v.get("snapshots") {
            None => None,
            Some(h) => Some(
                serde_json::from_value(h.clone())
                    .with_context(|| format!("/v1/cluster: unexpected snapshots: {h}"))?,
            ),
        };
        Ok(NodeView {
            leader_id: v.get("leader_id").and_then(Value::as_u64),
            term: v.get("term").and_then(Value::as_u64),
            applied_index: field_u64(&v, "applied_index")?,
            log_first_index: log.get("first_index").and_then(Value::as_u64),
            log: LogCounters {
                append_batches: field_u64(log, "append_batches")?,
                entries_appended: field_u64(log, "entries_appended")?,
                fdatasyncs: field_u64(log, "fdatasyncs")?,
                acked_batches: field_u64(log, "acked_batches")?,
            },
            request_records,
            acks_dropped: v.get("acks_dropped").and_then(Value::as_u64),
            snapshots,
        })
    }

    /// `POST /v1/admin/snapshot`: this node writes a snapshot of everything it has applied
    /// (root only when authentication is on). Returns the snapshot's last index.
    pub async fn admin_snapshot(&self) -> anyhow::Result<u64> {
        let v = self
            .send(
                reqwest::Method::POST,
                "/v1/admin/snapshot",
                None,
                ADMIN_SNAPSHOT_MS_MAX,
            )
            .await?;
        field_u64(&v, "last_snapshot_index")
    }

    /// `GET /metrics` as text (Prometheus text format).
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base))
            .timeout(Duration::from_millis(REQUEST_MS_MAX))
            .send()
            .await
            .context("/metrics")?;
        if !resp.status().is_success() {
            bail!("/metrics: HTTP {}", resp.status().as_u16());
        }
        resp.text().await.context("/metrics: body")
    }
}

/// The sum over label sets of the samples of `name` in Prometheus text (a counter is read as
/// `{name}_total` if the exposition names it so, else as `name`); `None` if it has no sample.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    sum_samples(text, &format!("{name}_total")).or_else(|| sum_samples(text, name))
}

fn sum_samples(text: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // Past the labels, if any: the last `}` closes them (a label value may hold spaces).
        let rest = match rest.strip_prefix('{') {
            Some(labels) => match labels.rfind('}') {
                Some(end) => &labels[end + 1..],
                None => continue,
            },
            None if rest.starts_with(' ') => rest,
            None => continue,
        };
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            sum = Some(sum.unwrap_or(0.0) + v);
        }
    }
    sum
}

fn field_u64(v: &Value, name: &str) -> anyhow::Result<u64> {
    v.get(name)
        .and_then(Value::as_u64)
        .with_context(|| format!("answer has no integer {name:?}: {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_samples_are_summed_over_labels_and_names_match_whole() {
        let text = "# HELP raft_leader_changes Leader changes.\n\
                    # TYPE raft_leader_changes counter\n\
                    raft_leader_changes_total 2\n\
                    raft_leader_changes_totally 9\n\
                    raft_vote_requests_total{from=\"a b\"} 3\n\
                    raft_vote_requests_total{from=\"c\"} 4 1700000000\n\
                    raft_heartbeats 5\n";
        assert_eq!(metric_sum(text, "raft_leader_changes"), Some(2.0));
        assert_eq!(metric_sum(text, "raft_vote_requests"), Some(7.0));
        assert_eq!(metric_sum(text, "raft_heartbeats"), Some(5.0));
        assert_eq!(metric_sum(text, "raft_missing"), None);
    }

    #[test]
    fn snapshot_history_parses_as_the_server_writes_it() {
        let h: SnapshotHistory = serde_json::from_value(json!({
            "built": 2, "cpu_ms_total": 30,
            "last": {"index": 812, "records": 1000, "bytes": 65536, "cpu_ms": 20, "wall_ms": 25}
        }))
        .expect("valid");
        assert_eq!(h.built, 2);
        assert_eq!(h.last.map(|l| l.records), Some(1_000));
        let empty: SnapshotHistory =
            serde_json::from_value(json!({"built": 0, "cpu_ms_total": 0, "last": null}))
                .expect("valid");
        assert_eq!(empty.last, None);
    }
}
