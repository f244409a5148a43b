//! `PendingAcks`: one soak client's answered request ids, waiting to ride in the
//! `x-turnstile-ack` header of its next requests. A copy of the Rust client's queue
//! (`turnstile-client/src/acks.rs`), with its constants, so that the soak loads the server the
//! way a client of that crate does; the bench speaks raw HTTP so that it sees every refusal
//! instead of the client's retries.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The header the server reads acknowledgments from (space-separated ids).
pub const ACK_HEADER: &str = "x-turnstile-ack";
/// Most ids sent with one request (the server's limit; the Rust client's too).
pub const ACKS_PER_REQUEST_MAX: usize = 64;
/// Most ids waiting to be sent; past it the oldest are dropped (they age out instead). The
/// Rust client's figure.
pub const PENDING_ACKS_MAX: usize = 4_096;

/// Ids answered and not yet acknowledged to the server.
#[derive(Debug, Default)]
pub struct PendingAcks {
    ids: Mutex<VecDeque<String>>,
}

impl PendingAcks {
    /// Queues an answered id, dropping the oldest past [`PENDING_ACKS_MAX`].
    pub fn push(&self, id: String) {
        if let Ok(mut q) = self.ids.lock() {
            if q.len() >= PENDING_ACKS_MAX {
                q.pop_front();
            }
            q.push_back(id);
        }
    }

    /// The next ids to send (at most [`ACKS_PER_REQUEST_MAX`]) and their header value, or
    /// `None` if there are none.
    pub fn take(&self) -> Option<(Vec<String>, String)> {
        let mut q = self.ids.lock().ok()?;
        let n = q.len().min(ACKS_PER_REQUEST_MAX);
        if n == 0 {
            return None;
        }
        let ids: Vec<String> = q.drain(..n).collect();
        let header = ids.join(" ");
        Some((ids, header))
    }

    /// Puts back, in front and in order, ids whose request may not have reached the server.
    pub fn restore(&self, ids: Vec<String>) {
        if let Ok(mut q) = self.ids.lock() {
            for id in ids.into_iter().rev() {
                if q.len() >= PENDING_ACKS_MAX {
                    break;
                }
                q.push_front(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_out_in_order_a_bounded_batch_at_a_time() {
        let p = PendingAcks::default();
        assert!(p.take().is_none());
        for i in 0..100 {
            p.push(format!("id{i}"));
        }
        let (ids, header) = p.take().expect("some");
        assert_eq!(ids.len(), ACKS_PER_REQUEST_MAX);
        assert!(header.starts_with("id0 id1 "));
        p.restore(ids);
        let (ids, _) = p.take().expect("some");
        assert_eq!(ids[0], "id0");
        let (ids, _) = p.take().expect("the rest");
        assert_eq!(ids.len(), 100 - ACKS_PER_REQUEST_MAX);
        for i in 0..PENDING_ACKS_MAX + 5 {
            p.push(format!("x{i}"));
        }
        let (ids, _) = p.take().expect("some");
        assert_eq!(ids[0], "x5", "the oldest were dropped");
    }
}
