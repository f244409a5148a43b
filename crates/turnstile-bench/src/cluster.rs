//! `Cluster`: a running 3-node cluster of either system, behind one interface the workloads
//! use: start, the leader, clients bound to a node, kill a node, resident memory, catch-up,
//! each node's leader and term. Also `RunDirs`, which names each cluster's directory inside the
//! run's temp dir.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::client::Client;
use crate::cluster_certs::ClusterCerts;
use crate::etcd_api::EtcdApi;
use crate::etcd_cluster::EtcdCluster;
use crate::plan::{Plan, System, Transport, ETCD_CONNECTIONS_MIN, ETCD_WORKERS_PER_CONNECTION_MAX};
use crate::scratch_dir::ScratchDir;
use crate::turnstile_api::{NodeView, TurnstileApi};
use crate::turnstile_cluster::TurnstileCluster;

/// The run's temp dir (removed at the end of the run) and a counter naming cluster dirs in it.
pub struct RunDirs {
    root: tempfile::TempDir,
    clusters_started: usize,
    keep_logs_in: Option<PathBuf>,
}

impl RunDirs {
    /// A temp dir in `work_dir`; with `keep_logs`, node logs are copied to `<out>.logs/`.
    pub fn create(work_dir: &Path, out: &Path, keep_logs: bool) -> anyhow::Result<RunDirs> {
        let root = tempfile::Builder::new()
            .prefix("turnstile-bench-")
            .tempdir_in(work_dir)?;
        let keep_logs_in = keep_logs.then(|| out.with_extension("logs"));
        Ok(RunDirs {
            root,
            clusters_started: 0,
            keep_logs_in,
        })
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A new cluster directory, named after `tag` and the clusters started before it.
    pub fn next(&mut self, tag: &str) -> anyhow::Result<ScratchDir> {
        self.clusters_started += 1;
        let path = self
            .root
            .path()
            .join(format!("{:02}-{tag}", self.clusters_started));
        ScratchDir::create(path, self.keep_logs_in.clone())
    }
}

/// What one node says of the leadership: the leader it knows (its own numbering: Turnstile's
/// node id, etcd's member id) and its term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub leader: Option<u64>,
    pub term: u64,
}

impl Leadership {
    /// What a Turnstile node's `/v1/cluster` says.
    pub fn of(view: &NodeView) -> anyhow::Result<Leadership> {
        Ok(Leadership {
            leader: view.leader_id,
            term: view.term.context("/v1/cluster reports no term")?,
        })
    }
}

/// A running cluster of one system.
pub enum Cluster {
    Turnstile(TurnstileCluster),
    Etcd(EtcdCluster),
}

impl Cluster {
    /// Starts a fresh cluster of `system` in a new directory named after `tag`. With
    /// [`Transport::Tls`], a new CA and its certificates are made in that directory first
    /// (with the `turnstile` binary, for either system).
    pub async fn start(
        system: System,
        transport: Transport,
        plan: &Plan,
        dirs: &mut RunDirs,
        tag: &str,
    ) -> anyhow::Result<Cluster> {
        let dir = dirs.next(&format!("{}-{}-{tag}", system.name(), transport.name()))?;
        let certs = match transport {
            Transport::Plain => None,
            Transport::Tls => {
                let certs_dir = dir.path().join("certs");
                let nodes = match system {
                    System::Turnstile | System::TurnstileEtcd => crate::turnstile_cluster::NODES,
                    System::Etcd => crate::etcd_cluster::NODES,
                };
                Some(ClusterCerts::create(
                    &plan.turnstile_bin,
                    &certs_dir,
                    nodes,
                )?)
            }
        };
        let certs = certs.as_ref();
        Ok(match system {
            System::Turnstile => Cluster::Turnstile(
                TurnstileCluster::start(&plan.turnstile_bin, dir, certs, false).await?,
            ),
            System::TurnstileEtcd => Cluster::Turnstile(
                TurnstileCluster::start(&plan.turnstile_bin, dir, certs, true).await?,
            ),
            System::Etcd => Cluster::Etcd(EtcdCluster::start(&plan.etcd_bin, dir, certs).await?),
        })
    }

    pub async fn leader(&mut self) -> anyhow::Result<usize> {
        match self {
            Cluster::Turnstile(c) => c.leader().await,
            Cluster::Etcd(c) => c.leader().await,
        }
    }

    pub fn live(&self) -> Vec<usize> {
        match self {
            Cluster::Turnstile(c) => c.live(),
            Cluster::Etcd(c) => c.live(),
        }
    }

    /// One client bound to `node`.
    pub async fn client(&self, node: usize) -> anyhow::Result<Client> {
        match self {
            Cluster::Turnstile(c) if c.serves_etcd() => {
                Ok(Client::Etcd(Box::new(c.etcd_api(node).await?)))
            }
            Cluster::Turnstile(c) => Ok(Client::Turnstile(c.api(node))),
            Cluster::Etcd(c) => Ok(Client::Etcd(Box::new(c.api(node).await?))),
        }
    }

    /// `n` clients bound to `node`, one per worker. Turnstile's share one pooled HTTP client
    /// (a connection per request in flight); etcd's, and those of Turnstile's etcd port, share
    /// multiplexed gRPC connections, round robin: [`ETCD_CONNECTIONS_MIN`], or more so that none serves more than
    /// [`ETCD_WORKERS_PER_CONNECTION_MAX`] workers.
    pub async fn clients(&self, node: usize, n: usize) -> anyhow::Result<Vec<Client>> {
        let count = n
            .div_ceil(ETCD_WORKERS_PER_CONNECTION_MAX)
            .max(n.min(ETCD_CONNECTIONS_MIN))
            .max(1);
        let mut conns: Vec<EtcdApi> = Vec::new();
        match self {
            Cluster::Turnstile(c) if c.serves_etcd() => {
                for _ in 0..count {
                    conns.push(c.etcd_api(node).await?);
                }
            }
            Cluster::Turnstile(c) => {
                return Ok((0..n).map(|_| Client::Turnstile(c.api(node))).collect())
            }
            Cluster::Etcd(c) => {
                for _ in 0..count {
                    conns.push(c.api(node).await?);
                }
            }
        }
        Ok((0..n)
            .map(|i| Client::Etcd(Box::new(conns[i % conns.len()].clone())))
            .collect())
    }

    pub fn kill(&mut self, node: usize) {
        match self {
            Cluster::Turnstile(c) => c.kill(node),
            Cluster::Etcd(c) => c.kill(node),
        }
    }

    pub fn rss_bytes(&self) -> anyhow::Result<Vec<u64>> {
        match self {
            Cluster::Turnstile(c) => c.rss_bytes(),
            Cluster::Etcd(c) => c.rss_bytes(),
        }
    }

    pub async fn wait_caught_up(&mut self) -> anyhow::Result<()> {
        match self {
            Cluster::Turnstile(c) => c.wait_caught_up().await,
            Cluster::Etcd(c) => c.wait_caught_up().await,
        }
    }

    /// Fails if a node that was not killed has died (checked after each measurement).
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self {
            Cluster::Turnstile(c) => c.check_running(),
            Cluster::Etcd(c) => c.check_running(),
        }
    }

    /// The leader and term every live node reports, in node order.
    pub async fn leadership(&mut self) -> anyhow::Result<Vec<Leadership>> {
        match self {
            Cluster::Turnstile(c) => c.views().await?.iter().map(Leadership::of).collect(),
            Cluster::Etcd(c) => Ok(c
                .statuses()
                .await?
                .into_iter()
                .map(|s| Leadership {
                    leader: (s.leader != 0).then_some(s.leader),
                    term: s.raft_term,
                })
                .collect()),
        }
    }

    /// The Turnstile cluster, for what only Turnstile exposes (None for etcd).
    pub fn as_turnstile(&self) -> Option<&TurnstileCluster> {
        match self {
            Cluster::Turnstile(c) => Some(c),
            Cluster::Etcd(_) => None,
        }
    }

    /// The Turnstile leader's API, for reading its log counters (None for etcd).
    pub async fn turnstile_leader(&mut self) -> anyhow::Result<Option<TurnstileApi>> {
        match self {
            Cluster::Turnstile(c) => {
                let leader = c.leader().await?;
                Ok(Some(c.api(leader)))
            }
            Cluster::Etcd(_) => Ok(None),
        }
    }
}
