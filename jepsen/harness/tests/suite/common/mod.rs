//! Fixtures shared by the failure-story tests (`stories_*.rs`): a cluster of real node processes
//! in a temp dir ([`TestCluster`]), lock-holding client processes in their own namespaces with
//! a line reader ([`HolderProc`]), the fenced example ledger served in-process on the bridge
//! ([`LedgerServer`]), raw HTTP for requests that must be queued at a frozen node
//! ([`RawRequest`]), and small API helpers. Every wait polls a condition with a deadline.
//!
//! Clusters are secure (TLS, every client presenting the run's `root` certificate) unless a
//! story needs what TLS cannot give: [`start_insecure_cluster`] is for raw requests written to
//! a frozen node's socket, since a TLS handshake needs the node awake.

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use turnstile_fence::ledger::{Ledger, LedgerStats};
use turnstile_jepsen::cluster::{Backend, ClusterOptions, ProcCluster};
use turnstile_jepsen::netns::NetHost;
use turnstile_jepsen::tls::Mode;

/// The harness binary: nodes run `turnstile-jepsen node`, holders `turnstile-jepsen holder`.
pub const BIN: &str = env!("CARGO_BIN_EXE_turnstile-jepsen");
/// The nodes' default `election-timeout-ms-max`.
pub const ELECTION_TIMEOUT_MS_MAX: u64 = 1_000;
/// How long a holder process waits in a lock's queue.
pub const HOLDER_WAIT_MS: u64 = 30_000;
/// Timeout of the long-lived HTTP requests of the tests (waiting acquires).
const LONG_HTTP_TIMEOUT_MS: u64 = 120_000;
/// Poll interval of [`wait_until`].
const POLL_MS: u64 = 20;

/// Wall-clock milliseconds since the epoch (the holder's `lost ... at_ms` uses the same clock).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Polls `f` until it returns `Some`, failing after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = f().await {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("timed out after {} ms waiting for {what}", ms(timeout));
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// A cluster and the temp dir holding its data dirs and logs. Fields drop in order: the nodes
/// and the network go before the directory. Derefs to [`ProcCluster`].
pub struct TestCluster {
    pub cluster: ProcCluster,
    pub dir: tempfile::TempDir,
}

impl Deref for TestCluster {
    type Target = ProcCluster;
    fn deref(&self) -> &ProcCluster {
        &self.cluster
    }
}

impl DerefMut for TestCluster {
    fn deref_mut(&mut self) -> &mut ProcCluster {
        &mut self.cluster
    }
}

/// Starts `nodes` secure node processes (with the `bugs` switches, empty for a correct server)
/// and waits for a leader.
pub async fn start_cluster(nodes: u64, bugs: &str) -> anyhow::Result<TestCluster> {
    start_cluster_in(nodes, bugs, Mode::Secure, false).await
}

/// [`start_cluster`] with nodes running `binary` (another build of `turnstile-jepsen`, such as
/// an older release's for a rolling upgrade).
pub async fn start_cluster_of(nodes: u64, binary: &Path) -> anyhow::Result<TestCluster> {
    start_cluster_with(nodes, "", Mode::Secure, false, binary).await
}

/// [`start_cluster`] with every node under libfiu (`ProcCluster::disk_fault`).
pub async fn start_disk_fault_cluster(nodes: u64, bugs: &str) -> anyhow::Result<TestCluster> {
    turnstile_jepsen::cluster::require_fiu()?;
    start_cluster_in(nodes, bugs, Mode::Secure, true).await
}

/// [`start_cluster`] over plain HTTP, for stories that write raw requests ([`RawRequest`]).
pub async fn start_insecure_cluster(nodes: u64, bugs: &str) -> anyhow::Result<TestCluster> {
    start_cluster_in(nodes, bugs, Mode::Insecure, false).await
}

async fn start_cluster_in(
    nodes: u64,
    bugs: &str,
    mode: Mode,
    disk_faults: bool,
) -> anyhow::Result<TestCluster> {
    start_cluster_with(nodes, bugs, mode, disk_faults, Path::new(BIN)).await
}

async fn start_cluster_with(
    nodes: u64,
    bugs: &str,
    mode: Mode,
    disk_faults: bool,
    binary: &Path,
) -> anyhow::Result<TestCluster> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let cluster = ProcCluster::start(ClusterOptions {
        nodes,
        binary: binary.to_path_buf(),
        dir: dir.path().to_path_buf(),
        bugs: bugs.to_string(),
        extra_args: Vec::new(),
        etcd_port: false,
        backend: Backend::Netns,
        mode,
        disk_faults,
    })
    .await?;
    eprintln!(
        "cluster of {nodes} up in {} ms, {mode:?} (dir {})",
        ms(started.elapsed()),
        dir.path().display()
    );
    Ok(TestCluster { cluster, dir })
}

impl TestCluster {
    /// A node to send requests to: the first one running and not paused (any node serves any
    /// request; followers forward to the leader).
    pub fn any(&self) -> anyhow::Result<u64> {
        self.live()
            .first()
            .copied()
            .ok_or_else(|| anyhow!("no live node"))
    }

    /// Whether any node's log contains `needle`.
    pub fn any_log_contains(&self, needle: &str) -> bool {
        self.ids()
            .into_iter()
            .any(|id| self.log_contains(id, needle))
    }

    /// The sum of the nodes' `fenced_rejections` counters.
    pub async fn fenced_rejections(&self) -> anyhow::Result<u64> {
        let mut sum = 0;
        for id in self.live() {
            sum += self.status(id).await?["fenced_rejections"]
                .as_u64()
                .unwrap_or(0);
        }
        Ok(sum)
    }

    /// Grants a lease of `ttl_ms` through node `id`.
    pub async fn grant_lease_on(&self, id: u64, ttl_ms: u64) -> anyhow::Result<u64> {
        let (code, v) = self
            .post(id, "/v1/leases", json!({ "ttl_ms": ttl_ms }))
            .await?;
        if code != 200 {
            bail!("lease grant {code}: {v}");
        }
        v["lease_id"].as_u64().context("lease_id")
    }

    pub async fn grant_lease(&self, ttl_ms: u64) -> anyhow::Result<u64> {
        self.grant_lease_on(self.any()?, ttl_ms).await
    }

    /// A try-acquire (`wait_ms` 0) through node `id`: status and body.
    pub async fn try_acquire_on(
        &self,
        id: u64,
        lock: &str,
        lease_id: u64,
    ) -> anyhow::Result<(u16, Value)> {
        self.post(
            id,
            &format!("/v1/locks/{lock}/acquire"),
            json!({ "lease_id": lease_id, "wait_ms": 0 }),
        )
        .await
    }

    /// A try-acquire that must be granted; returns the grant's token.
    pub async fn acquire_now(&self, lock: &str, lease_id: u64) -> anyhow::Result<u64> {
        let (code, v) = self.try_acquire_on(self.any()?, lock, lease_id).await?;
        if code != 200 {
            bail!("acquire {lock} {code}: {v}");
        }
        v["token"].as_u64().context("token")
    }

    /// Releases `lock` held by `lease_id` with `token`: status and body.
    pub async fn release(
        &self,
        lock: &str,
        token: u64,
        lease_id: u64,
    ) -> anyhow::Result<(u16, Value)> {
        self.post(
            self.any()?,
            &format!("/v1/locks/{lock}/release"),
            json!({ "token": token, "lease_id": lease_id }),
        )
        .await
    }

    /// `PUT /v1/kv/{key}` with `body` through node `id`: status and body.
    pub async fn put_on(&self, id: u64, key: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(
            id,
            reqwest::Method::PUT,
            &format!("/v1/kv/{key}"),
            Some(body),
        )
        .await
    }

    /// `GET /v1/locks/{lock}` through node `id`, parsed.
    pub async fn lock_state_on(&self, id: u64, lock: &str) -> anyhow::Result<LockState> {
        let (code, v) = self.get(id, &format!("/v1/locks/{lock}")).await?;
        if code != 200 {
            bail!("lock read {code}: {v}");
        }
        LockState::parse(&v)
    }

    pub async fn lock_state(&self, lock: &str) -> anyhow::Result<LockState> {
        self.lock_state_on(self.any()?, lock).await
    }

    /// `GET /v1/leases/{id}`: status and body.
    pub async fn lease(&self, lease_id: u64) -> anyhow::Result<(u16, Value)> {
        self.get(self.any()?, &format!("/v1/leases/{lease_id}"))
            .await
    }

    /// Revokes a lease; a lease already gone is fine.
    pub async fn revoke(&self, lease_id: u64) -> anyhow::Result<()> {
        let (code, v) = self
            .call(
                self.any()?,
                reqwest::Method::DELETE,
                &format!("/v1/leases/{lease_id}"),
                None,
            )
            .await?;
        if code != 200 && code != 404 {
            bail!("revoke {lease_id}: {code} {v}");
        }
        Ok(())
    }

    /// Waits until `lock`'s queue lists `lease_id`.
    pub async fn wait_queued(&self, lock: &str, lease_id: u64) -> anyhow::Result<LockState> {
        wait_until(
            &format!("lease {lease_id} to queue on {lock}"),
            Duration::from_secs(10),
            || async {
                let s = self.lock_state(lock).await.ok()?;
                s.waiters.contains(&lease_id).then_some(s)
            },
        )
        .await
    }
}

/// One holder of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub lease_id: u64,
    pub token: u64,
    pub term: u64,
}

/// A lock's holders and queue (lease ids, first in line first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub holders: Vec<Holding>,
    pub waiters: Vec<u64>,
}

impl LockState {
    fn parse(v: &Value) -> anyhow::Result<LockState> {
        let list = |field: &str| -> anyhow::Result<Vec<Value>> {
            v[field]
                .as_array()
                .cloned()
                .ok_or_else(|| anyhow!("no {field} in {v}"))
        };
        let num = |h: &Value, f: &str| h[f].as_u64().ok_or_else(|| anyhow!("no {f} in {h}"));
        let holders = list("holders")?
            .iter()
            .map(|h| {
                Ok(Holding {
                    lease_id: num(h, "lease_id")?,
                    token: num(h, "token")?,
                    term: num(h, "term")?,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let waiters = list("waiters")?
            .iter()
            .map(|w| num(w, "lease_id"))
            .collect::<anyhow::Result<_>>()?;
        Ok(LockState { holders, waiters })
    }

    /// The lease of the single holder, if exactly one holds the lock.
    pub fn holder(&self) -> Option<u64> {
        match self.holders.as_slice() {
            [h] => Some(h.lease_id),
            _ => None,
        }
    }
}

/// An HTTP client for the tests' own long requests (waiting acquires) to `cluster`'s nodes:
/// no proxy, the cluster's credentials, a timeout longer than any wait.
pub fn long_http(cluster: &ProcCluster) -> anyhow::Result<reqwest::Client> {
    Ok(cluster
        .http_builder()?
        .timeout(Duration::from_millis(LONG_HTTP_TIMEOUT_MS))
        .build()?)
}

/// Sends of one waiting acquire at most: the first and its resends.
const ACQUIRE_SENDS_MAX: u32 = 5;

/// A waiting acquire at `endpoint` (`http://ip:port`): status and body. The `request_id`
/// makes it retry-safe, and names the wait in the node logs. An answer that leaves the outcome
/// unknown (`504 indeterminate`, `503 no_quorum`: a loaded or cut-off leader) is resent with the
/// same `request_id`, as the docs tell every client to (locking.md, "request_id and retries"):
/// the resend re-attaches to the queued wait or returns its outcome. Each resend is printed,
/// so a test's output shows how often the cluster could not answer.
pub async fn acquire_wait(
    http: &reqwest::Client,
    endpoint: &str,
    lock: &str,
    lease_id: u64,
    wait_ms: u64,
) -> anyhow::Result<(u16, Value)> {
    let request_id = format!("story-{lock}-{lease_id}");
    let body = json!({
        "lease_id": lease_id,
        "wait_ms": wait_ms,
        "request_id": request_id,
    });
    let mut sends = 0;
    loop {
        sends += 1;
        let resp = http
            .post(format!("{endpoint}/v1/locks/{lock}/acquire"))
            .json(&body)
            .send()
            .await?;
        let code = resp.status().as_u16();
        let text = resp.text().await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let unknown = matches!(
            (code, v["code"].as_str()),
            (504, Some("indeterminate")) | (503, Some("no_quorum"))
        );
        if !unknown || sends == ACQUIRE_SENDS_MAX {
            return Ok((code, v));
        }
        eprintln!(
            "{request_id}: {code} {v}; resending it (send {})",
            sends + 1
        );
    }
}

/// A `lost reason=R at_ms=T` line of a holder.
#[derive(Debug, Clone)]
pub struct LostLine {
    pub line: String,
    /// When the holder printed it (unix ms, the holder's clock: this machine's).
    pub at_ms: u64,
}

/// A holder's `granted` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderGrant {
    pub token: u64,
    pub lease_id: u64,
    pub cluster_id: String,
}

/// A `turnstile-jepsen holder` process in its own namespace on a cluster's bridge. A reader
/// thread splits its stdout into answers (read with [`HolderProc::expect`]) and `lost` lines
/// (kept apart, see [`HolderProc::wait_lost`]). Dropping it kills the process.
pub struct HolderProc {
    pub name: String,
    pub host: NetHost,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
    lost: Arc<Mutex<Vec<LostLine>>>,
    session_lease: Option<u64>,
    /// Set once the process is reaped: its pid may belong to someone else from then on.
    reaped: bool,
}

impl HolderProc {
    /// Adds client host `name` at `.<octet>` to the cluster and starts a holder there that
    /// opens a session of `ttl_ms` and acquires `lock` (waiting up to [`HOLDER_WAIT_MS`]).
    pub fn spawn(
        tc: &mut TestCluster,
        name: &str,
        octet: u8,
        lock: &str,
        ttl_ms: u64,
    ) -> anyhow::Result<HolderProc> {
        let host = tc.add_client_host(name, octet)?;
        let log = std::fs::File::create(tc.dir.path().join(format!("holder-{name}.log")))?;
        let mut cmd = tc.net().command_in(&host, BIN.as_ref());
        cmd.arg("holder");
        if let Some(certs) = tc.certs() {
            let client = certs.client();
            cmd.arg("--cacert").arg(certs.ca_cert());
            cmd.arg("--cert")
                .arg(client.cert)
                .arg("--key")
                .arg(client.key);
        }
        cmd.arg("--endpoints")
            .arg(tc.endpoints().join(","))
            .args(["--lock", lock])
            .args(["--ttl-ms", &ttl_ms.to_string()])
            .args(["--wait-ms", &HOLDER_WAIT_MS.to_string()])
            .env("TURNSTILE_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd.spawn().context("cannot start a holder")?;
        let stdin = child.stdin.take().context("holder stdin")?;
        let stdout = child.stdout.take().context("holder stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        let lost = Arc::new(Mutex::new(Vec::new()));
        let (lost_w, tag) = (lost.clone(), name.to_string());
        std::thread::spawn(move || read_lines(stdout, &tag, &tx, &lost_w));
        Ok(HolderProc {
            name: name.to_string(),
            host,
            child,
            stdin,
            lines,
            lost,
            session_lease: None,
            reaped: false,
        })
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Writes one command line.
    pub fn send(&mut self, cmd: &str) -> anyhow::Result<()> {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").context("holder stdin")?;
        self.stdin.flush().context("holder stdin")
    }

    /// The next answer line (not a `lost` line), within `timeout`.
    pub async fn next_line(&mut self, timeout: Duration) -> anyhow::Result<String> {
        match tokio::time::timeout(timeout, self.lines.recv()).await {
            Ok(Some(line)) => Ok(line),
            Ok(None) => bail!("holder {} closed its stdout", self.name),
            Err(_) => bail!("holder {} said nothing in {} ms", self.name, ms(timeout)),
        }
    }

    /// The next answer line, which must start with `prefix`.
    pub async fn expect(&mut self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let line = self.next_line(timeout).await?;
        if !line.starts_with(prefix) {
            bail!("holder {}: expected {prefix:?}, got {line:?}", self.name);
        }
        Ok(line)
    }

    /// Sends `cmd` and returns its answer line.
    pub async fn call(&mut self, cmd: &str, timeout: Duration) -> anyhow::Result<String> {
        self.send(cmd)?;
        self.next_line(timeout).await
    }

    /// The session's lease, from the `session lease=L` line.
    pub async fn session_lease(&mut self, timeout: Duration) -> anyhow::Result<u64> {
        if let Some(lease) = self.session_lease {
            return Ok(lease);
        }
        let line = self.expect("session ", timeout).await?;
        let lease = field(&line, "lease")?.parse()?;
        self.session_lease = Some(lease);
        Ok(lease)
    }

    /// Waits for the `granted` line.
    pub async fn granted(&mut self, timeout: Duration) -> anyhow::Result<HolderGrant> {
        let deadline = Instant::now() + timeout;
        self.session_lease(timeout).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let line = self.expect("granted ", left).await?;
        Ok(HolderGrant {
            token: field(&line, "token")?.parse()?,
            lease_id: field(&line, "lease")?.parse()?,
            cluster_id: field(&line, "cluster")?.to_string(),
        })
    }

    /// Every `lost` line so far.
    pub fn lost(&self) -> Vec<LostLine> {
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits for the first `lost` line.
    pub async fn wait_lost(&self, timeout: Duration) -> anyhow::Result<LostLine> {
        let what = format!("holder {} to print lost", self.name);
        wait_until(&what, timeout, || async { self.lost().first().cloned() }).await
    }

    /// SIGSTOP: the process freezes, its keepalives stop.
    pub fn stop(&self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGSTOP).context("SIGSTOP")
    }

    /// SIGCONT.
    pub fn cont(&self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGCONT).context("SIGCONT")
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if self.reaped {
            return Ok(());
        }
        kill(self.pid(), Signal::SIGKILL).context("SIGKILL")?;
        // A stopped process dies of SIGKILL too; SIGCONT only makes that immediate everywhere.
        let _ = kill(self.pid(), Signal::SIGCONT);
        self.child.wait().context("reap a holder")?;
        self.reaped = true;
        Ok(())
    }
}

impl Drop for HolderProc {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// `key=value` out of a holder line.
fn field<'a>(line: &'a str, key: &str) -> anyhow::Result<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .ok_or_else(|| anyhow!("no {key}= in {line:?}"))
}

/// The reader thread: answers to the channel, `lost` lines to their own list, all echoed.
fn read_lines(
    stdout: std::process::ChildStdout,
    tag: &str,
    tx: &mpsc::UnboundedSender<String>,
    lost: &Mutex<Vec<LostLine>>,
) {
    use std::io::BufRead;
    for line in std::io::BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        eprintln!("  [{tag}] {line}");
        if line.starts_with("lost reason=") {
            let at_ms = field(&line, "at_ms")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            lost.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(LostLine { line, at_ms });
        } else if tx.send(line).is_err() {
            break;
        }
    }
}

/// The number in an `ok N` answer.
pub fn ok_number(answer: &str) -> anyhow::Result<i64> {
    answer
        .strip_prefix("ok ")
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| anyhow!("expected `ok N`, got {answer:?}"))
}

/// The fenced example ledger served in-process, on one listener per address (port 0 each).
/// Dropping it stops the servers.
pub struct LedgerServer {
    pub ledger: Arc<Ledger>,
    /// `http://ip:port`, one per listener, in the order of the addresses given.
    pub urls: Vec<String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl LedgerServer {
    /// Serves `ledger` on each of `ips` (bridge host addresses, so namespaced clients reach it).
    pub async fn serve(ledger: Ledger, ips: &[Ipv4Addr]) -> anyhow::Result<LedgerServer> {
        let ledger = Arc::new(ledger);
        let mut urls = Vec::new();
        let mut tasks = Vec::new();
        for ip in ips {
            let listener = tokio::net::TcpListener::bind(SocketAddr::from((*ip, 0))).await?;
            urls.push(format!("http://{}", listener.local_addr()?));
            let app = turnstile_fence::ledger::http::router(ledger.clone());
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        Ok(LedgerServer {
            ledger,
            urls,
            tasks,
        })
    }

    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    pub fn stats(&self) -> LedgerStats {
        self.ledger.stats()
    }

    /// A plain (unfenced) read of `account`.
    pub fn balance(&self, account: &str) -> anyhow::Result<i64> {
        self.ledger
            .balance(account, None)
            .map_err(|e| anyhow!("{e}"))
    }
}

impl Drop for LedgerServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// An HTTP/1.1 request written straight to a socket, so it is certainly queued at a node even
/// when the node is frozen (the kernel accepts the connection and buffers the bytes); the answer
/// is read later with [`RawRequest::answer`]. Plain HTTP only: a cluster from
/// [`start_insecure_cluster`].
pub struct RawRequest {
    stream: tokio::net::TcpStream,
}

impl RawRequest {
    pub async fn send(
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<RawRequest> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.flush().await?;
        Ok(RawRequest { stream })
    }

    /// Reads the whole answer (the server closes the connection): status and JSON body.
    pub async fn answer(mut self, timeout: Duration) -> anyhow::Result<(u16, Value)> {
        let mut buf = Vec::new();
        tokio::time::timeout(timeout, self.stream.read_to_end(&mut buf))
            .await
            .context("no answer in time")??;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| anyhow!("no header end in {text:?}"))?;
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| anyhow!("no status in {head:?}"))?;
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        Ok((
            code,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        ))
    }
}

/// Decodes a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// The JSON body a holder put after `fenced ` (the ledger's refusal).
pub fn fenced_body(answer: &str) -> anyhow::Result<Value> {
    let body = answer
        .strip_prefix("fenced ")
        .ok_or_else(|| anyhow!("expected `fenced BODY`, got {answer:?}"))?;
    Ok(serde_json::from_str(body)?)
}

/// `{"code": ...}` of a JSON error body, or "".
pub fn error_code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("")
}

pub fn json_u64(v: &Value, f: &str) -> anyhow::Result<u64> {
    v[f].as_u64().ok_or_else(|| anyhow!("no {f} in {v}"))
}

/// The test's default per-line timeout for holder answers.
pub const ANSWER: Duration = Duration::from_secs(15);

/// Builds a `json!` body for the fenced store write of `lock` at `token`.
pub fn fenced_put(value: &str, lock: &str, token: u64) -> Value {
    json!({ "value": value, "fence": { "lock": lock, "token": token } })
}
