//! `TurnstileCluster`: three `turnstile serve` processes on loopback with default settings,
//! plain HTTP or TLS (`ClusterCerts`: HTTPS, mutual TLS between peers, clients authenticated
//! by their certificate), data dirs and logs in one `ScratchDir`. Start waits until every node is ready and agrees on
//! the leader; drop kills the nodes, then removes the directory.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cluster_certs::ClusterCerts;
use crate::etcd_api::{EtcdApi, EtcdTls};
use crate::node_process::{free_ports, NodeProcess};
use crate::plan::CLUSTER_START_MS_MAX;
use crate::scratch_dir::ScratchDir;
use crate::turnstile_api::{http_client, https_client, NodeView, TurnstileApi};

/// Nodes per cluster.
pub const NODES: usize = 3;
/// Shared secret of the bench clusters' peer RPCs (loopback only; with TLS, peers also
/// authenticate by certificate).
const CLUSTER_SECRET: &str = "turnstile-bench-cluster-secret";
/// Log filter of the nodes: warnings only, so logging costs nothing measurable. openraft's
/// own warnings are off but for its heartbeat worker and replication streams, which warn only
/// when an RPC to a peer fails (`failed to send a heartbeat`, `did not answer in time`): a
/// healthy cluster writes none, and they are how W8 tells a missed heartbeat.
const NODE_LOG_FILTER: &str =
    "warn,openraft=error,openraft::core::heartbeat=warn,openraft::replication=warn";
/// Interval of the readiness and catch-up polls.
const POLL_MS: u64 = 50;

/// A running 3-node Turnstile cluster. Field order matters: nodes drop (die) before the
/// directory is removed.
pub struct TurnstileCluster {
    nodes: Vec<NodeProcess>,
    addrs: Vec<SocketAddr>,
    http: reqwest::Client,
    /// `https` with TLS, else `http`.
    scheme: &'static str,
    /// The etcd port's URL of each node, when the cluster serves one.
    etcd_urls: Vec<String>,
    /// The etcd clients' TLS settings on a TLS cluster.
    etcd_tls: Option<EtcdTls>,
    _dir: ScratchDir,
}

impl TurnstileCluster {
    /// Starts three nodes forming a new cluster and waits for a leader they all know. With
    /// `certs`, nodes serve HTTPS with their node certificates and clients present the
    /// `root` client certificate.
    pub async fn start(
        bin: &Path,
        dir: ScratchDir,
        certs: Option<&ClusterCerts>,
        etcd_port: bool,
    ) -> anyhow::Result<TurnstileCluster> {
        if !bin.is_file() {
            bail!(
                "no turnstile binary at {} (build it: cargo build --release -p turnstile, or pass --turnstile-bin)",
                bin.display()
            );
        }
        // Every port the cluster needs from one call: ports released by one call could come
        // back from the next, and two nodes (or a node's two ports) would then collide.
        let wanted = if etcd_port { 2 * NODES } else { NODES };
        let mut ports: Vec<SocketAddr> = free_ports(wanted)?
            .into_iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let etcd_addrs = ports.split_off(NODES);
        let addrs = ports;
        let initial: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let mut nodes = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = i + 1;
            let mut args: Vec<String> = vec![
                "serve".into(),
                "--id".into(),
                id.to_string(),
                "--listen".into(),
                addr.to_string(),
                "--data-dir".into(),
                dir.path().join(format!("node-{id}")).display().to_string(),
                "--initial-cluster".into(),
                initial.join(","),
                "--cluster-secret".into(),
                CLUSTER_SECRET.into(),
            ];
            if let Some(etcd) = etcd_addrs.get(i) {
                args.extend(["--etcd-listen".to_string(), etcd.to_string()]);
            }
            if let Some(certs) = certs {
                let node = certs.node(id);
                for (flag, path) in [
                    ("--tls-ca", certs.ca()),
                    ("--tls-cert", node.cert),
                    ("--tls-key", node.key),
                ] {
                    args.extend([flag.to_string(), path.display().to_string()]);
                }
            }
            let log = dir.path().join(format!("turnstile-{id}.log"));
            let envs = [("TURNSTILE_LOG", NODE_LOG_FILTER)];
            let name = format!("turnstile node {id}");
            nodes.push(NodeProcess::spawn(
                &name,
                bin,
                &args,
                &envs,
                &["TURNSTILE_"],
                &log,
            )?);
        }
        let (http, scheme) = match certs {
            Some(certs) => {
                let (cert, key) = certs.client_pem()?;
                (https_client(&certs.ca_pem()?, &cert, &key)?, "https")
            }
            None => (http_client()?, "http"),
        };
        let etcd_tls = certs.map(EtcdTls::from_certs).transpose()?;
        let mut cluster = TurnstileCluster {
            nodes,
            addrs,
            etcd_urls: etcd_addrs
                .iter()
                .map(|a| format!("{scheme}://{a}"))
                .collect(),
            etcd_tls,
            http,
            scheme,
            _dir: dir,
        };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(CLUSTER_START_MS_MAX);
        loop {
            for n in &mut self.nodes {
                n.check_running()?;
            }
            if self.all_ready().await && self.leader().await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tail = self.nodes.first().map(NodeProcess::log_tail);
                bail!(
                    "the Turnstile cluster was not ready within {CLUSTER_START_MS_MAX} ms; node 1's log:\n{}",
                    tail.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    async fn all_ready(&self) -> bool {
        for i in self.live() {
            if !self.api(i).ready().await {
                return false;
            }
        }
        true
    }

    /// Indexes (0-based) of the nodes not killed.
    pub fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].is_killed())
            .collect()
    }

    /// Whether the nodes serve the etcd port (`--etcd-listen`).
    pub fn serves_etcd(&self) -> bool {
        !self.etcd_urls.is_empty()
    }

    /// An etcd client bound to `node`'s etcd port.
    pub async fn etcd_api(&self, node: usize) -> anyhow::Result<EtcdApi> {
        let url = self
            .etcd_urls
            .get(node)
            .context("this cluster serves no etcd port")?;
        EtcdApi::connect(std::slice::from_ref(url), self.etcd_tls.as_ref()).await
    }

    pub fn api(&self, node: usize) -> TurnstileApi {
        TurnstileApi::new(self.http.clone(), self.scheme, self.addrs[node])
    }

    /// The leader's index, if every live node names the same live leader.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        let mut leader = None;
        for i in self.live() {
            let id = self
                .api(i)
                .leader_id()
                .await?
                .context("a node knows no leader")?;
            if leader.is_some_and(|l| l != id) {
                bail!("nodes disagree on the leader");
            }
            leader = Some(id);
        }
        let id = leader.context("no live node")?;
        let index = usize::try_from(id)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .filter(|&i| i < self.nodes.len() && !self.nodes[i].is_killed())
            .with_context(|| format!("leader {id} is not a live node"))?;
        Ok(index)
    }

    /// `/v1/cluster` of every live node.
    pub async fn views(&self) -> anyhow::Result<Vec<NodeView>> {
        let mut out = Vec::new();
        for i in self.live() {
            out.push(self.api(i).view().await?);
        }
        Ok(out)
    }

    /// Waits until every live node has applied at least the highest index any of them had
    /// applied when the wait began, with a deadline. Not "the same index": with leases alive
    /// the leader proposes a tick every 500 ms, and on a large state a round of `/v1/cluster`
    /// reads (each encodes and hashes the whole state) may outlast a tick.
    pub async fn wait_caught_up(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(CLUSTER_START_MS_MAX);
        let target = self.views().await?.iter().map(|v| v.applied_index).max();
        loop {
            let views = self.views().await?;
            if views.iter().all(|v| Some(v.applied_index) >= target) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("Turnstile nodes did not converge on one applied index");
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    pub fn kill(&mut self, node: usize) {
        self.nodes[node].kill();
    }

    /// Resident memory of every live node, in bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<Vec<u64>> {
        self.live()
            .into_iter()
            .map(|i| self.nodes[i].rss_bytes())
            .collect()
    }

    /// CPU time node `node` has used, in ms.
    pub fn cpu_ms(&self, node: usize) -> anyhow::Result<u64> {
        self.nodes[node].cpu_ms()
    }

    /// Each node's log size now: where [`TurnstileCluster::count_in_logs`] starts.
    pub fn log_lens(&self) -> Vec<u64> {
        self.nodes.iter().map(NodeProcess::log_len).collect()
    }

    /// For each of `needles`, the log lines of all nodes between two readings of
    /// [`TurnstileCluster::log_lens`] that contain it.
    pub fn count_in_logs(
        &self,
        from: &[u64],
        to: &[u64],
        needles: &[&str],
    ) -> anyhow::Result<Vec<u64>> {
        let mut total = vec![0; needles.len()];
        for ((node, &start), &end) in self.nodes.iter().zip(from).zip(to) {
            for (t, n) in total
                .iter_mut()
                .zip(node.count_in_log(start, end, needles)?)
            {
                *t += n;
            }
        }
        Ok(total)
    }

    /// Fails if a node that was not killed has died.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for n in self.nodes.iter_mut().filter(|n| !n.is_killed()) {
            n.check_running()?;
        }
        Ok(())
    }
}
