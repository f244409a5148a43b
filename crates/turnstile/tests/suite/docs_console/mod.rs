//! Docs that cannot drift: every `console` block of README.md and docs/*.md runs, command by
//! command, in bash against a live 3-node `turnstile dev` cluster (a fresh one per file), and
//! each answer must have the shape the doc shows.
//!
//! How a block is read (`console_blocks`):
//! - `$ CMD` is a command, run with `T` and `T2` (nodes 1 and 2), `TURNSTILE_ENDPOINTS` and this
//!   build's `turnstile` first on `PATH`; the lines after it are its output (stdout and stderr).
//! - A line `... words ...` (indented) marks the command above as still running: the lines
//!   before the marker are what it prints while it runs (waited for), and its final output is
//!   the lines after the marker, or the next block holding output and no command. The next
//!   commands run meanwhile. A `curl -N` stream is read until it has printed as many lines as
//!   shown, then stopped.
//! - A command that is only a read (no `-X`, no `-d`) and follows a still-running one is
//!   repeated until it answers as shown (for up to [`SETTLE_MS_MAX`]): the running command
//!   may not have reached the leader yet.
//!
//! What "the shape the doc shows" means (`Bindings::line`): JSON answers have the same keys,
//! the same types and the same strings (but `message` and `cluster_id`), and an `HTTP NNN`
//! suffix the same status. Lease ids and log indexes (tokens, revisions) are bound: the first
//! time the doc shows one, it stands for the value the cluster gave, and every later mention, in
//! answers and in commands (which are rewritten before they run), must be that value. A lease id
//! a command uses before any answer showed it is a fresh 60 s lease. Text lines must match word
//! for word, with numbers after `token` and `lease` bound the same way and a number after
//! `since` free.
//!
//! Blocks that talk to no cluster are left out (`talks_to_a_cluster`). `TURNSTILE_DOCS_SHOW=1`
//! prints every actual answer, for writing a new example; `TURNSTILE_DOCS_FILE=docs/x.md` runs
//! one file.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use serde_json::Value;

use crate::common::{spawn_server, Proc, STARTUP_MS_MAX};

mod shape;
mod transcript;

use shape::{unbound_leases, Bindings};
use transcript::{console_blocks, Item, Step};

/// The workspace root, where README.md and docs/ are.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Longest a command may run to completion.
const COMMAND_MS_MAX: u64 = 30_000;
/// Longest a read is repeated while a still-running command settles.
const SETTLE_MS_MAX: u64 = 10_000;
/// Files the test creates in the commands' working directory.
const FIXTURES: &[(&str, &str)] = &[(
    // elections.md's command run while leading: it leads until it is stopped.
    "serve-as-primary.sh",
    "#!/bin/sh\nexec sleep 120\n",
)];

/// A 3-node `turnstile dev` cluster, stopped on drop.
struct DevCluster {
    _proc: Proc,
    _dir: tempfile::TempDir,
    endpoints: Vec<String>,
}

impl DevCluster {
    fn start() -> anyhow::Result<DevCluster> {
        let dir = tempfile::tempdir()?;
        let base = consecutive_ports(3)?;
        let mut dev = crate::common::turnstile();
        dev.args(["dev", "--nodes", "3", "--base-port", &base.to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("data"));
        let cluster = DevCluster {
            _proc: spawn_server(dev, dir.path())?,
            endpoints: (0..3)
                .map(|i| format!("http://127.0.0.1:{}", base + i))
                .collect(),
            _dir: dir,
        };
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// Until a leader with a cluster id answers and every node is ready.
    fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(STARTUP_MS_MAX);
        loop {
            let ready = self.endpoints.iter().all(|e| {
                curl(&[
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    &format!("{e}/readyz"),
                ])
                .is_ok_and(|code| code == "200")
            });
            if ready {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the dev cluster was not ready in time"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A port P such that P, P+1, ... P+n-1 were free a moment ago (the dev cluster needs them
/// consecutive).
fn consecutive_ports(n: u16) -> anyhow::Result<u16> {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = first.local_addr()?.port();
        if base > u16::MAX - n {
            continue;
        }
        let rest: Vec<_> = (1..n)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return Ok(base);
        }
    }
    bail!("no {n} consecutive free ports")
}

fn curl(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("curl")
        .args(["--max-time", "10"])
        .args(args)
        .output()
        .context("cannot run curl")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command running in the background, its output gathered by a thread.
struct Running {
    step: Step,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Until it has printed `n` lines (or exited, or the deadline passed).
    fn wait_lines(&mut self, n: usize) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + Duration::from_millis(COMMAND_MS_MAX);
        loop {
            let lines = self.lines();
            if lines.len() >= n || self.child.try_wait()?.is_some() || Instant::now() > deadline {
                // Whatever a just-exited command printed last is read by now or never.
                std::thread::sleep(Duration::from_millis(50));
                return Ok(self.lines());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Until it exits; its whole output.
    fn wait_exit(&mut self) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + Duration::from_millis(COMMAND_MS_MAX);
        while self.child.try_wait()?.is_none() {
            ensure!(
                Instant::now() < deadline,
                "{}: still running after {COMMAND_MS_MAX} ms",
                self.step.at
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        Ok(self.lines())
    }

    /// SIGTERM to its process group, then SIGKILL if it lingers.
    fn stop(&mut self) {
        let group = format!("-{}", self.child.id());
        for signal in ["-TERM", "-KILL"] {
            let _ = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs one file's blocks against `cluster` in `cwd`.
struct Session<'a> {
    cluster: &'a DevCluster,
    cwd: &'a Path,
    path: String,
    bindings: Bindings,
    running: Vec<Running>,
    show: bool,
}

impl Session<'_> {
    fn command(&self, cmd: &str) -> Command {
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_turnstile"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!("exec 2>&1; {cmd}"))
            .current_dir(self.cwd)
            .env("PATH", format!("{}:{}", bin_dir.display(), self.path))
            .env("T", &self.cluster.endpoints[0])
            .env("T2", &self.cluster.endpoints[1])
            .env("TURNSTILE_ENDPOINTS", self.cluster.endpoints.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        c
    }

    fn spawn(&self, step: Step, cmd: &str) -> anyhow::Result<Running> {
        let mut child = self
            .command(cmd)
            .spawn()
            .with_context(|| format!("{}: cannot run bash", step.at))?;
        let out = child.stdout.take().context("no stdout")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(line);
            }
        });
        Ok(Running { step, child, lines })
    }

    /// Fresh leases for the lease ids `cmd` names before any answer bound them.
    fn grant_unbound(&mut self, cmd: &str) -> anyhow::Result<()> {
        for doc in unbound_leases(cmd, &self.bindings) {
            let url = format!("{}/v1/leases", self.cluster.endpoints[0]);
            let answer = curl(&["-s", "-XPOST", &url, "-d", r#"{"ttl_ms": 60000}"#])?;
            let v: Value = serde_json::from_str(&answer).context("lease grant answer")?;
            let id = v["lease_id"].as_u64().context("lease_id")?;
            self.bindings.leases.insert(doc, id);
        }
        Ok(())
    }

    fn check(
        &mut self,
        at: &str,
        cmd: &str,
        doc: &[String],
        actual: &[String],
    ) -> Result<(), String> {
        if self.show {
            eprintln!("{at}: $ {cmd}\n{}", actual.join("\n"));
        }
        if doc.len() != actual.len() {
            return Err(format!(
                "{} lines, the doc shows {}:\n{}",
                actual.len(),
                doc.len(),
                actual.join("\n")
            ));
        }
        for (d, a) in doc.iter().zip(actual) {
            self.bindings
                .line(d, a)
                .map_err(|e| format!("{e}\n  doc:    {d}\n  actual: {a}"))?;
        }
        Ok(())
    }

    fn step(&mut self, mut step: Step) -> anyhow::Result<()> {
        self.grant_unbound(&step.cmd)?;
        let cmd = self.bindings.rewrite(&step.cmd);
        step.cmd = cmd.clone();
        let fail = |e: String| anyhow!("{}: $ {cmd}\n{e}", step.at);
        if step.running || step.cmd.contains(" -N ") {
            // Only what it has printed so far is compared: a stream goes on, a running
            // command's final output comes later.
            let mut r = self.spawn(step.clone(), &cmd)?;
            let mut printed = r.wait_lines(step.output.len())?;
            printed.truncate(step.output.len());
            self.check(&step.at, &cmd, &step.output, &printed)
                .map_err(fail)?;
            if step.running {
                self.running.push(r);
            }
            return Ok(());
        }
        let is_read = !step.cmd.contains("-X") && !step.cmd.contains(" -d ");
        let settle = if is_read && !self.running.is_empty() {
            SETTLE_MS_MAX
        } else {
            0
        };
        let deadline = Instant::now() + Duration::from_millis(settle);
        loop {
            let mut r = self.spawn(step.clone(), &cmd)?;
            let out = r.wait_exit()?;
            // A repeated read must not leave bindings from an answer that did not match.
            let saved = (self.bindings.leases.clone(), self.bindings.indexes.clone());
            match self.check(&step.at, &cmd, &step.output, &out) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(fail(e)),
                Err(_) => {
                    (self.bindings.leases, self.bindings.indexes) = saved;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// The final output of the last still-running command.
    fn final_output(&mut self, at: &str, lines: &[String]) -> anyhow::Result<()> {
        let mut r = self
            .running
            .pop()
            .ok_or_else(|| anyhow!("{at}: output with no command running"))?;
        let all = r.wait_exit()?;
        let skip = r.step.output.len().min(all.len());
        let cmd = r.step.cmd.clone();
        self.check(at, &cmd, lines, &all[skip..])
            .map_err(|e| anyhow!("{at}: the final output of {}: $ {cmd}\n{e}", r.step.at))
    }
}

/// A block talks to a cluster if a command names a node (`$T`, `$T2`, a loopback address) or
/// runs `turnstile` (every `turnstile` command in a console block is a client command). The
/// rest (builds, the chaos harness, fencing.md's example ledger at `$L`, whose story its own
/// tests in crates/turnstile-fence run) is not this test's.
fn talks_to_a_cluster(raw: &str) -> bool {
    raw.lines().filter_map(|l| l.strip_prefix("$ ")).any(|cmd| {
        cmd.contains("$T") || cmd.contains("127.0.0.1:") || cmd.starts_with("turnstile ")
    })
}

/// Runs every console block of one file; returns how many commands ran.
fn run_file(file: &str, show: bool) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(file))?;
    let blocks = console_blocks(file, &text)?;
    let runnable: Vec<_> = blocks
        .into_iter()
        .filter(|(raw, _)| talks_to_a_cluster(raw))
        .collect();
    if runnable.is_empty() {
        return Ok(0);
    }
    let cluster = DevCluster::start()?;
    let cwd = tempfile::tempdir()?;
    for (name, body) in FIXTURES {
        let path = cwd.path().join(name);
        std::fs::write(&path, body)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    let mut session = Session {
        cluster: &cluster,
        cwd: cwd.path(),
        path: std::env::var("PATH").unwrap_or_default(),
        bindings: Bindings::default(),
        running: Vec::new(),
        show,
    };
    let mut commands = 0;
    for (_, items) in runnable {
        for item in items {
            match item {
                Item::Step(step) => {
                    let final_now = (step.running && !step.final_output.is_empty())
                        .then(|| (step.at.clone(), step.final_output.clone()));
                    session.step(step)?;
                    commands += 1;
                    if let Some((at, lines)) = final_now {
                        session.final_output(&at, &lines)?;
                    }
                }
                Item::Output { at, lines } => session.final_output(&at, &lines)?,
            }
        }
    }
    Ok(commands)
}

/// README.md and every docs/*.md, sorted.
fn doc_files() -> anyhow::Result<Vec<String>> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    docs.sort();
    for p in docs {
        if p.extension().is_some_and(|e| e == "md") {
            let name = p.file_name().context("name")?.to_string_lossy();
            files.push(format!("docs/{name}"));
        }
    }
    Ok(files)
}

/// Runs `run_file(file, show)` on every doc file, or on `TURNSTILE_DOCS_FILE` alone, with
/// `show` from `TURNSTILE_DOCS_SHOW`; fails with every file's failure. Returns the commands
/// run per file that ran any, or `None` if only one file was asked for.
pub(crate) fn run_doc_files(
    what: &str,
    run_file: fn(&str, bool) -> anyhow::Result<usize>,
) -> anyhow::Result<Option<BTreeMap<String, usize>>> {
    let show = std::env::var_os("TURNSTILE_DOCS_SHOW").is_some();
    let only = std::env::var("TURNSTILE_DOCS_FILE").ok();
    let mut ran = BTreeMap::new();
    let mut failures = Vec::new();
    for file in doc_files()? {
        if only.as_ref().is_some_and(|o| *o != file) {
            continue;
        }
        match run_file(&file, show) {
            Ok(0) => {}
            Ok(n) => {
                ran.insert(file, n);
            }
            Err(e) => failures.push(format!("{file}: {e:#}")),
        }
    }
    println!("{what} examples run (commands per file): {ran:?}");
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(only.is_none().then_some(ran))
}

#[test]
fn every_console_example_in_the_docs_runs_as_shown() -> anyhow::Result<()> {
    if let Some(ran) = run_doc_files("console", run_file)? {
        ensure!(
            ran.get("README.md").is_some_and(|&n| n >= 10),
            "the README's session did not run: {ran:?}"
        );
    }
    Ok(())
}
