//! `turnstile elect NAME VALUE -- CMD` as a user runs it, against a real `turnstile serve`
//! process: CMD sees the leader's fencing token and value in its environment, `elect --get`
//! shows the leader, and when the leadership is taken away while the session lives on (a
//! resign with the leader's `{lease_id, token}`, seen only on the watch), CMD is stopped long
//! before it would have finished and the election has no leader afterwards.

use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cli_lock::{drain, wait_line};
use crate::common::*;

/// How long CMD would run if nobody stopped it.
const CMD_SLEEP_S: u64 = 60;

/// Starts `turnstile elect` with stdout and stderr read line by line into one channel.
fn start_elect(endpoint: &str, args: &[&str]) -> anyhow::Result<(Proc, mpsc::Receiver<String>)> {
    let mut child = turnstile()
        .args(["--endpoints", endpoint, "elect"])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot spawn turnstile elect")?;
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    for (prefix, stream) in [
        ("out: ", Box::new(out) as Box<dyn std::io::Read + Send>),
        ("err: ", Box::new(err)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(format!("{prefix}{line}"));
            }
        });
    }
    Ok((Proc::new(child), rx))
}

/// Parses `out: token=<n> value=<v> pid=<n>`.
fn leader_line(line: &str) -> Option<(u64, String, u32)> {
    let rest = line.strip_prefix("out: token=")?;
    let (token, rest) = rest.split_once(" value=")?;
    let (value, pid) = rest.split_once(" pid=")?;
    Some((token.parse().ok()?, value.to_string(), pid.parse().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_leadership_stops_the_command() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;

    let script = format!(
        "echo token=$TURNSTILE_TOKEN value=$TURNSTILE_VALUE pid=$$; exec sleep {CMD_SLEEP_S}"
    );
    let (mut leader, rx) = start_elect(
        &listen,
        &["primary", "db-1:5432", "--", "sh", "-c", &script],
    )?;
    let mut seen = Vec::new();
    let (token, value, cmd_pid) = wait_line(&rx, &mut seen, leader_line)?;
    leader.extra_group = Some(cmd_pid);
    assert_eq!(value, "db-1:5432");

    let election = get_json(&http, &format!("{base}/v1/elections/primary")).await?;
    assert_eq!(election["leader"]["token"], token, "{election}");
    assert_eq!(election["leader"]["value"], "db-1:5432", "{election}");
    let lease = election["leader"]["lease_id"]
        .as_u64()
        .with_context(|| format!("no leader in {election}"))?;

    // `elect --get` shows the same leader.
    let got = turnstile()
        .args(["--endpoints", &listen, "elect", "primary", "--get"])
        .env_remove("TURNSTILE_ENDPOINTS")
        .output()?;
    let shown = String::from_utf8_lossy(&got.stdout);
    assert!(got.status.success(), "{got:?}");
    assert!(
        shown.contains(&format!("token {token}")) && shown.contains("db-1:5432"),
        "{shown}"
    );

    // Take the leadership away while the lease lives on: only the watch can tell the CLI.
    let resigned_at = Instant::now();
    let resp = http
        .post(format!("{base}/v1/elections/primary/resign"))
        .json(&serde_json::json!({"lease_id": lease, "token": token}))
        .send()
        .await?;
    assert_eq!(resp.status(), 200, "{}", resp.text().await?);
    let status = leader.wait_exit()?;
    let stopped_after = resigned_at.elapsed();
    drain(&rx, &mut seen);
    println!(
        "leadership ended to command stopped: {} ms",
        stopped_after.as_millis()
    );
    assert!(
        stopped_after < Duration::from_secs(CMD_SLEEP_S / 2),
        "the command ran on for {stopped_after:?} after its leadership ended"
    );
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "CMD ends by SIGTERM: {status:?}; {seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with("err: ") && l.contains("leadership ended")),
        "{seen:#?}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{cmd_pid}")).exists(),
        "CMD (pid {cmd_pid}) still runs"
    );
    let election = get_json(&http, &format!("{base}/v1/elections/primary")).await?;
    assert_eq!(election["leader"], serde_json::Value::Null, "{election}");
    Ok(())
}
