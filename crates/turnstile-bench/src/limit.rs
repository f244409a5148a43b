//! "The limit": the latency of one quorum commit on this machine, which bounds a strictly
//! sequential chain of commits such as W2's lock handoffs. Measured before any cluster runs, it
//! is twice the p50 of a 4 KiB write plus `fdatasync` in the run's directory (on the data
//! dirs' disk), plus the p50 of a 64-byte loopback TCP round trip: the leader's and one
//! follower's log writes, counted one after the other as two processes syncing one disk may
//! be, and the append/ack round trip between them.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::tally::{Percentiles, Tally};

/// Bytes of each synced write: one small log append.
const FSYNC_WRITE_BYTES: usize = 4_096;
/// Bytes of each round-trip message: about a small append or ack header.
const RTT_MESSAGE_BYTES: usize = 64;

/// The measured limit.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Limit {
    pub fsync: Percentiles,
    pub fsync_samples: usize,
    pub rtt: Percentiles,
    pub rtt_samples: usize,
    /// 2 × fsync p50 + rtt p50.
    pub commit_ms: f64,
    /// 1000 / commit_ms: sequential commits per second at best.
    pub commits_per_s: f64,
}

/// Measures both parts and combines them.
pub async fn measure(
    dir: &Path,
    fsync_samples: usize,
    rtt_samples: usize,
) -> anyhow::Result<Limit> {
    let path = dir.join("limit-fsync.bin");
    let fsync = tokio::task::spawn_blocking(move || fsync_tally(&path, fsync_samples))
        .await
        .context("the fsync probe panicked")??;
    let rtt = rtt_tally(rtt_samples).await?;
    let (f, r) = (fsync.percentiles(), rtt.percentiles());
    let commit_ms = 2.0 * f.p50_ms + r.p50_ms;
    Ok(Limit {
        fsync: f,
        fsync_samples,
        rtt: r,
        rtt_samples,
        commit_ms,
        commits_per_s: if commit_ms > 0.0 {
            1_000.0 / commit_ms
        } else {
            0.0
        },
    })
}

/// Appends `samples` 4 KiB blocks to a preallocated file, each followed by `fdatasync`.
fn fsync_tally(path: &Path, samples: usize) -> anyhow::Result<Tally> {
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let block = vec![0xa5u8; FSYNC_WRITE_BYTES];
    // Preallocate, so the timed syncs flush data rather than the file's growth.
    for _ in 0..samples {
        f.write_all(&block)?;
    }
    f.sync_all()?;
    f.seek(SeekFrom::Start(0))?;
    let mut t = Tally::new();
    for _ in 0..samples {
        let start = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        t.record(start.elapsed());
    }
    drop(f);
    std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(t)
}

/// Ping-pong of a small message over one loopback TCP connection (Nagle off).
async fn rtt_tally(samples: usize) -> anyhow::Result<Tally> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let echo = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; RTT_MESSAGE_BYTES];
        for _ in 0..samples {
            s.read_exact(&mut buf).await?;
            s.write_all(&buf).await?;
        }
        anyhow::Ok(())
    });
    let mut c = TcpStream::connect(addr).await?;
    c.set_nodelay(true)?;
    let mut buf = [7u8; RTT_MESSAGE_BYTES];
    let mut t = Tally::new();
    for _ in 0..samples {
        let start = Instant::now();
        c.write_all(&buf).await?;
        c.read_exact(&mut buf).await?;
        t.record(start.elapsed());
    }
    tokio::time::timeout(Duration::from_secs(5), echo)
        .await
        .context("the echo task did not finish")?
        .context("the echo task panicked")??;
    Ok(t)
}
