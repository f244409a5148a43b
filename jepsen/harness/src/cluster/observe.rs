//! Talking to a [`ProcCluster`]'s nodes over HTTP: requests, status, who leads, convergence,
//! the clock test hook, and the polling wait every harness wait goes through.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
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

    /// Waits until every live node has been seen at one applied index, with the same state
    /// digest there; returns `(node, index, digest)` for each at the highest such index.
    /// Fails at once when two nodes were seen at one index with different digests: replicas
    /// that applied the same entries encode to the same bytes, so that index can never agree
    /// (a bug-injection run that loses entries ends here instead of in a 30-s timeout).
    ///
    /// Not "all at the same index at one moment": a cluster keeps applying entries after the
    /// load ends (a `Tick` while request records wait out their retry window), and one round
    /// of polls (each node hashing its whole state at a new index) can take longer than the
    /// gap between them. After a 14-minute run, with a 5 MB state, no round found all five
    /// nodes at one index until the ticks stopped, 50 s after the heal (2026-12-02). Every poll
    /// is kept, so nodes polled at one index at different moments count.
    pub async fn converged(&self) -> anyhow::Result<Vec<(u64, u64, String)>> {
        let seen: RefCell<BTreeMap<u64, BTreeMap<u64, String>>> = RefCell::default();
        let outcome = wait_for("all nodes to converge", || async {
            let live = self.live();
            for &id in &live {
                if let Ok(s) = self.status(id).await {
                    if let (Some(index), Some(digest)) =
                        (s["applied_index"].as_u64(), s["state_digest"].as_str())
                    {
                        // An empty digest is the node's own failure to hash, not a state.
                        if !digest.is_empty() {
                            seen.borrow_mut()
                                .entry(id)
                                .or_default()
                                .insert(index, digest.to_string());
                        }
                    }
                }
            }
            match convergence(&live, &seen.borrow()) {
                Convergence::NotYet => None,
                Convergence::Agreed(found) => Some(Ok(found)),
                Convergence::Diverged(why) => Some(Err(why)),
            }
        })
        .await;
        let newest = || -> String {
            let newest: Vec<_> = seen
                .borrow()
                .iter()
                .map(|(id, m)| (*id, m.keys().next_back().copied()))
                .collect();
            format!("newest applied index seen per node: {newest:?}")
        };
        match outcome.with_context(newest)? {
            Ok(found) => Ok(found),
            Err(why) => bail!("{why}; {}", newest()),
        }
    }
}

/// What the polls so far say about the live nodes' states.
#[derive(Debug, PartialEq, Eq)]
enum Convergence {
    /// Every live node was seen at one index with one digest: `(node, index, digest)` per
    /// node, at the highest such index.
    Agreed(Vec<(u64, u64, String)>),
    /// Two nodes were seen at one index with different digests: they never will agree there.
    Diverged(String),
    NotYet,
}

fn convergence(live: &[u64], seen: &BTreeMap<u64, BTreeMap<u64, String>>) -> Convergence {
    if let Some(why) = diverged(seen) {
        return Convergence::Diverged(why);
    }
    match agreed_at_common_index(live, seen) {
        Some(found) => Convergence::Agreed(found),
        None => Convergence::NotYet,
    }
}

/// The lowest index at which two nodes (live or not) were seen with different digests.
fn diverged(seen: &BTreeMap<u64, BTreeMap<u64, String>>) -> Option<String> {
    let mut first_seen: BTreeMap<u64, (u64, &str)> = BTreeMap::new();
    for (id, polls) in seen {
        for (index, digest) in polls {
            match first_seen.get(index) {
                Some((other, d)) if *d != digest.as_str() => {
                    return Some(format!(
                        "nodes {other} and {id} applied index {index} to different states \
                         (digests {d} and {digest})"
                    ));
                }
                Some(_) => {}
                None => {
                    first_seen.insert(*index, (*id, digest.as_str()));
                }
            }
        }
    }
    None
}

/// The highest applied index at which every node of `live` was seen, if they all showed the
/// same digest there: `(node, index, digest)` per node.
fn agreed_at_common_index(
    live: &[u64],
    seen: &BTreeMap<u64, BTreeMap<u64, String>>,
) -> Option<Vec<(u64, u64, String)>> {
    let (first, rest) = live.split_first()?;
    let index = seen.get(first)?.keys().rev().find(|i| {
        rest.iter()
            .all(|id| seen.get(id).is_some_and(|m| m.contains_key(i)))
    })?;
    let found: Vec<(u64, u64, String)> = live
        .iter()
        .map(|id| (*id, *index, seen[id][index].clone()))
        .collect();
    found.iter().all(|f| f.2 == found[0].2).then_some(found)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(polls: &[(u64, u64, &str)]) -> BTreeMap<u64, BTreeMap<u64, String>> {
        let mut seen: BTreeMap<u64, BTreeMap<u64, String>> = BTreeMap::new();
        for &(id, index, digest) in polls {
            seen.entry(id).or_default().insert(index, digest.into());
        }
        seen
    }

    #[test]
    fn nodes_seen_at_one_index_at_different_moments_agree() {
        // Node 1 was polled at 10 and 11, node 2 only at 11 and 12, node 3 at 11.
        let s = seen(&[
            (1, 10, "a"),
            (1, 11, "b"),
            (2, 11, "b"),
            (2, 12, "c"),
            (3, 11, "b"),
        ]);
        let found = agreed_at_common_index(&[1, 2, 3], &s).expect("agreed at 11");
        assert_eq!(
            found,
            [
                (1, 11, "b".into()),
                (2, 11, "b".into()),
                (3, 11, "b".into())
            ]
        );
        // A node never seen at a common index, or a different digest there: not converged.
        assert!(agreed_at_common_index(&[1, 2, 4], &s).is_none());
        let s = seen(&[(1, 11, "b"), (2, 11, "x")]);
        assert!(agreed_at_common_index(&[1, 2], &s).is_none());
    }

    #[test]
    fn one_index_with_two_digests_is_divergence_not_a_wait() {
        // Still catching up: nothing seen at a common index, nothing contradictory.
        let s = seen(&[(1, 10, "a"), (2, 9, "z")]);
        assert_eq!(convergence(&[1, 2], &s), Convergence::NotYet);
        // Agreement at 11 after all.
        let s = seen(&[(1, 10, "a"), (1, 11, "b"), (2, 11, "b")]);
        assert!(matches!(convergence(&[1, 2], &s), Convergence::Agreed(_)));
        // Node 3 was seen at 10 with another digest than node 1: divergence, even though
        // nodes 1 and 2 agree at 11 and node 3 (no longer live) will never be polled again.
        let s = seen(&[(1, 10, "a"), (1, 11, "b"), (2, 11, "b"), (3, 10, "x")]);
        match convergence(&[1, 2], &s) {
            Convergence::Diverged(why) => {
                assert!(why.contains("index 10"), "{why}");
                assert!(why.contains("nodes 1 and 3"), "{why}");
            }
            other => panic!("not divergence: {other:?}"),
        }
    }
}
