//! A steady lock load for operations tests (membership changes, rolling restarts): each
//! worker acquires a fresh lock, writes its own key through the lock's fence, and releases.
//! It checks as it goes that no acknowledged grant is lost (the fenced write would fail) and
//! that tokens grow in real-time order, and at the end that every acknowledged write is
//! there. Every answer's status and code is tallied, so a test can say which errors clients
//! may see. Workers talk to a shared, changeable list of endpoints and move on from a node
//! that is down or cannot serve.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// Upper bound on one worker's cycles, so the load stops by itself even if a test stalls.
pub const CYCLES_MAX: u64 = 5_000;
/// How long one request (with its moves over every endpoint) may take.
const REQUEST_MS_MAX: u64 = 15_000;
/// Pause before trying the next endpoint.
const RETRY_PAUSE_MS: u64 = 50;

/// The nodes the workers may talk to.
pub type Endpoints = Arc<RwLock<Vec<SocketAddr>>>;

/// What the workers saw so far.
#[derive(Default)]
struct Tally {
    grants: AtomicU64,
    /// Highest token of a grant that has returned (for the real-time order check).
    max_returned_token: AtomicU64,
    /// `"<status> <code>"` of every non-2xx answer, and `"transport"` for failed sends.
    answers: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn saw(&self, what: String) {
        if let Ok(mut m) = self.answers.lock() {
            *m.entry(what).or_default() += 1;
        }
    }
}

/// How the workers reach the nodes: plain HTTP, or HTTPS with a client certificate.
#[derive(Clone)]
pub struct LoadHttp {
    pub client: reqwest::Client,
    /// `http` or `https`.
    pub scheme: &'static str,
}

impl LoadHttp {
    /// Plain HTTP.
    pub fn plain() -> anyhow::Result<LoadHttp> {
        Ok(LoadHttp {
            client: http_builder().build()?,
            scheme: "http",
        })
    }
}

/// A running load.
pub struct LockLoad {
    endpoints: Endpoints,
    http: LoadHttp,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<JoinHandle<anyhow::Result<u64>>>,
}

/// What a stopped load saw.
#[derive(Debug)]
pub struct LoadReport {
    pub grants: u64,
    /// Non-2xx answers by `"<status> <code>"` (`"transport"` for failed sends).
    pub answers: BTreeMap<String, u64>,
}

impl LockLoad {
    /// Starts `workers` workers against `endpoints`.
    pub fn start(endpoints: Endpoints, workers: u64) -> LockLoad {
        // Building a plain client fails only if the TLS backend cannot start.
        let http = LoadHttp::plain().expect("a plain HTTP client builds");
        LockLoad::start_with(endpoints, workers, http)
    }

    /// Like [`LockLoad::start`], reaching the nodes through `http`.
    pub fn start_with(endpoints: Endpoints, workers: u64, http: LoadHttp) -> LockLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let workers = (1..=workers)
            .map(|w| {
                let (endpoints, http) = (endpoints.clone(), http.clone());
                tokio::spawn(worker(w, endpoints, http, stop.clone(), tally.clone()))
            })
            .collect();
        LockLoad {
            endpoints,
            http,
            stop,
            tally,
            workers,
        }
    }

    /// Grants acknowledged so far.
    pub fn grants(&self) -> u64 {
        self.tally.grants.load(Ordering::Relaxed)
    }

    /// Waits until `more` grants beyond the current count were acknowledged.
    pub async fn wait_grants(&self, more: u64) -> anyhow::Result<()> {
        let target = self.grants() + more;
        crate::wait_for(&format!("{more} more grants"), || async {
            (self.grants() >= target).then_some(())
        })
        .await
    }

    /// Stops the workers and checks that every acknowledged write is there.
    pub async fn stop(self) -> anyhow::Result<LoadReport> {
        self.stop.store(true, Ordering::Relaxed);
        let http = self.http.clone();
        for (i, w) in self.workers.into_iter().enumerate() {
            let acked = w.await??;
            let key = format!("/v1/kv/k-{}", i + 1);
            let v = match get(&http, &self.endpoints, &key).await? {
                (200, v) => v,
                // A worker that never got a write acknowledged may have no key.
                (404, _) if acked == 0 => continue,
                (code, v) => bail!("{key}: {code} {v}"),
            };
            let value: u64 = v["value"].as_str().unwrap_or("0").parse()?;
            if value < acked {
                bail!(
                    "worker {}: acknowledged write {acked} lost; key holds {value}",
                    i + 1
                );
            }
        }
        let answers = self
            .tally
            .answers
            .lock()
            .map_err(|_| anyhow!("poisoned"))?
            .clone();
        Ok(LoadReport {
            grants: self.tally.grants.load(Ordering::Relaxed),
            answers,
        })
    }
}

/// The workers' client settings; a secure cluster adds its CA and a client certificate.
pub fn http_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(8))
}

/// A definite answer, or `None` when the outcome stays unknown.
type Answer = Option<(u16, Value)>;

/// Sends one request, moving over endpoints on transport errors and `503`s until it gets a
/// definite answer. Returns `None` when the outcome stays unknown (`504`, `503 unavailable`,
/// or a send that failed after it may have reached the server).
async fn send(
    http: &LoadHttp,
    endpoints: &Endpoints,
    method: reqwest::Method,
    path: &str,
    body: &Value,
    tally: &Tally,
) -> anyhow::Result<Answer> {
    let deadline = Instant::now() + Duration::from_millis(REQUEST_MS_MAX);
    let mut unknown = false;
    for attempt in 0usize.. {
        if Instant::now() > deadline {
            if unknown {
                return Ok(None);
            }
            bail!("{path}: no answer within {REQUEST_MS_MAX} ms");
        }
        let addrs = endpoints.read().map_err(|_| anyhow!("poisoned"))?.clone();
        let addr = addrs[attempt % addrs.len()];
        let url = format!("{}://{addr}{path}", http.scheme);
        let mut rb = http.client.request(method.clone(), url);
        if !body.is_null() {
            rb = rb.json(body);
        }
        let sent = rb.send().await;
        match sent {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                let name = v["code"].as_str().unwrap_or_default().to_string();
                if code >= 300 {
                    tally.saw(format!("{code} {name}"));
                }
                match (code, name.as_str()) {
                    (503, "no_quorum" | "not_member") => {}
                    (503, "unavailable") | (504, _) => unknown = true,
                    (c, _) if c >= 500 => bail!("{path}: unexpected {c}: {v}"),
                    _ => return Ok(Some((code, v))),
                }
            }
            // A refused connection cannot have delivered the request.
            Err(e) if e.is_connect() => tally.saw("transport".into()),
            Err(_) => {
                tally.saw("transport".into());
                unknown = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MS)).await;
    }
    unreachable!("the loop only ends by returning")
}

/// A read with the same endpoint rotation (no tally).
async fn get(http: &LoadHttp, endpoints: &Endpoints, path: &str) -> anyhow::Result<(u16, Value)> {
    let tally = Tally::default();
    send(
        http,
        endpoints,
        reqwest::Method::GET,
        path,
        &Value::Null,
        &tally,
    )
    .await?
    .ok_or_else(|| anyhow!("{path}: no definite answer"))
}

/// One worker: acquire a fresh lock, write its key through the fence, release. Returns the
/// sequence number of the last write it knows was acknowledged.
async fn worker(
    w: u64,
    endpoints: Endpoints,
    http: LoadHttp,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> anyhow::Result<u64> {
    use reqwest::Method;
    let body = json!({"ttl_ms": 120_000, "request_id": format!("lease-{w}")});
    let lease = match send(&http, &endpoints, Method::POST, "/v1/leases", &body, &tally).await? {
        Some((200, v)) => v["lease_id"].as_u64().ok_or_else(|| anyhow!("{v}"))?,
        other => bail!("worker {w} lease: {other:?}"),
    };
    let mut acked = 0;
    for seq in 1..=CYCLES_MAX {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let lock = format!("load-{w}-{seq}");
        let before = tally.max_returned_token.load(Ordering::SeqCst);
        let body = json!({"lease_id": lease, "wait_ms": 0, "request_id": format!("acq-{w}-{seq}")});
        let path = format!("/v1/locks/{lock}/acquire");
        let token = match send(&http, &endpoints, Method::POST, &path, &body, &tally).await? {
            Some((200, v)) => v["token"].as_u64().ok_or_else(|| anyhow!("{v}"))?,
            None => continue,
            other => bail!("worker {w} acquire {lock}: {other:?}"),
        };
        if token <= before {
            bail!("token {token} of {lock} is not above {before}, a grant that returned before it was asked for");
        }
        tally.max_returned_token.fetch_max(token, Ordering::SeqCst);
        tally.grants.fetch_add(1, Ordering::Relaxed);
        // A lost grant would make this fenced write fail.
        let put = json!({"value": seq.to_string(), "fence": {"lock": lock, "token": token},
                         "request_id": format!("put-{w}-{seq}")});
        let path = format!("/v1/kv/k-{w}");
        match send(&http, &endpoints, Method::PUT, &path, &put, &tally).await? {
            Some((200, _)) => acked = seq,
            None => {}
            Some((code, v)) => bail!("worker {w}: fenced write under {lock} token {token} answered {code} {v}: the grant was lost"),
        }
        let rel =
            json!({"lease_id": lease, "token": token, "request_id": format!("rel-{w}-{seq}")});
        let path = format!("/v1/locks/{lock}/release");
        match send(&http, &endpoints, Method::POST, &path, &rel, &tally).await? {
            Some((200, _)) | None => {}
            other => bail!("worker {w} release {lock}: {other:?}"),
        }
    }
    Ok(acked)
}
