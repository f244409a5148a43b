//! A cluster of real node processes, each in its own network namespace, with the faults the
//! nemesis and the failure-story tests need: SIGKILL and restart on the same data dir,
//! SIGSTOP/SIGCONT, nftables partitions (any grudge, including one-way), heal, and a jump of a
//! node's wall clock through the test hook.
//!
//! Node processes run `turnstile-jepsen node`, which is `turnstile serve` (the same
//! `turnstile_server::serve::serve`) in a binary that also carries the bug-injection switches.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::netns::{Net, NetHost};

/// The port every node listens on inside its namespace.
pub const NODE_PORT: u16 = 7000;
/// The cluster secret of harness clusters.
const SECRET: &str = "jepsen-cluster-secret";
/// Longest a wait in the harness may take before it gives up.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Timeout of one harness HTTP request to a node.
const HTTP_TIMEOUT_MS: u64 = 10_000;

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub nodes: u64,
    /// The node binary (`turnstile-jepsen`, run as `node`).
    pub binary: PathBuf,
    /// Data dirs and node logs go here.
    pub dir: PathBuf,
    /// `TURNSTILE_BUGS` for every node; empty for a correct server.
    pub bugs: String,
    /// Extra `serve` flags (e.g. `--request-timeout-ms 3000`).
    pub extra_args: Vec<String>,
}

/// One node process and where it lives.
#[derive(Debug)]
struct NodeProc {
    host: NetHost,
    child: Option<Child>,
    paused: bool,
    restarts: u32,
}

/// A running cluster. Dropping it kills every node and removes the network.
pub struct ProcCluster {
    opts: ClusterOptions,
    nodes: BTreeMap<u64, NodeProc>,
    http: reqwest::Client,
    /// Client hosts added for processes under test; `heal` clears their rules too.
    clients: Vec<NetHost>,
    // Dropped last: the namespaces go after the processes in them.
    net: Net,
}

impl ProcCluster {
    /// Creates the network, starts every node and waits for a leader.
    pub async fn start(opts: ClusterOptions) -> anyhow::Result<ProcCluster> {
        let mut net = Net::create()?;
        let mut nodes = BTreeMap::new();
        for id in 1..=opts.nodes {
            let host = net.add_host(&format!("n{id}"), 10 + id as u8)?;
            nodes.insert(
                id,
                NodeProc {
                    host,
                    child: None,
                    paused: false,
                    restarts: 0,
                },
            );
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(HTTP_TIMEOUT_MS))
            .build()?;
        std::fs::create_dir_all(&opts.dir)?;
        let mut c = ProcCluster {
            opts,
            nodes,
            http,
            clients: Vec::new(),
            net,
        };
        let ids: Vec<u64> = c.nodes.keys().copied().collect();
        for id in ids {
            c.spawn(id)?;
        }
        c.leader().await?;
        Ok(c)
    }

    pub fn net(&self) -> &Net {
        &self.net
    }

    /// Adds a namespace `name` at `.<octet>` on the cluster's bridge for a client process under
    /// test (run it with `net().command_in`). Octets 11 and up to 10 + nodes are the nodes'.
    pub fn add_client_host(&mut self, name: &str, octet: u8) -> anyhow::Result<NetHost> {
        if (11..=10 + self.opts.nodes).contains(&u64::from(octet)) {
            bail!("octet {octet} belongs to a node");
        }
        let host = self.net.add_host(name, octet)?;
        self.clients.push(host.clone());
        Ok(host)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn ip(&self, id: u64) -> Ipv4Addr {
        self.nodes[&id].host.ip
    }

    pub fn addr(&self, id: u64) -> SocketAddr {
        SocketAddr::from((self.ip(id), NODE_PORT))
    }

    /// `http://ip:port` of node `id`.
    pub fn endpoint(&self, id: u64) -> String {
        format!("http://{}", self.addr(id))
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.ids().into_iter().map(|id| self.endpoint(id)).collect()
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.opts.dir.join(format!("node-{id}"))
    }

    pub fn log_path(&self, id: u64) -> PathBuf {
        self.opts.dir.join(format!("node-{id}.log"))
    }

    fn initial_cluster(&self) -> String {
        self.ids()
            .into_iter()
            .map(|id| format!("{id}={}", self.addr(id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts node `id`'s process on its data dir (new or existing).
    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .context("cannot open the node log")?;
        let mut cmd = self
            .net
            .command_in(&self.nodes[&id].host, &self.opts.binary);
        cmd.arg("node")
            .args(["--id", &id.to_string()])
            .args(["--listen", &self.addr(id).to_string()])
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .args(["--initial-cluster", &self.initial_cluster()])
            .args(["--cluster-secret", SECRET])
            .args(["--initial-cluster-state", "new"])
            .arg("--enable-test-hooks")
            .arg("--check-invariants")
            .args(&self.opts.extra_args)
            .env("TURNSTILE_BUGS", &self.opts.bugs)
            .env("TURNSTILE_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().context("cannot start a node")?;
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    fn pid(&self, id: u64) -> Option<Pid> {
        self.nodes
            .get(&id)?
            .child
            .as_ref()
            .map(|c| Pid::from_raw(c.id() as i32))
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.child.is_some())
    }

    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.paused)
    }

    /// SIGKILLs node `id` (its page cache survives: this is a process crash, not power loss).
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        if let Some(mut child) = node.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGKILL);
            let _ = kill(pid, Signal::SIGCONT);
            child.wait().context("cannot reap a killed node")?;
        }
        node.paused = false;
        Ok(())
    }

    /// Restarts a killed node on the same data dir.
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        if self.is_running(id) {
            bail!("node {id} is running");
        }
        self.spawn(id)?;
        if let Some(n) = self.nodes.get_mut(&id) {
            n.restarts += 1;
        }
        Ok(())
    }

    /// SIGSTOPs node `id`: peers see silence, not resets.
    pub fn pause(&mut self, id: u64) -> anyhow::Result<()> {
        let pid = self
            .pid(id)
            .ok_or_else(|| anyhow!("node {id} is not running"))?;
        kill(pid, Signal::SIGSTOP).context("SIGSTOP")?;
        if let Some(n) = self.nodes.get_mut(&id) {
            n.paused = true;
        }
        Ok(())
    }

    pub fn resume(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some(pid) = self.pid(id) {
            kill(pid, Signal::SIGCONT).context("SIGCONT")?;
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            n.paused = false;
        }
        Ok(())
    }

    /// Cuts the cluster into `groups`: a node drops packets from every node that shares no
    /// group with it. Groups may overlap (a bridge node in two groups hears both). Nodes in no
    /// group are not touched. The harness (host side) is never cut.
    pub fn partition(&self, groups: &[Vec<u64>]) -> anyhow::Result<()> {
        let ids = self.ids();
        for id in &ids {
            let mine: Vec<&Vec<u64>> = groups.iter().filter(|g| g.contains(id)).collect();
            if mine.is_empty() {
                continue;
            }
            let cut: BTreeSet<Ipv4Addr> = ids
                .iter()
                .filter(|other| !mine.iter().any(|g| g.contains(other)))
                .map(|&other| self.ip(other))
                .collect();
            self.net.drop_from(&self.nodes[id].host, &cut)?;
        }
        Ok(())
    }

    /// Cuts one node off from all others, both ways.
    pub fn isolate(&self, id: u64) -> anyhow::Result<()> {
        let rest: Vec<u64> = self.ids().into_iter().filter(|&i| i != id).collect();
        self.partition(&[vec![id], rest])
    }

    /// One-way: `to` drops packets from `from`; `from` still hears `to`.
    pub fn drop_one_way(&self, from: u64, to: u64) -> anyhow::Result<()> {
        let set = BTreeSet::from([self.ip(from)]);
        self.net.drop_from(&self.nodes[&to].host, &set)
    }

    /// Cuts client host `host` off from every node, both ways. Replaces the nodes' partition
    /// rules (each node then drops only this client), so do not combine it with `partition`.
    pub fn cut_client(&self, host: &NetHost) -> anyhow::Result<()> {
        let nodes: BTreeSet<Ipv4Addr> = self.nodes.values().map(|n| n.host.ip).collect();
        self.net.drop_from(host, &nodes)?;
        let client = BTreeSet::from([host.ip]);
        for node in self.nodes.values() {
            self.net.drop_from(&node.host, &client)?;
        }
        Ok(())
    }

    /// Removes every partition rule, the client hosts' included.
    pub fn heal(&self) -> anyhow::Result<()> {
        for host in self.nodes.values().map(|n| &n.host).chain(&self.clients) {
            self.net.drop_from(host, &BTreeSet::new())?;
        }
        Ok(())
    }

    /// Jumps node `id`'s wall clock by `offset_ms` (the test hook; lease expiry must not see it).
    pub async fn clock_jump(&self, id: u64, offset_ms: i64) -> anyhow::Result<()> {
        let (code, v) = self
            .post(
                id,
                "/debug/clock",
                serde_json::json!({ "offset_ms": offset_ms }),
            )
            .await?;
        if code != 200 {
            bail!("clock hook {code}: {v}");
        }
        Ok(())
    }

    /// Sends one request to node `id` and returns the status and JSON body.
    pub async fn call(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.endpoint(id)));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let code = resp.status().as_u16();
        let text = resp.text().await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((code, v))
    }

    pub async fn get(&self, id: u64, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(id, reqwest::Method::POST, path, Some(body)).await
    }

    /// Node `id`'s `/v1/cluster` view.
    pub async fn status(&self, id: u64) -> anyhow::Result<Value> {
        let (code, v) = self.get(id, "/v1/cluster").await?;
        if code != 200 {
            bail!("cluster status {code}: {v}");
        }
        Ok(v)
    }

    /// Nodes that are running and not paused.
    pub fn live(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.child.is_some() && !n.paused)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Waits for a live node that reports itself leader of a formed cluster; returns it and
    /// its term.
    pub async fn leader(&self) -> anyhow::Result<(u64, u64)> {
        wait_for("a leader", || async {
            for id in self.live() {
                if let Ok(s) = self.status(id).await {
                    if s["state"] == "Leader" && !s["cluster_id"].is_null() {
                        return s["term"].as_u64().map(|t| (id, t));
                    }
                }
            }
            None
        })
        .await
    }

    /// Waits until every live node reports the same applied index and state digest.
    pub async fn converged(&self) -> anyhow::Result<Vec<(u64, u64, String)>> {
        wait_for("all nodes to converge", || async {
            let mut seen = Vec::new();
            for id in self.live() {
                let s = self.status(id).await.ok()?;
                seen.push((
                    id,
                    s["applied_index"].as_u64()?,
                    s["state_digest"].as_str()?.to_string(),
                ));
            }
            let first = seen.first()?.clone();
            seen.iter()
                .all(|s| s.1 == first.1 && s.2 == first.2)
                .then_some(seen)
        })
        .await
    }

    /// Kills every node (SIGKILL) and restarts all of them on their data dirs.
    pub fn restart_all(&mut self) -> anyhow::Result<()> {
        for id in self.ids() {
            self.kill(id)?;
        }
        for id in self.ids() {
            self.restart(id)?;
        }
        Ok(())
    }

    /// The last `lines` lines of node `id`'s log, for failure messages.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        tail(&self.log_path(id), lines)
    }

    /// Whether node `id`'s log contains `needle`.
    pub fn log_contains(&self, id: u64, needle: &str) -> bool {
        std::fs::read_to_string(self.log_path(id)).is_ok_and(|s| s.contains(needle))
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            let _ = self.kill(id);
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `f` until it returns `Some`, failing after [`WAIT_MS_MAX`].
pub async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Some(t) = f().await {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("timed out after {WAIT_MS_MAX} ms waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
