//! The operator commands as an operator runs them, against real `turnstile serve` processes:
//! `member list`, `snapshot`, `backup` from a live node, `restore` into a new data dir, `serve`
//! on it (the lock and key are there, the cluster id is new, the next token is above the
//! backup), and SIGTERM ending a node with exit status 0.

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use common::*;
use serde_json::{json, Value};

/// Runs `turnstile --endpoints <endpoint> <args>` and returns its output.
fn cli(endpoint: &str, args: &[&str]) -> anyhow::Result<Output> {
    turnstile()
        .args(["--endpoints", endpoint])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run turnstile {args:?}"))
}

/// Runs a command that must succeed and parses its `--json` output.
fn cli_json(endpoint: &str, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = cli(endpoint, &all)?;
    if !out.status.success() {
        bail!(
            "turnstile {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> anyhow::Result<Value> {
    let resp = http.post(url).json(&body).send().await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    if !status.is_success() {
        bail!("{url}: {status} {v}");
    }
    Ok(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restore_and_member_commands() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;

    // The source cluster: one node with a held lock and a key.
    let a_dir = dir.path().join("a");
    std::fs::create_dir_all(&a_dir)?;
    let a = format!("127.0.0.1:{}", free_port()?);
    let mut a_proc = start_server(&a_dir, &a)?;
    wait_for_leader(&mut a_proc, &http, &format!("http://{a}"), &a_dir).await?;
    let lease = post(
        &http,
        &format!("http://{a}/v1/leases"),
        json!({"ttl_ms": 60_000}),
    )
    .await?;
    let lease_id = lease["lease_id"].as_u64().context("lease_id")?;
    let grant = post(
        &http,
        &format!("http://{a}/v1/locks/report/acquire"),
        json!({"lease_id": lease_id, "wait_ms": 0}),
    )
    .await?;
    let old_cluster_id = grant["cluster_id"]
        .as_str()
        .context("cluster_id")?
        .to_string();
    let resp = http
        .put(format!("http://{a}/v1/kv/config"))
        .json(&json!({"value": "blue"}))
        .send()
        .await?;
    assert!(resp.status().is_success());

    let members = cli_json(&a, &["member", "list"])?;
    assert_eq!(members["members"][0]["voter"], true, "{members}");
    let snap = cli_json(&a, &["snapshot"])?;
    assert!(snap["last_snapshot_index"].as_u64() > Some(0), "{snap}");
    // A membership change the cluster cannot make is a refusal (exit 1), with the reason.
    let out = cli(&a, &["member", "remove", "1"])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("membership_refused"));

    let backup = dir.path().join("a.backup");
    let out = cli(&a, &["backup", "--out", backup.to_str().context("path")?])?;
    assert!(out.status.success(), "{out:?}");
    // An existing file is never overwritten.
    assert!(
        !cli(&a, &["backup", "--out", backup.to_str().context("path")?])?
            .status
            .success()
    );

    // SIGTERM: the node drains and exits 0.
    nix_term(&a_proc)?;
    let status = a_proc.wait_exit()?;
    assert!(status.success(), "serve exited with {status}");

    // Restore into a new node and serve it.
    let b_dir = dir.path().join("b");
    std::fs::create_dir_all(&b_dir)?;
    let b = format!("127.0.0.1:{}", free_port()?);
    let restored = cli_json(
        &b,
        &[
            "restore",
            "--from",
            backup.to_str().context("path")?,
            "--data-dir",
            b_dir.join("data").to_str().context("path")?,
            "--id",
            "1",
            "--initial-cluster",
            &format!("1={b}"),
        ],
    )?;
    let new_cluster_id = restored["cluster_id"]
        .as_str()
        .context("cluster_id")?
        .to_string();
    assert_ne!(new_cluster_id, old_cluster_id);
    assert_eq!(restored["source_cluster_id"], old_cluster_id.as_str());
    let backup_index = restored["last_index"].as_u64().context("last_index")?;

    let mut b_proc = start_server(&b_dir, &b)?;
    wait_for_leader(&mut b_proc, &http, &format!("http://{b}"), &b_dir).await?;
    let lock = cli_json(&b, &["locks", "report"])?;
    assert_eq!(lock["holders"][0]["lease_id"], lease_id, "{lock}");
    let out = cli(&b, &["kv", "get", "config"])?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "blue");
    let lease = post(
        &http,
        &format!("http://{b}/v1/leases"),
        json!({"ttl_ms": 60_000}),
    )
    .await?;
    let grant = post(
        &http,
        &format!("http://{b}/v1/locks/next/acquire"),
        json!({"lease_id": lease["lease_id"], "wait_ms": 0}),
    )
    .await?;
    assert_eq!(grant["cluster_id"], new_cluster_id.as_str());
    assert!(grant["token"].as_u64() > Some(backup_index), "{grant}");
    nix_term(&b_proc)?;
    assert!(b_proc.wait_exit()?.success());
    Ok(())
}

/// Sends SIGTERM to the process.
fn nix_term(p: &Proc) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -TERM failed");
    }
    Ok(())
}
