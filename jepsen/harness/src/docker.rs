//! Docker as the harness's second backend: every node is a container of the
//! `turnstile-jepsen:test` image (built without a registry by `jepsen/image/build-image.sh`) on
//! a private bridge network `tjd<n>` (`10.214.<n>.0/24`). The harness sits on the host side at
//! the network's gateway (`.1`) and is never cut off. Network namespaces (`netns`) stay the
//! default; this backend exists to run the same nemesis against the deployment shape operators
//! use.
//!
//! Faults map onto Docker as follows:
//! - crash: `docker kill` (SIGKILL), then `docker start` on the same bind-mounted data dir;
//! - pause: `docker pause` (the freezer cgroup: the process cannot notice, peers see silence);
//! - partitions: the same nftables rules as `netns` (see `nft`), entered from the host with
//!   `nsenter` into the container's network namespace, so no NET_ADMIN and no nft in the image.
//!   A container's namespace dies with it, so the rules are remembered and re-applied after each
//!   start.
//!
//! Docker owns the host's iptables chains (its FORWARD rules already accept traffic within a
//! network), so nothing here touches host chains. Node logs are followed with `docker logs -f`
//! into each node's log file, which is therefore current while the container runs.
//!
//! Everything created is removed when the [`DockerNet`] is dropped (also on panic). A run killed
//! outright leaves its owner's pid under [`STATE_DIR`], and the next [`DockerNet::create`] (or
//! `turnstile-jepsen cleanup`) sweeps networks whose owner is dead.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::ErrorKind;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::nft;

/// The node image the harness runs (tag of `jepsen/image/build-image.sh`).
pub const IMAGE: &str = "turnstile-jepsen:test";
/// Where live Docker networks record their owning process (apart from `netns`'s records).
pub const STATE_DIR: &str = "/run/turnstile-jepsen-docker";
/// A node's data dir inside its container (a bind mount of the host's data dir).
pub const DATA_DIR_IN_CONTAINER: &str = "/data";
/// Subnets are `10.214.<index>.0/24`, apart from `netns`'s `10.213.<index>.0/24`.
const SUBNET_FIRST_OCTETS: [u8; 2] = [10, 214];
/// How many networks may exist at once (the index range we try).
const NETS_MAX: u32 = 200;
/// Name prefix of the networks and containers.
const PREFIX: &str = "tjd";
/// Label on every network and container, valued with the network index: the sweep's handle.
const NET_LABEL: &str = "turnstile-jepsen.net";
/// The image label `build-image.sh` sets to the binary's SHA-256.
const SHA_LABEL: &str = "turnstile-jepsen.binary-sha256";
/// How long a log follower may take to finish once its container stopped.
const LOG_FOLLOWER_EXIT_MS_MAX: u64 = 5_000;

/// What one container runs.
#[derive(Debug, Clone)]
pub struct ContainerSpec<'a> {
    /// Short name, unique in the network (`n1`); the container is `tjd<n>-<name>`.
    pub name: &'a str,
    pub ip: Ipv4Addr,
    /// Host directory mounted at [`DATA_DIR_IN_CONTAINER`].
    pub data_dir: &'a Path,
    /// Host directory mounted read-only at [`crate::tls::CERTS_DIR_IN_CONTAINER`] (the node's
    /// TLS files), on a secure cluster.
    pub certs_dir: Option<&'a Path>,
    /// Host file the container's output is followed into.
    pub log_path: &'a Path,
    pub env: Vec<(&'a str, &'a str)>,
    /// Arguments after the image's entrypoint (`node --id ...`).
    pub args: Vec<OsString>,
}

/// What the network remembers of one container.
#[derive(Debug)]
struct Container {
    /// The container's init pid while it runs: the handle on its network namespace.
    pid: Option<i32>,
    /// The addresses it drops (re-applied after every start).
    drop_from: BTreeSet<Ipv4Addr>,
    log_path: PathBuf,
    /// `docker logs -f` writing the container's output to `log_path`.
    follower: Option<Child>,
}

/// A private Docker network with node containers on it.
#[derive(Debug)]
pub struct DockerNet {
    index: u32,
    image: String,
    /// By full container name. A mutex because partitions are applied through `&self`.
    containers: Mutex<BTreeMap<String, Container>>,
}

/// Runs `docker` with `args`; its trimmed stdout, or an error with its stderr.
fn docker<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> anyhow::Result<String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run docker")?;
    if !out.status.success() {
        let shown: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        bail!(
            "docker {} failed: {}",
            shown.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether a Docker engine answers (`docker info` succeeds).
pub fn engine_available() -> bool {
    Command::new("docker")
        .arg("info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn network_name(index: u32) -> String {
    format!("{PREFIX}{index}")
}

impl DockerNet {
    /// Creates a network on an unused subnet for containers of `image`, first sweeping
    /// networks whose owner died. `binary` is the node binary the caller believes the image
    /// holds; a mismatch is logged, since a stale image silently tests old code.
    pub fn create(image: &str, binary: &Path) -> anyhow::Result<DockerNet> {
        check_tools()?;
        let labels = docker(&[
            "image",
            "inspect",
            "--format",
            "{{json .Config.Labels}}",
            image,
        ])
        .with_context(|| {
            format!("image {image} is missing: build it with jepsen/image/build-image.sh")
        })?;
        warn_if_stale(image, &labels, binary);
        sweep_stale();
        std::fs::create_dir_all(STATE_DIR).context("cannot create the state dir")?;
        for index in 1..=NETS_MAX {
            if !claim(index)? {
                continue;
            }
            // The index is ours now: whatever still carries it was left by a run that died
            // before it recorded itself.
            remove_objects(index);
            // From here on, dropping `net` releases the claim.
            let net = DockerNet {
                index,
                image: image.to_string(),
                containers: Mutex::new(BTreeMap::new()),
            };
            let subnet = format!("{}/24", net.ip(0));
            let gateway = net.host_ip().to_string();
            let label = format!("{NET_LABEL}={index}");
            let name = network_name(index);
            let created = docker(&[
                "network",
                "create",
                "--driver",
                "bridge",
                "--subnet",
                &subnet,
                "--gateway",
                &gateway,
                "--label",
                &label,
                &name,
            ]);
            match created {
                Ok(_) => return Ok(net),
                // Someone else's network on this subnet: try the next index.
                Err(e) if e.to_string().contains("overlaps") => continue,
                Err(e) => return Err(e),
            }
        }
        bail!("no free Docker network index in 1..={NETS_MAX}")
    }

    /// The host side's address (the network's gateway): the harness talks from here and is
    /// never cut off.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.ip(1)
    }

    /// The address `.<octet>` on the network.
    pub fn ip(&self, octet: u8) -> Ipv4Addr {
        let [a, b] = SUBNET_FIRST_OCTETS;
        Ipv4Addr::new(a, b, self.index as u8, octet)
    }

    pub fn name(&self) -> String {
        network_name(self.index)
    }

    /// The full name of container `name` on this network.
    pub fn container_name(&self, name: &str) -> String {
        format!("{PREFIX}{}-{name}", self.index)
    }

    fn containers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Container>> {
        self.containers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates and starts a container; returns its full name.
    pub fn run(&self, spec: &ContainerSpec) -> anyhow::Result<String> {
        let name = self.container_name(spec.name);
        std::fs::create_dir_all(spec.data_dir).context("cannot create the data dir")?;
        let data_dir = std::fs::canonicalize(spec.data_dir).context("data dir")?;
        let mut mount = data_dir.into_os_string();
        mount.push(format!(":{DATA_DIR_IN_CONTAINER}"));
        let mut args: Vec<OsString> = [
            "run",
            "-d",
            "--name",
            &name,
            "--hostname",
            spec.name,
            "--label",
            &format!("{NET_LABEL}={}", self.index),
            "--network",
            &self.name(),
            "--ip",
            &spec.ip.to_string(),
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.push("-v".into());
        args.push(mount);
        if let Some(certs) = spec.certs_dir {
            let certs = std::fs::canonicalize(certs).context("certs dir")?;
            let mut mount = certs.into_os_string();
            mount.push(format!(":{}:ro", crate::tls::CERTS_DIR_IN_CONTAINER));
            args.push("-v".into());
            args.push(mount);
        }
        for (key, value) in &spec.env {
            args.push("-e".into());
            args.push(format!("{key}={value}").into());
        }
        args.push(self.image.clone().into());
        args.extend(spec.args.iter().cloned());
        self.containers().insert(
            name.clone(),
            Container {
                pid: None,
                drop_from: BTreeSet::new(),
                log_path: spec.log_path.to_path_buf(),
                follower: None,
            },
        );
        docker(&args)?;
        self.started(&name)?;
        Ok(name)
    }

    /// Starts a stopped container again (same data dir, same partition rules).
    pub fn start(&self, name: &str) -> anyhow::Result<()> {
        docker(&["start", name])?;
        self.started(name)
    }

    /// After a start: learn the pid, re-apply the partition rules, follow the log.
    fn started(&self, name: &str) -> anyhow::Result<()> {
        let pid: i32 = docker(&["inspect", "--format", "{{.State.Pid}}", name])?
            .parse()
            .context("container pid")?;
        let mut containers = self.containers();
        let c = containers
            .get_mut(name)
            .ok_or_else(|| anyhow!("no container {name}"))?;
        c.pid = (pid > 0).then_some(pid);
        if let Some(pid) = c.pid.filter(|_| !c.drop_from.is_empty()) {
            // The node may talk for the few ms until this lands; the nemesis never restarts a
            // node during a partition, and a story that does should expect it.
            apply_rules(pid, name, &c.drop_from)?;
        }
        finish_follower(c.follower.take());
        // The follower replays the whole log (every earlier start included), so the file is
        // truncated: it ends up holding the container's full output.
        let log = std::fs::File::create(&c.log_path).context("cannot open the node log")?;
        let follower = Command::new("docker")
            .args(["logs", "-f", name])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot follow the container's log")?;
        c.follower = Some(follower);
        Ok(())
    }

    /// SIGKILLs the container (also when paused) and waits until Docker reports it stopped and
    /// its log is in the log file.
    pub fn kill(&self, name: &str) -> anyhow::Result<()> {
        if let Err(e) = docker(&["kill", name]) {
            // Already stopped (it crashed) is fine; still running is not.
            if docker(&["inspect", "--format", "{{.State.Running}}", name])? == "true" {
                return Err(e);
            }
        }
        docker(&["wait", name])?;
        let mut containers = self.containers();
        if let Some(c) = containers.get_mut(name) {
            c.pid = None;
            finish_follower(c.follower.take());
        }
        Ok(())
    }

    /// Freezes the container (the freezer cgroup).
    pub fn pause(&self, name: &str) -> anyhow::Result<()> {
        docker(&["pause", name]).map(drop)
    }

    pub fn unpause(&self, name: &str) -> anyhow::Result<()> {
        docker(&["unpause", name]).map(drop)
    }

    /// Replaces container `name`'s partition rules: it drops every packet arriving from
    /// `from`; an empty set heals it. A stopped container gets them when it starts.
    pub fn drop_from(&self, name: &str, from: &BTreeSet<Ipv4Addr>) -> anyhow::Result<()> {
        let mut containers = self.containers();
        let c = containers
            .get_mut(name)
            .ok_or_else(|| anyhow!("no container {name}"))?;
        c.drop_from = from.clone();
        match c.pid {
            Some(pid) => apply_rules(pid, name, from),
            None => Ok(()),
        }
    }

    /// Container `name`'s whole output so far (every start), from Docker.
    pub fn logs(&self, name: &str) -> anyhow::Result<String> {
        let out = Command::new("docker")
            .args(["logs", name])
            .stdin(Stdio::null())
            .output()
            .context("cannot run docker logs")?;
        if !out.status.success() {
            bail!(
                "docker logs {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // The node writes only to stderr; stdout comes first in case anything is there.
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(text)
    }
}

impl Drop for DockerNet {
    fn drop(&mut self) {
        remove_objects(self.index);
        for c in self.containers().values_mut() {
            finish_follower(c.follower.take());
        }
        crate::owners::forget(STATE_DIR, self.index);
    }
}

/// Enters container `pid`'s network namespace from the host and replaces its rules.
fn apply_rules(pid: i32, name: &str, from: &BTreeSet<Ipv4Addr>) -> anyhow::Result<()> {
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid.to_string(), "-n", "nft", "-f", "-"]);
    nft::apply(cmd, &nft::drop_script(from), name)
}

/// Waits for a log follower to drain its container's output, killing it if it lingers.
fn finish_follower(follower: Option<Child>) {
    let Some(mut child) = follower else { return };
    let deadline = Instant::now() + Duration::from_millis(LOG_FOLLOWER_EXIT_MS_MAX);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Claims network `index` by creating its owner record; false if someone holds it.
fn claim(index: u32) -> anyhow::Result<bool> {
    use std::io::Write;
    let path = Path::new(STATE_DIR).join(index.to_string());
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(mut f) => {
            write!(f, "{}", std::process::id()).context("cannot record the network's owner")?;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).context("cannot record the network's owner"),
    }
}

/// Removes every container labelled with network `index`, then the network.
fn remove_objects(index: u32) {
    let filter = format!("label={NET_LABEL}={index}");
    if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = docker(&args);
        }
    }
    let _ = docker(&["network", "rm", &network_name(index)]);
}

/// Removes Docker networks (and their containers) whose owning process is gone. Returns how
/// many were removed.
pub fn sweep_stale() -> usize {
    let orphans = crate::owners::orphaned(STATE_DIR);
    for &index in &orphans {
        remove_objects(index);
        crate::owners::forget(STATE_DIR, index);
    }
    orphans.len()
}

/// Logs a warning when the image was built from another binary than `binary`.
fn warn_if_stale(image: &str, labels_json: &str, binary: &Path) {
    let labels: serde_json::Value = serde_json::from_str(labels_json).unwrap_or_default();
    if labels["turnstile-jepsen.static"] == "1" {
        // A static build is a different binary by design.
        return;
    }
    let Some(built_from) = labels[SHA_LABEL].as_str() else {
        return;
    };
    let Ok(out) = Command::new("sha256sum").arg(binary).output() else {
        return;
    };
    let ours = String::from_utf8_lossy(&out.stdout);
    if ours.split_whitespace().next() != Some(built_from) {
        tracing::warn!(
            image,
            binary = %binary.display(),
            "the image was built from another binary; rebuild it with jepsen/image/build-image.sh"
        );
    }
}

/// Fails early, with the fix, when the tools, the engine or privileges are missing.
fn check_tools() -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the Docker backend needs root (nsenter into containers' namespaces)");
    }
    for tool in ["docker", "nsenter", "nft"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            bail!("{tool} is missing (Debian: docker.io, util-linux, nftables)");
        }
    }
    if !engine_available() {
        bail!("no Docker engine answers (`docker info` failed)");
    }
    Ok(())
}
