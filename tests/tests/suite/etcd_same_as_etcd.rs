//! One `etcdctl` session run against a real etcd (Debian's 3.4, one member) and against
//! Turnstile's etcd port (3 nodes), outputs compared line by line with revisions, lease ids and
//! cluster ids masked. Every command where the two differ on purpose is listed in
//! [`KNOWN_DIFFERENCES`] with its reason (and in docs/etcd-compat.md); any other difference
//! fails the test, as does a listed one that stopped differing (the list must stay true).
//!
//! Skipped, saying so, where `etcd` or `etcdctl` is not installed (`.ci/run` installs both).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context};
use turnstile_tests::Cluster;

/// The session, one `etcdctl` command line per entry (split on spaces; `|` separates a
/// `txn`'s stdin lines, which `etcdctl txn` reads interactively).
const SESSION: &[&str] = &[
    "put a 1",
    "get a",
    "put a 2 --prev-kv",
    "get a -w json",
    "put b/1 x",
    "put b/2 y",
    "put b/3 z",
    "get --prefix b/",
    "get --prefix b/ --keys-only",
    "get --prefix b/ --limit=2",
    "get --prefix b/ --limit=2 -w json",
    "get --prefix b/ --consistency=s",
    "get --prefix b/ --order=DESCEND --sort-by=VALUE",
    "get --from-key b/2",
    "get b/1 b/3",
    "get missing",
    "txn|value(\"a\") = \"2\"||put a 3|get b/1||put a never|",
    "txn|create(\"c\") = \"0\"||put c 1||get c|",
    "txn|create(\"c\") = \"0\"||put c 2||get c|",
    "txn|version(\"c\") = \"1\"||del c||get c|",
    "del a",
    "del a",
    "del b/1 --prev-kv",
    "get a",
    "lease grant 30",
    "lease timetolive 1234",
    "watch --rev=1 a --prev-kv",
    "watch --rev=1 --prefix b/",
    "get --rev=1 b/2",
    "del --prefix b/",
    "put b/4 w",
    "put b/5 v",
    "del --prefix b/ --prev-kv",
    "get --prefix b/",
    "txn|version(\"c\") > \"0\"||put c 9||get c|",
    "put c 1",
    "txn|version(\"c\") > \"0\"|value(\"c\") < \"2\"|mod(\"c\") > \"1\"||put c 9||get c|",
    "txn|value(\"c\") != \"9\"||del c||get c|",
    "txn|create(\"c\") < \"1\"||put d 1||put d 2|",
    "del --from-key c",
    "get --from-key a",
];

/// Commands whose outputs differ from etcd's on purpose, and why.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[(
    "get --rev=1 b/2",
    "Turnstile keeps no history: a past revision is etcd's compacted error",
)];

fn installed(path: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    assert!(
        p.exists() || std::env::var_os("CI").is_none(),
        "CI must install {path} (.ci/run)"
    );
    p.exists().then_some(p)
}

/// A free loopback port: bound, read and released (etcd takes ports, not sockets; another
/// process could take it in between, which would fail the start loudly, not silently).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A one-member etcd in `dir`, killed on drop.
struct RealEtcd {
    child: std::process::Child,
    endpoint: String,
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RealEtcd {
    fn start(binary: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<RealEtcd> {
        let (client, peer) = (free_port()?, free_port()?);
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let child = std::process::Command::new(binary)
            .args([
                "--name=e1".to_string(),
                format!("--data-dir={}", dir.join("e1.etcd").display()),
                format!("--listen-client-urls={}", url(client)),
                format!("--advertise-client-urls={}", url(client)),
                format!("--listen-peer-urls={}", url(peer)),
                format!("--initial-advertise-peer-urls={}", url(peer)),
                format!("--initial-cluster=e1={}", url(peer)),
                "--log-level=error".into(),
                "--logger=zap".into(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("spawn etcd")?;
        Ok(RealEtcd {
            child,
            endpoint: format!("127.0.0.1:{client}"),
        })
    }
}

/// Runs one session command against `endpoints`; returns exit status and stdout+stderr.
async fn run(ctl: &std::path::Path, endpoints: &str, command: &str) -> anyhow::Result<String> {
    use tokio::io::AsyncWriteExt;
    let mut parts = command.split('|');
    let args: Vec<&str> = parts.next().unwrap_or_default().split(' ').collect();
    let stdin: String = parts.map(|l| format!("{l}\n")).collect();
    let watch = args.first() == Some(&"watch");
    let mut cmd = tokio::process::Command::new(ctl);
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=10s")
        .args(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.as_bytes()).await?;
    drop(input);
    let mut watched = Vec::new();
    if watch {
        // A watch never ends by itself: what it printed in two seconds is its output (a
        // handful of past events, sent at once by both systems).
        use tokio::io::AsyncReadExt;
        let mut stdout = child.stdout.take().context("stdout")?;
        let read = stdout.read_to_end(&mut watched);
        if tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .is_err()
        {
            return Ok(format!(
                "(still watching)\n{}",
                String::from_utf8_lossy(&watched)
            ));
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .with_context(|| format!("etcdctl {command} did not finish"))??;
    Ok(format!(
        "exit {}\n{}{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&[watched, out.stdout].concat()),
        // etcdctl's retry warnings are JSON log lines; the error itself starts with "Error".
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("Error"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    ))
}

/// Masks what legitimately differs between two clusters: revisions, ids, terms, lease ids.
fn masked(output: &str) -> String {
    let mut s = output.to_string();
    for field in [
        "cluster_id",
        "member_id",
        "revision",
        "raft_term",
        "create_revision",
        "mod_revision",
    ] {
        let pat = format!("\"{field}\":");
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(i) = rest.find(&pat) {
            out.push_str(&rest[..i + pat.len()]);
            rest = &rest[i + pat.len()..];
            let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
            out.push('N');
            rest = &rest[digits..];
        }
        out.push_str(rest);
        s = out;
    }
    // "lease 694d7c2b6b5a9a0c granted with TTL(30s)": the id is the cluster's to choose.
    s.lines()
        .map(|l| match l.strip_prefix("lease ") {
            Some(rest) => match rest.split_once(' ') {
                Some((_, tail)) => format!("lease ID {tail}"),
                None => l.to_string(),
            },
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcdctl_session_answers_as_real_etcd_does() -> anyhow::Result<()> {
    let (Some(etcd), Some(ctl)) = (installed("/usr/bin/etcd"), installed("/usr/bin/etcdctl"))
    else {
        eprintln!(
            "SKIPPED: etcd or etcdctl is not installed (apt-get install etcd-server etcd-client)"
        );
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let real = RealEtcd::start(&etcd, dir.path())?;
    let c = Cluster::start_tuned(3, |a| {
        a.etcd_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await?;
    let ours = (1..=3)
        .map(|id| c.etcd_addr(id).map(|a| a.to_string()).context("etcd port"))
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(",");
    // Wait until the real etcd answers.
    turnstile_tests::wait_for("etcd to answer", || async {
        let out = run(&ctl, &real.endpoint, "endpoint health").await.ok()?;
        out.starts_with("exit 0").then_some(())
    })
    .await?;

    let mut unexpected = Vec::new();
    let mut listed_but_same = Vec::new();
    for command in SESSION {
        let theirs = masked(&run(&ctl, &real.endpoint, command).await?);
        let mine = masked(&run(&ctl, &ours, command).await?);
        let known = KNOWN_DIFFERENCES.iter().any(|(c, _)| c == command);
        match (theirs == mine, known) {
            (true, true) => listed_but_same.push(command.to_string()),
            (false, false) => unexpected.push(format!(
                "`etcdctl {command}`\n--- etcd:\n{theirs}\n--- Turnstile:\n{mine}"
            )),
            _ => {}
        }
    }
    ensure!(
        unexpected.is_empty(),
        "outputs differ from etcd's:\n\n{}",
        unexpected.join("\n\n")
    );
    ensure!(
        listed_but_same.is_empty(),
        "listed as different but now the same (drop them from KNOWN_DIFFERENCES): {listed_but_same:?}"
    );
    Ok(())
}
