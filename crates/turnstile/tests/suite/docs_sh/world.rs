//! The machines the docs' `sh` examples run on: a network namespace whose loopback carries the
//! docs' addresses (10.0.0.1-4, 10.0.1.1-3), a mount namespace where /etc and /var/lib are
//! copy-on-write (the host's files are never touched) and a pid namespace of their own (so
//! `pkill turnstile` reaches only the docs' nodes). A holder process keeps the namespaces; a
//! shell entered into them runs the commands one at a time. Dropping the world kills the
//! holder, and with it every process in its pid namespace.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// The addresses the docs use for nodes.
const ADDRESSES: &[&str] = &[
    "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.1.1", "10.0.1.2", "10.0.1.3",
];
/// Longest the holder may live: it outlives no test run, even if the test is killed.
const HOLDER_S_MAX: u64 = 1_800;
/// Longest the namespaces take to set up.
const SETUP_MS_MAX: u64 = 10_000;
/// Ends a command's output: the marker, then its exit status.
const DONE: &str = "@@docs-sh-done@@";
/// The shim the shell sources.
const MACHINES_SH: &str = include_str!("machines.sh");

pub struct World {
    dir: tempfile::TempDir,
    holder: Child,
    /// The holder's child, pid 1 of the namespace, as the host sees it.
    init_pid: u32,
}

impl World {
    pub fn start() -> anyhow::Result<World> {
        let dir = tempfile::tempdir()?;
        for sub in ["home", "machines", "logs", "ov"] {
            std::fs::create_dir(dir.path().join(sub))?;
        }
        let ov = dir.path().join("ov");
        let ov = ov.display();
        let addrs: String = ADDRESSES
            .iter()
            .map(|a| format!("ip addr add {a}/32 dev lo; "))
            .collect();
        let setup = format!(
            "set -e; ip link set lo up; {addrs}\
             mount -t tmpfs tmpfs {ov}; \
             for d in etc var; do mkdir -p {ov}/$d/upper {ov}/$d/work; done; \
             mount -t overlay overlay -o lowerdir=/etc,upperdir={ov}/etc/upper,workdir={ov}/etc/work /etc; \
             mount -t overlay overlay -o lowerdir=/var/lib,upperdir={ov}/var/upper,workdir={ov}/var/work /var/lib; \
             mkdir -p /var/lib/turnstile; echo ready; exec sleep {HOLDER_S_MAX}"
        );
        let mut holder = Command::new("unshare")
            .args([
                "--net",
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "bash",
                "-c",
                &setup,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot run unshare (the docs' sh examples need root)")?;
        let out = holder.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = holder.kill();
            let _ = holder.wait();
            bail!("the namespaces were not set up (run as root): {line:?}");
        }
        let children = format!("/proc/{0}/task/{0}/children", holder.id());
        let init_pid = std::fs::read_to_string(&children)?
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .context("the holder has no child")?;
        Ok(World {
            dir,
            holder,
            init_pid,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A bash inside the namespaces, in the world's home dir, with `turnstile` (this build's,
    /// wrapped by machines.sh) first on `PATH` and `env` set.
    pub fn shell(&self, env: &[(&str, &str)]) -> anyhow::Result<Shell> {
        let bin_dir: PathBuf = Path::new(env!("CARGO_BIN_EXE_turnstile"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut child = Command::new("nsenter")
            .args(["--target", &self.init_pid.to_string()])
            .args([
                "--net",
                "--mount",
                "--pid",
                "--",
                "bash",
                "--noprofile",
                "--norc",
            ])
            .current_dir(self.path().join("home"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin_dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("DOCS_W", self.path())
            .env("DOCS_BIN", env!("CARGO_BIN_EXE_turnstile"))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run nsenter")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let out = child.stdout.take().context("no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell {
            child,
            stdin,
            lines,
        };
        let machines = self.path().join("machines.sh");
        std::fs::write(&machines, MACHINES_SH)?;
        let (status, out) = shell.run(
            // Entering a mount namespace moves the shell to its root: back to the world's home.
            &format!(
                "exec 2>&1; cd {} && source {}",
                self.path().join("home").display(),
                machines.display()
            ),
            Duration::from_millis(SETUP_MS_MAX),
        )?;
        ensure!(status == 0, "machines.sh: {}", out.join("\n"));
        Ok(shell)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Pid 1 of the namespace gone, the kernel kills every process left in it.
        let _ = Command::new("kill")
            .args(["-KILL", &self.init_pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// One bash, commands sent one at a time.
pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Shell {
    /// Runs `cmd` in this shell (so `export` lasts) with stdin from /dev/null; its exit status
    /// and output lines.
    pub fn run(&mut self, cmd: &str, timeout: Duration) -> anyhow::Result<(i32, Vec<String>)> {
        writeln!(
            self.stdin,
            "{{ {cmd}\n}} </dev/null; printf '%s %d\\n' '{DONE}' \"$?\""
        )?;
        self.stdin.flush()?;
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    bail!("still running after {} ms", timeout.as_millis())
                }
                Err(RecvTimeoutError::Disconnected) => bail!("the shell exited"),
            };
            // A command whose output does not end in a newline shares the marker's line.
            if let Some((before, status)) = line.split_once(DONE) {
                if !before.is_empty() {
                    out.push(before.to_string());
                }
                let status = status.trim().parse().context("exit status")?;
                return Ok((status, out));
            }
            out.push(line);
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
