//! The register workload through the etcd port (`--etcd-listen`), driven by the `etcd-client`
//! crate as etcd's users would: `Range` reads, `Put` writes, and compare-and-set as a `Txn`
//! comparing the value. The keys and values are the HTTP register workers' (`workload`), so
//! both APIs write the same registers and one linearizability check covers them together: a
//! stale read or a lost write through either shows against the other's history.
//!
//! Classification as `crate::http` does it: a read that fails is `fail` (it had no effect); a
//! write that fails with a status saying it was refused before anything ran is `fail`, any
//! other error (a timeout, a lost connection, "no leader", "may or may not have committed")
//! is `info`. etcd's API has no request ids, so a write is never retried.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnOp};
use rand::Rng;
use turnstile_checker::history::{EventType, OpValue};
use turnstile_checker::models::CAS_COMPARE_FAILED;

use crate::http::{Answer, CLIENT_TIMEOUT_MS};
use crate::workload::{register_key, Worker, WorkerCtx, REGISTER_KEYS, REGISTER_VALUES};

/// How long a connection attempt to a node's etcd port may take.
const CONNECT_TIMEOUT_MS: u64 = 1_000;

/// Runs an etcd register worker, bound to its node's etcd port, until the deadline.
pub async fn etcd_register_worker(ctx: WorkerCtx, index: u64, seed: u64) {
    let mut w = Worker::new(ctx, index, seed, "etcd-reg");
    let endpoint = w.ctx.etcd_endpoints[(w.node - 1) as usize].clone();
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .with_timeout(Duration::from_millis(CLIENT_TIMEOUT_MS));
    if let Some(tls) = &w.ctx.etcd_tls {
        options = options.with_tls(tls.clone());
    }
    // One client for the run: etcd-client's channel reconnects by itself after a fault.
    let mut client = loop {
        if !w.running() {
            return;
        }
        match Client::connect([endpoint.as_str()], Some(options.clone())).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::debug!(error = %e, %endpoint, "etcd worker cannot connect yet");
                w.think(true).await;
            }
        }
    };
    while w.running() {
        let key = register_key(w.rng.gen_range(0..REGISTER_KEYS));
        let roll: f64 = w.rng.gen();
        let (op, answer) = if roll < 0.5 {
            let op = OpValue::Read { key, value: None };
            w.invoke(&op);
            read(&mut client, op).await
        } else if roll < 0.75 {
            let value = w.rng.gen_range(0..REGISTER_VALUES);
            let op = OpValue::Write {
                key: key.clone(),
                value,
            };
            w.invoke(&op);
            let r = client.put(key, value.to_string(), None).await.map(|_| ());
            (op, written(r))
        } else {
            let from = w.rng.gen_range(0..REGISTER_VALUES);
            let to = w.rng.gen_range(0..REGISTER_VALUES);
            let op = OpValue::Cas {
                key: key.clone(),
                from,
                to,
            };
            w.invoke(&op);
            let txn = Txn::new()
                .when([Compare::value(
                    key.clone(),
                    CompareOp::Equal,
                    from.to_string(),
                )])
                .and_then([TxnOp::put(key, to.to_string(), None)]);
            let answer = match client.txn(txn).await {
                // A compare that did not hold: a CAS that did nothing, and an observation that
                // the value was not `from` (as the HTTP API's `412 compare_failed`).
                Ok(r) if !r.succeeded() => answer(EventType::Fail, Some(CAS_COMPARE_FAILED.into())),
                r => written(r.map(|_| ())),
            };
            (op, answer)
        };
        let failed = !answer.is_ok();
        w.complete(&answer, op);
        w.think(failed).await;
    }
}

/// A read of the register; its value goes into the completed op.
async fn read(client: &mut Client, op: OpValue) -> (OpValue, Answer) {
    let OpValue::Read { key, .. } = op else {
        return (op, answer(EventType::Fail, Some("not a read".into())));
    };
    match client.get(key.clone(), None).await {
        Ok(r) => {
            let value = match r.kvs().first() {
                None => None,
                Some(kv) => match kv.value_str().ok().and_then(|v| v.parse().ok()) {
                    Some(v) => Some(v),
                    // A value no register worker writes: not a read the checker can judge.
                    None => {
                        let op = OpValue::Read { key, value: None };
                        return (op, answer(EventType::Fail, Some("unparsable".into())));
                    }
                },
            };
            (OpValue::Read { key, value }, answer(EventType::Ok, None))
        }
        Err(e) => (
            OpValue::Read { key, value: None },
            answer(EventType::Fail, Some(e.to_string())),
        ),
    }
}

/// A write's outcome: `ok`, `fail` when the status says it was refused before it ran, else
/// `info`.
fn written(r: Result<(), etcd_client::Error>) -> Answer {
    use tonic::Code;
    match r {
        Ok(()) => answer(EventType::Ok, None),
        Err(etcd_client::Error::GRpcStatus(s))
            if matches!(
                s.code(),
                Code::InvalidArgument
                    | Code::NotFound
                    | Code::PermissionDenied
                    | Code::FailedPrecondition
                    | Code::ResourceExhausted
                    | Code::OutOfRange
                    | Code::Unauthenticated
                    | Code::Unimplemented
            ) =>
        {
            answer(EventType::Fail, Some(s.message().to_string()))
        }
        Err(e) => answer(EventType::Info, Some(e.to_string())),
    }
}

fn answer(kind: EventType, error: Option<String>) -> Answer {
    Answer {
        kind,
        status: None,
        body: serde_json::Value::Null,
        error,
    }
}
