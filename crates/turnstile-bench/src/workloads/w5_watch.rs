//! W5, watch delivery: N watchers (1, 100, 1,000) on one key, all on the leader; one writer puts
//! to the key every `W5_WRITE_INTERVAL_MS`, each value being the send time. Each watcher records,
//! per delivered put, the time from the writer sending it to the watcher reading it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};

use super::common::{failed, run_workers, until, Op, Window};
use super::{Ctx, Outcome};
use crate::client::{Client, Watcher};
use crate::measure::{latency, Better, Measure};
use crate::plan::{SETUP_CONCURRENCY, W5_DRAIN_MS, W5_WRITE_INTERVAL_MS};
use crate::tally::{merge_all, Tally};

/// How often a reader blocked on its stream checks whether it has seen every write. Reading
/// again after a cut read loses nothing: both streams buffer what arrived.
const POLL_SLICE_MS: u64 = 100;

/// Shared between the writer and the watchers.
struct Feed {
    /// Send times are nanoseconds since this instant.
    epoch: Instant,
    writes: AtomicU64,
    writer_done: AtomicBool,
}

async fn writer(mut c: Client, key: String, feed: Arc<Feed>, w: Window) -> Tally {
    let mut t = Tally::new();
    let mut tick = tokio::time::interval(Duration::from_millis(W5_WRITE_INTERVAL_MS));
    while w.open(&t) {
        tick.tick().await;
        let t0 = Instant::now();
        let sent = t0.duration_since(feed.epoch).as_nanos().to_string();
        match until(w.end, c.put(&key, &sent)).await {
            Op::Done(_) => {
                t.record(t0.elapsed());
                feed.writes.fetch_add(1, Ordering::SeqCst);
            }
            Op::Failed(e) => failed(&mut t, &e).await,
            Op::Cut => break,
        }
    }
    feed.writer_done.store(true, Ordering::SeqCst);
    t
}

/// Reads deliveries until every acknowledged write has arrived after the writer stopped, or
/// the drain deadline passes.
async fn reader(mut watcher: Watcher, feed: Arc<Feed>, w: Window) -> Tally {
    let mut t = Tally::new();
    let deadline = w.end + Duration::from_millis(W5_DRAIN_MS);
    loop {
        if feed.writer_done.load(Ordering::SeqCst) && t.ops >= feed.writes.load(Ordering::SeqCst) {
            break;
        }
        let slice_end = deadline.min(Instant::now() + Duration::from_millis(POLL_SLICE_MS));
        match until(slice_end, watcher.next_puts()).await {
            Op::Done(Some(values)) => {
                let now = feed.epoch.elapsed();
                for v in values {
                    if let Ok(ns) = v.parse::<u64>() {
                        t.record(now.saturating_sub(Duration::from_nanos(ns)));
                    }
                }
            }
            Op::Done(None) => break,
            Op::Failed(e) => {
                t.error(&e);
                break;
            }
            Op::Cut if Instant::now() >= deadline => break,
            Op::Cut => {}
        }
    }
    t
}

pub async fn run(ctx: &mut Ctx<'_>) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.start_cluster("w5").await?;
    let leader = cluster.leader().await?;
    let mut out = Outcome::default();
    let stream_ms = u64::try_from(ctx.plan.duration.as_millis()).unwrap_or(u64::MAX / 2)
        + 2 * W5_DRAIN_MS
        + crate::plan::REQUEST_MS_MAX;
    for &n in &ctx.plan.w5_watchers {
        let key = format!("w5-{n}");
        let clients = cluster.clients(leader, n + 1).await?;
        let watchers: Vec<Watcher> = futures::stream::iter(clients.iter().skip(1).cloned())
            .map(|mut c| {
                let key = key.clone();
                async move { c.watcher(&key, stream_ms).await }
            })
            .buffered(SETUP_CONCURRENCY)
            .try_collect()
            .await?;
        let feed = Arc::new(Feed {
            epoch: Instant::now(),
            writes: AtomicU64::new(0),
            writer_done: AtomicBool::new(false),
        });
        let w = Window::after(Duration::ZERO, ctx.plan.duration);
        let readers: Vec<_> = watchers
            .into_iter()
            .map(|wa| tokio::spawn(reader(wa, feed.clone(), w)))
            .collect();
        let writer_client: Vec<Client> = clients.into_iter().take(1).collect();
        let written = run_workers(writer_client, |_, c| {
            writer(c, key.clone(), feed.clone(), w)
        })
        .await?;
        let mut delivered = Vec::new();
        for r in readers {
            delivered.push(r.await?);
        }
        cluster.check_running()?;
        let writes = merge_all(&written);
        let got = merge_all(&delivered);
        let point = format!("{n} watcher{}", if n == 1 { "" } else { "s" });
        out.measures
            .extend(latency("W5", &point, "write-to-delivery", &got));
        let expected = writes.ops * n as u64;
        out.measures.push(
            Measure::new(
                "W5",
                format!("{point}: deliveries / (writes x watchers)"),
                "fraction",
                Better::Higher,
                if expected > 0 {
                    got.ops as f64 / expected as f64
                } else {
                    0.0
                },
            )
            .counts(&got),
        );
        out.measures
            .extend(latency("W5", &point, "write ack", &writes));
    }
    Ok(out)
}
