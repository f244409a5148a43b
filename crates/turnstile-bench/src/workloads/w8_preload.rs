//! W8's preload: held locks on long leases (1,000 per lease, as in W6) and keys with small
//! values, each a fixed count of requests sent a bounded number at a time through the given
//! clients, with progress on stderr and a deadline. The first failed request fails the
//! preload: the state the loaded run measures must be the one the table names.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;

use crate::client::Client;
use crate::measure::{Better, Measure};
use crate::plan::{
    W8_LEASE_TTL_MS, W8_LOCKS_PER_LEASE, W8_PRELOAD_S_MAX, W8_PROGRESS_MS, W8_VALUE_BYTES,
};
use crate::tally::Tally;

/// `wait_ms` of each acquire: every lock is free, so it is granted at once.
const ACQUIRE_WAIT_MS: u64 = 10_000;

/// What one preload did.
pub struct Filled {
    /// Requests sent, with their latencies.
    pub tally: Tally,
    pub took: Duration,
}

impl Filled {
    /// The fill rate and time, as figures labelled `preload, {what}`.
    pub fn measures(&self, what: &str, unit: &'static str) -> Vec<Measure> {
        let s = self.took.as_secs_f64();
        vec![
            Measure::new(
                "W8",
                format!("preload, {what}: rate"),
                unit,
                Better::Info,
                self.tally.ops as f64 / s.max(1e-9),
            )
            .counts(&self.tally),
            Measure::new("W8", format!("preload, {what}: time"), "s", Better::Info, s)
                .counts(&self.tally),
        ]
    }
}

/// Runs `op(k)` for every k in 0..count, `concurrency` at a time, recording each latency;
/// reports progress every [`W8_PROGRESS_MS`], and fails on the first error or after
/// [`W8_PRELOAD_S_MAX`].
async fn fill<F, Fut>(what: &str, count: usize, concurrency: usize, op: F) -> anyhow::Result<Filled>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let mut tally = Tally::new();
    let mut printed = started;
    let mut requests = futures::stream::iter(0..count)
        .map(|k| {
            let fut = op(k);
            async move {
                let t0 = Instant::now();
                fut.await
                    .map(|()| t0.elapsed())
                    .with_context(|| format!("{what} #{k}"))
            }
        })
        .buffer_unordered(concurrency.max(1));
    let all = async {
        while let Some(done) = requests.next().await {
            tally.record(done?);
            if printed.elapsed() >= Duration::from_millis(W8_PROGRESS_MS) {
                printed = Instant::now();
                let rate = tally.ops as f64 / started.elapsed().as_secs_f64();
                eprintln!(
                    "turnstile-bench: W8 preload: {} / {count} {what} ({rate:.0}/s)",
                    tally.ops
                );
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(W8_PRELOAD_S_MAX), all)
        .await
        .with_context(|| {
            format!("W8 preload of {count} {what}: not done in {W8_PRELOAD_S_MAX} s")
        })??;
    let took = started.elapsed();
    eprintln!(
        "turnstile-bench: W8 preload: {count} {what} in {:.1} s ({:.0}/s)",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64().max(1e-9)
    );
    Ok(Filled { tally, took })
}

/// Grants one lease of [`W8_LEASE_TTL_MS`] per [`W8_LOCKS_PER_LEASE`] locks, then takes and
/// holds `w8-lock-{k}` for every k in 0..locks, one request per client at a time. Each acquire
/// carries the request id `w8-lock-{k}`, whose record Turnstile keeps while the hold lives.
pub async fn hold_locks(clients: &[Client], locks: usize) -> anyhow::Result<Filled> {
    let mut leases = Vec::with_capacity(locks.div_ceil(W8_LOCKS_PER_LEASE));
    for k in 0..locks.div_ceil(W8_LOCKS_PER_LEASE) {
        let mut c = clients[k % clients.len()].clone();
        leases.push(c.lease_grant(W8_LEASE_TTL_MS).await?);
    }
    fill("locks", locks, clients.len(), |k| {
        let mut c = clients[k % clients.len()].clone();
        let lease = leases[k / W8_LOCKS_PER_LEASE];
        async move {
            let name = format!("w8-lock-{k}");
            c.lock(&name, lease, ACQUIRE_WAIT_MS, &name).await?;
            Ok(())
        }
    })
    .await
}

/// The value of preloaded key k: k's digits, zero-padded to [`W8_VALUE_BYTES`].
fn value(k: usize) -> String {
    format!("{k:0>W8_VALUE_BYTES$}")
}

/// Puts `w8-key-{k}` for every k in 0..keys, one request per client at a time.
pub async fn put_keys(clients: &[Client], keys: usize) -> anyhow::Result<Filled> {
    fill("keys", keys, clients.len(), |k| {
        let mut c = clients[k % clients.len()].clone();
        async move {
            c.put(&format!("w8-key-{k}"), &value(k)).await?;
            Ok(())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_planned_size() {
        assert_eq!(value(0).len(), W8_VALUE_BYTES);
        assert_eq!(value(199_999).len(), W8_VALUE_BYTES);
        assert!(value(42).ends_with("042"));
    }

    #[tokio::test]
    async fn fill_counts_every_request_and_stops_at_the_first_error() {
        let done = fill("things", 100, 8, |_| async { Ok(()) })
            .await
            .expect("no error");
        assert_eq!(done.tally.ops, 100);
        let err = fill("things", 100, 8, |k| async move {
            anyhow::ensure!(k != 37, "boom");
            Ok(())
        })
        .await
        .err()
        .expect("an error");
        assert!(format!("{err:#}").contains("things #37: boom"), "{err:#}");
    }
}
