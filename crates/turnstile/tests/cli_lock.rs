//! `turnstile lock NAME -- CMD` as a user runs it, against a real `turnstile serve` process:
//! CMD sees its fencing token in the environment; a second `lock` of the held lock is refused;
//! when the lock's lease is revoked behind its back, CMD is stopped (SIGTERM) long before it
//! would have finished, the CLI exits with CMD's status, and the lock is free afterwards.
//! `lock` exits with CMD's own status and releases the lock when CMD ends normally.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// A debug build on a loaded 2-core box can take a while to elect itself.
const STARTUP_MS_MAX: u64 = 60_000;
/// Deadline of any other wait in this test.
const WAIT_MS_MAX: u64 = 20_000;
/// Interval between polls while waiting for a condition.
const POLL_MS: u64 = 50;
/// How long CMD would run if nobody stopped it.
const CMD_SLEEP_S: u64 = 60;

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process killed (SIGKILL, with its process group when it leads one) and reaped on
/// drop, so a failing assertion leaves nothing running.
struct Proc {
    child: Child,
    /// Another process group to kill on drop (CMD's, which `lock` puts in a group of its own).
    extra_group: Option<u32>,
}

impl Proc {
    fn new(child: Child) -> Proc {
        Proc {
            child,
            extra_group: None,
        }
    }

    /// Waits for the process to exit, failing after `WAIT_MS_MAX`.
    fn wait_exit(&mut self) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("process {} did not exit in time", self.child.id());
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        for group in [Some(self.child.id()), self.extra_group]
            .into_iter()
            .flatten()
        {
            // Either may be gone already; nothing more to do then.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn turnstile() -> Command {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
}

fn start_server(dir: &Path, listen: &str) -> anyhow::Result<Proc> {
    use std::os::unix::process::CommandExt;
    let log = fs::File::create(dir.join("server.log"))?;
    let child = turnstile()
        .args(["serve", "--id", "1", "--listen", listen, "--data-dir"])
        .arg(dir.join("data"))
        .args(["--initial-cluster", &format!("1={listen}")])
        .args(["--cluster-secret", "cli-lock-test-secret"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot spawn turnstile serve")?;
    Ok(Proc::new(child))
}

async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    Ok(http.get(url).send().await?.json().await?)
}

async fn wait_for_leader(
    server: &mut Proc,
    http: &reqwest::Client,
    base: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(STARTUP_MS_MAX);
    loop {
        if let Some(status) = server.child.try_wait()? {
            let log = fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            bail!("server exited early ({status}); output:\n{log}");
        }
        if let Ok(c) = get_json(http, &format!("{base}/v1/cluster")).await {
            if c["state"] == "Leader" && c["cluster_id"].is_string() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("no leader within {STARTUP_MS_MAX} ms");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Starts `turnstile lock` with stdout and stderr read line by line into one channel.
fn start_lock(endpoint: &str, args: &[&str]) -> anyhow::Result<(Proc, mpsc::Receiver<String>)> {
    let mut child = turnstile()
        .args(["--endpoints", endpoint, "lock"])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot spawn turnstile lock")?;
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    for (prefix, stream) in [
        ("out: ", Box::new(out) as Box<dyn std::io::Read + Send>),
        ("err: ", Box::new(err)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(format!("{prefix}{line}"));
            }
        });
    }
    Ok((Proc::new(child), rx))
}

/// Reads lines until one satisfies `f`; returns what `f` extracted and every line seen.
fn wait_line<T>(
    rx: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    mut f: impl FnMut(&str) -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = f(&line);
                seen.push(line);
                if let Some(t) = hit {
                    return Ok(t);
                }
            }
            Err(_) => bail!("expected line not seen; output so far: {seen:#?}"),
        }
    }
}

/// Parses `out: token=<n> pid=<n>`.
fn token_line(line: &str) -> Option<(u64, u32)> {
    let rest = line.strip_prefix("out: token=")?;
    let (token, pid) = rest.split_once(" pid=")?;
    Some((token.parse().ok()?, pid.parse().ok()?))
}

fn drain(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>) {
    // The reader threads end when the process's pipes close.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(WAIT_MS_MAX)) {
        seen.push(line);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_stops_the_command() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;

    let script = format!("echo token=$TURNSTILE_TOKEN pid=$$; exec sleep {CMD_SLEEP_S}");
    let (mut holder, rx) = start_lock(&listen, &["job", "--ttl", "2s", "--", "sh", "-c", &script])?;
    let mut seen = Vec::new();
    let (token, cmd_pid) = wait_line(&rx, &mut seen, token_line)?;
    holder.extra_group = Some(cmd_pid);

    let lock = get_json(&http, &format!("{base}/v1/locks/job")).await?;
    assert_eq!(lock["holders"][0]["token"], token, "{lock}");
    let lease = lock["holders"][0]["lease_id"]
        .as_u64()
        .with_context(|| format!("no holder in {lock}"))?;

    // The lock is held: a second `lock` that may not wait is refused with exit code 1.
    let refused = turnstile()
        .args([
            "--endpoints",
            &listen,
            "lock",
            "job",
            "--wait",
            "0s",
            "--",
            "true",
        ])
        .env_remove("TURNSTILE_ENDPOINTS")
        .output()?;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("lock held"));

    let revoked_at = Instant::now();
    let resp = http
        .delete(format!("{base}/v1/leases/{lease}"))
        .send()
        .await?;
    assert_eq!(resp.status(), 200, "{}", resp.text().await?);
    let status = holder.wait_exit()?;
    let stopped_after = revoked_at.elapsed();
    drain(&rx, &mut seen);
    println!(
        "lease revoked to command stopped: {} ms",
        stopped_after.as_millis()
    );

    assert!(
        stopped_after < Duration::from_secs(CMD_SLEEP_S / 2),
        "the command ran on for {stopped_after:?} after its lease was revoked"
    );
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "CMD ends by SIGTERM: {status:?}; {seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with("err: ") && l.contains("lost")),
        "{seen:#?}"
    );
    assert!(
        !Path::new(&format!("/proc/{cmd_pid}")).exists(),
        "CMD (pid {cmd_pid}) still runs"
    );
    let lock = get_json(&http, &format!("{base}/v1/locks/job")).await?;
    assert_eq!(lock["holders"], serde_json::json!([]), "{lock}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_exits_with_the_command_status_and_releases() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;

    let script = r#"test "$TURNSTILE_LOCK" = job2 && test -n "$TURNSTILE_CLUSTER_ID" && test "$TURNSTILE_TOKEN" -gt 0 && exit 7"#;
    let out = turnstile()
        .args([
            "--endpoints",
            &listen,
            "lock",
            "job2",
            "--wait",
            "0s",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env_remove("TURNSTILE_ENDPOINTS")
        .output()?;
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let lock = get_json(&http, &format!("{base}/v1/locks/job2")).await?;
    assert_eq!(lock["holders"], serde_json::json!([]), "{lock}");

    let missing = turnstile()
        .args(["--endpoints", &listen, "lock", "job2", "--wait", "0s", "--"])
        .arg(dir.path().join("no-such-command"))
        .env_remove("TURNSTILE_ENDPOINTS")
        .output()?;
    assert_eq!(missing.status.code(), Some(127), "{missing:?}");
    Ok(())
}
