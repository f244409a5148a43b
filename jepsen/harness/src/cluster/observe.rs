//! Talking to a [`ProcCluster`]'s nodes over HTTP: requests, status, who leads, convergence,
//! the clock test hook, and the polling wait every harness wait goes through.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::Value;

use super::{ProcCluster, WAIT_MS_MAX};

impl ProcCluster {
    /// Jumps node `id`'s wall clock by `offset_ms` (the test hook; lease expiry must not see it).
    pub async fn clock_jump(&self, id: u64, offset_ms: i64) -> anyhow::Result<()> {
        let (code, v) = self
            .post(
                id,
                "/debug/clock",
                serde_json::json!({ "offset_ms": offset_ms }),
            )
            .await?;
        if code != 200 {
            bail!("clock hook {code}: {v}");
        }
        Ok(())
    }

    /// Sends one request to node `id` and returns the status and JSON body.
    pub async fn call(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.endpoint(id)));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let code = resp.status().as_u16();
        let text = resp.text().await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((code, v))
    }

    pub async fn get(&self, id: u64, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::POST, path, Some(body)).await
    }

    /// Node `id`'s `/v1/cluster` view.
    pub async fn status(&self, id: u64) -> anyhow::Result<Value> {
        let (code, v) = self.get(id, "/v1/cluster").await?;
        if code != 200 {
            bail!("cluster status {code}: {v}");
        }
        Ok(v)
    }

    /// Nodes that are running and not paused.
    pub fn live(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.running() && !n.paused)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Waits for a live node that reports itself leader of a formed cluster; returns it and
    /// its term.
    pub async fn leader(&self) -> anyhow::Result<(u64, u64)> {
        wait_for("a leader", || async {
            for id in self.live() {
                if let Ok(s) = self.status(id).await {
                    if s["state"] == "Leader" && !s["cluster_id"].is_null() {
                        return s["term"].as_u64().map(|t| (id, t));
                    }
                }
            }
            None
        })
        .await
    }

    /// Waits until every live node reports the same applied index and state digest.
    pub async fn converged(&self) -> anyhow::Result<Vec<(u64, u64, String)>> {
        wait_for("all nodes to converge", || async {
            let mut seen = Vec::new();
            for id in self.live() {
                let s = self.status(id).await.ok()?;
                seen.push((
                    id,
                    s["applied_index"].as_u64()?,
                    s["state_digest"].as_str()?.to_string(),
                ));
            }
            let first = seen.first()?.clone();
            seen.iter()
                .all(|s| s.1 == first.1 && s.2 == first.2)
                .then_some(seen)
        })
        .await
    }
}

/// Polls `f` until it returns `Some`, failing after [`WAIT_MS_MAX`].
pub async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Some(t) = f().await {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("timed out after {WAIT_MS_MAX} ms waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
