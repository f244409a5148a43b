//! `turnstile kv list`, `locks list`, `leases list` and `txn` against a real `turnstile serve`:
//! listings print every item, `txn` reads its body from a file or stdin and exits 1 when the
//! failure branch ran, and refusals are plain one-line messages, never Rust debug text.

use std::io::Write;
use std::process::{Output, Stdio};

use crate::common::*;
use anyhow::{ensure, Context};
use serde_json::Value;

fn cli(endpoint: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
    let mut child = turnstile()
        .args(["--endpoints", endpoint])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run turnstile {args:?}"))?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.unwrap_or_default().as_bytes())?;
    drop(input);
    Ok(child.wait_with_output()?)
}

fn ok_json(endpoint: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = cli(endpoint, &all, stdin)?;
    ensure!(
        out.status.success(),
        "turnstile {args:?}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A refusal or error: its exit code and its stderr, which must read as a plain message.
fn failed(endpoint: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<(i32, String)> {
    let out = cli(endpoint, args, stdin)?;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    ensure!(!out.status.success(), "turnstile {args:?} succeeded");
    ensure!(err.starts_with("turnstile: "), "{err}");
    for debug in ["BadRequest {", "message:", "Error {", "\\\""] {
        ensure!(!err.contains(debug), "debug text in {err:?}");
    }
    Ok((out.status.code().unwrap_or(-1), err))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_transactions_from_the_command_line() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let http = reqwest::Client::builder().no_proxy().build()?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &format!("http://{listen}"), dir.path()).await?;
    let ep = listen.as_str();

    for (k, v) in [("p/2", "two"), ("p/1", "one"), ("q/1", "other")] {
        ok_json(ep, &["kv", "put", k, v], None)?;
    }
    let keys = ok_json(ep, &["kv", "list", "--prefix", "p/"], None)?;
    let names: Vec<&str> = keys
        .as_array()
        .context("array")?
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert_eq!(names, ["p/1", "p/2"]);
    let plain = cli(ep, &["kv", "list", "--prefix", "p/"], None)?;
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "p/1\tone\np/2\ttwo\n"
    );
    let some = cli(ep, &["kv", "list", "--max", "1"], None)?;
    assert!(String::from_utf8_lossy(&some.stderr).contains("more remain"));

    let lease = ok_json(ep, &["lease", "grant", "10s"], None)?["lease_id"]
        .as_u64()
        .context("lease")?;
    let leases = ok_json(ep, &["leases", "list"], None)?;
    assert_eq!(leases[0]["lease_id"], lease);
    let locks = ok_json(ep, &["locks", "list"], None)?;
    assert_eq!(locks, serde_json::json!([]));

    // A transaction from stdin whose compare fails: exit 1, the failure branch applied.
    let body = r#"{"compare": [{"key": "p/1", "value": "nope"}],
                   "success": [{"put": {"key": "p/1", "value": "s"}}],
                   "failure": [{"put": {"key": "p/3", "value": "f"}}, {"get": {"key": "p/1"}}]}"#;
    let out = cli(ep, &["--json", "txn"], Some(body))?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (&r["succeeded"], &r["results"][1]["get"]["value"]),
        (&Value::Bool(false), &Value::from("one"))
    );
    // The same from a file, with the compare holding.
    let file = dir.path().join("txn.json");
    std::fs::write(&file, body.replace("nope", "one"))?;
    let path = file.to_str().context("path")?;
    let r = ok_json(ep, &["txn", path], None)?;
    assert_eq!(r["succeeded"], true);
    // Again, in human form: p/1 is now "s", so the compare fails.
    let human = cli(ep, &["txn", path], None)?;
    assert_eq!(human.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&human.stdout).starts_with("failure branch applied"));

    // Errors: a refused body, a file that is not JSON, a missing file.
    let (code, err) = failed(ep, &["txn", "-"], Some(r#"{"success": [{"upsert": {}}]}"#))?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown variant"), "{err}");
    std::fs::write(&file, "{not json")?;
    let (code, err) = failed(ep, &["txn", path], None)?;
    assert!(code == 2 && err.contains("invalid JSON"), "{err}");
    let (code, err) = failed(ep, &["txn", "/nonexistent/txn.json"], None)?;
    assert!(code == 2 && err.contains("cannot read"), "{err}");
    Ok(())
}
