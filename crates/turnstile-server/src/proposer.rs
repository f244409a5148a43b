//! `Proposer`: the leader's group proposal. Client writes that arrive together go to Raft as
//! one batch of consecutive messages, which openraft's core takes as one (its receiver merges
//! consecutive `ClientWrite`s, up to `api_batch_capacity`); lock acquires and releases
//! among them share log entries (`Command::Many`), and so do key puts and deletes
//! (`Command::KeyWrites`).
//!
//! Why: openraft's core runs its engine commands (an append to the log store, a wake-up of
//! every replication task) after each message it takes from its API queue. With one message
//! per write, 64 concurrent writes cost 64 appends and 64 rounds of replication wake-ups; as
//! one message they cost one of each. What is paid per entry on every node (its encoding, its
//! sled record, its apply bookkeeping and answer) is paid once for the lock commands that
//! share an entry. The rule that keeps a fencing token the index of the entry that granted
//! it, and unique for an exclusive lock, is in `turnstile_core::many`: items name distinct
//! locks (or keys), and only acquires and releases (or key writes) qualify. Every other write
//! is its own entry.
//!
//! Batching is by arrival only, never by a timer: the proposer task takes one write, lets the
//! tasks that are ready at that moment run once (HTTP handlers about to queue their writes),
//! then takes whatever is queued (at most `BATCH_ENTRIES_MAX`), and sends it on at once.
//! A write that finds at most `DIRECT_OTHERS_IN_FLIGHT_MAX` other writes in flight skips the
//! queue and goes to Raft from its own task: a lone client, or a lock handoff racing the old
//! holder's next acquire, pays no extra hop.
//!
//! Answers go straight from Raft to the waiting handlers: each entry is proposed with a
//! `turnstile_raft::responder::Reply` that hands its outcome (one per item of a `Many` or
//! `KeyWrites` entry) to its callers where openraft completes it. No task of the proposer's
//! sits between an entry's apply and its handlers.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::errors::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot};
use turnstile_core::{many, Envelope, Item, Outcome, Response};
use turnstile_raft::responder::Reply;
use turnstile_raft::types::{ClientWriteResult, Raft, TypeConfig};

/// Writes in one message to Raft at most: bounds the append (and so the fdatasync) one
/// batch adds to the leader's log.
pub const BATCH_ENTRIES_MAX: usize = 256;
/// A write goes straight to Raft, not through the proposer task, when at most this many
/// other writes are in flight. A queued write costs a task hand-off to the proposer task (and,
/// when this was measured, a second one for its answer, now given by Raft directly); with one
/// write in flight besides it that cost more than batching saved (W2's handoff chain, where
/// the old holder's next acquire is usually in flight beside the release: 6-8% fewer
/// handoffs with 0).
pub const DIRECT_OTHERS_IN_FLIGHT_MAX: u64 = 1;
/// Writes waiting for the proposer task at most; a caller past it waits for room (its own
/// request timeout still bounds the wait).
pub const QUEUE_WRITES_MAX: usize = 4_096;

/// What a proposed write came to: the applied response, or Raft's reason it was not.
pub type WriteOutcome = Result<Response, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>;

/// Where batches go: Raft in a node, a scripted stand-in in the unit tests.
pub trait Sink: Send + Sync + 'static {
    /// Appends the entries as consecutive entries, in order, and gives each one's outcome to
    /// its `Answer`. An entry that was not appended is answered with the reason; an answer
    /// dropped ungiven leaves its callers' outcome unknown.
    fn propose(&self, entries: Vec<(Envelope, Answer)>) -> impl Future<Output = ()> + Send;
}

impl Sink for Raft {
    async fn propose(&self, entries: Vec<(Envelope, Answer)>) {
        let mut entries = entries.into_iter();
        while let Some((env, answer)) = entries.next() {
            let given = answer.clone();
            let reply = Reply::new(move |result: ClientWriteResult| {
                given.give(
                    result
                        .map(|written| written.data)
                        .map_err(RaftError::APIError),
                )
            });
            // Consecutive messages are merged into one append by openraft's core
            // (`api_batch_capacity`), as `client_write_many` would have sent them.
            if let Err(fatal) = self.client_write_ff(env, Some(reply)).await {
                // The core stopped before it took this message: neither it nor any later
                // entry of the batch was appended. The earlier ones may have been.
                let later = entries.map(|(_, answer)| answer);
                for not_appended in std::iter::once(answer).chain(later) {
                    not_appended.give(Err(RaftError::Fatal(fatal.clone())));
                }
                return;
            }
        }
    }
}

/// The callers of one entry, answered at most once: by Raft through the entry's `Reply`, or
/// by the sink when the entry was not appended. Dropped ungiven (Raft stopped first), its
/// callers' receivers close and their outcome is unknown.
#[derive(Clone)]
pub struct Answer(Arc<Mutex<Option<Replies>>>);

impl Answer {
    fn new(replies: Replies) -> Answer {
        Answer(Arc::new(Mutex::new(Some(replies))))
    }

    /// Answers the entry's callers with `outcome`, unless they were answered already.
    pub fn give(&self, outcome: WriteOutcome) {
        let replies = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(replies) = replies {
            replies.answer(outcome);
        }
    }
}

struct Pending {
    env: Envelope,
    reply: oneshot::Sender<WriteOutcome>,
}

/// The handle writes are proposed through; the task behind it stops when the last handle
/// is dropped.
pub struct Proposer<S: Sink = Raft> {
    sink: Arc<S>,
    queue: mpsc::Sender<Pending>,
    counts: Arc<Counts>,
}

/// Messages and writes the proposer sent to Raft since the node started (`/v1/cluster`
/// `proposer`): their ratio is the mean batch.
#[derive(Debug, Default)]
struct Counts {
    batches: AtomicU64,
    writes: AtomicU64,
    /// Log entries those writes went out as: fewer than the writes when several
    /// commands shared a `Command::Many` or `Command::KeyWrites` entry.
    entries: AtomicU64,
    /// Writes proposed or queued and not yet answered.
    in_flight: AtomicU64,
}

impl Counts {
    /// One message to Raft carrying `writes` writes.
    fn record_batch(&self, writes: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(writes as u64, Ordering::Relaxed);
    }
}

/// What the proposer sent to Raft since the node started: `writes / batches` is the mean
/// message, `writes / entries` the mean number of writes per log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProposerCounts {
    pub batches: u64,
    pub writes: u64,
    pub entries: u64,
}

/// One write in flight while it lives.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    /// Counts a write in; returns the guard and how many others were in flight.
    fn enter(count: &'a AtomicU64) -> (InFlight<'a>, u64) {
        let others = count.fetch_add(1, Ordering::AcqRel);
        (InFlight(count), others)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a write has no outcome to report.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// Nothing was proposed: the proposer task had stopped (the node is shutting down).
    #[error("the proposer has stopped (the node is shutting down)")]
    Stopped,
    /// The write was queued, so it may have been proposed, but its answer was lost.
    #[error("the write was queued but its outcome was lost (the node is shutting down)")]
    Unanswered,
}

impl<S: Sink> Proposer<S> {
    /// Starts the proposer task for `sink` on the current tokio runtime.
    pub fn start(sink: S) -> Proposer<S> {
        let (queue, rx) = mpsc::channel(QUEUE_WRITES_MAX);
        let counts = Arc::new(Counts::default());
        let sink = Arc::new(sink);
        tokio::spawn(run(sink.clone(), rx, counts.clone()));
        Proposer {
            sink,
            queue,
            counts,
        }
    }

    /// Batches, writes and entries sent to Raft so far.
    pub fn counts(&self) -> ProposerCounts {
        ProposerCounts {
            batches: self.counts.batches.load(Ordering::Relaxed),
            writes: self.counts.writes.load(Ordering::Relaxed),
            entries: self.counts.entries.load(Ordering::Relaxed),
        }
    }

    /// Proposes `env` and waits for it to apply. Dropping the future abandons only the
    /// wait: a write already queued is still proposed (its outcome is then unknown to the
    /// caller, as with any timed-out write).
    pub async fn write(&self, env: Envelope) -> Result<WriteOutcome, ProposeError> {
        let (_in_flight, others) = InFlight::enter(&self.counts.in_flight);
        if others <= DIRECT_OTHERS_IN_FLIGHT_MAX {
            return self.write_alone(env).await;
        }
        let (reply, rx) = oneshot::channel();
        self.queue
            .send(Pending { env, reply })
            .await
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Unanswered)
    }

    /// A batch of one, sent from the caller's task.
    async fn write_alone(&self, env: Envelope) -> Result<WriteOutcome, ProposeError> {
        self.counts.record_batch(1);
        self.counts.entries.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.sink
            .propose(vec![(env, Answer::new(Replies::One(reply)))])
            .await;
        rx.await.map_err(|_| ProposeError::Unanswered)
    }
}

impl<S: Sink> Clone for Proposer<S> {
    fn clone(&self) -> Self {
        Proposer {
            sink: self.sink.clone(),
            queue: self.queue.clone(),
            counts: self.counts.clone(),
        }
    }
}

async fn run<S: Sink>(sink: Arc<S>, mut rx: mpsc::Receiver<Pending>, counts: Arc<Counts>) {
    let mut batch = Vec::with_capacity(BATCH_ENTRIES_MAX);
    while rx.recv_many(&mut batch, BATCH_ENTRIES_MAX).await > 0 {
        // Let every task that is ready now run first (HTTP handlers about to queue their
        // writes), then take what they queued too: a batch gathers what is ready, not only
        // what had been queued when this task woke. No timer: an idle node proposes at once.
        tokio::task::yield_now().await;
        while batch.len() < BATCH_ENTRIES_MAX {
            match rx.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        counts.record_batch(batch.len());
        let (envs, replies) = entries(batch.drain(..));
        counts
            .entries
            .fetch_add(envs.len() as u64, Ordering::Relaxed);
        // Returns once Raft has the entries; their answers come as they apply, so the next
        // batch is proposed meanwhile.
        let answers = replies.into_iter().map(Answer::new);
        sink.propose(envs.into_iter().zip(answers).collect()).await;
    }
}

/// Who waits for one entry's outcome: the caller of a plain entry, or one caller per item of a
/// `Command::Many` or `Command::KeyWrites` entry.
enum Replies {
    One(oneshot::Sender<WriteOutcome>),
    Many(Vec<oneshot::Sender<WriteOutcome>>),
}

impl Replies {
    /// Answers the callers of one entry. An entry answered with something other than one
    /// response per item is a bug here or in apply: its callers are dropped unanswered (their
    /// outcome is unknown to them) rather than told something made up.
    fn answer(self, outcome: WriteOutcome) {
        match self {
            Replies::One(reply) => {
                let _ = reply.send(outcome);
            }
            Replies::Many(replies) => match outcome {
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
                Ok(Response {
                    outcome: Ok(Outcome::Many { responses }),
                    ..
                }) if responses.len() == replies.len() => {
                    for (reply, response) in replies.into_iter().zip(responses) {
                        let _ = reply.send(Ok(response));
                    }
                }
                Ok(other) => {
                    tracing::error!(
                        items = replies.len(),
                        response = ?other,
                        "a many entry was not answered item by item; its writes' outcomes are unknown"
                    );
                }
            },
        }
    }
}

/// The entries for the writes taken from the queue, in their order: consecutive writes that
/// `turnstile_core::many` admits together share one `Command::Many` or `Command::KeyWrites`
/// entry, every other write is an entry of its own.
fn entries(pending: impl Iterator<Item = Pending>) -> (Vec<Envelope>, Vec<Replies>) {
    let mut envs = Vec::new();
    let mut replies = Vec::new();
    let mut open = Open::default();
    for Pending { env, reply } in pending {
        let now_ms = env.now_ms;
        let item = Item {
            request_id: env.request_id,
            command: env.command,
        };
        let Err(item) = open.batch.try_add(item) else {
            open.add(now_ms, reply);
            continue;
        };
        open.close(&mut envs, &mut replies);
        match open.batch.try_add(*item) {
            Ok(()) => open.add(now_ms, reply),
            Err(item) => {
                envs.push(envelope(now_ms, *item));
                replies.push(Replies::One(reply));
            }
        }
    }
    open.close(&mut envs, &mut replies);
    (envs, replies)
}

/// A plain entry of one write.
fn envelope(now_ms: u64, item: Item) -> Envelope {
    Envelope {
        now_ms,
        request_id: item.request_id,
        command: item.command,
    }
}

/// The `Command::Many` or `Command::KeyWrites` entry being gathered.
#[derive(Default)]
struct Open {
    batch: many::Batch,
    replies: Vec<oneshot::Sender<WriteOutcome>>,
    /// The newest leader stamp of its writes (they are all from this leader's clock).
    now_ms: u64,
}

impl Open {
    fn add(&mut self, now_ms: u64, reply: oneshot::Sender<WriteOutcome>) {
        self.now_ms = self.now_ms.max(now_ms);
        self.replies.push(reply);
    }

    /// Ends the entry: one item goes as a plain entry, several as `Command::Many` or
    /// `Command::KeyWrites`.
    fn close(&mut self, envs: &mut Vec<Envelope>, replies: &mut Vec<Replies>) {
        let Open {
            batch,
            replies: senders,
            now_ms,
        } = std::mem::take(self);
        let Some((kind, mut items)) = batch.into_entry() else {
            return;
        };
        if items.len() == 1 {
            envs.push(envelope(now_ms, items.remove(0)));
            replies.extend(senders.into_iter().map(Replies::One));
        } else {
            envs.push(Envelope {
                now_ms,
                request_id: None,
                command: kind.command(items),
            });
            replies.push(Replies::Many(senders));
        }
    }
}

#[cfg(test)]
#[path = "proposer_test.rs"]
mod tests;
