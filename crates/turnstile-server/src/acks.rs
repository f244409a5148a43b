//! Acknowledged answers: a client that has the answer to a request it made with a
//! `request_id` may name that id in the [`ACK_HEADER`] of any later `/v1` request, and the
//! request's record then leaves the state at once instead of at the end of the retry window
//! (`turnstile_core::limits::REQUEST_RECORD_WINDOW_MS`). This is how a session that acquires
//! and releases at full speed for days keeps state proportional to what it has in flight.
//!
//! Each node gathers the ids it is told into a bounded queue, and [`run_flush`] proposes them
//! as `Command::Ack` entries, at most `ACKS_PER_ENTRY_MAX` ids each, every
//! [`ACK_FLUSH_INTERVAL_MS`]. Acks are an optimisation: ids dropped (queue full, no quorum) are
//! simply kept until their window ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use tokio::sync::watch;
use turnstile_core::{limits, Command};

use crate::api::validate;
use crate::app::App;
use crate::error::ApiError;

/// Request header naming acknowledged request ids, separated by spaces (ids are printable
/// ASCII without spaces).
pub const ACK_HEADER: &str = "x-turnstile-ack";
/// Most ids one request may acknowledge.
pub const ACKS_PER_REQUEST_MAX: usize = 64;
/// Most ids a node holds before proposing them; more are dropped (and age out instead).
pub const ACK_QUEUE_IDS_MAX: usize = 65_536;
/// How often a node proposes what it gathered.
pub const ACK_FLUSH_INTERVAL_MS: u64 = 100;

/// The ids this node was told, waiting to be proposed.
#[derive(Debug, Default)]
pub struct AckQueue {
    ids: Mutex<Vec<String>>,
    dropped: AtomicU64,
}

impl AckQueue {
    /// Queues `ids`, dropping what does not fit.
    pub fn push(&self, ids: Vec<String>) {
        let Ok(mut q) = self.ids.lock() else {
            return;
        };
        let room = ACK_QUEUE_IDS_MAX.saturating_sub(q.len());
        let dropped = ids.len().saturating_sub(room);
        q.extend(ids.into_iter().take(room));
        if dropped > 0 {
            self.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        }
    }

    /// Takes up to `max` ids, oldest first.
    pub fn take(&self, max: usize) -> Vec<String> {
        let Ok(mut q) = self.ids.lock() else {
            return Vec::new();
        };
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Ids dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Parses an [`ACK_HEADER`] value: at most [`ACKS_PER_REQUEST_MAX`] valid request ids.
pub fn parse(value: &str) -> Result<Vec<String>, ApiError> {
    let ids: Vec<String> = value.split_ascii_whitespace().map(str::to_owned).collect();
    if ids.len() > ACKS_PER_REQUEST_MAX {
        return Err(ApiError::BadRequest(format!(
            "{ACK_HEADER} names {} ids; at most {ACKS_PER_REQUEST_MAX}",
            ids.len()
        )));
    }
    for id in &ids {
        validate::request_id(Some(id))
            .map_err(|_| ApiError::BadRequest(format!("{ACK_HEADER}: {}", bad_id_message())))?;
    }
    Ok(ids)
}

fn bad_id_message() -> String {
    format!(
        "each id must be 1..={} printable ASCII bytes, separated by spaces",
        limits::REQUEST_ID_BYTES_MAX
    )
}

/// For each `/v1` data request (a check of `crate::api`'s route middleware): queues the
/// request's acknowledgments, or refuses a malformed header with `400` before the request does
/// anything.
pub fn gather(app: &App, req: &Request) -> Result<(), ApiError> {
    let Some(value) = req.headers().get(ACK_HEADER) else {
        return Ok(());
    };
    let ids = match value.to_str() {
        Ok(v) => parse(v),
        Err(_) => Err(ApiError::BadRequest(format!(
            "{ACK_HEADER}: {}",
            bad_id_message()
        ))),
    };
    // An authenticated caller's ids are scoped to it, as its requests' were: a client can
    // acknowledge only its own answers.
    let caller = req.extensions().get::<crate::auth::Caller>();
    let ids = ids.map(|ids| match caller {
        Some(c) => ids
            .into_iter()
            .filter_map(|id| c.request_id(Some(id)))
            .collect(),
        None => ids,
    });
    app.acks.push(ids?);
    Ok(())
}

/// Proposes gathered acknowledgments until `stop` flips.
pub async fn run_flush(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(ACK_FLUSH_INTERVAL_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.changed() => return,
        }
        loop {
            let request_ids = app.acks.take(limits::ACKS_PER_ENTRY_MAX);
            if request_ids.is_empty() {
                break;
            }
            let n = request_ids.len();
            if let Err(e) = app
                .write(
                    &crate::auth::Caller::Node,
                    None,
                    Command::Ack { request_ids },
                )
                .await
            {
                tracing::debug!(ids = n, error = %e, "acknowledgments not proposed; their records age out");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_bounded_and_checked() {
        assert_eq!(
            parse(" a  b\tc ").expect("parses"),
            vec!["a".to_string(), "b".into(), "c".into()]
        );
        assert!(parse("").expect("empty is fine").is_empty());
        let many = vec!["x"; ACKS_PER_REQUEST_MAX + 1].join(" ");
        assert!(parse(&many).is_err());
        let long = "y".repeat(limits::REQUEST_ID_BYTES_MAX + 1);
        assert!(parse(&long).is_err());
    }

    #[test]
    fn the_queue_keeps_at_most_its_cap() {
        let q = AckQueue::default();
        q.push((0..ACK_QUEUE_IDS_MAX + 10).map(|i| i.to_string()).collect());
        assert_eq!(q.dropped(), 10);
        assert_eq!(q.take(5), vec!["0", "1", "2", "3", "4"]);
        assert_eq!(q.take(usize::MAX).len(), ACK_QUEUE_IDS_MAX - 5);
    }
}
