//! Test fixture: real in-process Turnstile clusters on loopback (ports bound to 0, data dirs in
//! a temp dir, real sled and fsync), with restarts, wipes and fault-injected network cuts.
//! Every wait polls a condition with a deadline; nothing sleeps a fixed time to "let it settle".
//!
//! [`Cluster::start_secure`] starts nodes with TLS: a CA, node certificates for 127.0.0.1 and
//! a `root` client certificate are made in the cluster's temp dir (`turnstile_server::tls::
//! certs`), peers talk mutual TLS, and the fixture's own client speaks HTTPS as `root`.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use turnstile_raft::faults::Faults;
use turnstile_server::config::{format_initial_cluster, InitialClusterState, ServeArgs};
use turnstile_server::node::{self, RunningNode};
use turnstile_server::tls::certs::{self, CertOptions, CertPaths};

pub mod cdp;
pub mod load;
pub mod raw_http;

/// How long any wait in the fixture may take before the test fails.
pub const WAIT_MS_MAX: u64 = 20_000;

/// Installs a test log subscriber once (RUST_LOG-style filter in `TURNSTILE_TEST_LOG`).
pub fn init_logging() {
    let filter =
        std::env::var("TURNSTILE_TEST_LOG").unwrap_or_else(|_| "warn,openraft=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Polls `f` until it returns `Some`, failing after [`WAIT_MS_MAX`].
pub async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Some(t) = f().await {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cluster of in-process nodes.
pub struct Cluster {
    pub addrs: BTreeMap<u64, SocketAddr>,
    nodes: BTreeMap<u64, RunningNode>,
    faults: BTreeMap<u64, Faults>,
    root: tempfile::TempDir,
    secret: String,
    http: reqwest::Client,
    /// Applied to every node's arguments.
    tweak: fn(&mut ServeArgs),
    /// A secure cluster's certs dir (CA, node and `root` client certificates).
    certs: Option<PathBuf>,
}

/// The user of the fixture's own client certificate in a secure cluster.
pub const ROOT_USER: &str = "root";

/// How a cluster is started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Security {
    Plain,
    Tls,
}

impl Cluster {
    /// Starts `n` nodes that form a new cluster, and waits for a leader.
    pub async fn start(n: u64) -> anyhow::Result<Cluster> {
        Cluster::start_seeded(n, |_, _, _| async { Ok(()) }).await
    }

    /// Like [`Cluster::start`], with `tweak` applied to every node's arguments (now and on
    /// every later start).
    pub async fn start_tuned(n: u64, tweak: fn(&mut ServeArgs)) -> anyhow::Result<Cluster> {
        Cluster::start_full(n, tweak, Security::Plain, |_, _, _| async { Ok(()) }).await
    }

    /// Starts `n` nodes with TLS on their ports and mutual TLS between them (see the module
    /// header), and waits for a leader.
    pub async fn start_secure(n: u64) -> anyhow::Result<Cluster> {
        Cluster::start_secure_tuned(n, |_| {}).await
    }

    /// [`Cluster::start_secure`] with `tweak` applied to every node's arguments.
    pub async fn start_secure_tuned(n: u64, tweak: fn(&mut ServeArgs)) -> anyhow::Result<Cluster> {
        Cluster::start_full(n, tweak, Security::Tls, |_, _, _| async { Ok(()) }).await
    }

    /// Like [`Cluster::start`], but first lets `seed` fill each node's data dir, given its id,
    /// its dir and every node's address (restore tests seed them from a backup).
    pub async fn start_seeded<F, Fut>(n: u64, seed: F) -> anyhow::Result<Cluster>
    where
        F: FnMut(u64, PathBuf, BTreeMap<u64, SocketAddr>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        Cluster::start_full(n, |_| {}, Security::Plain, seed).await
    }

    async fn start_full<F, Fut>(
        n: u64,
        tweak: fn(&mut ServeArgs),
        security: Security,
        mut seed: F,
    ) -> anyhow::Result<Cluster>
    where
        F: FnMut(u64, PathBuf, BTreeMap<u64, SocketAddr>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        init_logging();
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await?;
            listeners.insert(id, l);
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().expect("bound")))
            .collect();
        let root = tempfile::tempdir()?;
        let certs = match security {
            Security::Plain => None,
            Security::Tls => Some(make_certs(&root.path().join("certs"), n)?),
        };
        let mut c = Cluster {
            addrs,
            nodes: BTreeMap::new(),
            faults: (1..=n).map(|id| (id, Faults::default())).collect(),
            root,
            secret: "test-cluster-secret".into(),
            http: reqwest::Client::new(),
            tweak,
            certs,
        };
        let root_cert = c.certs.as_ref().map(|d| certs::client_paths(d, ROOT_USER));
        c.http = c
            .client_builder(root_cert.as_ref())?
            .timeout(Duration::from_secs(15))
            .build()?;
        for id in 1..=n {
            seed(id, c.data_dir(id), c.addrs.clone()).await?;
        }
        for (id, l) in listeners {
            c.start_on(id, l, InitialClusterState::New).await?;
        }
        c.leader().await?;
        Ok(c)
    }

    /// Starts a new node (the next free id) on an empty data dir with
    /// `--initial-cluster-state existing`: it waits until it is added through membership.
    pub async fn add_node(&mut self) -> anyhow::Result<u64> {
        let id = self.addrs.keys().max().map_or(1, |m| m + 1);
        let l = TcpListener::bind("127.0.0.1:0").await?;
        self.addrs.insert(id, l.local_addr()?);
        self.faults.insert(id, Faults::default());
        if let Some(dir) = &self.certs {
            certs::create_node(dir, id, &node_hosts(), &CertOptions::default())?;
        }
        self.start_on(id, l, InitialClusterState::Existing).await?;
        Ok(id)
    }

    /// Node `id`'s etcd port, when the cluster serves one (`--etcd-listen`) and `id` runs.
    pub fn etcd_addr(&self, id: u64) -> Option<SocketAddr> {
        self.nodes.get(&id).and_then(|n| n.etcd_addr)
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    fn args(&self, id: u64, state: InitialClusterState) -> ServeArgs {
        let mut args = ServeArgs {
            id: Some(id),
            listen: Some(self.addrs[&id]),
            data_dir: Some(self.data_dir(id)),
            initial_cluster: Some(format_initial_cluster(&self.addrs)),
            cluster_secret: Some(self.secret.clone()),
            initial_cluster_state: Some(state),
            check_invariants: true,
            ..ServeArgs::default()
        };
        if let Some(dir) = &self.certs {
            let node = certs::node_paths(dir, id);
            args.tls_ca = Some(certs::ca_paths(dir).cert);
            args.tls_cert = Some(node.cert);
            args.tls_key = Some(node.key);
        }
        (self.tweak)(&mut args);
        args
    }

    async fn start_on(
        &mut self,
        id: u64,
        listener: TcpListener,
        state: InitialClusterState,
    ) -> anyhow::Result<()> {
        let mut cfg = self.args(id, state).resolve()?;
        // Not a flag (`turnstile serve` has none): only an embedding program turns hooks on.
        cfg.enable_test_hooks = true;
        let node = node::start(cfg, listener, self.faults[&id].clone()).await?;
        self.nodes.insert(id, node);
        Ok(())
    }

    /// Stops node `id` cleanly (its data dir stays).
    pub async fn stop(&mut self, id: u64) {
        if let Some(n) = self.nodes.remove(&id) {
            n.shutdown().await;
        }
    }

    /// Starts a stopped node again on its address and data dir.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        self.restart_with(id, InitialClusterState::New).await
    }

    pub async fn restart_with(
        &mut self,
        id: u64,
        state: InitialClusterState,
    ) -> anyhow::Result<()> {
        let addr = self.addrs[&id];
        let listener = wait_for("the node's port to be free", || async {
            TcpListener::bind(addr).await.ok()
        })
        .await?;
        self.start_on(id, listener, state).await
    }

    /// Starts node `id` and returns the start error, if any (for refusal tests).
    pub async fn try_restart(&mut self, id: u64) -> Result<(), String> {
        self.restart(id).await.map_err(|e| format!("{e:#}"))
    }

    /// Deletes a stopped node's data dir.
    pub fn wipe(&self, id: u64) -> anyhow::Result<()> {
        std::fs::remove_dir_all(self.data_dir(id)).context("wipe")
    }

    /// Stops node `id`, empties its data dir and starts it again, as after a lost disk;
    /// returns once it waits to be re-admitted (phase `awaiting`).
    pub async fn restart_empty(&mut self, id: u64) -> anyhow::Result<()> {
        self.stop(id).await;
        self.wipe(id)?;
        self.restart(id).await?;
        wait_for("the wiped node to wait for re-admission", || async {
            let s = self.status(id).await.ok()?;
            (s["phase"] == "awaiting").then_some(())
        })
        .await
    }

    /// Adds node `id` (at its address) as a learner through node `via`, then promotes it, as an
    /// operator adds or re-admits a node. Returns the promote call's answer (the membership).
    pub async fn admit(&self, via: u64, id: u64) -> anyhow::Result<Value> {
        let addr = self.addrs[&id].to_string();
        let (code, v) = self
            .post(via, "/v1/members", json!({"id": id, "addr": addr}))
            .await?;
        anyhow::ensure!(code == 200, "add learner {id}: HTTP {code}: {v}");
        let (code, v) = self
            .post(via, &format!("/v1/members/{id}/promote"), json!({}))
            .await?;
        anyhow::ensure!(code == 200, "promote {id}: HTTP {code}: {v}");
        Ok(v)
    }

    /// Node `id`'s shared context (its Raft handle, state, config), while it runs.
    pub fn app(&self, id: u64) -> Option<std::sync::Arc<turnstile_server::app::App>> {
        self.nodes.get(&id).map(|n| n.app.clone())
    }

    pub fn running(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Cuts every link between `id` and the other nodes (both directions).
    pub fn isolate(&self, id: u64) {
        for (&other, f) in &self.faults {
            if other != id {
                f.block([id]);
            }
        }
        self.faults[&id].block(self.addrs.keys().copied().filter(|&o| o != id));
    }

    /// Splits the cluster into `side` and the rest.
    pub fn partition(&self, side: &[u64]) {
        for (&a, f) in &self.faults {
            let in_side = side.contains(&a);
            f.block(
                self.addrs
                    .keys()
                    .copied()
                    .filter(|b| side.contains(b) != in_side),
            );
        }
    }

    pub fn heal(&self) {
        for f in self.faults.values() {
            f.heal();
        }
    }

    pub fn url(&self, id: u64, path: &str) -> String {
        format!("{}://{}{}", self.scheme(), self.addrs[&id], path)
    }

    /// `https` for a secure cluster, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.certs.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// A secure cluster's certs dir: `ca.crt`/`ca.key`, `node-N.crt`/`.key`,
    /// `client-root.crt`/`.key` (see `turnstile_server::tls::certs`).
    pub fn certs_dir(&self) -> Option<PathBuf> {
        self.certs.clone()
    }

    /// A client builder for this cluster: in a secure one it trusts only the cluster CA and
    /// presents `identity` if given (any certificate files, e.g. from another CA). Plain
    /// clusters ignore `identity`.
    pub fn client_builder(
        &self,
        identity: Option<&CertPaths>,
    ) -> anyhow::Result<reqwest::ClientBuilder> {
        let mut b = reqwest::Client::builder().no_proxy();
        let Some(dir) = &self.certs else {
            return Ok(b);
        };
        let ca = std::fs::read(certs::ca_paths(dir).cert)?;
        b = b
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
            .https_only(true);
        if let Some(paths) = identity {
            let mut pem = std::fs::read(&paths.key)?;
            pem.extend(std::fs::read(&paths.cert)?);
            b = b.identity(reqwest::Identity::from_pem(&pem)?);
        }
        Ok(b)
    }

    /// Sends a request; returns the status and the JSON body (Null if none).
    pub async fn call(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut rb = self.http.request(method, self.url(id, path));
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .with_context(|| format!("{path} on node {id}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| anyhow!("non-JSON body {text:?}: {e}"))?
        };
        Ok((status, v))
    }

    /// A GET whose answer is not JSON (a backup file): the status and the raw body.
    pub async fn get_bytes(&self, id: u64, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
        let resp = self
            .http
            .get(self.url(id, path))
            .send()
            .await
            .with_context(|| format!("{path} on node {id}"))?;
        let status = resp.status().as_u16();
        Ok((status, resp.bytes().await?.to_vec()))
    }

    pub async fn get(&self, id: u64, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::GET, path, None).await
    }

    pub async fn delete(&self, id: u64, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::DELETE, path, None).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::POST, path, Some(body)).await
    }

    /// This node's `/v1/cluster` view.
    pub async fn status(&self, id: u64) -> anyhow::Result<Value> {
        let (code, v) = self.get(id, "/v1/cluster").await?;
        if code != 200 {
            bail!("cluster status {code}: {v}");
        }
        Ok(v)
    }

    /// Waits until a running node reports itself leader with a cluster id, and returns it.
    pub async fn leader(&self) -> anyhow::Result<u64> {
        wait_for("a leader", || async {
            for &id in self.nodes.keys() {
                if let Ok(s) = self.status(id).await {
                    if s["state"] == "Leader"
                        && !s["cluster_id"].is_null()
                        && s["phase"] == "member"
                    {
                        return Some(id);
                    }
                }
            }
            None
        })
        .await
    }

    /// Waits until every running node reports the same applied index and state digest.
    pub async fn converged(&self) -> anyhow::Result<(u64, String)> {
        wait_for("all nodes to converge", || async {
            let mut seen = Vec::new();
            for &id in self.nodes.keys() {
                let s = self.status(id).await.ok()?;
                seen.push((
                    s["applied_index"].as_u64()?,
                    s["state_digest"].as_str()?.to_string(),
                ));
            }
            let first = seen.first()?.clone();
            seen.iter().all(|s| *s == first).then_some(first)
        })
        .await
    }

    /// Grants a lease through node `id`.
    pub async fn lease(&self, id: u64, ttl_ms: u64) -> anyhow::Result<u64> {
        let (code, v) = self
            .post(id, "/v1/leases", json!({"ttl_ms": ttl_ms}))
            .await?;
        if code != 200 {
            bail!("lease grant {code}: {v}");
        }
        v["lease_id"]
            .as_u64()
            .ok_or_else(|| anyhow!("no lease_id in {v}"))
    }

    pub async fn acquire(
        &self,
        id: u64,
        name: &str,
        lease_id: u64,
    ) -> anyhow::Result<(u16, Value)> {
        self.post(
            id,
            &format!("/v1/locks/{name}/acquire"),
            json!({"lease_id": lease_id, "wait_ms": 0}),
        )
        .await
    }

    pub async fn release(
        &self,
        id: u64,
        name: &str,
        lease_id: u64,
        token: u64,
    ) -> anyhow::Result<(u16, Value)> {
        self.post(
            id,
            &format!("/v1/locks/{name}/release"),
            json!({"lease_id": lease_id, "token": token}),
        )
        .await
    }

    /// Stops every node (used at the end of tests so data dirs are released before cleanup).
    pub async fn shutdown(mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// Hosts in the fixture's node certificates.
pub fn node_hosts() -> Vec<String> {
    vec!["127.0.0.1".into(), "localhost".into()]
}

/// A CA, certificates for nodes `1..=n` and the `root` client certificate in `dir`.
fn make_certs(dir: &std::path::Path, n: u64) -> anyhow::Result<PathBuf> {
    let opts = CertOptions::default();
    certs::create_ca(dir, &opts)?;
    for id in 1..=n {
        certs::create_node(dir, id, &node_hosts(), &opts)?;
    }
    certs::create_client(dir, ROOT_USER, &opts)?;
    Ok(dir.to_path_buf())
}

/// The `token` of a successful acquire.
pub fn token(v: &Value) -> anyhow::Result<u64> {
    v["token"]
        .as_u64()
        .ok_or_else(|| anyhow!("no token in {v}"))
}

/// One server-sent event as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sse {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

/// Reads server-sent events from `url` until `want` events arrived (or the stream ends, or
/// [`WAIT_MS_MAX`] passes), resuming after `last_event_id` if given.
pub async fn read_sse(
    url: &str,
    last_event_id: Option<&str>,
    want: usize,
) -> anyhow::Result<Vec<Sse>> {
    read_sse_with(&reqwest::Client::new(), url, last_event_id, want).await
}

/// [`read_sse`] with a client of the caller's (a secure cluster's, with its credential).
pub async fn read_sse_with(
    http: &reqwest::Client,
    url: &str,
    last_event_id: Option<&str>,
    want: usize,
) -> anyhow::Result<Vec<Sse>> {
    let mut rb = http.get(url);
    if let Some(id) = last_event_id {
        rb = rb.header("last-event-id", id);
    }
    let mut resp = rb.send().await?;
    if !resp.status().is_success() {
        bail!("watch {url}: HTTP {}", resp.status());
    }
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while out.len() < want {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Err(_) => bail!("timed out with {} of {want} events: {out:?}", out.len()),
            Ok(chunk) => match chunk? {
                Some(chunk) => chunk,
                None => break,
            },
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            if data.is_empty() {
                continue; // keep-alive comment
            }
            out.push(Sse {
                id,
                event,
                data: serde_json::from_str(&data)?,
            });
        }
    }
    Ok(out)
}
