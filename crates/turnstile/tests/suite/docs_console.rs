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

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use serde_json::Value;

use crate::common::{Proc, STARTUP_MS_MAX};

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

/// One command of a block, and what the doc shows it printing.
#[derive(Debug, Clone)]
struct Step {
    /// Where the command is (file:line), for messages.
    at: String,
    cmd: String,
    /// Output printed while it runs (before a marker), or all of it (no marker).
    output: Vec<String>,
    /// True if a marker says it keeps running while the next commands run.
    running: bool,
    /// Its final output, after the marker (or in a later output-only block).
    final_output: Vec<String>,
}

/// What a file's console blocks say, in order.
#[derive(Debug)]
enum Item {
    Step(Step),
    /// An output-only block: the final output of the last still-running command.
    Output {
        at: String,
        lines: Vec<String>,
    },
}

/// The console blocks of `text`, as steps and output-only blocks.
fn console_blocks(file: &str, text: &str) -> anyhow::Result<Vec<(String, Vec<Item>)>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim_end() != "```console" {
            continue;
        }
        let start = format!("{file}:{}", n + 1);
        let mut body = Vec::new();
        for (n, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            body.push((format!("{file}:{}", n + 1), line.to_string()));
        }
        let raw = body
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        blocks.push((raw, parse_block(&start, &body)?));
    }
    Ok(blocks)
}

fn is_marker(line: &str) -> bool {
    let t = line.trim();
    line.starts_with(' ') && t.len() > 6 && t.starts_with("...") && t.ends_with("...")
}

fn parse_block(start: &str, body: &[(String, String)]) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut orphan = Vec::new();
    for (at, line) in body {
        if let Some(cmd) = line.strip_prefix("$ ") {
            items.push(Item::Step(Step {
                at: at.clone(),
                cmd: cmd.to_string(),
                output: Vec::new(),
                running: false,
                final_output: Vec::new(),
            }));
            continue;
        }
        match items.last_mut() {
            Some(Item::Step(step)) if is_marker(line) => {
                ensure!(!step.running, "{at}: a second marker for one command");
                step.running = true;
            }
            Some(Item::Step(step)) if step.running => step.final_output.push(line.clone()),
            Some(Item::Step(step)) => step.output.push(line.clone()),
            _ => orphan.push(line.clone()),
        }
    }
    if !orphan.is_empty() {
        ensure!(items.is_empty(), "{start}: output before the first command");
        items.push(Item::Output {
            at: start.to_string(),
            lines: orphan,
        });
    }
    Ok(items)
}

/// Doc values bound to the cluster's, per kind.
#[derive(Debug, Default)]
struct Bindings {
    leases: HashMap<u64, u64>,
    indexes: HashMap<u64, u64>,
}

/// JSON keys whose numbers are log indexes, and those that are lease ids.
const INDEX_KEYS: &[&str] = &[
    "token",
    "revision",
    "mod_revision",
    "create_revision",
    "current_token",
    "highest",
];
const LEASE_KEYS: &[&str] = &["lease_id"];
/// JSON keys whose values differ from run to run whatever the doc says (type still checked).
const FREE_KEYS: &[&str] = &["message", "cluster_id", "since_ms", "term"];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lease,
    Index,
}

impl Bindings {
    fn table(&mut self, kind: Kind) -> &mut HashMap<u64, u64> {
        match kind {
            Kind::Lease => &mut self.leases,
            Kind::Index => &mut self.indexes,
        }
    }

    /// Binds doc value `doc` to `actual`, or checks an earlier binding.
    fn bind(&mut self, kind: Kind, doc: u64, actual: u64) -> Result<(), String> {
        let table = self.table(kind);
        match table.get(&doc) {
            Some(&bound) if bound == actual => Ok(()),
            Some(&bound) => Err(format!("{doc} stands for {bound} here, but {actual} came")),
            None => {
                if let Some((d, _)) = table.iter().find(|(_, &a)| a == actual) {
                    return Err(format!("{actual} came for {doc}, but {d} stands for it"));
                }
                table.insert(doc, actual);
                Ok(())
            }
        }
    }

    /// Checks one actual line against the doc's.
    fn line(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let (doc_body, doc_status) = split_status(doc);
        let (body, status) = split_status(actual);
        if doc_status != status {
            return Err(format!("status {status:?}, the doc shows {doc_status:?}"));
        }
        if let Some(rest) = doc_body.strip_prefix("id: ") {
            let got = body
                .strip_prefix("id: ")
                .ok_or_else(|| "not an event id line".to_string())?;
            let (d_rev, d_seq) = event_id(rest)?;
            let (a_rev, a_seq) = event_id(got)?;
            if d_seq != a_seq {
                return Err(format!("event seq {a_seq}, the doc shows {d_seq}"));
            }
            return self.bind(Kind::Index, d_rev, a_rev);
        }
        if let Some(rest) = doc_body.strip_prefix("data: ") {
            let got = body
                .strip_prefix("data: ")
                .ok_or_else(|| "not an event data line".to_string())?;
            return self.json_line(rest, got);
        }
        if doc_body.starts_with('{') {
            return self.json_line(doc_body, body);
        }
        self.text(doc_body, body)
    }

    fn json_line(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let d: Value = serde_json::from_str(doc).map_err(|e| format!("the doc's JSON: {e}"))?;
        let a: Value = serde_json::from_str(actual).map_err(|e| format!("not JSON: {e}"))?;
        self.json("", &d, &a)
    }

    fn json(&mut self, key: &str, d: &Value, a: &Value) -> Result<(), String> {
        let at = |m: String| {
            if key.is_empty() {
                m
            } else {
                format!("{key}: {m}")
            }
        };
        match (d, a) {
            (Value::Object(d), Value::Object(a)) => {
                let mut dk: Vec<_> = d.keys().collect();
                let mut ak: Vec<_> = a.keys().collect();
                dk.sort();
                ak.sort();
                if dk != ak {
                    return Err(at(format!("keys {ak:?}, the doc shows {dk:?}")));
                }
                for (k, dv) in d {
                    // "tokens": {name: token} and "cycle": [lease ids] bind their elements.
                    let inner = match (key, k.as_str()) {
                        ("tokens", _) => "token",
                        (_, "cycle") => "lease_id",
                        (_, other) => other,
                    };
                    self.json(inner, dv, &a[k])?;
                }
                Ok(())
            }
            (Value::Array(d), Value::Array(a)) => {
                if d.len() != a.len() {
                    return Err(at(format!(
                        "{} elements, the doc shows {}",
                        a.len(),
                        d.len()
                    )));
                }
                d.iter().zip(a).try_for_each(|(d, a)| self.json(key, d, a))
            }
            (Value::Number(dn), Value::Number(an)) => {
                let kind = if INDEX_KEYS.contains(&key) {
                    Some(Kind::Index)
                } else if LEASE_KEYS.contains(&key) {
                    Some(Kind::Lease)
                } else {
                    None
                };
                match (kind, dn.as_u64(), an.as_u64()) {
                    (Some(kind), Some(dv), Some(av)) => self.bind(kind, dv, av).map_err(at),
                    _ if FREE_KEYS.contains(&key) || dn == an => Ok(()),
                    _ => Err(at(format!("{an}, the doc shows {dn}"))),
                }
            }
            (Value::String(_), Value::String(_)) if FREE_KEYS.contains(&key) => Ok(()),
            (d, a) if d == a => Ok(()),
            (d, a) => Err(at(format!("{a}, the doc shows {d}"))),
        }
    }

    /// Word for word; numbers after `token`/`lease` bound, after `since` free.
    fn text(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let d = words(doc);
        let a = words(actual);
        if d.len() != a.len() {
            return Err(format!("{} words, the doc shows {}", a.len(), d.len()));
        }
        let mut before = "";
        for (dw, aw) in d.iter().zip(&a) {
            let (dn, an) = (leading_number(dw), leading_number(aw));
            match (before, dn, an) {
                ("token", Some((dv, dr)), Some((av, ar))) if dr == ar => {
                    self.bind(Kind::Index, dv, av)?
                }
                ("lease", Some((dv, dr)), Some((av, ar))) if dr == ar => {
                    self.bind(Kind::Lease, dv, av)?
                }
                ("since", Some(_), Some(_)) => {}
                _ if dw == aw => {}
                _ => return Err(format!("{aw:?}, the doc shows {dw:?}")),
            }
            before = dw.trim_start_matches('(');
        }
        Ok(())
    }

    /// `cmd` with every bound value of the doc replaced by the cluster's.
    fn rewrite(&self, cmd: &str) -> String {
        let mut out = cmd.to_string();
        for key in INDEX_KEYS {
            out = replace_numbers(&out, &format!("\"{key}\": "), &self.indexes);
        }
        out = replace_numbers(&out, "token=", &self.indexes);
        out = replace_numbers(&out, "from_revision=", &self.indexes);
        for key in LEASE_KEYS {
            out = replace_numbers(&out, &format!("\"{key}\": "), &self.leases);
        }
        out
    }
}

/// Splits a trailing `  HTTP NNN` (curl's `-w`) off a line.
fn split_status(line: &str) -> (&str, Option<&str>) {
    match line.rsplit_once("  HTTP ") {
        Some((body, status)) if status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()) => {
            (body, Some(status))
        }
        _ => (line, None),
    }
}

fn event_id(s: &str) -> Result<(u64, u64), String> {
    let (rev, seq) = s.trim().split_once('.').ok_or("no '.' in the event id")?;
    let parse = |v: &str| v.parse::<u64>().map_err(|e| format!("event id {s}: {e}"));
    Ok((parse(rev)?, parse(seq)?))
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// A word's leading number and the rest (`16,` is 16 and `,`).
fn leading_number(word: &str) -> Option<(u64, &str)> {
    let end = word
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(word.len());
    Some((word[..end].parse().ok()?, &word[end..]))
}

/// Replaces the number after each `prefix` in `s` by its binding, if it has one.
fn replace_numbers(s: &str, prefix: &str, table: &HashMap<u64, u64>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        out.push_str(&rest[..i + prefix.len()]);
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        match after[..end].parse::<u64>().ok().and_then(|n| table.get(&n)) {
            Some(bound) => out.push_str(&bound.to_string()),
            None => out.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Lease ids a command names (`"lease_id": N`) that nothing has bound yet.
fn unbound_leases(cmd: &str, b: &Bindings) -> Vec<u64> {
    let mut found = Vec::new();
    let prefix = "\"lease_id\": ";
    let mut rest = cmd;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if let Ok(n) = after[..end].parse::<u64>() {
            if !b.leases.contains_key(&n) && !found.contains(&n) {
                found.push(n);
            }
        }
        rest = &after[end..];
    }
    found
}

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
        let log = std::fs::File::create(dir.path().join("dev.log"))?;
        let child = crate::common::turnstile()
            .args(["dev", "--nodes", "3", "--base-port", &base.to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("cannot start turnstile dev")?;
        let cluster = DevCluster {
            _proc: Proc::new(child),
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

#[test]
fn every_console_example_in_the_docs_runs_as_shown() -> anyhow::Result<()> {
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
    println!("console examples run (commands per file): {ran:?}");
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    if only.is_none() {
        ensure!(
            ran.get("README.md").is_some_and(|&n| n >= 10),
            "the README's session did not run: {ran:?}"
        );
    }
    Ok(())
}

/// The checker itself: a drifted answer fails, the same answer with other ids passes.
#[test]
fn a_drifted_answer_is_caught() {
    let doc = r#"{"lease_id":3,"revision":3,"ttl_ms":60000}"#;
    let mut b = Bindings::default();
    assert!(b
        .line(doc, r#"{"lease_id":7,"revision":7,"ttl_ms":60000}"#)
        .is_ok());
    // The same doc value again must be the same cluster value.
    assert!(b
        .line(doc, r#"{"lease_id":8,"revision":8,"ttl_ms":60000}"#)
        .is_err());
    let mut b = Bindings::default();
    // A renamed field, a missing one, a changed constant, a changed error code.
    for drifted in [
        r#"{"lease":7,"revision":7,"ttl_ms":60000}"#,
        r#"{"lease_id":7,"ttl_ms":60000}"#,
        r#"{"lease_id":7,"revision":7,"ttl_ms":30000}"#,
    ] {
        assert!(b.line(doc, drifted).is_err(), "{drifted}");
    }
    let doc = r#"{"code":"lock_held","message":"lock demo is held (token 6)","current_token":6}  HTTP 409"#;
    assert!(Bindings::default()
        .line(
            doc,
            r#"{"code":"lock_held","message":"x","current_token":9}  HTTP 409"#
        )
        .is_ok());
    assert!(Bindings::default()
        .line(
            doc,
            r#"{"code":"lock_held","message":"x","current_token":9}  HTTP 423"#
        )
        .is_err());
    assert!(Bindings::default()
        .line(
            doc,
            r#"{"code":"held","message":"x","current_token":9}  HTTP 409"#
        )
        .is_err());
    // Text: bound numbers after token/lease, everything else word for word.
    let doc = "primary: leader lease 5 token 16 since 41200 ms: db-1:5432";
    let mut b = Bindings::default();
    assert!(b
        .line(
            doc,
            "primary: leader lease 9 token 31 since 12 ms: db-1:5432"
        )
        .is_ok());
    assert!(b
        .line(
            doc,
            "primary: leader lease 9 token 32 since 12 ms: db-1:5432"
        )
        .is_err());
    assert!(Bindings::default()
        .line(
            doc,
            "primary: leader lease 9 token 31 since 12 ms: db-2:5432"
        )
        .is_err());
    // Commands are rewritten with the bindings.
    let mut b = Bindings::default();
    b.leases.insert(3, 41);
    b.indexes.insert(6, 44);
    assert_eq!(
        b.rewrite(r#"curl -d '{"lease_id": 3, "token": 6, "wait_ms": 0}' "$T?token=6""#),
        r#"curl -d '{"lease_id": 41, "token": 44, "wait_ms": 0}' "$T?token=44""#
    );
}

/// Parsing: markers, final output, output-only blocks.
#[test]
fn console_blocks_are_read_as_documented() -> anyhow::Result<()> {
    let text = "x\n```console\n$ a\n1\n    ... blocks ...\n2\n$ b\n```\n```console\n3\n```\n";
    let blocks = console_blocks("f.md", text)?;
    assert_eq!(blocks.len(), 2);
    match &blocks[0].1[..] {
        [Item::Step(a), Item::Step(b)] => {
            assert!(a.running && a.output == ["1"] && a.final_output == ["2"]);
            assert!(!b.running && b.output.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&blocks[1].1[..], [Item::Output { lines, .. }] if lines == &["3"]));
    Ok(())
}
