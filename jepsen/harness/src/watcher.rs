//! Watch workers: unfiltered watch streams from the first revision, resumed with
//! `Last-Event-ID` on the next node whenever a stream ends (node killed, cut off, paused), and
//! every delivery recorded. The watch checker then demands that every watcher saw every event
//! once, in order; the lock checkers use the same deliveries as the log of committed grants
//! and lease expiries.

use std::time::{Duration, Instant};

use serde_json::Value;
use turnstile_checker::history::{WatchDelivery, WatchEnd};

use crate::recorder::Recorder;

/// Longest one stream may stay silent before the watcher reconnects elsewhere.
const STREAM_IDLE_MS: u64 = 3_000;
/// Bytes of one SSE frame we accept (events are small; a frame this big is a bug).
const FRAME_BYTES_MAX: usize = 1 << 20;

/// What a watcher is told to do.
pub struct WatcherPlan {
    pub watcher: u64,
    /// `endpoints[i]` is node `i + 1`.
    pub endpoints: Vec<String>,
    /// Keep streaming until this instant ...
    pub deadline: Instant,
    /// ... and, after it, until this revision has been delivered (or `drain_deadline`).
    pub drain_to: tokio::sync::watch::Receiver<Option<u64>>,
    pub drain_deadline: Instant,
}

/// Runs one watcher until its deadline and drain target.
pub async fn watcher(rec: Recorder, http: reqwest::Client, mut plan: WatcherPlan) {
    let mut last: Option<(u64, u32)> = None;
    let mut attempt = plan.watcher as usize;
    loop {
        let now = Instant::now();
        let drain_to = *plan.drain_to.borrow_and_update();
        let caught_up = match (drain_to, last) {
            (Some(target), Some((rev, _))) => rev >= target,
            (Some(_), None) => false,
            (None, _) => false,
        };
        if now >= plan.drain_deadline || (now >= plan.deadline && caught_up) {
            break;
        }
        let endpoint = &plan.endpoints[attempt % plan.endpoints.len()];
        attempt += 1;
        match stream_once(&rec, &http, endpoint, plan.watcher, &mut last, &plan).await {
            StreamEnd::Compacted => {
                rec.watch_end(WatchEnd {
                    watcher: plan.watcher,
                    compacted: true,
                });
                return;
            }
            StreamEnd::Ended => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    rec.watch_end(WatchEnd {
        watcher: plan.watcher,
        compacted: false,
    });
}

enum StreamEnd {
    Ended,
    Compacted,
}

async fn stream_once(
    rec: &Recorder,
    http: &reqwest::Client,
    endpoint: &str,
    watcher: u64,
    last: &mut Option<(u64, u32)>,
    plan: &WatcherPlan,
) -> StreamEnd {
    let mut req = http
        .get(format!("{endpoint}/v1/watch?from_revision=1"))
        .timeout(Duration::from_secs(3_600));
    if let Some((rev, seq)) = last {
        req = req.header("Last-Event-ID", format!("{rev}.{seq}"));
    }
    let Ok(Ok(mut resp)) =
        tokio::time::timeout(Duration::from_millis(STREAM_IDLE_MS), req.send()).await
    else {
        return StreamEnd::Ended;
    };
    if !resp.status().is_success() {
        return StreamEnd::Ended;
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        if Instant::now() >= plan.drain_deadline {
            return StreamEnd::Ended;
        }
        let chunk =
            match tokio::time::timeout(Duration::from_millis(STREAM_IDLE_MS), resp.chunk()).await {
                Ok(Ok(Some(c))) => c,
                _ => return StreamEnd::Ended,
            };
        buf.extend_from_slice(&chunk);
        while let Some(end) = find_frame_end(&buf) {
            let frame: Vec<u8> = buf.drain(..end + 2).collect();
            match parse_frame(&String::from_utf8_lossy(&frame)) {
                Frame::Event(data) => {
                    if let Some(d) = delivery(watcher, rec.now_ns(), &data) {
                        *last = Some((d.revision, d.seq));
                        rec.watch(d);
                    }
                }
                Frame::Compacted => return StreamEnd::Compacted,
                Frame::Other => {}
            }
        }
        if buf.len() > FRAME_BYTES_MAX {
            return StreamEnd::Ended;
        }
        // Stop once drained: past the deadline and at the target revision.
        let drain_to = *plan.drain_to.borrow();
        if let (Some(target), Some((rev, _))) = (drain_to, *last) {
            if Instant::now() >= plan.deadline && rev >= target {
                return StreamEnd::Ended;
            }
        }
    }
}

fn find_frame_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n")
}

enum Frame {
    Event(Value),
    Compacted,
    Other,
}

fn parse_frame(frame: &str) -> Frame {
    let mut event = "";
    let mut data = String::new();
    for line in frame.lines() {
        if let Some(e) = line.strip_prefix("event:") {
            event = e.trim();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim());
        }
    }
    if event == "compacted" {
        return Frame::Compacted;
    }
    match serde_json::from_str::<Value>(&data) {
        Ok(v) if v.get("revision").is_some() => Frame::Event(v),
        _ => Frame::Other,
    }
}

fn delivery(watcher: u64, time_ns: u64, v: &Value) -> Option<WatchDelivery> {
    let kind = v["kind"].as_str()?.to_string();
    let name = v["key"]
        .as_str()
        .or_else(|| v["lock"].as_str())
        .unwrap_or_default()
        .to_string();
    Some(WatchDelivery {
        watcher,
        time_ns,
        revision: v["revision"].as_u64()?,
        seq: u32::try_from(v["seq"].as_u64()?).ok()?,
        kind,
        name,
        lease_id: v["lease_id"].as_u64(),
        token: v["token"].as_u64(),
    })
}
