//! [`Watch`]: a stream of watch events (`GET /v1/watch`, server-sent events) that resumes by
//! itself. Every node emits the same events with the same `(revision, seq)` ids, so when a
//! connection ends or stalls the stream reconnects (to the next endpoint if that one failed)
//! with `Last-Event-ID: <revision>.<seq>` of the last event delivered, and drops anything at
//! or before it. An `event: compacted` (the resume point is older than the retained history)
//! ends the stream with [`Error::Compacted`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use serde_json::Value;

use crate::error::Retry;
use crate::sse::{SseEvent, SseParser};
use crate::{Client, Error};

/// A connection that delivers nothing (no event, no comment) for this long is taken as dead
/// and replaced. A quiet but healthy stream then reconnects, which resumes without a gap.
pub const WATCH_IDLE_MS_DEFAULT: u64 = 30_000;

/// What to watch, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// One key (or lock name).
    pub key: Option<String>,
    /// Every key (or lock name) starting with this.
    pub prefix: Option<String>,
    /// First revision to deliver (inclusive); 0 means from now.
    pub from_revision: u64,
    /// See [`WATCH_IDLE_MS_DEFAULT`].
    pub idle_timeout: Duration,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            key: None,
            prefix: None,
            from_revision: 0,
            idle_timeout: Duration::from_millis(WATCH_IDLE_MS_DEFAULT),
        }
    }
}

impl WatchOptions {
    pub fn key(key: impl Into<String>) -> WatchOptions {
        WatchOptions {
            key: Some(key.into()),
            ..WatchOptions::default()
        }
    }

    pub fn prefix(prefix: impl Into<String>) -> WatchOptions {
        WatchOptions {
            prefix: Some(prefix.into()),
            ..WatchOptions::default()
        }
    }

    pub fn from_revision(mut self, revision: u64) -> WatchOptions {
        self.from_revision = revision;
        self
    }
}

/// Kinds of watch events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
    LockGranted,
    LockReleased,
    LeaseExpired,
    /// An election got a leader, or its leader proclaimed a new value.
    ElectionLeader,
    /// An election's leader stopped leading.
    ElectionResigned,
    /// A kind this client does not know (a newer server).
    Other(String),
}

impl EventKind {
    fn parse(s: &str) -> EventKind {
        match s {
            "put" => EventKind::Put,
            "delete" => EventKind::Delete,
            "lock_granted" => EventKind::LockGranted,
            "lock_released" => EventKind::LockReleased,
            "lease_expired" => EventKind::LeaseExpired,
            "election_leader" => EventKind::ElectionLeader,
            "election_resigned" => EventKind::ElectionResigned,
            other => EventKind::Other(other.to_string()),
        }
    }
}

/// One watch event. `data` is the event's whole JSON object (`revision`, `seq`, `kind` and the
/// kind's fields: `key`, `value`, `lock`, `election`, `lease_id`, `token`, `mode`, `cause`).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub revision: u64,
    pub seq: u64,
    pub kind: EventKind,
    pub data: Value,
}

impl WatchEvent {
    /// The SSE id, `<revision>.<seq>`.
    pub fn id(&self) -> String {
        format!("{}.{}", self.revision, self.seq)
    }

    fn str_field(&self, f: &str) -> Option<&str> {
        self.data.get(f).and_then(Value::as_str)
    }

    /// The key of a `put` or `delete`.
    pub fn key(&self) -> Option<&str> {
        self.str_field("key")
    }

    /// The value of a `put` or an `election_leader`.
    pub fn value(&self) -> Option<&str> {
        self.str_field("value")
    }

    /// The lock name of a lock event (`lock` in the event's JSON).
    pub fn lock(&self) -> Option<&str> {
        self.str_field("lock")
    }

    /// The election name of an election event (`election` in the event's JSON).
    pub fn election(&self) -> Option<&str> {
        self.str_field("election")
    }

    pub fn lease_id(&self) -> Option<u64> {
        self.data.get("lease_id").and_then(Value::as_u64)
    }

    pub fn token(&self) -> Option<u64> {
        self.data.get("token").and_then(Value::as_u64)
    }
}

/// Parses an SSE id `<revision>.<seq>`.
pub(crate) fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (r, s) = id.split_once('.')?;
    Some((r.parse().ok()?, s.parse().ok()?))
}

/// A live watch. Poll it as a [`Stream`]; drop it to stop watching.
pub struct Watch {
    inner: Pin<Box<dyn Stream<Item = Result<WatchEvent, Error>> + Send>>,
}

impl Stream for Watch {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Client {
    /// Starts a watch. Nothing is sent until the stream is first polled.
    pub fn watch(&self, opts: WatchOptions) -> Watch {
        let state = WatchState {
            client: self.clone(),
            opts,
            last: None,
            now_floor: None,
            conn: None,
            ready: VecDeque::new(),
            done: false,
        };
        Watch {
            inner: Box::pin(futures::stream::unfold(state, WatchState::step)),
        }
    }
}

struct Conn {
    resp: reqwest::Response,
    parser: SseParser,
    endpoint: usize,
}

struct WatchState {
    client: Client,
    opts: WatchOptions,
    /// `(revision, seq)` of the last event delivered.
    last: Option<(u64, u64)>,
    /// For a watch "from now": the node's applied index before the first connection, so a
    /// reconnect before any event resumes after it instead of from a later "now" (which
    /// could skip events). May deliver a few events older than the first connection.
    now_floor: Option<u64>,
    conn: Option<Conn>,
    ready: VecDeque<Result<WatchEvent, Error>>,
    done: bool,
}

impl WatchState {
    async fn step(mut self) -> Option<(Result<WatchEvent, Error>, WatchState)> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some((item, self));
            }
            if self.done {
                return None;
            }
            let Some(conn) = self.conn.as_mut() else {
                match self.connect().await {
                    Ok(c) => self.conn = Some(c),
                    Err(e) => {
                        self.done = true;
                        return Some((Err(e), self));
                    }
                }
                continue;
            };
            let chunk = tokio::time::timeout(self.opts.idle_timeout, conn.resp.chunk()).await;
            let parsed = match chunk {
                Ok(Ok(Some(bytes))) => conn.parser.push(&bytes),
                Ok(Ok(None)) => Err("the server ended the stream".into()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no data within the idle timeout".into()),
            };
            match parsed {
                Ok(events) => events.into_iter().for_each(|ev| self.deliver(ev)),
                Err(why) => {
                    tracing::debug!(%why, "watch connection ended; resuming");
                    self.client.endpoints.failed(conn.endpoint);
                    self.conn = None;
                }
            }
        }
    }

    /// Queues an event unless it was delivered already; `compacted` ends the stream.
    fn deliver(&mut self, ev: SseEvent) {
        if self.done {
            return;
        }
        let data: Value = match serde_json::from_str(&ev.data) {
            Ok(v) => v,
            Err(e) => return self.fail(format!("watch event data is not JSON: {e}")),
        };
        if ev.event == "compacted" {
            let oldest_revision = data["oldest_revision"].as_u64().unwrap_or(0);
            self.ready
                .push_back(Err(Error::Compacted { oldest_revision }));
            self.done = true;
            self.conn = None;
            return;
        }
        let pos = ev
            .id
            .as_deref()
            .and_then(parse_event_id)
            .or_else(|| Some((data.get("revision")?.as_u64()?, data.get("seq")?.as_u64()?)));
        let Some((revision, seq)) = pos else {
            return self.fail(format!("watch event without a position: {}", ev.data));
        };
        if self.last.is_some_and(|last| (revision, seq) <= last) {
            return;
        }
        self.last = Some((revision, seq));
        let kind = data
            .get("kind")
            .and_then(Value::as_str)
            .map_or_else(|| EventKind::parse(&ev.event), EventKind::parse);
        self.ready.push_back(Ok(WatchEvent {
            revision,
            seq,
            kind,
            data,
        }));
    }

    fn fail(&mut self, message: String) {
        self.ready.push_back(Err(Error::Protocol { message }));
        self.done = true;
        self.conn = None;
    }

    /// The query's start: the requested revision, or where the stream left off.
    fn resume_revision(&self) -> u64 {
        match (self.last, self.now_floor) {
            // Inclusive: the server may resend the tail of this revision; `deliver` drops it.
            (Some((revision, _)), _) => revision,
            (None, _) if self.opts.from_revision > 0 => self.opts.from_revision,
            (None, Some(floor)) => floor + 1,
            (None, None) => 0,
        }
    }

    /// Connects to the preferred endpoint, moving on and backing off until the client's retry
    /// budget passes.
    async fn connect(&mut self) -> Result<Conn, Error> {
        if self.opts.from_revision == 0 && self.last.is_none() && self.now_floor.is_none() {
            let client = self.client.with_retry_budget(Duration::from_secs(1));
            // Without the state digest: only the index is needed, and the digest costs the
            // node a hash of its whole state.
            let status = crate::request::Prepared::<serde_json::Value>::read(
                "/v1/cluster?digest=false".into(),
            );
            self.now_floor = client
                .send(&status)
                .await
                .ok()
                .and_then(|v| v["applied_index"].as_u64());
        }
        let deadline = Instant::now() + self.client.config.retry_budget;
        let mut pause = Duration::from_millis(50);
        loop {
            let (i, base) = self.client.endpoints.current();
            let url = format!("{base}/v1/watch");
            match self.open(&url).await {
                Ok(resp) => {
                    self.client.endpoints.answered(i);
                    return Ok(Conn {
                        resp,
                        parser: SseParser::default(),
                        endpoint: i,
                    });
                }
                Err(e) if e.retry() == Retry::No => return Err(e),
                Err(e) => {
                    self.client.endpoints.failed(i);
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    async fn open(&self, url: &str) -> Result<reqwest::Response, Error> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(k) = &self.opts.key {
            query.push(("key", k.clone()));
        }
        if let Some(p) = &self.opts.prefix {
            query.push(("prefix", p.clone()));
        }
        query.push(("from_revision", self.resume_revision().to_string()));
        let mut rb = self
            .client
            .http
            .get(url)
            .query(&query)
            .header("accept", "text/event-stream");
        if let Some((r, s)) = self.last {
            rb = rb.header("last-event-id", format!("{r}.{s}"));
        }
        let sent = tokio::time::timeout(self.client.config.request_timeout, rb.send()).await;
        let resp = match sent {
            Ok(Ok(resp)) => resp,
            // A TLS failure stays final; anything else before an answer is "unreachable": a
            // watch changes nothing, so reconnecting is always safe.
            Ok(Err(e)) => {
                return Err(match crate::request::transport(url, &e).error {
                    Error::Unreachable { message } | Error::Indeterminate { message, .. } => {
                        Error::Unreachable { message }
                    }
                    other => other,
                })
            }
            Err(_) => {
                return Err(Error::Unreachable {
                    message: format!("{url}: no answer in time"),
                })
            }
        };
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        Err(crate::request::refusal(url, status, text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Result<WatchState, Error> {
        Ok(WatchState {
            client: Client::new(vec!["127.0.0.1:1".into()])?,
            opts: WatchOptions::prefix("a"),
            last: None,
            now_floor: None,
            conn: None,
            ready: VecDeque::new(),
            done: false,
        })
    }

    fn sse(id: &str, kind: &str, data: &str) -> SseEvent {
        SseEvent {
            id: Some(id.into()),
            event: kind.into(),
            data: data.into(),
        }
    }

    #[test]
    fn redelivered_events_are_dropped_and_resume_point_tracks() -> Result<(), Error> {
        let mut st = state()?;
        st.now_floor = Some(4);
        assert_eq!(st.resume_revision(), 5);
        st.deliver(sse(
            "7.0",
            "put",
            r#"{"revision":7,"seq":0,"kind":"put","key":"a"}"#,
        ));
        st.deliver(sse(
            "7.1",
            "delete",
            r#"{"revision":7,"seq":1,"kind":"delete"}"#,
        ));
        assert_eq!(st.resume_revision(), 7);
        // A resumed stream resends revision 7 from its start.
        st.deliver(sse(
            "7.0",
            "put",
            r#"{"revision":7,"seq":0,"kind":"put","key":"a"}"#,
        ));
        st.deliver(sse(
            "7.1",
            "delete",
            r#"{"revision":7,"seq":1,"kind":"delete"}"#,
        ));
        st.deliver(sse(
            "9.0",
            "lock_granted",
            r#"{"revision":9,"seq":0,"kind":"lock_granted","token":9}"#,
        ));
        let got: Vec<(u64, u64, EventKind)> = st
            .ready
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|e| (e.revision, e.seq, e.kind.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, 0, EventKind::Put),
                (7, 1, EventKind::Delete),
                (9, 0, EventKind::LockGranted)
            ]
        );
        Ok(())
    }

    #[test]
    fn compacted_ends_the_stream_with_its_oldest_revision() -> Result<(), Error> {
        let mut st = state()?;
        st.deliver(SseEvent {
            id: None,
            event: "compacted".into(),
            data: r#"{"oldest_revision": 42}"#.into(),
        });
        st.deliver(sse(
            "50.0",
            "put",
            r#"{"revision":50,"seq":0,"kind":"put"}"#,
        ));
        assert!(st.done);
        assert_eq!(st.ready.len(), 1);
        assert_eq!(
            st.ready.front(),
            Some(&Err(Error::Compacted {
                oldest_revision: 42
            }))
        );
        Ok(())
    }

    #[test]
    fn event_ids_parse() {
        assert_eq!(parse_event_id("12.3"), Some((12, 3)));
        assert_eq!(parse_event_id("12"), None);
        assert_eq!(parse_event_id("x.1"), None);
    }
}
