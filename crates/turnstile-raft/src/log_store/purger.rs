//! Deleting purged log entries beside the log, not inside openraft's `purge` call.
//!
//! openraft awaits `purge` in its core loop, and a snapshot of a large state purges about as
//! many entries as the state has records (`snapshot_policy`): deleting 700,000 sled keys in one
//! batch, synchronously, under the lock appends take, stalled a node for seconds, long enough
//! to lose its leadership (the bench's W8 found it). So `purge` makes `last_purged` durable
//! (which is all a crash needs: `open` deletes whatever lies at or below it) and hands the
//! deletion to this thread, which deletes in batches of [`PURGE_KEYS_PER_BATCH`] and takes the
//! write-order lock once per batch, so an append waits at most one batch.
//!
//! Entries at or below `last_purged` may therefore still be stored for a while. Nothing reads
//! them: openraft never asks for a purged index, and `get_log_state` reports the greater of the
//! last entry and `last_purged`. The thread ends when the store is dropped, after at most one
//! more batch; `open` finishes any deletion it left.

use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::codec::key_range;

/// Keys deleted per sled batch (and per hold of the write-order lock).
pub const PURGE_KEYS_PER_BATCH: usize = 4_096;

/// The purge thread of one store.
pub(super) struct Purger {
    tx: Option<Sender<u64>>,
    thread: Option<JoinHandle<()>>,
}

impl Purger {
    /// Starts the thread deleting from `log`, taking `write_order` per batch.
    pub(super) fn spawn(log: sled::Tree, write_order: Arc<Mutex<()>>) -> std::io::Result<Purger> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("log-purger".into())
            .spawn(move || run(&log, &write_order, &rx))?;
        Ok(Purger {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Asks for every entry at or below `index` to be deleted (after `last_purged` is durable).
    pub(super) fn purge_through(&self, index: u64) {
        if let Some(tx) = &self.tx {
            // A stopped thread leaves the entries to `open`, which deletes them.
            let _ = tx.send(index);
        }
    }
}

impl Drop for Purger {
    /// Stops the thread after its current batch and waits for it, so the store's directory
    /// is released when the store is.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(log: &sled::Tree, write_order: &Mutex<()>, rx: &Receiver<u64>) {
    while let Ok(mut upto) = rx.recv() {
        loop {
            match delete_batch(log, write_order, upto) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(upto, error = %e, "log purge stopped; the next purge or restart finishes it");
                    break;
                }
            }
            // A newer purge widens the range; a dropped store stops the thread.
            loop {
                match rx.try_recv() {
                    Ok(next) => upto = upto.max(next),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
        }
    }
}

/// Deletes up to [`PURGE_KEYS_PER_BATCH`] entries at or below `upto`; how many it deleted.
fn delete_batch(log: &sled::Tree, write_order: &Mutex<()>, upto: u64) -> sled::Result<usize> {
    let keys = log
        .range(key_range(&(..=upto)))
        .keys()
        .take(PURGE_KEYS_PER_BATCH)
        .collect::<sled::Result<Vec<_>>>()?;
    if keys.is_empty() {
        return Ok(0);
    }
    let n = keys.len();
    let mut batch = sled::Batch::default();
    for key in keys {
        batch.remove(key);
    }
    let _order = write_order.lock().unwrap_or_else(PoisonError::into_inner);
    log.apply_batch(batch)?;
    Ok(n)
}
