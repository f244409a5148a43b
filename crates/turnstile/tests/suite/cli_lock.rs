//! `turnstile lock NAME -- CMD` as a user runs it, against a real `turnstile serve` process:
//! CMD sees its fencing token in the environment; a second `lock` of the held lock is refused;
//! when the lock's lease is revoked behind its back, CMD is stopped (SIGTERM) long before it
//! would have finished, the CLI exits with CMD's status, and the lock is free afterwards.
//! `lock` exits with CMD's own status and releases the lock when CMD ends normally.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;
use anyhow::{bail, Context};

/// How long CMD would run if nobody stopped it.
const CMD_SLEEP_S: u64 = 60;

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
pub(crate) fn wait_line<T>(
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

pub(crate) fn drain(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>) {
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
