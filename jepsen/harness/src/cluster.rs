//! A cluster of real node processes, each in its own network namespace (the default backend,
//! `netns`) or its own container (`docker`), with the faults the nemesis and the failure-story
//! tests need: SIGKILL and restart on the same data dir, SIGSTOP/SIGCONT (`docker pause` in a
//! container), nftables partitions (any grudge, including one-way), heal, and a jump of a
//! node's wall clock through the test hook.
//!
//! Partitions live in `cluster/network.rs`, libfiu disk faults in `cluster/disk.rs`, wiping a
//! node and re-admitting it through membership in `cluster/membership.rs`, HTTP to the nodes
//! (status, leader, convergence, the clock hook) in `cluster/observe.rs`.
//!
//! Clusters are secure by default (`tls`): the cluster makes its own CA and certificates under
//! its directory, nodes serve HTTPS with mutual TLS between peers, and the cluster's HTTP
//! client, like every client built from [`ProcCluster::http_builder`], presents `root`.
//! [`Mode::Insecure`] starts the nodes with `--insecure` instead, for debugging.
//!
//! Node processes run `turnstile-jepsen node`, which is `turnstile serve` (the same
//! `turnstile_server::serve` code) in a binary that also carries the test hooks and the
//! bug-injection switches, and the `--enable-test-hooks` flag that turns them on.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::docker::{self, ContainerSpec, DockerNet};
use crate::netns::{Net, NetHost};
use crate::tls::{self, Mode, RunCerts};

mod disk;
mod membership;
mod network;
mod observe;

pub use disk::require_fiu;

pub use observe::wait_for;

/// The port every node listens on inside its namespace.
pub const NODE_PORT: u16 = 7000;
/// Every node's etcd port (`--etcd-listen`), on its own address (etcd's client port).
pub const ETCD_PORT: u16 = 2379;
/// The cluster secret of harness clusters.
const SECRET: &str = "jepsen-cluster-secret";
/// Longest a wait in the harness may take before it gives up.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Timeout of one harness HTTP request to a node.
const HTTP_TIMEOUT_MS: u64 = 10_000;
/// How often `terminate` checks whether the node has exited.
const TERMINATE_POLL_MS: u64 = 10;

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
    /// Every node also serves the etcd port on its address, port [`ETCD_PORT`]. Off for a
    /// binary older than the flag (the rolling upgrade's).
    pub etcd_port: bool,
    /// Where the nodes run.
    pub backend: Backend,
    /// TLS and client certificates (the default), or plain HTTP for debugging.
    pub mode: Mode,
    /// Run every node under libfiu's `fiu-run -x`, so `disk_fault` can fail its I/O calls
    /// (netns backend only; `cluster/disk.rs`).
    pub disk_faults: bool,
}

/// Where a cluster's nodes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backend {
    /// Processes in network namespaces on a private bridge: no daemon, image or static build,
    /// millisecond starts. The default, and CI's.
    #[default]
    Netns,
    /// Containers of the [`docker::IMAGE`] image on a private Docker network.
    Docker,
}

/// Where one node runs.
#[derive(Debug)]
enum Place {
    /// A child process inside namespace `host`.
    Netns { host: NetHost, child: Option<Child> },
    /// Container `name`: `created` once `docker run` made it, `running` from a start to a kill.
    Docker {
        name: String,
        created: bool,
        running: bool,
    },
}

/// One node and where it lives.
#[derive(Debug)]
struct NodeProc {
    ip: Ipv4Addr,
    place: Place,
    paused: bool,
    restarts: u32,
}

impl NodeProc {
    fn running(&self) -> bool {
        match &self.place {
            Place::Netns { child, .. } => child.is_some(),
            Place::Docker { running, .. } => *running,
        }
    }
}

/// The network the nodes share.
#[derive(Debug)]
enum Fabric {
    Netns(Net),
    Docker(DockerNet),
}

/// A running cluster. Dropping it kills every node and removes the network.
pub struct ProcCluster {
    opts: ClusterOptions,
    nodes: BTreeMap<u64, NodeProc>,
    http: reqwest::Client,
    /// The cluster's CA and certificates; `None` on an insecure cluster.
    certs: Option<RunCerts>,
    /// Client hosts added for processes under test; `heal` clears their rules too.
    clients: Vec<NetHost>,
    // Dropped last: the namespaces (or the containers) go after the processes in them.
    fabric: Fabric,
}

impl ProcCluster {
    /// Creates the network, starts every node on `opts.backend` and waits for a leader.
    pub async fn start(opts: ClusterOptions) -> anyhow::Result<ProcCluster> {
        let backend = opts.backend;
        let mut nodes = BTreeMap::new();
        let fabric = match backend {
            Backend::Netns => {
                let mut net = Net::create()?;
                for id in 1..=opts.nodes {
                    let host = net.add_host(&format!("n{id}"), 10 + id as u8)?;
                    let node = NodeProc {
                        ip: host.ip,
                        place: Place::Netns { host, child: None },
                        paused: false,
                        restarts: 0,
                    };
                    nodes.insert(id, node);
                }
                Fabric::Netns(net)
            }
            Backend::Docker => {
                let net = DockerNet::create(docker::IMAGE, &opts.binary)?;
                for id in 1..=opts.nodes {
                    let node = NodeProc {
                        ip: net.ip(10 + id as u8),
                        place: Place::Docker {
                            name: net.container_name(&format!("n{id}")),
                            created: false,
                            running: false,
                        },
                        paused: false,
                        restarts: 0,
                    };
                    nodes.insert(id, node);
                }
                Fabric::Docker(net)
            }
        };
        std::fs::create_dir_all(&opts.dir)?;
        let certs = match opts.mode {
            Mode::Secure => {
                let hosts: Vec<(u64, Vec<String>)> = nodes
                    .iter()
                    .map(|(&id, n)| (id, RunCerts::node_hosts(id, n.ip)))
                    .collect();
                Some(RunCerts::create(&opts.dir.join("certs"), &hosts)?)
            }
            Mode::Insecure => None,
        };
        let http = tls::client_builder(certs.as_ref())?
            .timeout(Duration::from_millis(HTTP_TIMEOUT_MS))
            .build()?;
        let mut c = ProcCluster {
            opts,
            nodes,
            http,
            certs,
            clients: Vec::new(),
            fabric,
        };
        let ids: Vec<u64> = c.nodes.keys().copied().collect();
        for id in ids {
            c.spawn(id)?;
        }
        c.leader().await?;
        Ok(c)
    }

    /// The backend the nodes run on.
    pub fn backend(&self) -> Backend {
        match self.fabric {
            Fabric::Netns(_) => Backend::Netns,
            Fabric::Docker(_) => Backend::Docker,
        }
    }

    /// Whether the nodes serve TLS and demand credentials.
    pub fn mode(&self) -> Mode {
        self.opts.mode
    }

    /// The cluster's certificates (`None` when insecure): holders and other client processes
    /// take their files from here.
    pub fn certs(&self) -> Option<&RunCerts> {
        self.certs.as_ref()
    }

    /// An HTTP client builder that reaches this cluster's nodes: no proxy, and on a secure
    /// cluster trust in only its CA and the `root` client certificate.
    pub fn http_builder(&self) -> Result<reqwest::ClientBuilder, tls::TlsError> {
        tls::client_builder(self.certs.as_ref())
    }

    /// The namespaces' network.
    ///
    /// # Panics
    ///
    /// On the Docker backend, which has no namespaces of its own (client hosts, the only use,
    /// need the netns backend).
    pub fn net(&self) -> &Net {
        match &self.fabric {
            Fabric::Netns(net) => net,
            Fabric::Docker(_) => panic!("ProcCluster::net: the Docker backend has no namespaces"),
        }
    }

    /// The Docker network, on the Docker backend.
    pub fn docker_net(&self) -> Option<&DockerNet> {
        match &self.fabric {
            Fabric::Netns(_) => None,
            Fabric::Docker(net) => Some(net),
        }
    }

    /// Adds a namespace `name` at `.<octet>` on the cluster's bridge for a client process under
    /// test (run it with `net().command_in`). Octets 11 and up to 10 + nodes are the nodes'.
    /// Netns backend only.
    pub fn add_client_host(&mut self, name: &str, octet: u8) -> anyhow::Result<NetHost> {
        if (11..=10 + self.opts.nodes).contains(&u64::from(octet)) {
            bail!("octet {octet} belongs to a node");
        }
        let Fabric::Netns(net) = &mut self.fabric else {
            bail!("client hosts need the netns backend");
        };
        let host = net.add_host(name, octet)?;
        self.clients.push(host.clone());
        Ok(host)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn ip(&self, id: u64) -> Ipv4Addr {
        self.nodes[&id].ip
    }

    pub fn addr(&self, id: u64) -> SocketAddr {
        SocketAddr::from((self.ip(id), NODE_PORT))
    }

    /// `https://ip:port` of node `id` (`http://` on an insecure cluster).
    pub fn endpoint(&self, id: u64) -> String {
        format!("{}://{}", self.mode().scheme(), self.addr(id))
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.ids().into_iter().map(|id| self.endpoint(id)).collect()
    }

    /// `https://ip:2379` (or `http://`) of every node's etcd port, in node order.
    pub fn etcd_endpoints(&self) -> Vec<String> {
        self.ids()
            .into_iter()
            .map(|id| format!("{}://{}", self.mode().scheme(), self.etcd_addr(id)))
            .collect()
    }

    fn etcd_addr(&self, id: u64) -> SocketAddr {
        SocketAddr::from((self.ip(id), ETCD_PORT))
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

    /// `node` and its flags, with `data_dir` and the `--tls-*` flags (`tls_args`, naming files
    /// as the node sees them; empty on an insecure cluster).
    fn node_args(&self, id: u64, data_dir: OsString, tls_args: Vec<OsString>) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["node".into(), "--id".into(), id.to_string().into()];
        args.extend(["--listen".into(), self.addr(id).to_string().into()]);
        if self.opts.etcd_port {
            args.extend([
                "--etcd-listen".into(),
                self.etcd_addr(id).to_string().into(),
            ]);
        }
        args.extend(["--data-dir".into(), data_dir]);
        args.extend(["--initial-cluster".into(), self.initial_cluster().into()]);
        args.extend(["--cluster-secret".into(), SECRET.into()]);
        args.extend(["--initial-cluster-state".into(), "new".into()]);
        args.push("--enable-test-hooks".into());
        args.push("--check-invariants".into());
        match self.opts.mode {
            Mode::Secure => args.extend(tls_args),
            // Nodes listen on their namespace's (non-loopback) address: over plain HTTP a node
            // refuses that unless told so (docs/security.md).
            Mode::Insecure => args.push("--insecure".into()),
        }
        args.extend(self.opts.extra_args.iter().map(OsString::from));
        args
    }

    /// Starts node `id` on its data dir (new or existing).
    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        match self.backend() {
            Backend::Netns => self.spawn_process(id)?,
            Backend::Docker => self.spawn_container(id)?,
        }
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        node.paused = false;
        Ok(())
    }

    /// Starts node `id`'s process in its namespace.
    fn spawn_process(&mut self, id: u64) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .context("cannot open the node log")?;
        let tls_args = self
            .certs
            .as_ref()
            .map(|c| c.node_args(id))
            .unwrap_or_default();
        let args = self.node_args(id, self.data_dir(id).into_os_string(), tls_args);
        let node = self.nodes.get(&id).ok_or_else(|| anyhow!("no node {id}"))?;
        let Place::Netns { host, .. } = &node.place else {
            bail!("node {id} is not a process");
        };
        let mut cmd = match self.fiu_wrapper(id, &self.opts.binary) {
            Some(wrapper) => {
                let mut cmd = self.net().command_in(host, Path::new(disk::FIU_RUN));
                cmd.args(wrapper);
                cmd
            }
            None => self.net().command_in(host, &self.opts.binary),
        };
        cmd.args(args)
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
        if let Place::Netns { child: slot, .. } = &mut node.place {
            *slot = Some(child);
        }
        Ok(())
    }

    /// Creates node `id`'s container, or starts it again.
    fn spawn_container(&mut self, id: u64) -> anyhow::Result<()> {
        // Each container mounts a directory with only its own key, the CA certificate and its
        // certificate: never the CA's key or another node's.
        let certs_dir = self.opts.dir.join(format!("certs-node-{id}"));
        let tls_args = match &self.certs {
            Some(c) => c.node_files_for_container(id, &certs_dir)?,
            None => Vec::new(),
        };
        let certs_dir = self.certs.as_ref().map(|_| certs_dir.as_path());
        let args = self.node_args(id, docker::DATA_DIR_IN_CONTAINER.into(), tls_args);
        let (data_dir, log_path) = (self.data_dir(id), self.log_path(id));
        let Fabric::Docker(net) = &self.fabric else {
            bail!("no Docker network");
        };
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        let Place::Docker {
            name,
            created,
            running,
        } = &mut node.place
        else {
            bail!("node {id} is not a container");
        };
        if *created {
            net.start(name)?;
        } else {
            let short = format!("n{id}");
            net.run(&ContainerSpec {
                name: &short,
                ip: node.ip,
                data_dir: &data_dir,
                certs_dir,
                log_path: &log_path,
                env: vec![
                    ("TURNSTILE_BUGS", &self.opts.bugs),
                    ("TURNSTILE_LOG", "info,openraft=warn"),
                ],
                args,
            })?;
            *created = true;
        }
        *running = true;
        Ok(())
    }

    fn pid(&self, id: u64) -> Option<Pid> {
        match &self.nodes.get(&id)?.place {
            Place::Netns { child, .. } => child.as_ref().map(|c| Pid::from_raw(c.id() as i32)),
            Place::Docker { .. } => None,
        }
    }

    /// The file node `id`'s process executes (netns backend; `None` for a container or a
    /// stopped node): what a rolling upgrade checks it replaced.
    pub fn executable(&self, id: u64) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/{}/exe", self.pid(id)?)).ok()
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(NodeProc::running)
    }

    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.paused)
    }

    /// SIGKILLs node `id` (its page cache survives: this is a process crash, not power loss).
    /// A container is killed with `docker kill`, also when paused.
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        match (&mut node.place, &self.fabric) {
            (Place::Netns { child, .. }, _) => {
                if let Some(mut child) = child.take() {
                    let pid = Pid::from_raw(child.id() as i32);
                    let _ = kill(pid, Signal::SIGKILL);
                    let _ = kill(pid, Signal::SIGCONT);
                    child.wait().context("cannot reap a killed node")?;
                }
            }
            (Place::Docker { name, running, .. }, Fabric::Docker(net)) => {
                if *running {
                    net.kill(name)?;
                    *running = false;
                }
            }
            (Place::Docker { .. }, Fabric::Netns(_)) => bail!("node {id} has no Docker network"),
        }
        node.paused = false;
        Ok(())
    }

    /// Stops node `id` gracefully with SIGTERM (it drains and hands leadership over) and waits
    /// up to `timeout` for it to exit; past that it is killed and this fails. Returns how long
    /// the exit took. Network-namespace backend only.
    pub fn terminate(&mut self, id: u64, timeout: Duration) -> anyhow::Result<Duration> {
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        let Place::Netns { child, .. } = &mut node.place else {
            bail!("terminate is implemented for the netns backend only");
        };
        let Some(mut proc) = child.take() else {
            bail!("node {id} is not running");
        };
        let started = Instant::now();
        kill(Pid::from_raw(proc.id() as i32), Signal::SIGTERM).context("SIGTERM")?;
        loop {
            if let Some(status) = proc.try_wait().context("wait for a terminated node")? {
                if !status.success() {
                    bail!("node {id} exited with {status} after SIGTERM");
                }
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                let _ = proc.kill();
                let _ = proc.wait();
                bail!("node {id} did not exit within {timeout:?} of SIGTERM; killed");
            }
            std::thread::sleep(Duration::from_millis(TERMINATE_POLL_MS));
        }
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

    /// Makes every later start or restart run `binary`: a rolling upgrade stops each node and
    /// starts it again on the same data dir with the new build. Netns backend only: a
    /// container runs its image's binary.
    pub fn set_binary(&mut self, binary: PathBuf) {
        self.opts.binary = binary;
    }

    /// SIGSTOPs node `id` (`docker pause` for a container): peers see silence, not resets.
    pub fn pause(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some((net, name)) = self.container(id) {
            if !self.is_running(id) {
                bail!("node {id} is not running");
            }
            net.pause(name)?;
        } else {
            let pid = self
                .pid(id)
                .ok_or_else(|| anyhow!("node {id} is not running"))?;
            kill(pid, Signal::SIGSTOP).context("SIGSTOP")?;
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            n.paused = true;
        }
        Ok(())
    }

    pub fn resume(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some((net, name)) = self.container(id) {
            // Unpausing a container that is not paused is an error, unlike a spare SIGCONT.
            if self.is_paused(id) && self.is_running(id) {
                net.unpause(name)?;
            }
        } else if let Some(pid) = self.pid(id) {
            kill(pid, Signal::SIGCONT).context("SIGCONT")?;
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            n.paused = false;
        }
        Ok(())
    }

    /// Node `id`'s network and container name, on the Docker backend.
    fn container(&self, id: u64) -> Option<(&DockerNet, &str)> {
        match (&self.fabric, &self.nodes.get(&id)?.place) {
            (Fabric::Docker(net), Place::Docker { name, .. }) => Some((net, name)),
            _ => None,
        }
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

    /// Node `id`'s whole log: the file, or for a container what Docker holds (the file
    /// follows it, but lags a moment behind each start).
    fn log_text(&self, id: u64) -> Option<String> {
        if let Some((net, name)) = self.container(id) {
            if let Ok(text) = net.logs(name) {
                return Some(text);
            }
        }
        std::fs::read_to_string(self.log_path(id)).ok()
    }

    /// The last `lines` lines of node `id`'s log, for failure messages.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        tail(&self.log_text(id).unwrap_or_default(), lines)
    }

    /// Whether node `id`'s log contains `needle`.
    pub fn log_contains(&self, id: u64, needle: &str) -> bool {
        self.log_text(id).is_some_and(|s| s.contains(needle))
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        // Containers go with their network (`docker rm -f` of them all at once).
        if self.backend() == Backend::Netns {
            for id in self.ids() {
                let _ = self.kill(id);
            }
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
