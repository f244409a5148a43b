//! The client workloads. Each worker is bound to one node (Jepsen style: a client talks to
//! "its" node, which forwards to the leader), runs one operation at a time on a seeded schedule,
//! and records every invocation and completion. After an `info` the worker continues under a
//! fresh process id, since the unknown operation may still take effect.
//!
//! - register: read / write / compare-and-set on a few keys (checked for linearizability);
//! - counter: increments (some delivered twice with the same `request_id`, as a client retrying
//!   after a lost answer would) and reads;
//! - lock-set: lease, acquire (waiting), fenced read-modify-write of a set kept in the store,
//!   release; some holders stall past their TTL, as a paused client would.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use turnstile_checker::history::{EventType, OpValue};

use crate::http::{Answer, Effect, Http};
use crate::recorder::Recorder;

/// Register keys (partitions of the linearizability check; few, so each has many ops).
pub const REGISTER_KEYS: u64 = 4;
/// Register values are drawn from 0..this, so compare-and-set often succeeds.
pub(crate) const REGISTER_VALUES: i64 = 5;
/// Locks of the lock-set workload.
pub const LOCKS: u64 = 2;
/// The counter every counter worker increments.
pub const COUNTER: &str = "jepsen-counter";
/// TTL of a lock worker's lease (the minimum the API allows, so expiry is frequent).
pub const LOCK_TTL_MS: u64 = 1_000;
/// How long a lock worker waits in the queue: longer than its TTL, so some leases expire in
/// the queue.
const LOCK_WAIT_MS: u64 = 1_500;
/// Chance that a holder stalls past its TTL between reading and writing the set.
const STALL_PROBABILITY: f64 = 0.25;
/// Chance that an increment is delivered twice with one `request_id`.
const DUPLICATE_PROBABILITY: f64 = 0.3;
/// Pause between a worker's operations (keeps 2 cores from drowning).
const THINK_MS_MAX: u64 = 40;

/// What every worker shares.
#[derive(Clone)]
pub struct WorkerCtx {
    pub rec: Recorder,
    pub http: Http,
    /// `endpoints[i]` is node `i + 1`.
    pub endpoints: Vec<String>,
    /// The nodes' etcd ports, in the same order (`crate::etcd_workload`).
    pub etcd_endpoints: Vec<String>,
    /// TLS for the etcd ports of a secure cluster.
    pub etcd_tls: Option<etcd_client::TlsOptions>,
    pub deadline: Instant,
    /// Process ids advance by this after an `info`, so they stay unique across workers.
    pub workers_total: u64,
}

/// One worker's identity and schedule.
pub(crate) struct Worker {
    pub(crate) ctx: WorkerCtx,
    pub(crate) process: u64,
    pub(crate) node: u64,
    pub(crate) rng: StdRng,
    seq: u64,
    tag: String,
}

impl Worker {
    pub(crate) fn new(ctx: WorkerCtx, index: u64, seed: u64, tag: &str) -> Worker {
        let node = index % ctx.endpoints.len() as u64 + 1;
        Worker {
            rng: StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            ctx,
            process: index,
            node,
            seq: 0,
            tag: format!("{tag}-{index}"),
        }
    }

    pub(crate) fn running(&self) -> bool {
        Instant::now() < self.ctx.deadline && !self.ctx.rec.full()
    }

    fn endpoint(&self) -> &str {
        &self.ctx.endpoints[(self.node - 1) as usize]
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint())
    }

    fn request_id(&mut self) -> String {
        self.seq += 1;
        format!("{}-p{}-{}", self.tag, self.process, self.seq)
    }

    pub(crate) fn invoke(&self, op: &OpValue) {
        self.ctx.rec.invoke(self.process, self.node, op);
    }

    /// Records the completion; after `info` moves to a fresh process id.
    pub(crate) fn complete(&mut self, answer: &Answer, op: OpValue) {
        let error = answer.error.clone();
        self.ctx
            .rec
            .complete(self.process, self.node, answer.kind, op, error);
        if answer.kind == EventType::Info {
            self.process += self.ctx.workers_total;
        }
    }

    pub(crate) async fn think(&mut self, failed: bool) {
        // After a failure (node down, no quorum) wait longer, so a dead node is not hammered.
        let ms = if failed {
            100 + self.rng.gen_range(0..100)
        } else {
            self.rng.gen_range(0..=THINK_MS_MAX)
        };
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        e: Effect,
    ) -> Answer {
        self.ctx
            .http
            .send(method, &self.url(path), body.as_ref(), e, None)
            .await
    }
}

/// Register key name.
pub fn register_key(k: u64) -> String {
    format!("reg-{k}")
}

/// The key holding lock `l`'s set.
pub fn set_key(lock: &str) -> String {
    format!("set-{lock}")
}

pub fn lock_name(l: u64) -> String {
    format!("lock-{l}")
}

/// Reads a register key: `Ok(Some(v))`, `Ok(None)` when absent.
fn parse_register(answer: &Answer) -> Option<Option<i64>> {
    match answer.status {
        Some(200) => answer.body["value"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .map(Some),
        Some(404) if answer.code() == Some("key_not_found") => Some(None),
        _ => None,
    }
}

/// Runs a register worker until the deadline.
pub async fn register_worker(ctx: WorkerCtx, index: u64, seed: u64) {
    let mut w = Worker::new(ctx, index, seed, "reg");
    while w.running() {
        let key = register_key(w.rng.gen_range(0..REGISTER_KEYS));
        let path = format!("/v1/kv/{key}");
        let roll: f64 = w.rng.gen();
        let failed = if roll < 0.5 {
            let endpoint = w.endpoint().to_string();
            read_register_at(&w.ctx.rec, &w.ctx.http, &endpoint, w.process, w.node, &key).await
        } else if roll < 0.75 {
            let value = w.rng.gen_range(0..REGISTER_VALUES);
            let op = OpValue::Write { key, value };
            w.invoke(&op);
            let body = json!({"value": value.to_string(), "request_id": w.request_id()});
            let a = w
                .send(reqwest::Method::PUT, &path, Some(body), Effect::Write)
                .await;
            w.complete(&a, op);
            !a.is_ok()
        } else {
            let from = w.rng.gen_range(0..REGISTER_VALUES);
            let to = w.rng.gen_range(0..REGISTER_VALUES);
            let op = OpValue::Cas { key, from, to };
            w.invoke(&op);
            let body = json!({
                "value": to.to_string(),
                "if": {"value": from.to_string()},
                "request_id": w.request_id(),
            });
            let a = w
                .send(reqwest::Method::PUT, &path, Some(body), Effect::Write)
                .await;
            w.complete(&a, op);
            !a.is_ok()
        };
        w.think(failed).await;
    }
}

/// Runs a counter worker until the deadline.
pub async fn counter_worker(ctx: WorkerCtx, index: u64, seed: u64) {
    let mut w = Worker::new(ctx, index, seed, "ctr");
    let path = format!("/v1/counters/{COUNTER}");
    while w.running() {
        let failed = if w.rng.gen_bool(0.7) {
            let op = OpValue::Incr {
                counter: COUNTER.into(),
                by: 1,
                value: None,
            };
            w.invoke(&op);
            let body = json!({"by": 1, "request_id": w.request_id()});
            let incr = format!("{path}/incr");
            let mut a = w
                .send(
                    reqwest::Method::POST,
                    &incr,
                    Some(body.clone()),
                    Effect::Write,
                )
                .await;
            // A retry of the same request, as after an answer lost on the way back: with
            // request-id dedup it changes nothing and answers the first outcome. The retry's
            // own answer decides only if it is `ok`; a retry that failed or got lost says
            // nothing about the first attempt, which may well have been applied.
            if w.rng.gen_bool(DUPLICATE_PROBABILITY) && a.kind != EventType::Fail {
                let retry = w
                    .send(reqwest::Method::POST, &incr, Some(body), Effect::Write)
                    .await;
                if retry.is_ok() {
                    a = retry;
                }
            }
            let value = a.body["value"].as_i64();
            if a.is_ok() && value.is_none() {
                a.kind = EventType::Info;
            }
            let done = OpValue::Incr {
                counter: COUNTER.into(),
                by: 1,
                value,
            };
            w.complete(&a, done);
            !a.is_ok()
        } else {
            let endpoint = w.endpoint().to_string();
            read_counter_at(&w.ctx.rec, &w.ctx.http, &endpoint, w.process, w.node).await
        };
        w.think(failed).await;
    }
}

/// Parses a set value ("3,17,42") into its elements.
pub fn parse_set(value: &str) -> Vec<u64> {
    value
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// Runs a lock-set worker until the deadline.
pub async fn lock_worker(ctx: WorkerCtx, index: u64, seed: u64) {
    let mut w = Worker::new(ctx, index, seed, "lock");
    let mut element = index * 1_000_000;
    while w.running() {
        let lock = lock_name(w.rng.gen_range(0..LOCKS));
        let failed = if w.rng.gen_bool(0.1) {
            read_set(&mut w, &lock).await
        } else {
            element += 1;
            !lock_cycle(&mut w, &lock, element).await
        };
        w.think(failed).await;
    }
}

/// Lease, acquire, fenced read-modify-write, release. Returns whether it got the lock.
async fn lock_cycle(w: &mut Worker, lock: &str, element: u64) -> bool {
    let lease = w
        .send(
            reqwest::Method::POST,
            "/v1/leases",
            Some(json!({"ttl_ms": LOCK_TTL_MS})),
            Effect::Write,
        )
        .await;
    let Some(lease_id) = lease.body["lease_id"].as_u64().filter(|_| lease.is_ok()) else {
        return false;
    };
    let request_id = w.request_id();
    let op = OpValue::Acquire {
        lock: lock.into(),
        request_id: request_id.clone(),
        lease_id: Some(lease_id),
        token: None,
        term: None,
    };
    w.invoke(&op);
    let body = json!({"lease_id": lease_id, "wait_ms": LOCK_WAIT_MS, "request_id": request_id});
    let mut a = w
        .send(
            reqwest::Method::POST,
            &format!("/v1/locks/{lock}/acquire"),
            Some(body),
            Effect::Write,
        )
        .await;
    let token = a.body["token"].as_u64();
    let term = a.body["term"].as_u64();
    if a.is_ok() && token.is_none() {
        a.kind = EventType::Info;
    }
    w.complete(
        &a,
        OpValue::Acquire {
            lock: lock.into(),
            request_id,
            lease_id: Some(lease_id),
            token,
            term,
        },
    );
    let Some(token) = token.filter(|_| a.is_ok()) else {
        return false;
    };
    set_add(w, lock, token, element).await;
    let op = OpValue::Release {
        lock: lock.into(),
        lease_id,
        token,
    };
    w.invoke(&op);
    let body = json!({"lease_id": lease_id, "token": token});
    let a = w
        .send(
            reqwest::Method::POST,
            &format!("/v1/locks/{lock}/release"),
            Some(body),
            Effect::Write,
        )
        .await;
    w.complete(&a, op);
    true
}

/// The fenced read-modify-write: read the set, maybe stall, write it back with one more
/// element, fenced with the grant's token.
async fn set_add(w: &mut Worker, lock: &str, token: u64, element: u64) {
    let op = OpValue::SetAdd {
        lock: lock.into(),
        element,
        token,
    };
    w.invoke(&op);
    let key = set_key(lock);
    let path = format!("/v1/kv/{key}");
    let read = w
        .send(reqwest::Method::GET, &path, None, Effect::Read)
        .await;
    let current = match (read.status, read.body["value"].as_str()) {
        (Some(200), Some(v)) => v.to_string(),
        (Some(404), _) => String::new(),
        _ => {
            // Could not read: nothing was written, so the add definitely did not happen.
            let mut failed = read.clone();
            failed.kind = EventType::Fail;
            w.complete(&failed, op);
            return;
        }
    };
    if w.rng.gen_bool(STALL_PROBABILITY) {
        // A holder paused mid-critical-section (GC, swap, SIGSTOP): longer than its TTL.
        let ms = w.rng.gen_range(LOCK_TTL_MS + 200..LOCK_TTL_MS * 2);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let value = if current.is_empty() {
        element.to_string()
    } else {
        format!("{current},{element}")
    };
    let body = json!({
        "value": value,
        "fence": {"lock": lock, "token": token},
        "request_id": w.request_id(),
    });
    let a = w
        .send(reqwest::Method::PUT, &path, Some(body), Effect::Write)
        .await;
    w.complete(&a, op);
}

/// A linearizable read of a lock's set, recorded. Returns whether it failed.
pub async fn read_set_at(
    rec: &Recorder,
    http: &Http,
    endpoint: &str,
    process: u64,
    node: u64,
    lock: &str,
) -> bool {
    let op = OpValue::SetRead {
        lock: lock.into(),
        elements: None,
    };
    rec.invoke(process, node, &op);
    let url = format!("{endpoint}/v1/kv/{}", set_key(lock));
    let mut a = http
        .send(reqwest::Method::GET, &url, None, Effect::Read, None)
        .await;
    let elements = match (a.status, a.body["value"].as_str()) {
        (Some(200), Some(v)) => Some(parse_set(v)),
        (Some(404), _) => Some(Vec::new()),
        _ => None,
    };
    a.kind = if elements.is_some() {
        EventType::Ok
    } else {
        EventType::Fail
    };
    rec.complete(
        process,
        node,
        a.kind,
        OpValue::SetRead {
            lock: lock.into(),
            elements,
        },
        a.error.clone(),
    );
    a.kind != EventType::Ok
}

async fn read_set(w: &mut Worker, lock: &str) -> bool {
    let endpoint = w.endpoint().to_string();
    read_set_at(&w.ctx.rec, &w.ctx.http, &endpoint, w.process, w.node, lock).await
}

/// A linearizable read of the counter through `endpoint`, recorded. Returns whether it failed.
pub async fn read_counter_at(
    rec: &Recorder,
    http: &Http,
    endpoint: &str,
    process: u64,
    node: u64,
) -> bool {
    let op = OpValue::CounterRead {
        counter: COUNTER.into(),
        value: None,
    };
    rec.invoke(process, node, &op);
    let url = format!("{endpoint}/v1/counters/{COUNTER}");
    let a = http
        .send(reqwest::Method::GET, &url, None, Effect::Read, None)
        .await;
    let value = a.body["value"].as_i64().filter(|_| a.is_ok());
    let kind = if value.is_some() {
        EventType::Ok
    } else {
        EventType::Fail
    };
    let done = OpValue::CounterRead {
        counter: COUNTER.into(),
        value,
    };
    rec.complete(process, node, kind, done, a.error.clone());
    kind != EventType::Ok
}

/// A linearizable read of register `key` through `endpoint`, recorded. `404 key_not_found` is
/// a successful read of an absent key; anything unparsable is a failed read. Returns whether
/// it failed.
pub async fn read_register_at(
    rec: &Recorder,
    http: &Http,
    endpoint: &str,
    process: u64,
    node: u64,
    key: &str,
) -> bool {
    let op = OpValue::Read {
        key: key.to_string(),
        value: None,
    };
    rec.invoke(process, node, &op);
    let url = format!("{endpoint}/v1/kv/{key}");
    let a = http
        .send(reqwest::Method::GET, &url, None, Effect::Read, None)
        .await;
    let (kind, value) = match parse_register(&a) {
        Some(v) => (EventType::Ok, v),
        None => (EventType::Fail, None),
    };
    let done = OpValue::Read {
        key: key.to_string(),
        value,
    };
    rec.complete(process, node, kind, done, a.error.clone());
    kind != EventType::Ok
}
