//! The recorded history of a chaos run, as the harness writes it and the checkers read it.
//!
//! Every timestamp comes from one monotonic clock in the harness (nanoseconds since the run
//! started). A client operation is two events: an `invoke` and exactly one completion: `ok`,
//! `fail` (it definitely did not take effect) or `info` (unknown: it may take effect at any
//! time after its invocation, even after the run). Each logical client (`process`) has at most
//! one outstanding operation; after an `info` the harness retires the process id and continues
//! under a fresh one, as Jepsen does.
//!
//! Besides client operations the run records nemesis windows, which node led which term, watch
//! deliveries and each node's final `applied_index` and `state_digest`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nanoseconds since the run started, on the harness's one monotonic clock.
pub type TimeNs = u64;

/// The kind of a history event.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Invoke,
    /// Completed and took effect, with the results in `op`.
    Ok,
    /// Definitely did not take effect.
    Fail,
    /// Unknown: may take effect at any time after the invocation.
    Info,
}

/// One line of `history.jsonl`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Event {
    /// Position in the history, from 0.
    pub index: u64,
    pub time_ns: TimeNs,
    /// The logical client. One outstanding operation per process.
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The node the request was sent to.
    pub node: u64,
    /// The operation. On `invoke` the result fields are `null`; on `ok` they hold the results.
    pub op: OpValue,
    /// The error code or message of a `fail` or `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An operation and, once it completed `ok`, its results.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum OpValue {
    /// Linearizable read of a register key; `value` is `None` when the key is absent.
    Read { key: String, value: Option<i64> },
    /// Unconditional write of a register key.
    Write { key: String, value: i64 },
    /// Compare-and-set: `ok` means the value was `from` and is now `to`; `fail` means the
    /// comparison failed (nothing changed).
    Cas { key: String, from: i64, to: i64 },
    /// Add `by` to a counter; `value` is the counter after this increment.
    Incr {
        counter: String,
        by: i64,
        value: Option<i64>,
    },
    /// Linearizable read of a counter (absent reads as 0).
    CounterRead { counter: String, value: Option<i64> },
    /// Acquire an exclusive lock for a lease. `ok` carries the grant's token (its log index)
    /// and the term of the entry that granted it.
    Acquire {
        lock: String,
        request_id: String,
        lease_id: Option<u64>,
        token: Option<u64>,
        term: Option<u64>,
    },
    /// Release a grant.
    Release {
        lock: String,
        lease_id: u64,
        token: u64,
    },
    /// Read-modify-write of the set guarded by `lock`, fenced with `token`: `ok` means the
    /// fenced write was accepted and `element` added; `fail` means it was fenced (rejected).
    SetAdd {
        lock: String,
        element: u64,
        token: u64,
    },
    /// Linearizable read of the set guarded by `lock`.
    SetRead {
        lock: String,
        elements: Option<Vec<u64>>,
    },
}

/// A fault the nemesis held over an interval.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NemesisWindow {
    /// For example `partition-majority`, `pause-leader`, `kill`, `clock-jump`.
    pub kind: String,
    pub start_ns: TimeNs,
    /// `None` if the fault was still in force when the run ended (the final heal ends it).
    pub end_ns: Option<TimeNs>,
    /// The nodes the fault was applied to.
    pub targets: Vec<u64>,
    /// Nodes that could not reach a majority of the cluster for the whole window (cut off or
    /// on the minority side). They must grant nothing on their own authority meanwhile.
    pub minority: Vec<u64>,
}

/// "Node `node` led `term`", first seen at `time_ns` (from polling `/v1/cluster`: a node
/// reporting itself leader, or naming the leader of a recent term in `recent_leaders`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LeaderObservation {
    pub time_ns: TimeNs,
    pub node: u64,
    pub term: u64,
}

/// One event delivered to one watcher, in delivery order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WatchDelivery {
    pub watcher: u64,
    pub time_ns: TimeNs,
    /// The event id is `revision.seq`: the entry index and the position within the entry.
    pub revision: u64,
    pub seq: u32,
    /// `put`, `delete`, `lock_granted`, `lock_released` or `lease_expired`.
    pub kind: String,
    /// The key or lock name; empty for `lease_expired`.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub lease_id: Option<u64>,
    /// `lock_granted`: the token.
    #[serde(default)]
    pub token: Option<u64>,
}

/// How one watcher's stream ended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WatchEnd {
    pub watcher: u64,
    /// `true` when the watcher had to stop because the history it needed was compacted away:
    /// its log is then only checked up to that point.
    pub compacted: bool,
}

/// A node's state after the final heal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FinalNodeState {
    pub node: u64,
    pub applied_index: u64,
    pub state_digest: String,
}

/// Everything a run recorded, as the checkers take it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Recorded {
    pub events: Vec<Event>,
    pub nemesis: Vec<NemesisWindow>,
    pub leaders: Vec<LeaderObservation>,
    pub watch: Vec<WatchDelivery>,
    pub watch_ends: Vec<WatchEnd>,
    pub final_nodes: Vec<FinalNodeState>,
}

/// One operation with its invocation and completion paired up.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// The invocation's event index: unique per operation.
    pub id: u64,
    pub process: u64,
    pub node: u64,
    pub call_ns: TimeNs,
    /// `None` for `info`: the operation may take effect at any time after `call_ns`.
    pub ret_ns: Option<TimeNs>,
    pub status: EventType,
    /// The completion's value for `ok`, otherwise the invocation's.
    pub value: OpValue,
    pub error: Option<String>,
}

/// A history that cannot be paired.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PairError {
    #[error("process {process} invoked event {index} while event {outstanding} was outstanding")]
    Overlapping {
        process: u64,
        index: u64,
        outstanding: u64,
    },
    #[error("event {index} completes process {process}, which has no outstanding invocation")]
    Unmatched { process: u64, index: u64 },
}

/// Pairs invocations with completions. An invocation never completed counts as `info`.
pub fn pair(events: &[Event]) -> Result<Vec<Op>, PairError> {
    let mut open: BTreeMap<u64, &Event> = BTreeMap::new();
    let mut ops = Vec::with_capacity(events.len() / 2);
    for e in events {
        match e.kind {
            EventType::Invoke => {
                if let Some(prev) = open.insert(e.process, e) {
                    return Err(PairError::Overlapping {
                        process: e.process,
                        index: e.index,
                        outstanding: prev.index,
                    });
                }
            }
            kind => {
                let inv = open.remove(&e.process).ok_or(PairError::Unmatched {
                    process: e.process,
                    index: e.index,
                })?;
                let (ret_ns, value) = match kind {
                    EventType::Ok => (Some(e.time_ns), e.op.clone()),
                    EventType::Fail => (Some(e.time_ns), inv.op.clone()),
                    _ => (None, inv.op.clone()),
                };
                ops.push(Op {
                    id: inv.index,
                    process: inv.process,
                    node: inv.node,
                    call_ns: inv.time_ns,
                    ret_ns,
                    status: kind,
                    value,
                    error: e.error.clone(),
                });
            }
        }
    }
    for inv in open.into_values() {
        ops.push(Op {
            id: inv.index,
            process: inv.process,
            node: inv.node,
            call_ns: inv.time_ns,
            ret_ns: None,
            status: EventType::Info,
            value: inv.op.clone(),
            error: Some("never completed".into()),
        });
    }
    ops.sort_by_key(|o| o.id);
    Ok(ops)
}
