//! etcd's Watch service over Turnstile's replicated watch history (`turnstile_core::events`):
//! one bidirectional stream carries any number of watches (up to
//! [`WATCHES_PER_STREAM_MAX`]), each on a key, a range or a prefix, from now or from a
//! `start_revision`, with `prev_kv`, the `NOPUT`/`NODELETE` filters, `progress_notify`, cancel,
//! and progress requests. Only key events are etcd events: locks, leases and elections have
//! their own services.
//!
//! A put's create revision and version and every `prev_kv` come from the node's own record of
//! the key changes it applied (`turnstile_core::key_changes`). A watch that would start before
//! what this node holds (the history's bound, or the node's last start from a snapshot) gets
//! etcd's compacted answer, `compact_revision` = the oldest revision it may start at, and is
//! cancelled, as etcd does: the client lists again and watches from there. So is a watch whose
//! reader fell so far behind that the history dropped events it had not sent.
//!
//! A stream counts against the caller's `watches` quota and the node's
//! [`WATCH_STREAMS_PER_NODE_MAX`]. A node that hears no leader for two election timeouts ends
//! its streams with etcd's "no leader", so clients move to a node that still hears the cluster,
//! and a stopping node ends them so it is not held up; clients resume from their last revision.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};
use turnstile_core::auth::{Access, Kind};
use turnstile_core::key_changes::KeyChange;
use turnstile_core::{Event, KeyRecord, State};
use turnstile_etcd_proto::etcdserverpb::watch_create_request::FilterType;
use turnstile_etcd_proto::etcdserverpb::watch_request::RequestUnion;
use turnstile_etcd_proto::etcdserverpb::{
    watch_server::Watch, WatchCreateRequest, WatchRequest, WatchResponse,
};
use turnstile_etcd_proto::mvccpb::{self, event::EventType, KeyValue};

use crate::api::watch::leaderless_for;
use crate::app::App;
use crate::auth::{NodeQuota, NodeUsage};
use crate::etcd::common::{
    caller, header, header_in, judged_principal, signed, status, value_bytes, StreamSlot,
};
use crate::etcd::kv::bounds;
use crate::key_span::KeySpan;

/// Watches one stream may hold at once.
pub const WATCHES_PER_STREAM_MAX: usize = 1_000;
/// Watch streams one node serves at once (`Observe` streams count here too).
pub const WATCH_STREAMS_PER_NODE_MAX: usize = 10_000;
/// Events one response carries at most ...
const EVENTS_PER_RESPONSE_MAX: usize = 256;
/// ... and about this many bytes of keys and values (at least one event).
const RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Responses buffered per stream before its reader must catch up.
const STREAM_BUFFER: usize = 16;
/// A `progress_notify` watch with nothing to send hears the current revision this often
/// (etcd's default).
const PROGRESS_NOTIFY_INTERVAL_MS: u64 = 600_000;
/// etcd's `watch_id` for a progress answer that belongs to no one watch.
const NO_WATCH_ID: i64 = -1;

static WATCH_STREAMS: AtomicUsize = AtomicUsize::new(0);

/// The Watch service.
pub struct WatchService {
    pub app: Arc<App>,
}

/// One watch of a stream.
struct Watcher {
    span: KeySpan,
    /// The position of the last event looked at.
    after: (u64, u32),
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    /// Something was sent for it since the last progress tick.
    sent_since_tick: bool,
}

/// A stream's watches and who asked.
struct Watches {
    app: Arc<App>,
    principal: Option<String>,
    by_id: BTreeMap<i64, Watcher>,
    /// The id an automatic `watch_id` is looked for from (etcd counts from 0).
    next_id: i64,
}

#[tonic::async_trait]
impl Watch for WatchService {
    async fn watch(
        &self,
        req: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<BoxStream<WatchResponse>>, Status> {
        let caller = caller(&self.app, &req).await?;
        let node_slot = stream_slot()?;
        let quota_slot =
            NodeUsage::take(&self.app, &caller, NodeQuota::Watches).map_err(|e| status(&e))?;
        let incoming = req.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let watches = Watches {
            app: self.app.clone(),
            principal: judged_principal(&caller),
            by_id: BTreeMap::new(),
            next_id: 0,
        };
        tokio::spawn(async move {
            let _slots = (node_slot, quota_slot);
            if let Err(end) = watches.run(incoming, &tx).await {
                let _ = tx.send(Err(end)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

type Out = mpsc::Sender<Result<WatchResponse, Status>>;

/// Why a stream stopped early: the client left (`Ok`), or a status to end it with.
type Ended = Result<(), Status>;

impl Watches {
    /// Serves the stream until the client closes it, the node stops, or it hears no leader.
    async fn run(mut self, mut incoming: Streaming<WatchRequest>, tx: &Out) -> Ended {
        let mut wakeups = Wakeups::new(&self.app);
        let mut progress =
            tokio::time::interval(Duration::from_millis(PROGRESS_NOTIFY_INTERVAL_MS));
        progress.tick().await;
        loop {
            wakeups.seen();
            let (responses, more) = self.fill();
            for r in responses {
                send(tx, r).await?;
            }
            if more {
                continue;
            }
            tokio::select! {
                message = incoming.next() => match message {
                    Some(Ok(m)) => {
                        for r in self.handle(m) {
                            send(tx, r).await?;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "etcd watch stream ended");
                        return Ok(());
                    }
                    None => return Ok(()),
                },
                woken = wakeups.applied() => woken?,
                _ = progress.tick() => {
                    for r in self.progress_notices() {
                        send(tx, r).await?;
                    }
                }
            }
        }
    }

    /// Answers one request of the client.
    fn handle(&mut self, m: WatchRequest) -> Vec<WatchResponse> {
        match m.request_union {
            Some(RequestUnion::CreateRequest(c)) => vec![self.create(c)],
            Some(RequestUnion::CancelRequest(c)) => match self.by_id.remove(&c.watch_id) {
                Some(_) => vec![WatchResponse {
                    header: self.header(),
                    watch_id: c.watch_id,
                    canceled: true,
                    ..Default::default()
                }],
                // etcd answers nothing for an id it does not know.
                None => Vec::new(),
            },
            Some(RequestUnion::ProgressRequest(_)) => vec![WatchResponse {
                header: self.header(),
                watch_id: NO_WATCH_ID,
                ..Default::default()
            }],
            None => Vec::new(),
        }
    }

    fn header(&self) -> Option<turnstile_etcd_proto::etcdserverpb::ResponseHeader> {
        let revision = self.app.sm.read().state.applied_index;
        header(&self.app, revision)
    }

    /// Adds a watch, or answers why not (etcd: `created` and `canceled`, with a reason).
    fn create(&mut self, c: WatchCreateRequest) -> WatchResponse {
        let refused = |watch_id: i64, reason: String, header| WatchResponse {
            header,
            watch_id,
            created: true,
            canceled: true,
            cancel_reason: reason,
            ..Default::default()
        };
        let header = self.header();
        let watcher = match self.watcher(&c) {
            Ok(w) => w,
            Err(reason) => return refused(c.watch_id, reason, header),
        };
        if self.by_id.len() >= WATCHES_PER_STREAM_MAX {
            let reason = format!("a stream holds at most {WATCHES_PER_STREAM_MAX} watches");
            return refused(c.watch_id, reason, header);
        }
        let id = if c.watch_id != 0 {
            if c.watch_id < 0 {
                return refused(c.watch_id, "a watch_id is not negative".into(), header);
            }
            if self.by_id.contains_key(&c.watch_id) {
                let reason = "mvcc: duplicate watch ID provided on the WatchStream".into();
                return refused(c.watch_id, reason, header);
            }
            c.watch_id
        } else {
            while self.by_id.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        self.next_id = self.next_id.max(id.saturating_add(1));
        self.by_id.insert(id, watcher);
        WatchResponse {
            header,
            watch_id: id,
            created: true,
            ..Default::default()
        }
    }

    /// The watch `c` asks for, if it may have it.
    fn watcher(&self, c: &WatchCreateRequest) -> Result<Watcher, String> {
        let (start, end) = bounds(&c.key, &c.range_end).map_err(|s| s.message().to_string())?;
        let span = KeySpan::bounds(start, end);
        let inner = self.app.sm.read();
        let state = &inner.state;
        if let Some(p) = &self.principal {
            if !state
                .auth
                .allowed(p, Kind::Key, span.guard_prefix(), Access::Read)
            {
                return Err("etcdserver: permission denied".into());
            }
        }
        let after = match u64::try_from(c.start_revision) {
            Ok(r) if r > 0 => State::position_before(r),
            Ok(_) => (state.applied_index, u32::MAX),
            Err(_) => return Err("start_revision is negative".into()),
        };
        let filtered = |f: FilterType| c.filters.contains(&(f as i32));
        Ok(Watcher {
            span,
            after,
            prev_kv: c.prev_kv,
            no_put: filtered(FilterType::Noput),
            no_delete: filtered(FilterType::Nodelete),
            progress_notify: c.progress_notify,
            sent_since_tick: false,
        })
    }

    /// The events every watch has not seen yet, as responses, under one short read of the
    /// state. `true`: some watch was cut at a bound and has more waiting.
    fn fill(&mut self) -> (Vec<WatchResponse>, bool) {
        let app = self.app.clone();
        let inner = app.sm.read();
        let state = &inner.state;
        let mut out = Vec::new();
        let mut more = false;
        let mut compacted = Vec::new();
        for (&id, w) in self.by_id.iter_mut() {
            match events_for(state, self.principal.as_deref(), w) {
                Fill::Events(events, cut) => {
                    more |= cut;
                    if !events.is_empty() {
                        w.sent_since_tick = true;
                        out.push(WatchResponse {
                            header: header_in(&app, state, state.applied_index),
                            watch_id: id,
                            events,
                            ..Default::default()
                        });
                    }
                }
                Fill::Compacted(oldest) => {
                    compacted.push(id);
                    out.push(WatchResponse {
                        header: header_in(&app, state, state.applied_index),
                        watch_id: id,
                        canceled: true,
                        compact_revision: signed(oldest),
                        cancel_reason: "etcdserver: mvcc: required revision has been compacted"
                            .into(),
                        ..Default::default()
                    });
                }
            }
        }
        for id in compacted {
            self.by_id.remove(&id);
        }
        (out, more)
    }

    /// An empty answer with the current revision for each `progress_notify` watch that had
    /// nothing sent since the last tick.
    fn progress_notices(&mut self) -> Vec<WatchResponse> {
        let header = self.header();
        let mut out = Vec::new();
        for (&id, w) in self.by_id.iter_mut() {
            if w.progress_notify && !w.sent_since_tick {
                out.push(WatchResponse {
                    header,
                    watch_id: id,
                    ..Default::default()
                });
            }
            w.sent_since_tick = false;
        }
        out
    }
}

/// What wakes a stream that reads the watch history (a watch, an `Observe`): a newly applied
/// entry; or why it must end: the node is stopping, or has heard no leader for two election
/// timeouts (its stream could only fall silent; the client moves to another node).
pub(crate) struct Wakeups {
    applied: tokio::sync::watch::Receiver<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
    leaderless: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Wakeups {
    pub(crate) fn new(app: &Arc<App>) -> Wakeups {
        let span = Duration::from_millis(2 * app.cfg.election_timeout_ms_max);
        let app_ = app.clone();
        Wakeups {
            applied: app.waiters.applied(),
            stopping: app.stopping.subscribe(),
            leaderless: Box::pin(async move { leaderless_for(&app_, span).await }),
        }
    }

    /// Marks every entry applied so far as seen.
    pub(crate) fn seen(&mut self) {
        self.applied.borrow_and_update();
    }

    /// Resolves once an entry is applied after the last [`Wakeups::seen`]; an error to end the
    /// stream with. Cancel-safe.
    pub(crate) async fn applied(&mut self) -> Result<(), Status> {
        tokio::select! {
            changed = self.applied.changed() => {
                changed.map_err(|_| Status::unavailable("etcdserver: server stopped"))
            }
            _ = self.stopping.wait_for(|s| *s) => Err(Status::unavailable("etcdserver: server stopped")),
            () = &mut self.leaderless => {
                tracing::info!("ending an etcd stream: no leader known");
                Err(Status::unavailable("etcdserver: no leader"))
            }
        }
    }
}

/// One of the node's watch streams (a `Watch` or an `Observe`).
pub(crate) fn stream_slot() -> Result<StreamSlot, Status> {
    StreamSlot::take(&WATCH_STREAMS, WATCH_STREAMS_PER_NODE_MAX, "watch")
}

async fn send(tx: &Out, r: WatchResponse) -> Ended {
    // The client went away: end quietly.
    tx.send(Ok(r)).await.map_err(|_| Status::cancelled(""))
}

/// What one watch gets from the history now.
enum Fill {
    /// Its next events, and whether a bound cut them.
    Events(Vec<mvccpb::Event>, bool),
    /// It wants events this node no longer holds (or never held): the oldest revision it
    /// could start at.
    Compacted(u64),
}

/// The oldest revision a watch may start at on this node.
fn oldest_start(state: &State) -> u64 {
    state
        .oldest_event_revision()
        .max(state.key_changes.from_revision())
}

fn events_for(state: &State, principal: Option<&str>, w: &mut Watcher) -> Fill {
    if w.after.0.saturating_add(1) < state.key_changes.from_revision() {
        return Fill::Compacted(oldest_start(state));
    }
    let Ok(history) = state.events_after(w.after) else {
        return Fill::Compacted(oldest_start(state));
    };
    let mut events = Vec::new();
    let mut bytes = 0;
    for (looked, (&position, e)) in history.enumerate() {
        if events.len() >= EVENTS_PER_RESPONSE_MAX || bytes >= RESPONSE_BYTES_MAX {
            return Fill::Events(events, true);
        }
        // Bounds the work of one pass when few events match.
        if looked >= 16 * EVENTS_PER_RESPONSE_MAX {
            return Fill::Events(events, true);
        }
        let (key, kind) = match e {
            Event::Put { key, .. } if !w.no_put => (key, EventType::Put),
            Event::Delete { key } if !w.no_delete => (key, EventType::Delete),
            _ => {
                w.after = position;
                continue;
            }
        };
        if !w.span.holds(key) {
            w.after = position;
            continue;
        }
        let Some(change) = state.key_changes.get(position) else {
            // Every key event this node applied has its change: one without is older than
            // what the node holds.
            tracing::warn!(?position, "etcd watch: a key event without its change");
            return Fill::Compacted(oldest_start(state));
        };
        w.after = position;
        let seen = match principal {
            Some(p) => state.event_for(p, e),
            None => Some(e.clone()),
        };
        let Some(seen) = seen else { continue };
        let owned = |id: Option<u64>| match principal {
            Some(p) => id.filter(|id| state.auth.owns_lease(p, *id)),
            None => id,
        };
        let event = etcd_event(position.0, kind, seen, change, w.prev_kv, owned);
        bytes += event_bytes(&event);
        events.push(event);
    }
    Fill::Events(events, false)
}

/// An event as etcd's: a put's key with its create revision and version after it, a delete's
/// key with the delete's revision alone, and the key before when `prev_kv`.
fn etcd_event(
    revision: u64,
    kind: EventType,
    seen: Event,
    change: &KeyChange,
    prev_kv: bool,
    owned: impl Fn(Option<u64>) -> Option<u64>,
) -> mvccpb::Event {
    let kv = match seen {
        Event::Put {
            key,
            value,
            lease_id,
        } => KeyValue {
            key: key.into_bytes(),
            create_revision: signed(change.create_revision),
            mod_revision: signed(revision),
            version: signed(change.version),
            value: value_bytes(value),
            lease: lease_id.map_or(0, signed),
        },
        Event::Delete { key } => KeyValue {
            key: key.into_bytes(),
            mod_revision: signed(revision),
            ..Default::default()
        },
        // Only key events reach here (`events_for`).
        _ => KeyValue::default(),
    };
    let prev = |p: &KeyRecord| KeyValue {
        key: kv.key.clone(),
        create_revision: signed(p.create_revision),
        mod_revision: signed(p.mod_revision),
        version: signed(p.version),
        value: value_bytes(p.value.clone()),
        lease: owned(p.lease_id).map_or(0, signed),
    };
    let prev_kv = if prev_kv {
        change.prev.as_deref().map(prev)
    } else {
        None
    };
    mvccpb::Event {
        r#type: kind as i32,
        kv: Some(kv),
        prev_kv,
    }
}

fn event_bytes(e: &mvccpb::Event) -> usize {
    let kv_bytes = |kv: &Option<KeyValue>| kv.as_ref().map_or(0, |k| k.key.len() + k.value.len());
    64 + kv_bytes(&e.kv) + kv_bytes(&e.prev_kv)
}

#[cfg(test)]
#[path = "watch_test.rs"]
mod watch_test;
