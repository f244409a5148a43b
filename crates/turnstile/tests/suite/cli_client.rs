//! The client commands' rough edges, against a real `turnstile serve` process: no silent
//! default cluster (a command without `--endpoints` or `TURNSTILE_ENDPOINTS` is refused and
//! says how to give them), client flags refused on `serve`, the `counter` commands, `lock
//! --permits` (a semaphore admits a second holder where a plain lock refuses it), and `lock`
//! with several names (acquire-many: one token for the set, CMD sees every name).

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::*;
use anyhow::{ensure, Context};

/// Runs `turnstile --endpoints <endpoint> <args>` to the end.
fn cli(endpoint: &str, args: &[&str]) -> anyhow::Result<Output> {
    turnstile()
        .args(["--endpoints", endpoint])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run turnstile {args:?}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

#[test]
fn no_endpoints_is_refused_with_a_hint_and_client_flags_are_refused_on_serve() -> anyhow::Result<()>
{
    let out = turnstile()
        .args(["status"])
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .output()?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("--endpoints") && err.contains("TURNSTILE_ENDPOINTS"),
        "{err}"
    );

    // A client flag typed on `serve` is a usage error, before anything starts.
    let dir = tempfile::tempdir()?;
    let out = turnstile()
        .args(["serve", "--endpoints", "127.0.0.1:1", "--id", "1"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .output()?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("client option"), "{}", stderr(&out));
    // From the environment it is not an error: a shell may export it for its clients.
    let out = turnstile()
        .args(["serve", "--help"])
        .env("TURNSTILE_ENDPOINTS", "127.0.0.1:1")
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let help = stdout(&out);
    assert!(
        help.contains("Client options (client commands only)"),
        "{help}"
    );
    assert!(
        help.contains("--heartbeat-ms <MS>") && help.contains("(default 100"),
        "{help}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_semaphores_and_several_names() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;

    // Counters.
    let out = cli(&listen, &["counter", "incr", "jobs", "--by", "5"])?;
    ensure!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "5");
    let out = cli(&listen, &["counter", "incr", "jobs", "--by", "-2"])?;
    assert_eq!(stdout(&out), "3", "{out:?}");
    let out = cli(&listen, &["counter", "get", "jobs"])?;
    assert_eq!(stdout(&out), "3", "{out:?}");
    let out = cli(&listen, &["counter", "get", "never"])?;
    assert_eq!(stdout(&out), "0", "{out:?}");

    // A plain lock held by one CMD refuses a second holder; a semaphore of 2 admits one.
    let mut holder = turnstile()
        .args([
            "--endpoints",
            &listen,
            "lock",
            "sem",
            "--permits",
            "2",
            "--",
        ])
        .args(["sleep", "60"])
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Proc::new)?;
    let held = async {
        loop {
            let lock = get_json(&http, &format!("{base}/v1/locks/sem")).await?;
            if lock["holders"].as_array().is_some_and(|h| h.len() == 1) {
                return anyhow::Ok(lock);
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    };
    let lock = tokio::time::timeout(Duration::from_millis(WAIT_MS_MAX), held).await??;
    assert_eq!(lock["permits"], 2, "{lock}");
    let second = cli(
        &listen,
        &[
            "lock",
            "sem",
            "--permits",
            "2",
            "--wait",
            "0s",
            "--",
            "true",
        ],
    )?;
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    let third = cli(
        &listen,
        &[
            "lock",
            "sem",
            "--permits",
            "1",
            "--wait",
            "0s",
            "--",
            "true",
        ],
    )?;
    assert_ne!(
        third.status.code(),
        Some(0),
        "a different permit count is refused: {third:?}"
    );
    // SIGTERM to `lock` is passed on to CMD's group; `lock` then releases and exits.
    let term = std::process::Command::new("kill")
        .args(["-TERM", &holder.child.id().to_string()])
        .status()?;
    ensure!(term.success(), "kill -TERM failed");
    holder.wait_exit()?;

    // Several names: one entry, one token; CMD sees every name.
    let script = "echo lock=$TURNSTILE_LOCK token=$TURNSTILE_TOKEN";
    let out = cli(
        &listen,
        &["lock", "acct.a", "acct.b", "--", "sh", "-c", script],
    )?;
    ensure!(out.status.success(), "{out:?}");
    let line = stdout(&out);
    assert!(line.starts_with("lock=acct.a,acct.b token="), "{line}");
    let token: u64 = line
        .rsplit('=')
        .next()
        .and_then(|t| t.parse().ok())
        .with_context(|| format!("no token in {line}"))?;
    assert!(token > 0);
    for name in ["acct.a", "acct.b"] {
        let lock = get_json(&http, &format!("{base}/v1/locks/{name}")).await?;
        assert!(
            lock["holders"].as_array().is_none_or(|h| h.is_empty()),
            "{name} kept after CMD ended: {lock}"
        );
    }
    let mixed = cli(&listen, &["lock", "a", "b", "--shared", "--", "true"])?;
    assert_ne!(mixed.status.code(), Some(0), "{mixed:?}");
    assert!(stderr(&mixed).contains("--shared"), "{}", stderr(&mixed));
    Ok(())
}
