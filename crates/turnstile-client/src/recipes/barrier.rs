//! [`Barrier`]: a key whose presence holds waiters back. A coordinator raises it (`hold`),
//! any number of processes `wait` until it is lowered (`release`, or the end of the lease the
//! key is bound to, so a coordinator that dies does not hold everyone forever).
//!
//! `wait` is exact: it reads the key linearizably and, if present, watches that key from the
//! revision after its last write, so a release between the read and the watch is seen.

use futures::StreamExt;

use crate::{Client, DeleteOptions, Deleted, Error, EventKind, PutOptions, WatchOptions, Written};

/// A barrier on one key.
#[derive(Clone)]
pub struct Barrier {
    client: Client,
    key: String,
}

impl Barrier {
    pub fn new(client: &Client, key: impl Into<String>) -> Barrier {
        Barrier {
            client: client.clone(),
            key: key.into(),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Raises the barrier. With `lease_id`, it is lowered by itself when that lease ends.
    pub async fn hold(&self, lease_id: Option<u64>) -> Result<Written, Error> {
        let opts = PutOptions {
            lease_id,
            ..PutOptions::default()
        };
        self.client.put(&self.key, "held", opts).await
    }

    /// Lowers the barrier, letting every waiter go.
    pub async fn release(&self) -> Result<Deleted, Error> {
        self.client
            .delete(&self.key, DeleteOptions::default())
            .await
    }

    /// Returns once the barrier is down: at once if it is not raised now, otherwise when its
    /// key is deleted. Returns the revision at which it was seen down (0 if it was never up).
    pub async fn wait(&self) -> Result<u64, Error> {
        let Some(kv) = self.client.get(&self.key).await? else {
            return Ok(0);
        };
        self.wait_past(kv.mod_revision).await
    }

    /// Returns the revision of the first delete of the barrier's key after `revision` (the
    /// revision of a `hold`, or of a read that saw it up). The watch starts from history, so a
    /// delete that happened before this call is found too, as long as the history still holds
    /// it (otherwise the watch's `compacted` error is returned).
    pub async fn wait_past(&self, revision: u64) -> Result<u64, Error> {
        let opts = WatchOptions::key(self.key.clone()).from_revision(revision + 1);
        let mut watch = self.client.watch(opts);
        while let Some(event) = watch.next().await {
            let event = event?;
            if event.kind == EventKind::Delete && event.key() == Some(self.key.as_str()) {
                return Ok(event.revision);
            }
        }
        Err(Error::Protocol {
            message: format!("the watch of barrier {:?} ended", self.key),
        })
    }
}
