//! `NodeProcess`: one server process (a `turnstile serve` or an `etcd`) that the harness started,
//! with its output in a log file. Dropping it kills the process (SIGKILL) and reaps it, so a
//! cluster dropped on any path, an error or Ctrl-C included, leaves no node running.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

/// Bytes of a node's log shown when it fails to start or dies.
const LOG_TAIL_BYTES: u64 = 4_096;
/// Most bytes of a node's log one [`NodeProcess::count_in_log`] reads: nodes log at `warn`,
/// so even a window full of peer failures writes far less.
const LOG_SCAN_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Clock ticks per second of `/proc/<pid>/stat`'s CPU times (`USER_HZ`, which Linux fixes at
/// 100 on every architecture it reports to user space with).
const USER_HZ: u64 = 100;

/// A running server process owned by the harness.
pub struct NodeProcess {
    name: String,
    child: Child,
    log: PathBuf,
    killed: bool,
}

impl NodeProcess {
    /// Starts `program args...` with stdout and stderr appended to `log`, and every variable
    /// starting with one of `env_prefixes_removed` taken out of its environment (so a setting
    /// in the caller's shell cannot change what is measured).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &str)],
        env_prefixes_removed: &[&str],
        log: &Path,
    ) -> anyhow::Result<NodeProcess> {
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone().context("cannot clone a log file handle")?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if env_prefixes_removed.iter().any(|p| k.starts_with(p)) {
                cmd.env_remove(&key);
            }
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} ({name})", program.display()))?;
        Ok(NodeProcess {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
            killed: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the end of the node's log if the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "{} exited ({status}); end of its log:\n{}",
                self.name,
                self.log_tail()
            ),
            Err(e) => bail!("cannot check {}: {e}", self.name),
        }
    }

    /// SIGKILL, then reap. Idempotent.
    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        // An error means the process is already gone; reaping below still applies.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn is_killed(&self) -> bool {
        self.killed
    }

    /// Resident memory (VmRSS of `/proc/<pid>/status`), in bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        let path = format!("/proc/{}/status", self.pid());
        let status =
            std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        parse_vm_rss_bytes(&status).with_context(|| format!("no VmRSS line in {path}"))
    }

    /// CPU time the process has used, all threads, user and system, in ms (10 ms steps).
    pub fn cpu_ms(&self) -> anyhow::Result<u64> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        parse_cpu_ms(&stat).with_context(|| format!("no CPU times in {path}"))
    }

    /// The node's log size now, in bytes (0 if it cannot be read): where a later
    /// [`NodeProcess::count_in_log`] starts.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// For each of `needles`, the log lines written between byte `from` and byte `to` (two
    /// [`NodeProcess::log_len`]s) that contain it; at most [`LOG_SCAN_BYTES_MAX`] bytes are read.
    pub fn count_in_log(&self, from: u64, to: u64, needles: &[&str]) -> anyhow::Result<Vec<u64>> {
        let mut f =
            File::open(&self.log).with_context(|| format!("cannot open {}", self.log.display()))?;
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.take(to.saturating_sub(from).min(LOG_SCAN_BYTES_MAX))
            .read_to_end(&mut buf)?;
        Ok(count_lines(&String::from_utf8_lossy(&buf), needles))
    }

    /// The last few KiB of the node's log, for error messages.
    pub fn log_tail(&self) -> String {
        read_tail(&self.log)
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log.display()))
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_tail(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// For each needle, the lines of `text` that contain it.
fn count_lines(text: &str, needles: &[&str]) -> Vec<u64> {
    needles
        .iter()
        .map(|n| text.lines().filter(|l| l.contains(n)).count() as u64)
        .collect()
}

/// utime + stime of a `/proc/<pid>/stat` line, in ms. The fields are counted after the last
/// `)`, since the command name before it may hold spaces and parentheses.
fn parse_cpu_ms(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3 (state) onwards; utime and stime are fields 14 and 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 1_000 / USER_HZ)
}

/// `VmRSS:  12345 kB` → bytes.
pub fn parse_vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `n` distinct free loopback ports: bound to port 0 together, then released for the nodes to
/// bind. Another process could take one in between; a node that cannot bind fails to start and
/// the harness reports it.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("cannot bind a loopback port")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect::<std::io::Result<Vec<u16>>>()
        .context("cannot read a bound port")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_parsed_in_bytes() {
        let status = "Name:\tetcd\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads: 9\n";
        assert_eq!(parse_vm_rss_bytes(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss_bytes("Name: x\n"), None);
    }

    #[test]
    fn cpu_times_and_log_lines_are_read() {
        let stat = "4242 (turnstile (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0";
        assert_eq!(parse_cpu_ms(stat), Some(2_870));
        assert_eq!(parse_cpu_ms("4242 (short) S 1"), None);
        let log = "WARN a failed to send a heartbeat: peer 2 did not answer in time\n\
                   WARN b did not answer in time\nINFO c\n";
        assert_eq!(
            count_lines(
                log,
                &["failed to send a heartbeat", "did not answer in time", "x"]
            ),
            vec![1, 2, 0]
        );
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(6).expect("loopback ports");
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6);
    }
}
