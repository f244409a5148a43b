//! `EtcdCluster`: three `etcd` processes (Debian's etcd-server 3.4) on loopback with default
//! timings, static bootstrap with `--initial-cluster`, data dirs and logs in one `ScratchDir`.
//! With `ClusterCerts`, clients and peers use TLS and both must present a certificate signed
//! by the cluster CA (`--client-cert-auth`, `--peer-client-cert-auth`).
//! Start waits until every member reports the same leader; drop kills the members, then
//! removes the directory.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cluster_certs::ClusterCerts;
use crate::etcd_api::{EtcdApi, EtcdStatus, EtcdTls};
use crate::node_process::{free_ports, NodeProcess};
use crate::plan::CLUSTER_START_MS_MAX;
use crate::scratch_dir::ScratchDir;

/// Members per cluster.
pub const NODES: usize = 3;
/// Interval of the readiness and catch-up polls.
const POLL_MS: u64 = 50;

/// A running 3-member etcd cluster. Field order matters: members drop (die) before the
/// directory is removed.
pub struct EtcdCluster {
    nodes: Vec<NodeProcess>,
    client_urls: Vec<String>,
    tls: Option<EtcdTls>,
    /// One connection per member, for status polls.
    admin: Vec<Option<EtcdApi>>,
    _dir: ScratchDir,
}

/// `https` with TLS, else `http`.
fn scheme(certs: Option<&ClusterCerts>) -> &'static str {
    if certs.is_some() {
        "https"
    } else {
        "http"
    }
}

/// What member `i` (1-based) serves with and trusts when the cluster runs TLS: its node
/// certificate for clients and peers alike, and the cluster CA for both directions.
fn tls_args(i: usize, certs: &ClusterCerts) -> Vec<String> {
    let node = certs.node(i);
    let (cert, key, ca) = (
        node.cert.display().to_string(),
        node.key.display().to_string(),
        certs.ca().display().to_string(),
    );
    vec![
        format!("--cert-file={cert}"),
        format!("--key-file={key}"),
        format!("--trusted-ca-file={ca}"),
        "--client-cert-auth".into(),
        format!("--peer-cert-file={cert}"),
        format!("--peer-key-file={key}"),
        format!("--peer-trusted-ca-file={ca}"),
        "--peer-client-cert-auth".into(),
    ]
}

fn etcd_args(
    i: usize,
    dir: &Path,
    (client, peer): (u16, u16),
    initial: &str,
    token: &str,
    certs: Option<&ClusterCerts>,
) -> Vec<String> {
    let url = |p: u16| format!("{}://127.0.0.1:{p}", scheme(certs));
    let mut args = vec![
        format!("--name=e{i}"),
        format!("--data-dir={}", dir.join(format!("e{i}.etcd")).display()),
        format!("--listen-client-urls={}", url(client)),
        format!("--advertise-client-urls={}", url(client)),
        format!("--listen-peer-urls={}", url(peer)),
        format!("--initial-advertise-peer-urls={}", url(peer)),
        format!("--initial-cluster={initial}"),
        format!("--initial-cluster-token={token}"),
        "--initial-cluster-state=new".into(),
        "--logger=zap".into(),
        "--log-outputs=stderr".into(),
        "--log-level=warn".into(),
    ];
    if let Some(certs) = certs {
        args.extend(tls_args(i, certs));
    }
    args
}

impl EtcdCluster {
    /// Starts three members forming a new cluster and waits until they agree on a leader; with
    /// `certs`, over TLS with client certificates required.
    pub async fn start(
        bin: &Path,
        dir: ScratchDir,
        certs: Option<&ClusterCerts>,
    ) -> anyhow::Result<EtcdCluster> {
        let ports = free_ports(2 * NODES)?;
        let (clients, peers) = ports.split_at(NODES);
        let scheme = scheme(certs);
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{}={scheme}://127.0.0.1:{p}", i + 1))
            .collect();
        let initial = initial.join(",");
        let token = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "turnstile-bench".into());
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let ports = (clients[i], peers[i]);
            let args = etcd_args(i + 1, dir.path(), ports, &initial, &token, certs);
            let log = dir.path().join(format!("etcd-{}.log", i + 1));
            let name = format!("etcd member {}", i + 1);
            nodes.push(NodeProcess::spawn(&name, bin, &args, &[], &["ETCD"], &log)?);
        }
        let mut cluster = EtcdCluster {
            nodes,
            client_urls: clients
                .iter()
                .map(|p| format!("{scheme}://127.0.0.1:{p}"))
                .collect(),
            tls: certs.map(EtcdTls::from_certs).transpose()?,
            admin: (0..NODES).map(|_| None).collect(),
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
            if self.leader().await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tail = self.nodes.first().map(NodeProcess::log_tail);
                bail!(
                    "the etcd cluster was not ready within {CLUSTER_START_MS_MAX} ms; member 1's log:\n{}",
                    tail.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    /// Indexes (0-based) of the members not killed.
    pub fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].is_killed())
            .collect()
    }

    /// A new connection to one member.
    pub async fn api(&self, node: usize) -> anyhow::Result<EtcdApi> {
        EtcdApi::connect(&[self.client_urls[node].clone()], self.tls.as_ref()).await
    }

    async fn status(&mut self, node: usize) -> anyhow::Result<EtcdStatus> {
        if self.admin[node].is_none() {
            self.admin[node] = Some(self.api(node).await?);
        }
        let api = self.admin[node].as_mut().context("admin connection")?;
        let status = api.status().await;
        if status.is_err() {
            // Reconnect next time: the member may have been starting.
            self.admin[node] = None;
        }
        status
    }

    /// Status of every live member, in member order.
    pub async fn statuses(&mut self) -> anyhow::Result<Vec<EtcdStatus>> {
        let mut out = Vec::new();
        for i in self.live() {
            out.push(self.status(i).await?);
        }
        Ok(out)
    }

    /// The leader's index, if every live member names the same live leader.
    pub async fn leader(&mut self) -> anyhow::Result<usize> {
        let statuses = self.statuses().await?;
        let leader = statuses
            .first()
            .map(|s| s.leader)
            .context("no live member")?;
        if leader == 0 || statuses.iter().any(|s| s.leader != leader) {
            bail!("members do not agree on a leader yet");
        }
        let live = self.live();
        statuses
            .iter()
            .position(|s| s.member_id == leader)
            .map(|p| live[p])
            .context("the leader is not a live member")
    }

    /// Waits until every live member has applied the same index, with a deadline.
    pub async fn wait_caught_up(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(CLUSTER_START_MS_MAX);
        loop {
            let s = self.statuses().await?;
            let first = s.first().map(|s| s.raft_applied_index);
            if s.iter().all(|s| Some(s.raft_applied_index) == first) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("etcd members did not converge on one applied index");
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    pub fn kill(&mut self, node: usize) {
        self.nodes[node].kill();
        self.admin[node] = None;
    }

    /// Resident memory of every live member, in bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<Vec<u64>> {
        self.live()
            .into_iter()
            .map(|i| self.nodes[i].rss_bytes())
            .collect()
    }

    /// Fails if a member that was not killed has died.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for n in self.nodes.iter_mut().filter(|n| !n.is_killed()) {
            n.check_running()?;
        }
        Ok(())
    }
}
