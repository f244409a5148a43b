//! What one durable log append costs on this disk, several ways, median and p99 of N appends
//! of a small entry, the ways taking turns in rounds:
//!
//! - `presized file`: `pwrite` into a file already long enough, then `fdatasync`: the floor;
//! - `presized + sync_file_range`: the same with the call sled makes after each of its writes
//!   (`WAIT_BEFORE | WRITE | WAIT_AFTER`) between the two, to tell that call's cost apart;
//! - `growing file`: `pwrite` past the end, then `fdatasync`, which then also commits the new
//!   length, as sled's appends do;
//! - `sled`: a sled tree opened by the log store's own `open_db`: insert, then
//!   `db.flush()` (sled's own `pwrite` and `sync_file_range`), then `fdatasync` of its `db`
//!   file, as the flusher does for every batch; then the same split into its three steps;
//! - `sled, presized segment`: the same, but after the first append the `db` file is
//!   lengthened to the end of sled's current segment, so sled's appends no longer grow it.
//!   Only here, where one thread does every write: in the node, lengthening the file could race
//!   sled's own write of a segment's end (see docs/benchmarks.md, tenth round).
//!
//! `cargo run --release -p turnstile-raft --example log_sync_floor -- [N] [ROUNDS]`
//! (defaults 2,000 and 3). Writes in a temporary directory under the current directory, so
//! run it on the disk the data dirs use.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use turnstile_raft::log_store::{open_db, SLED_SEGMENT_BYTES};

/// About one W1 entry as the log stores it.
const ENTRY_BYTES: usize = 256;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    anyhow::ensure!(
        n > 0 && rounds > 0,
        "usage: log_sync_floor [N > 0] [ROUNDS > 0]"
    );
    let entry = vec![0xA5u8; ENTRY_BYTES];
    for round in 1..=rounds {
        let presized = file_appends(n, &entry, Layout::Presized)?;
        let presized_sfr = file_appends(n, &entry, Layout::PresizedSyncFileRange)?;
        let growing = file_appends(n, &entry, Layout::Growing)?;
        let sled = sled_appends(n, &entry, false)?;
        let sled_presized = sled_appends(n, &entry, true)?;
        println!("round {round}, {n} appends of {ENTRY_BYTES} bytes, p50 / p99 in ms:");
        let rows = [
            ("presized file", presized),
            ("presized + sync_file_range", presized_sfr),
            ("growing file", growing),
            ("sled", sled.total),
            ("  its insert", sled.insert),
            ("  its db.flush()", sled.flush),
            ("  its fdatasync", sled.fdatasync),
            ("sled, presized segment", sled_presized.total),
        ];
        for (way, times) in rows {
            println!("  {way:<28} {}", summary(times));
        }
    }
    Ok(())
}

/// How [`file_appends`] lays out and syncs its file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Presized,
    PresizedSyncFileRange,
    Growing,
}

fn file_appends(n: usize, entry: &[u8], layout: Layout) -> anyhow::Result<Vec<Duration>> {
    let dir = tempfile::tempdir_in(".")?;
    let file = File::create(dir.path().join("log"))?;
    if layout != Layout::Growing {
        // Long enough first (and synced), so an append changes no length.
        file.set_len((n * entry.len()) as u64)?;
    }
    file.sync_all()?;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let offset = (i * entry.len()) as u64;
        file.write_all_at(entry, offset)?;
        if layout == Layout::PresizedSyncFileRange {
            sync_file_range(&file, offset, entry.len())?;
        }
        file.sync_data()?;
        times.push(started.elapsed());
    }
    Ok(times)
}

#[derive(Default)]
struct SledTimes {
    total: Vec<Duration>,
    insert: Vec<Duration>,
    flush: Vec<Duration>,
    fdatasync: Vec<Duration>,
}

fn sled_appends(n: usize, entry: &[u8], presize: bool) -> anyhow::Result<SledTimes> {
    let dir = tempfile::tempdir_in(".")?;
    // Opened as the log store opens it.
    let db = open_db(dir.path())?;
    let tree = db.open_tree("log")?;
    let db_file = File::open(dir.path().join("db"))?;
    let mut t = SledTimes::default();
    for i in 0..n {
        let started = Instant::now();
        tree.insert((i as u64).to_be_bytes(), entry)?;
        let inserted = Instant::now();
        db.flush()?;
        let flushed = Instant::now();
        db_file.sync_data()?;
        let synced = Instant::now();
        t.insert.push(inserted - started);
        t.flush.push(flushed - inserted);
        t.fdatasync.push(synced - flushed);
        t.total.push(synced - started);
        if presize && i == 0 {
            let segment = SLED_SEGMENT_BYTES as u64;
            let len = db_file.metadata()?.len();
            // A handle that may write: `db_file` is read-only.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.path().join("db"))?;
            f.set_len(len.div_ceil(segment) * segment)?;
            f.sync_all()?;
        }
    }
    Ok(t)
}

/// The call sled 0.34.7 makes after each buffer write (`pagecache/iobuf.rs`).
fn sync_file_range(file: &File, offset: u64, len: usize) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain syscall on a descriptor `file` keeps open; it reads no memory of ours.
    let ret = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    format!("{:.3} / {:.3}", at(0.5), at(0.99))
}
