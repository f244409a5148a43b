//! Network namespaces on a private bridge: every node (and any client under test) gets its own
//! namespace and address, and partitions are nftables drop rules inside the receiving
//! namespace (Jepsen's grudge model). The harness itself sits on the host side at `.1` and is
//! never cut off, so it can always reach every node.
//!
//! Everything created is removed when the [`Net`] is dropped (also on panic), and a run that
//! was killed outright is swept by the next [`Net::create`] or by `turnstile-jepsen cleanup`:
//! each live `Net` records its owner's pid under [`STATE_DIR`].

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::nft;

/// Where live networks record their owning process.
pub const STATE_DIR: &str = "/run/turnstile-jepsen";
/// Subnets are `10.213.<index>.0/24`; the index is claimed by creating the bridge.
const SUBNET_FIRST_OCTETS: [u8; 2] = [10, 213];
/// How many networks may exist at once (the index range we try).
const NETS_MAX: u32 = 200;
/// Name prefix of everything we create (bridges, veths, namespaces): short, because Linux
/// interface names are limited to 15 bytes.
const PREFIX: &str = "tj";

/// One host (node or client) inside its own namespace.
#[derive(Debug, Clone)]
pub struct NetHost {
    pub namespace: String,
    pub ip: Ipv4Addr,
}

/// A private bridge with namespaces attached.
#[derive(Debug)]
pub struct Net {
    index: u32,
    hosts: Vec<NetHost>,
}

/// Runs a command, failing with its stderr if it exits non-zero.
fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs a command whose failure is expected when the thing is already gone.
fn run_quiet(program: &str, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn bridge_name(index: u32) -> String {
    format!("{PREFIX}br{index}")
}

impl Net {
    /// Creates a fresh bridge on an unused subnet, first sweeping networks whose owner died.
    pub fn create() -> anyhow::Result<Net> {
        check_tools()?;
        sweep_stale();
        std::fs::create_dir_all(STATE_DIR).context("cannot create the state dir")?;
        for index in 1..=NETS_MAX {
            let bridge = bridge_name(index);
            // Creating the bridge is the atomic claim: it fails if another run holds the index.
            if run("ip", &["link", "add", &bridge, "type", "bridge"]).is_err() {
                continue;
            }
            let net = Net {
                index,
                hosts: Vec::new(),
            };
            crate::owners::record(STATE_DIR, index)?;
            let cidr = format!("{}/24", net.host_ip());
            run("ip", &["addr", "add", &cidr, "dev", &bridge])?;
            run("ip", &["link", "set", &bridge, "up"])?;
            // Docker loads br_netfilter and sets FORWARD to DROP, which silently drops bridged
            // traffic between our namespaces. Accept our bridge's traffic explicitly.
            run("iptables", &forward_rule_args("-I", &bridge))?;
            return Ok(net);
        }
        bail!("no free network index in 1..={NETS_MAX}; run `turnstile-jepsen cleanup`")
    }

    /// The host side's address: the harness's drivers talk from here and are never cut off.
    pub fn host_ip(&self) -> Ipv4Addr {
        let [a, b] = SUBNET_FIRST_OCTETS;
        Ipv4Addr::new(a, b, self.index as u8, 1)
    }

    /// Creates a namespace `tj<index>-<name>` at `.<octet>` on the bridge.
    pub fn add_host(&mut self, name: &str, octet: u8) -> anyhow::Result<NetHost> {
        let [a, b] = SUBNET_FIRST_OCTETS;
        let ip = Ipv4Addr::new(a, b, self.index as u8, octet);
        let namespace = format!("{PREFIX}{}-{name}", self.index);
        let veth = format!("{PREFIX}{}-{name}", self.index);
        if veth.len() > 15 {
            bail!("interface name {veth} is longer than 15 bytes");
        }
        run("ip", &["netns", "add", &namespace])?;
        let host = NetHost {
            namespace: namespace.clone(),
            ip,
        };
        self.hosts.push(host.clone());
        run(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ],
        )?;
        run(
            "ip",
            &[
                "link",
                "set",
                &veth,
                "master",
                &bridge_name(self.index),
                "up",
            ],
        )?;
        let cidr = format!("{ip}/24");
        run(
            "ip",
            &["-n", &namespace, "addr", "add", &cidr, "dev", "eth0"],
        )?;
        run("ip", &["-n", &namespace, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &namespace, "link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub fn command_in(&self, host: &NetHost, program: &Path) -> Command {
        // `ip netns exec` enters the namespace and then execs the program, so the child's pid
        // is the program's own: SIGSTOP and SIGKILL reach it directly.
        let mut cmd = Command::new("ip");
        cmd.arg("netns")
            .arg("exec")
            .arg(&host.namespace)
            .arg(program);
        cmd
    }

    /// Replaces `host`'s partition rules: it drops every packet arriving from `from`. An empty
    /// set heals it. One call per receiving host, so one-way partitions are natural.
    pub fn drop_from(&self, host: &NetHost, from: &BTreeSet<Ipv4Addr>) -> anyhow::Result<()> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.namespace, "nft", "-f", "-"]);
        nft::apply(cmd, &nft::drop_script(from), &host.namespace)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        remove_net(self.index);
    }
}

fn forward_rule_args<'a>(op: &'a str, bridge: &'a str) -> Vec<&'a str> {
    vec![
        op, "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT", "-w",
    ]
}

/// Removes everything of network `index`: processes in its namespaces, the namespaces, the
/// bridge (which takes the veths with it), the FORWARD rule and the owner record.
fn remove_net(index: u32) {
    let ns_prefix = format!("{PREFIX}{index}-");
    for ns in namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&ns_prefix))
    {
        kill_namespace_processes(&ns);
        // The host end of the veth has the namespace's name. Deleting it removes both ends at
        // once; a deleted namespace frees its interfaces only later, asynchronously, and a
        // lingering veth would make the next network that claims this index fail to add it.
        run_quiet("ip", &["link", "del", &ns]);
        run_quiet("ip", &["netns", "del", &ns]);
    }
    let bridge = bridge_name(index);
    run_quiet("iptables", &forward_rule_args("-D", &bridge));
    run_quiet("ip", &["link", "del", &bridge]);
    crate::owners::forget(STATE_DIR, index);
}

/// Names of all network namespaces.
fn namespaces() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// SIGKILLs every process in a namespace (and SIGCONTs it, so a paused one dies too).
fn kill_namespace_processes(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let pid = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Removes networks whose owning process is gone (a run killed before its cleanup ran).
/// Returns how many were removed.
pub fn sweep_stale() -> usize {
    let orphans = crate::owners::orphaned(STATE_DIR);
    for &index in &orphans {
        remove_net(index);
    }
    orphans.len()
}

/// Fails early, with the fix, when the tools or privileges are missing.
fn check_tools() -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("network namespaces need root");
    }
    for tool in ["ip", "nft", "iptables"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !found {
            bail!("{tool} is missing (Debian: iproute2, nftables, iptables)");
        }
    }
    Ok(())
}
