//! `GET /v1/watch`: server-sent events for a key or prefix (keys and lock names), read from
//! the replicated watch history, so every node emits the same stream with the same ids.
//!
//! The SSE `id` is `revision.seq`. `Last-Event-ID` resumes strictly after that event;
//! `from_revision=R` starts at the first event of revision R; `from_revision=0` (or none)
//! means "from now". A position older than the retained history gets one `compacted` event
//! with the oldest available revision, and the stream ends.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::stream::{self, Stream};
use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use turnstile_core::{Event, State as SmState};
use utoipa::{IntoParams, ToSchema};

use crate::api::openapi::ErrorAnswer;
use crate::api::validate;
use crate::app::App;
use crate::auth::{Caller, NodeQuota, NodeUsage, QuotaSlot};
use crate::error::ApiError;

/// Most watch streams one node serves at once.
pub const WATCHERS_PER_NODE_MAX: usize = 10_000;
/// Most events sent per wakeup, so one stream cannot hold the state lock long.
const EVENTS_PER_BATCH_MAX: usize = 256;

static WATCHERS: AtomicUsize = AtomicUsize::new(0);

/// `?key=` or `?prefix=` (not both; neither: every event), and `from_revision=`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WatchQuery {
    /// Only events of this key or lock name.
    key: Option<String>,
    /// Only events of keys and lock names starting with this.
    prefix: Option<String>,
    /// Start at the first event of this revision; 0 or absent: from now.
    from_revision: Option<u64>,
}

enum Filter {
    All,
    Key(String),
    Prefix(String),
}

impl Filter {
    fn matches(&self, e: &Event) -> bool {
        match (self, e.subject()) {
            (Filter::All, _) => true,
            (Filter::Key(k), Some(s)) => s == k,
            (Filter::Prefix(p), Some(s)) => s.starts_with(p.as_str()),
            (_, None) => false,
        }
    }
}

/// The JSON `data` of one watch event; its SSE `event` name is `kind`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WatchEvent {
    pub revision: u64,
    /// Its place within the revision.
    pub seq: u32,
    #[serde(flatten)]
    pub body: EventBody,
}

/// What happened, by `kind`. A `lease_id` or `token` of another principal's lease is null.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    Put {
        key: String,
        value: String,
        lease_id: Option<u64>,
    },
    Delete {
        key: String,
    },
    LockGranted {
        lock: String,
        lease_id: Option<u64>,
        token: Option<u64>,
        mode: String,
    },
    LockReleased {
        lock: String,
        lease_id: Option<u64>,
        token: Option<u64>,
        cause: String,
    },
    LeaseExpired {
        lease_id: u64,
    },
    ElectionLeader {
        election: String,
        lease_id: Option<u64>,
        token: Option<u64>,
        value: String,
    },
    ElectionResigned {
        election: String,
        lease_id: Option<u64>,
        token: Option<u64>,
        cause: String,
    },
}

/// The `data` of the `compacted` event that ends a stream starting before the history.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactedEvent {
    pub oldest_revision: u64,
}

/// One server-sent event as the stream frames it: `event` is the `kind` of the
/// [`WatchEvent`] JSON in `data` (or `compacted`, with a [`CompactedEvent`]), and `id`,
/// absent on `compacted`, is `<revision>.<seq>` (what `Last-Event-ID` resumes after).
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // Documents the framing axum writes; never built.
pub struct SseFrame {
    event: String,
    /// A `WatchEvent` (or `CompactedEvent`) as JSON.
    #[schema(content_media_type = "application/json")]
    data: String,
    #[schema(pattern = "^[0-9]+\\.[0-9]+$")]
    id: Option<String>,
}

/// The typed body of one event.
pub fn watch_event(revision: u64, seq: u32, e: &Event) -> WatchEvent {
    let body = match e.clone() {
        Event::Put {
            key,
            value,
            lease_id,
        } => EventBody::Put {
            key,
            value,
            lease_id,
        },
        Event::Delete { key } => EventBody::Delete { key },
        Event::LockGranted {
            name,
            lease_id,
            token,
            mode,
        } => EventBody::LockGranted {
            lock: name,
            lease_id: shown(lease_id),
            token: shown(token),
            mode: mode.as_str().into(),
        },
        Event::LockReleased {
            name,
            lease_id,
            token,
            cause,
        } => EventBody::LockReleased {
            lock: name,
            lease_id: shown(lease_id),
            token: shown(token),
            cause: cause.as_str().into(),
        },
        Event::LeaseExpired { lease_id } => EventBody::LeaseExpired { lease_id },
        Event::ElectionLeader {
            name,
            lease_id,
            token,
            value,
        } => EventBody::ElectionLeader {
            election: name,
            lease_id: shown(lease_id),
            token: shown(token),
            value,
        },
        Event::ElectionResigned {
            name,
            lease_id,
            token,
            cause,
        } => EventBody::ElectionResigned {
            election: name,
            lease_id: shown(lease_id),
            token: shown(token),
            cause: cause.as_str().into(),
        },
    };
    WatchEvent {
        revision,
        seq,
        body,
    }
}

/// A lease id or token as JSON: 0 is what an event shows in place of another tenant's
/// (`State::event_for`), sent as null.
fn shown(id: u64) -> Option<u64> {
    (id > 0).then_some(id)
}

fn parse_last_event_id(headers: &HeaderMap) -> Result<Option<(u64, u32)>, ApiError> {
    let Some(raw) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest("Last-Event-ID must be <revision>.<seq>".into());
    let s = raw.to_str().map_err(|_| bad())?;
    let (r, q) = s.split_once('.').ok_or_else(bad)?;
    Ok(Some((
        r.parse().map_err(|_| bad())?,
        q.parse().map_err(|_| bad())?,
    )))
}

struct Stream_ {
    app: Arc<App>,
    filter: Filter,
    after: (u64, u32),
    applied: watch::Receiver<u64>,
    pending: std::collections::VecDeque<SseEvent>,
    done: bool,
    /// The authenticated principal: events are filtered and redacted for it.
    principal: Option<String>,
    _slot: WatcherSlot,
    _quota: QuotaSlot,
}

struct WatcherSlot;

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        WATCHERS.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Stream_ {
    /// Moves retained events after our position into `pending`. Returns true if the batch
    /// was cut at its bound (more events are already waiting).
    fn fill(&mut self) -> bool {
        let app = self.app.clone();
        let inner = app.sm.read();
        let state: &SmState = &inner.state;
        let events = match state.events_after(self.after) {
            Ok(events) => events,
            Err(oldest_revision) => {
                let data = CompactedEvent { oldest_revision };
                let sse = SseEvent::default().event("compacted").json_data(data);
                self.pending.push_back(sse.unwrap_or_default());
                self.done = true;
                return false;
            }
        };
        let mut seen = 0;
        for (&(revision, seq), e) in events.take(EVENTS_PER_BATCH_MAX) {
            seen += 1;
            self.after = (revision, seq);
            if !self.filter.matches(e) {
                continue;
            }
            let seen_as = match &self.principal {
                Some(p) => state.event_for(p, e),
                None => Some(e.clone()),
            };
            if let Some(e) = seen_as {
                let e = &e;
                let sse = SseEvent::default()
                    .id(format!("{revision}.{seq}"))
                    .event(e.kind())
                    .json_data(watch_event(revision, seq, e));
                // Serializing plain strings and numbers cannot fail.
                self.pending.push_back(sse.unwrap_or_default());
            }
        }
        seen == EVENTS_PER_BATCH_MAX
    }
}

/// True if this node follows a leader it accepted an append from within `span`, or leads
/// with a quorum heard from within `span`. A cut-off leader keeps its role in openraft 0.10
/// but stops hearing acknowledgements; a cut-off follower keeps its leader's id (PreVote: it
/// never campaigns) but stops hearing from it.
fn hears_a_leader(app: &App, span: Duration) -> bool {
    let metrics = app.raft.metrics();
    let m = metrics.borrow_watched();
    match m.current_leader {
        None => false,
        Some(id) if id != app.node_id() => app.heard_leader_within(span),
        // `millis_since_quorum_ack` is deprecated in favour of an Instant-typed field; the
        // millisecond view is all this check needs.
        #[allow(deprecated)]
        Some(_) => m
            .millis_since_quorum_ack
            .is_none_or(|ms| u128::from(ms) < span.as_millis()),
    }
}

/// Resolves once this node has heard no leader for `span` without a break.
pub(crate) async fn leaderless_for(app: &App, span: Duration) {
    let step = Duration::from_millis(app.cfg.heartbeat_ms.max(50));
    let mut since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(step).await;
        if hears_a_leader(app, span) {
            since = None;
            continue;
        }
        let start = *since.get_or_insert_with(tokio::time::Instant::now);
        if start.elapsed() >= span {
            return;
        }
    }
}

/// Server-sent events of keys, locks, leases and elections, from the replicated history.
#[utoipa::path(get, path = "/v1/watch", tag = "watch", params(WatchQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume strictly after this `<revision>.<seq>`")),
    responses((status = 200, description = "The event stream; `compacted` ends it", content_type = "text/event-stream", body = SseFrame),
        (status = 429, description = "`limit_reached` (watch streams per node), `quota_exceeded`", body = ErrorAnswer)))]
pub async fn watch(
    State(app): State<Arc<App>>,
    caller: Caller,
    headers: HeaderMap,
    query: Result<Query<WatchQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(format!("invalid query: {e}")))?;
    let filter = match (q.key, q.prefix) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest("give key or prefix, not both".into()))
        }
        (Some(k), None) => {
            validate::key(&k)?;
            Filter::Key(k)
        }
        (None, Some(p)) if p.is_empty() => Filter::All,
        (None, Some(p)) => {
            validate::key(&p)?;
            Filter::Prefix(p)
        }
        (None, None) => Filter::All,
    };
    let after = match (parse_last_event_id(&headers)?, q.from_revision) {
        (Some(pos), _) => pos,
        (None, Some(r)) if r > 0 => SmState::position_before(r),
        (None, _) => (app.sm.read().state.applied_index, u32::MAX),
    };
    let quota = NodeUsage::take(&app, &caller, NodeQuota::Watches)?;
    if WATCHERS.fetch_add(1, Ordering::Relaxed) >= WATCHERS_PER_NODE_MAX {
        WATCHERS.fetch_sub(1, Ordering::Relaxed);
        return Err(ApiError::Apply(turnstile_core::ApplyError::LimitReached {
            limit: "watchers_per_node_max".into(),
        }));
    }
    let applied = app.waiters.applied();
    let st = Stream_ {
        app,
        filter,
        after,
        applied,
        pending: Default::default(),
        done: false,
        principal: caller.principal().map(str::to_string),
        _slot: WatcherSlot,
        _quota: quota,
    };
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            st.applied.borrow_and_update();
            let more = st.fill();
            if st.pending.is_empty() && !st.done && !more {
                let mut stopping = st.app.stopping.subscribe();
                tokio::select! {
                    changed = st.applied.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                    // A stopping node ends its streams so shutdown is not held up; clients
                    // resume elsewhere with Last-Event-ID.
                    _ = async { stopping.wait_for(|s| *s).await.map(|_| ()) } => return None,
                    // A node that has lost its leader (cut off from the majority) would only
                    // send keep-alives: end the stream so the client resumes on a node that
                    // still hears the cluster.
                    _ = leaderless_for(&st.app, Duration::from_millis(2 * st.app.cfg.election_timeout_ms_max)) => {
                        tracing::info!("ending a watch stream: no leader known");
                        return None;
                    }
                }
            }
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
