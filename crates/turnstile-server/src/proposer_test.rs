//! The proposer against a scripted sink: writes queued together leave as one batch, each
//! caller gets its own entry's outcome, and a sink that fails or stops early is reported as
//! failed (nothing appended) or unknown (maybe appended), never as another caller's answer.

use std::sync::Mutex;

use openraft::errors::Fatal;

use futures::future::join_all;
use turnstile_core::{ApplyError, Command, Outcome};

use super::*;

/// What the scripted sink does with a batch.
#[derive(Clone, Copy)]
enum Script {
    /// Answers every entry: revision = the write's number, taken from its request id.
    Apply,
    /// Refuses the batch: nothing appended.
    Refuse,
    /// Answers the first `n` entries, then ends the stream (Raft stopped meanwhile).
    StopAfter(usize),
}

struct ScriptedSink {
    script: Script,
    batches: Arc<Mutex<Vec<usize>>>,
    entries: Arc<Mutex<Vec<Vec<usize>>>>,
}

impl Sink for ScriptedSink {
    async fn propose(&self, entries: Vec<(Envelope, Answer)>) {
        let (envs, answers): (Vec<Envelope>, Vec<Answer>) = entries.into_iter().unzip();
        self.batches
            .lock()
            .expect("no test thread panics holding the lock")
            .push(envs.len());
        self.entries
            .lock()
            .expect("no test thread panics holding the lock")
            .push(shapes(&envs));
        let answered = match self.script {
            // Refused after a moment, as Raft would: the writes sent alone stay in flight
            // meanwhile, so the later ones queue.
            Script::Refuse => {
                tokio::task::yield_now().await;
                for answer in answers {
                    answer.give(Err(RaftError::Fatal(Fatal::Stopped)));
                }
                return;
            }
            Script::Apply => envs.len(),
            Script::StopAfter(n) => n,
        };
        let outcomes: Vec<WriteOutcome> = envs.iter().take(answered).map(applied).collect();
        give_later(outcomes, answers)
    }
}

/// Gives `outcomes` to the first answers in order, from a task of their own after a yield, as
/// entries are not applied the moment they are proposed. Answers past the outcomes are
/// dropped ungiven (Raft stopped meanwhile).
fn give_later(outcomes: Vec<WriteOutcome>, answers: Vec<Answer>) {
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            answer.give(outcome);
        }
    });
}

/// Answers an entry as apply would, with each write's number (its request id) as revision: a
/// plain entry with one response, a `Command::Many` or `Command::KeyWrites` entry with one
/// per item.
fn applied(env: &Envelope) -> WriteOutcome {
    let response = |request_id: &Option<String>, outcome| Response {
        revision: request_id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .expect("every test write carries its number as request id"),
        term: 1,
        replayed: false,
        outcome,
    };
    match &env.command {
        Command::Many { items } | Command::KeyWrites { items } => {
            assert!(items.len() >= 2, "a many entry of {} items", items.len());
            let responses = items
                .iter()
                .map(|item| response(&item.request_id, Ok(Outcome::Applied)))
                .collect();
            Ok(Response {
                revision: 0,
                term: 1,
                replayed: false,
                outcome: Ok(Outcome::Many { responses }),
            })
        }
        _ => Ok(response(&env.request_id, Ok(Outcome::Applied))),
    }
}

/// Writes per entry of each batch: 1 for a plain entry, the items of a `Command::Many` or
/// `Command::KeyWrites`.
fn shapes(envs: &[Envelope]) -> Vec<usize> {
    envs.iter()
        .map(|env| match &env.command {
            Command::Many { items } | Command::KeyWrites { items } => items.len(),
            _ => 1,
        })
        .collect()
}

fn write(number: u64) -> Envelope {
    Envelope {
        now_ms: 0,
        request_id: Some(number.to_string()),
        command: Command::Tick,
    }
}

fn start(script: Script) -> (Proposer<ScriptedSink>, Arc<Mutex<Vec<usize>>>) {
    let (proposer, batches, _) = start_recording(script);
    (proposer, batches)
}

/// `start`, also recording the shape of each batch's entries (`shapes`).
#[allow(clippy::type_complexity)]
fn start_recording(
    script: Script,
) -> (
    Proposer<ScriptedSink>,
    Arc<Mutex<Vec<usize>>>,
    Arc<Mutex<Vec<Vec<usize>>>>,
) {
    let batches = Arc::new(Mutex::new(Vec::new()));
    let entries = Arc::new(Mutex::new(Vec::new()));
    let sink = ScriptedSink {
        script,
        batches: batches.clone(),
        entries: entries.clone(),
    };
    (Proposer::start(sink), batches, entries)
}

/// Write `number` as a lock acquire of `name`.
fn lock_write(number: u64, name: &str) -> Envelope {
    Envelope {
        now_ms: number,
        request_id: Some(number.to_string()),
        command: Command::LockAcquire {
            name: name.into(),
            lease_id: 1,
        },
    }
}

/// Write `number` as a put of `key`.
fn key_write(number: u64, key: &str) -> Envelope {
    Envelope {
        now_ms: number,
        request_id: Some(number.to_string()),
        command: Command::KvPut {
            key: key.into(),
            value: "v".into(),
            lease_id: None,
            condition: None,
            fence: None,
        },
    }
}

/// Sends `envs` (numbered from 1) as `write_all` does.
async fn send_all<S: Sink>(
    proposer: &Proposer<S>,
    envs: Vec<Envelope>,
) -> Vec<Result<WriteOutcome, ProposeError>> {
    tokio::task::unconstrained(join_all(envs.into_iter().map(|env| proposer.write(env)))).await
}

/// Sends writes `1..=n` before the proposer task runs, then waits for all of them: the
/// test's runtime is single threaded, and `join_all` polls every write once before it
/// yields (`unconstrained` keeps tokio's cooperative budget from making it yield early).
/// Writes 1 and 2 find at most one other in flight and go alone; writes 3 to n queue.
async fn write_all<S: Sink>(
    proposer: &Proposer<S>,
    n: u64,
) -> Vec<Result<WriteOutcome, ProposeError>> {
    assert_eq!(
        DIRECT_OTHERS_IN_FLIGHT_MAX, 1,
        "the batches below assume it"
    );
    send_all(proposer, (1..=n).map(write).collect()).await
}

#[tokio::test]
async fn writes_queued_together_leave_as_one_batch_and_each_gets_its_own_outcome() {
    let (proposer, batches) = start(Script::Apply);
    let outcomes = write_all(&proposer, 10).await;
    for (i, outcome) in (1..).zip(outcomes) {
        let response = outcome.expect("queued").expect("applied");
        assert_eq!(
            response.revision, i,
            "write {i} got another write's outcome"
        );
    }
    assert_eq!(*batches.lock().expect("no poison"), vec![1, 1, 8]);
    let counts = ProposerCounts {
        batches: 3,
        writes: 10,
        entries: 10,
    };
    assert_eq!(proposer.counts(), counts);
}

#[tokio::test]
async fn a_batch_holds_at_most_batch_entries_max_writes() {
    let (proposer, batches) = start(Script::Apply);
    let n = BATCH_ENTRIES_MAX as u64 + 5;
    let outcomes = write_all(&proposer, n).await;
    assert!(outcomes.iter().all(|o| matches!(o, Ok(Ok(_)))));
    assert_eq!(
        *batches.lock().expect("no poison"),
        vec![1, 1, BATCH_ENTRIES_MAX, 3]
    );
}

/// One write after another, each answered before the next: none waits for the proposer task.
#[tokio::test]
async fn a_lone_write_is_sent_at_once() {
    let (proposer, batches) = start(Script::Apply);
    for i in 1..=3 {
        let response = proposer.write(write(i)).await.expect("queued").expect("ok");
        assert_eq!(response.revision, i);
    }
    assert_eq!(*batches.lock().expect("no poison"), vec![1, 1, 1]);
}

#[tokio::test]
async fn a_refused_batch_fails_every_write_in_it() {
    let (proposer, _) = start(Script::Refuse);
    for outcome in write_all(&proposer, 4).await {
        assert!(
            matches!(outcome, Ok(Err(RaftError::Fatal(Fatal::Stopped)))),
            "{outcome:?}"
        );
    }
}

#[tokio::test]
async fn writes_left_when_raft_stops_mid_batch_are_unanswered_not_failed() {
    let (proposer, _) = start(Script::StopAfter(2));
    let outcomes = write_all(&proposer, 5).await;
    for (i, outcome) in (1..).zip(&outcomes) {
        // Writes 1 and 2 went alone; writes 3 to 5 were one batch, of which Raft answered two.
        if i <= 4 {
            assert!(
                matches!(outcome, Ok(Ok(r)) if r.revision == i),
                "{outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Err(ProposeError::Unanswered)),
                "write {i}: {outcome:?}"
            );
        }
    }
}

#[tokio::test]
async fn an_applied_error_reaches_its_own_caller() {
    struct OddFails;
    impl Sink for OddFails {
        async fn propose(&self, entries: Vec<(Envelope, Answer)>) {
            let (envs, answers): (Vec<Envelope>, Vec<Answer>) = entries.into_iter().unzip();
            let outcomes: Vec<WriteOutcome> = envs
                .iter()
                .map(|env| {
                    let mut outcome = applied(env)?;
                    if outcome.revision % 2 == 1 {
                        outcome.outcome = Err(ApplyError::RequestIdReused {
                            request_id: outcome.revision.to_string(),
                        });
                    }
                    Ok(outcome)
                })
                .collect();
            give_later(outcomes, answers)
        }
    }
    let proposer = Proposer::start(OddFails);
    for (i, outcome) in (1..).zip(write_all(&proposer, 6).await) {
        let response = outcome.expect("queued").expect("answered");
        assert_eq!(response.revision, i);
        assert_eq!(response.outcome.is_err(), i % 2 == 1, "write {i}");
    }
}

/// Queued lock writes share `Command::Many` entries, split where a lock is named again or a
/// write of another kind comes between, in arrival order; each caller gets its own item's
/// response.
#[tokio::test]
async fn queued_lock_writes_share_entries_split_by_repeated_locks_and_other_writes() {
    let (proposer, batches, entries) = start_recording(Script::Apply);
    let envs = vec![
        lock_write(1, "a1"),
        lock_write(2, "a2"),
        lock_write(3, "a3"),
        lock_write(4, "a4"),
        lock_write(5, "x"),
        lock_write(6, "x"),
        lock_write(7, "a7"),
        write(8),
        lock_write(9, "a9"),
        write(10),
        lock_write(11, "a11"),
        lock_write(12, "a12"),
    ];
    for (i, outcome) in (1..).zip(send_all(&proposer, envs).await) {
        let response = outcome.expect("queued").expect("applied");
        assert_eq!(
            response.revision, i,
            "write {i} got another write's outcome"
        );
    }
    // Writes 1 and 2 went alone; 3 to 12 were one batch of six entries.
    assert_eq!(*batches.lock().expect("no poison"), vec![1, 1, 6]);
    assert_eq!(
        *entries.lock().expect("no poison"),
        vec![vec![1], vec![1], vec![3, 2, 1, 1, 1, 2]]
    );
    let counts = ProposerCounts {
        batches: 3,
        writes: 12,
        entries: 8,
    };
    assert_eq!(proposer.counts(), counts);
}

/// Queued key writes share `Command::KeyWrites` entries, never with lock commands, split
/// where a key is written again; each caller gets its own item's response.
#[tokio::test]
async fn queued_key_writes_share_entries_apart_from_lock_writes() {
    let (proposer, batches, entries) = start_recording(Script::Apply);
    let envs = vec![
        key_write(1, "k1"),
        key_write(2, "k2"),
        key_write(3, "k3"),
        key_write(4, "k4"),
        key_write(5, "k5"),
        lock_write(6, "k5"),
        lock_write(7, "l7"),
        key_write(8, "k8"),
        key_write(9, "k8"),
        key_write(10, "k10"),
    ];
    for (i, outcome) in (1..).zip(send_all(&proposer, envs).await) {
        let response = outcome.expect("queued").expect("applied");
        assert_eq!(
            response.revision, i,
            "write {i} got another write's outcome"
        );
    }
    // Writes 1 and 2 went alone; 3 to 10 were one batch of four entries: keys 3-5, locks
    // 6-7, key 8, keys 9-10.
    assert_eq!(*batches.lock().expect("no poison"), vec![1, 1, 4]);
    assert_eq!(
        *entries.lock().expect("no poison"),
        vec![vec![1], vec![1], vec![3, 2, 1, 2]]
    );
}

#[tokio::test]
async fn a_refused_many_entry_fails_every_write_in_it() {
    let (proposer, _, entries) = start_recording(Script::Refuse);
    let envs = (1..=5).map(|i| lock_write(i, &format!("l{i}"))).collect();
    for outcome in send_all(&proposer, envs).await {
        assert!(
            matches!(outcome, Ok(Err(RaftError::Fatal(Fatal::Stopped)))),
            "{outcome:?}"
        );
    }
    assert_eq!(entries.lock().expect("no poison")[2], vec![3]);
}

/// Raft stopped before answering anything: the two writes sent alone and the three of the
/// many entry are all unknown.
#[tokio::test]
async fn writes_of_an_unanswered_many_entry_are_unanswered_not_failed() {
    let (proposer, _, _) = start_recording(Script::StopAfter(0));
    let envs = (1..=5).map(|i| lock_write(i, &format!("l{i}"))).collect();
    for outcome in send_all(&proposer, envs).await {
        assert!(
            matches!(outcome, Err(ProposeError::Unanswered)),
            "{outcome:?}"
        );
    }
}

/// A many entry answered with something other than one response per item (a bug): its
/// callers learn that their outcome is unknown, never someone else's answer.
#[tokio::test]
async fn a_many_entry_answered_whole_leaves_its_writes_unanswered() {
    struct Whole;
    impl Sink for Whole {
        async fn propose(&self, entries: Vec<(Envelope, Answer)>) {
            let (envs, answers): (Vec<Envelope>, Vec<Answer>) = entries.into_iter().unzip();
            let outcomes: Vec<WriteOutcome> = envs
                .iter()
                .map(|env| match env.command {
                    Command::Many { .. } => Ok(Response {
                        revision: 99,
                        term: 1,
                        replayed: false,
                        outcome: Ok(Outcome::Applied),
                    }),
                    _ => applied(env),
                })
                .collect();
            give_later(outcomes, answers)
        }
    }
    let proposer = Proposer::start(Whole);
    let envs = (1..=5).map(|i| lock_write(i, &format!("l{i}"))).collect();
    let outcomes = send_all(&proposer, envs).await;
    for (i, outcome) in (1..).zip(&outcomes) {
        if i <= 2 {
            assert!(
                matches!(outcome, Ok(Ok(r)) if r.revision == i),
                "{outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Err(ProposeError::Unanswered)),
                "write {i}: {outcome:?}"
            );
        }
    }
}
