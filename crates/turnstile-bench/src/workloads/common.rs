//! What the workloads share: the measurement `Window`, running one task per client, granting
//! leases up front, bounded operations, and the probe of Turnstile's log counters over a
//! window.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};

use crate::client::Client;
use crate::plan::SETUP_CONCURRENCY;
use crate::tally::Tally;
use crate::turnstile_api::{LogCounters, TurnstileApi};

/// Errors one worker tolerates in one measurement before it stops.
pub const ERRORS_PER_WORKER_MAX: u64 = 1_000;
/// Pause after a failed operation, so a failing system is not hammered in a tight loop.
pub const ERROR_BACKOFF_MS: u64 = 10;

/// The interval whose operations count.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    /// A window opening `warmup` from now and lasting `length`.
    pub fn after(warmup: Duration, length: Duration) -> Window {
        let start = Instant::now() + warmup;
        Window {
            start,
            end: start + length,
        }
    }

    pub fn length(&self) -> Duration {
        self.end - self.start
    }

    pub fn contains(&self, t: Instant) -> bool {
        t >= self.start && t < self.end
    }

    /// The worker loop condition: time left and the count bound not reached.
    pub fn open(&self, t: &Tally) -> bool {
        Instant::now() < self.end
            && t.ops < crate::plan::OPS_PER_WORKER_MAX
            && t.errors < ERRORS_PER_WORKER_MAX
    }
}

/// Outcome of one operation run against a deadline.
pub enum Op<T> {
    Done(T),
    Failed(anyhow::Error),
    /// The deadline passed first; the operation was abandoned.
    Cut,
}

/// Runs `fut` until `deadline`.
pub async fn until<T>(deadline: Instant, fut: impl Future<Output = anyhow::Result<T>>) -> Op<T> {
    match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), fut).await {
        Ok(Ok(v)) => Op::Done(v),
        Ok(Err(e)) => Op::Failed(e),
        Err(_) => Op::Cut,
    }
}

/// Records a failure and backs off briefly.
pub async fn failed(t: &mut Tally, e: &anyhow::Error) {
    t.error(e);
    tokio::time::sleep(Duration::from_millis(ERROR_BACKOFF_MS)).await;
}

/// Spawns one task per client running `body(index, client)` and gathers their results.
pub async fn run_workers<T, F, Fut>(clients: Vec<Client>, body: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize, Client) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(body(i, c)))
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.context("a worker panicked")?);
    }
    Ok(out)
}

/// Grants one lease per client (through that client), `SETUP_CONCURRENCY` at a time.
pub async fn grant_leases(clients: &[Client], ttl_ms: u64) -> anyhow::Result<Vec<i64>> {
    futures::stream::iter(clients.iter().cloned())
        .map(|mut c| async move { c.lease_grant(ttl_ms).await })
        .buffered(SETUP_CONCURRENCY)
        .try_collect()
        .await
        .context("granting leases")
}

/// Revokes leases (ending their holds and waits), `SETUP_CONCURRENCY` at a time.
pub async fn revoke_leases(clients: &[Client], leases: &[i64]) -> anyhow::Result<()> {
    futures::stream::iter(clients.iter().cloned().zip(leases.iter().copied()))
        .map(|(mut c, l)| async move { c.lease_revoke(l).await })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .context("revoking leases")?;
    Ok(())
}

/// Reads the leader's log counters at the window's start and end, and returns the difference
/// (None for etcd, or if a read failed).
pub async fn log_delta(leader: Option<TurnstileApi>, w: Window) -> Option<LogCounters> {
    let api = leader?;
    tokio::time::sleep_until(tokio::time::Instant::from_std(w.start)).await;
    let before = api.view().await.ok()?.log;
    tokio::time::sleep_until(tokio::time::Instant::from_std(w.end)).await;
    let after = api.view().await.ok()?.log;
    Some(after.delta(before))
}
