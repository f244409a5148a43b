//! Acknowledgments: once a request made with a `request_id` has its answer (anything but
//! [`crate::Error::Indeterminate`], which the caller may still resolve by resending), the
//! client names that id in the `x-turnstile-ack` header of its next requests, and the server
//! forgets the request's record at once instead of keeping it for its 10-minute retry window.
//! That keeps the cluster's state proportional to what this client has in flight, however
//! long it runs. Ids not yet sent when the client is dropped simply age out on the server.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The header the server reads acknowledgments from (space-separated ids).
pub const ACK_HEADER: &str = "x-turnstile-ack";
/// Most ids sent with one request (the server's limit).
pub const ACKS_PER_REQUEST_MAX: usize = 64;
/// Most ids waiting to be sent; past it the oldest are dropped (they age out instead).
pub const PENDING_ACKS_MAX: usize = 4_096;

/// Ids answered and not yet acknowledged to the server. [`crate::Client`] keeps one; it is
/// public for callers that speak HTTP themselves (the benchmark harness's soak) and want to
/// acknowledge exactly as the client does.
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

    /// The next ids to send, as a header value, or `None` if there are none.
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

    /// Puts back ids whose request never reached a server.
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
        for i in 0..PENDING_ACKS_MAX + 5 {
            p.push(format!("x{i}"));
        }
        let (ids, _) = p.take().expect("some");
        assert_eq!(ids[0], "x5", "the oldest were dropped");
    }
}
