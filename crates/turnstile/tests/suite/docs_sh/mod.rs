//! Docs that cannot drift, the operator's half: every `sh` block of README.md and docs/*.md
//! that runs `turnstile` or `curl` runs verbatim, command by command, in one bash per file, on
//! machines the test makes (`world.rs`: the docs' 10.0.0.x addresses on a private loopback,
//! copy-on-write /etc and /var/lib, a pid namespace of its own). Needs root, like the chaos
//! tests.
//!
//! - `turnstile serve` and `turnstile restore` lines run on the machine of their address, and
//!   a `serve` of a new cluster starts the other members too (`machines.sh` has the rules).
//! - A block that needs something no earlier block of its file made finds it: a block that
//!   talks to 10.0.0.x with no `serve` line of its own finds the README's secure cluster
//!   running (its certificates in `certs/`); one naming `/etc/turnstile` finds the secret and a
//!   CA there; one naming `127.0.0.1:7001` finds `turnstile dev` running. `$SECRET` is set.
//! - Every command must exit 0, and print no JSON error (`"error"` key).
//! - `# prints: LINE` comments after a command are what it prints, line for line (stdout and
//!   stderr). Words must match but numbers (any run of digits) are free, and a word with `...`
//!   stands for any word: the first time it is seen, it is bound to the word printed, and every
//!   later use of it in a command is replaced by that word (`--cluster-id 6f0c...`).
//! - Blocks that build or run containers (cargo, bash, deploy/, docker, install, npx) are not
//!   run here: `.ci/run` is the build, and tests/tests/suite/container_image.rs runs the
//!   container steps.
//!
//! `TURNSTILE_DOCS_SHOW=1` prints every command's output; `TURNSTILE_DOCS_FILE=docs/x.md` runs
//! one file.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, ensure, Context};
use serde_json::Value;

mod world;

use world::World;

/// The workspace root, where README.md and docs/ are.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Longest one command may run (`member add` waits for the learner to catch up).
const COMMAND_MS_MAX: u64 = 60_000;
/// `$SECRET`, the cluster secret the docs pass to `serve`.
const SECRET: &str = "docs-example-cluster-secret-0123456789";
/// First words of commands that build or run containers: such blocks are not this test's.
const NOT_HERE: &[&str] = &[
    "cargo ",
    "bash ",
    "deploy/",
    "docker",
    "install ",
    "npx ",
    "systemctl ",
    "target/",
];

/// One command of a block: its text (continuation lines kept) and its `# prints:` lines.
#[derive(Debug)]
struct ShCommand {
    at: String,
    text: String,
    prints: Vec<String>,
}

/// The `sh` blocks of `text`: where each starts, and its commands.
fn sh_blocks(file: &str, text: &str) -> Vec<(String, Vec<ShCommand>)> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim_end() != "```sh" {
            continue;
        }
        let mut commands: Vec<ShCommand> = Vec::new();
        let mut continued = false;
        for (n, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            let trimmed = line.trim();
            if continued {
                if let Some(c) = commands.last_mut() {
                    c.text.push('\n');
                    c.text.push_str(line);
                }
            } else if let Some(printed) = trimmed.strip_prefix("# prints:") {
                if let Some(c) = commands.last_mut() {
                    c.prints.push(printed.trim().to_string());
                }
            } else if !trimmed.is_empty() && !trimmed.starts_with('#') {
                commands.push(ShCommand {
                    at: format!("{file}:{}", n + 1),
                    text: line.to_string(),
                    prints: Vec::new(),
                });
            }
            continued = !trimmed.starts_with('#') && line.trim_end().ends_with('\\');
        }
        blocks.push((format!("{file}:{}", n + 1), commands));
    }
    blocks
}

/// Why a block is not run here, if it is not.
fn not_here(commands: &[ShCommand]) -> Option<&'static str> {
    if commands
        .iter()
        .any(|c| NOT_HERE.iter().any(|w| c.text.starts_with(w)) || c.text.contains("docker"))
    {
        return Some("builds or containers");
    }
    if !commands
        .iter()
        .any(|c| c.text.contains("turnstile ") || c.text.starts_with("curl "))
    {
        return Some("no turnstile or curl command");
    }
    None
}

/// A client command talks to a running cluster (`certs`, `serve`, `restore` do not).
fn is_client(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    if words.first() == Some(&"curl") {
        return true;
    }
    let Some(at) = words.iter().position(|w| *w == "turnstile") else {
        return false;
    };
    // The subcommand: the first word after `turnstile` that is not a flag or a flag's value.
    let mut rest = words[at + 1..].iter();
    while let Some(w) = rest.next() {
        if w.starts_with("--") {
            rest.next();
            continue;
        }
        return !matches!(*w, "certs" | "serve" | "restore" | "dev" | "\\");
    }
    false
}

/// What `# prints:` placeholders (words with `...`) were bound to.
#[derive(Default)]
struct Bindings(BTreeMap<String, String>);

impl Bindings {
    /// `cmd` with every bound placeholder replaced.
    fn rewrite(&self, cmd: &str) -> String {
        let mut out = cmd.to_string();
        for (doc, actual) in &self.0 {
            out = out.replace(doc.as_str(), actual);
        }
        out
    }

    /// Whether a printed line has the doc line's shape; binds its placeholders.
    fn line(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let d: Vec<&str> = doc.split_whitespace().collect();
        let a: Vec<&str> = actual.split_whitespace().collect();
        if d.len() != a.len() {
            return Err(format!("{} words, the doc shows {}", a.len(), d.len()));
        }
        for (d, a) in d.iter().zip(&a) {
            if let Some((_, suffix)) = d.split_once("...") {
                let value = a.strip_suffix(suffix).ok_or(format!("{a:?} for {d:?}"))?;
                let placeholder = d.strip_suffix(suffix).unwrap_or(d).to_string();
                match self.0.get(&placeholder) {
                    Some(bound) if bound != value => {
                        return Err(format!("{d} was {bound}, now {value}"))
                    }
                    _ => {
                        self.0.insert(placeholder, value.to_string());
                    }
                }
            } else if digits_free(d) != digits_free(a) {
                return Err(format!("{a:?} where the doc shows {d:?}"));
            }
        }
        Ok(())
    }
}

/// `word` with every run of digits as one `0`.
fn digits_free(word: &str) -> String {
    let mut out = String::new();
    for c in word.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('\u{0}') {
            out.push('\u{0}');
        }
    }
    out
}

/// What the world of one file has been given so far.
#[derive(Default)]
struct Givens {
    cluster: bool,
    etc: bool,
    dev: bool,
}

impl Givens {
    /// The `machines.sh` calls a block needs before it runs.
    fn for_block(&mut self, commands: &[ShCommand]) -> Vec<&'static str> {
        let text: String = commands.iter().map(|c| c.text.as_str()).collect();
        let mut calls = Vec::new();
        if text.contains("127.0.0.1:7001") && !self.dev {
            self.dev = true;
            calls.push("docs_given_dev");
        }
        if text.contains("/etc/turnstile") && !self.etc {
            self.etc = true;
            calls.push("docs_given_etc");
        }
        // A client command before any `serve` line of the block needs a running cluster.
        let first_client = commands
            .iter()
            .position(|c| is_client(&c.text) && !c.text.contains("127.0.0.1"));
        let first_serve = commands
            .iter()
            .position(|c| c.text.contains("turnstile serve"));
        let needs = match (first_client, first_serve) {
            (Some(c), Some(s)) => c < s,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if needs && !self.cluster {
            calls.push("docs_given_cluster");
        }
        self.cluster |= needs || first_serve.is_some();
        calls
    }
}

/// Checks one command's exit status and output.
fn check(
    bindings: &mut Bindings,
    cmd: &ShCommand,
    status: i32,
    out: &[String],
) -> Result<(), String> {
    if status != 0 {
        return Err(format!("exit status {status}"));
    }
    if cmd.prints.is_empty() {
        for line in out {
            if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(line) {
                if o.contains_key("error") {
                    return Err(format!("an error answer: {line}"));
                }
            }
        }
        return Ok(());
    }
    if cmd.prints.len() != out.len() {
        return Err(format!(
            "{} lines, the doc shows {}",
            out.len(),
            cmd.prints.len()
        ));
    }
    for (d, a) in cmd.prints.iter().zip(out) {
        bindings
            .line(d, a)
            .map_err(|e| format!("{e}\n  doc:    {d}\n  actual: {a}"))?;
    }
    Ok(())
}

/// Runs every runnable `sh` block of one file; returns how many commands ran.
fn run_file(file: &str, show: bool) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(file))?;
    let blocks: Vec<_> = sh_blocks(file, &text)
        .into_iter()
        .filter(|(_, commands)| not_here(commands).is_none())
        .collect();
    if blocks.is_empty() {
        return Ok(0);
    }
    let world = World::start()?;
    let mut shell = world.shell(&[("SECRET", SECRET)])?;
    let mut givens = Givens::default();
    let mut bindings = Bindings::default();
    let timeout = Duration::from_millis(COMMAND_MS_MAX);
    let mut ran = 0;
    for (at, commands) in blocks {
        for call in givens.for_block(&commands) {
            let (status, out) = shell.run(call, timeout)?;
            ensure!(status == 0, "{at}: {call}: {}", out.join("\n"));
        }
        for cmd in &commands {
            let text = bindings.rewrite(&cmd.text);
            let (status, out) = shell
                .run(&text, timeout)
                .with_context(|| format!("{}: $ {text}\n{}", cmd.at, node_logs(&world)))?;
            if show {
                eprintln!("{}: $ {text}\n{}", cmd.at, out.join("\n"));
            }
            check(&mut bindings, cmd, status, &out).map_err(|e| {
                anyhow!(
                    "{}: $ {text}\n{}\n{e}\n{}",
                    cmd.at,
                    out.join("\n"),
                    node_logs(&world)
                )
            })?;
            ran += 1;
        }
    }
    Ok(ran)
}

/// The last lines of every node's log, for a failure message.
fn node_logs(world: &World) -> String {
    let Ok(entries) = std::fs::read_dir(world.path().join("logs")) else {
        return String::new();
    };
    let mut out = String::new();
    for e in entries.flatten() {
        let log = std::fs::read_to_string(e.path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n");
        out.push_str(&format!(
            "--- {}\n{tail}\n",
            e.file_name().to_string_lossy()
        ));
    }
    out
}

#[test]
fn every_sh_example_in_the_docs_runs() -> anyhow::Result<()> {
    if let Some(ran) = crate::docs_console::run_doc_files("sh", run_file)? {
        for file in ["README.md", "docs/operations.md", "docs/security.md"] {
            ensure!(
                ran.contains_key(file),
                "{file}'s sh examples did not run: {ran:?}"
            );
        }
    }
    Ok(())
}

mod unit {
    use super::*;

    #[test]
    fn numbers_are_free_and_placeholders_bind() -> Result<(), String> {
        let mut b = Bindings::default();
        b.line(
            "restored node 1 at index 233: new cluster id 6f0c... (was 9d2e...)",
            "restored node 1 at index 51: new cluster id aa11 (was bb22)",
        )?;
        assert_eq!(b.rewrite("--cluster-id 6f0c..."), "--cluster-id aa11");
        assert!(
            b.line("id 6f0c...", "id cc33").is_err(),
            "a bound word changed"
        );
        assert!(b.line("node 1 ready", "node 1 down").is_err());
        assert!(b.line("node 1", "node 1 2").is_err());
        Ok(())
    }

    #[test]
    fn client_commands_are_told_from_offline_ones() {
        assert!(is_client("turnstile member list"));
        assert!(is_client(
            "turnstile --cert certs/client-root.crt --key k auth user put billing"
        ));
        assert!(is_client("curl -s https://10.0.0.1:7001/v1/cluster"));
        assert!(!is_client("turnstile certs create-ca --certs-dir certs"));
        assert!(!is_client(
            "turnstile serve --id 1 \\\n --listen 10.0.0.1:7001"
        ));
    }
}
