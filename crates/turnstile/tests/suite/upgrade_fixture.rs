//! Data dirs written by earlier releases open with this binary, with everything in them: each
//! `tests/fixtures/upgrade/<release>/` holds one (made by `make.sh` there, by that release's
//! binary) and the `manifest.json` of what it holds. A change to the snapshot, log or state
//! encoding that a later binary cannot read fails here, not on a user's disk.
//!
//! Each fixture's node is a one-node cluster; the test starts it on a fresh port (a one-node
//! cluster never dials its own recorded address) and checks the state against the manifest:
//! the snapshot's part and the log's part after it, leases still alive, the lock, its queued
//! waiter, the shared hold, the election, the counter and keys. Then the cluster goes on: a
//! release hands the lock to the waiter queued before the upgrade, and new tokens are larger
//! than every old one.
//!
//! Negative control: the newest fixture without its log (the snapshot alone, as a binary that
//! could not read the log would see it) starts, and fails the checks: its applied index, or the
//! write made after the snapshot.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::common::*;

/// Every fixture directory, oldest release first.
fn fixtures() -> anyhow::Result<Vec<PathBuf>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    dirs.sort();
    ensure!(!dirs.is_empty(), "no fixture in {}", root.display());
    Ok(dirs)
}

fn num(v: &Value, key: &str) -> anyhow::Result<u64> {
    v[key].as_u64().with_context(|| format!("{key} in {v}"))
}

/// Unpacks `fixture`'s data dir into `dir/data`.
fn unpack(fixture: &Path, dir: &Path) -> anyhow::Result<()> {
    let status = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(fixture.join("data.tar.gz"))
        .arg("-C")
        .arg(dir)
        .status()
        .context("tar")?;
    ensure!(status.success(), "tar -xzf failed: {status}");
    Ok(())
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut req = http.request(method, &url);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await?;
    let code = resp.status();
    let text = resp.text().await?;
    ensure!(code.is_success(), "{url}: {code} {text}");
    Ok(serde_json::from_str(&text)?)
}

/// Opens one fixture and checks it against its manifest; `without_log`: with its Raft log
/// removed first (the control).
async fn open_fixture(fixture: &Path, without_log: bool) -> anyhow::Result<()> {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(fixture.join("manifest.json"))?)?;
    let dir = tempfile::tempdir()?;
    unpack(fixture, dir.path())?;
    if without_log {
        std::fs::remove_dir_all(dir.path().join("data").join("raft-log"))?;
    }
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    let get = |path: &str| send(&http, reqwest::Method::GET, format!("{base}{path}"), None);

    let c = get("/v1/cluster?digest=false").await?;
    ensure!(c["cluster_id"] == m["cluster_id"], "cluster id: {c}");
    ensure!(
        num(&c, "applied_index")? >= num(&m, "applied_index")?,
        "applied {} < {}",
        c["applied_index"],
        m["applied_index"]
    );
    ensure!(
        c["last_snapshot_index"] == m["snapshot_index"],
        "the snapshot was not loaded: {c}"
    );
    let (lease_a, lease_b) = (num(&m, "lease_a")?, num(&m, "lease_b")?);
    for lease in [lease_a, lease_b] {
        let l = get(&format!("/v1/leases/{lease}")).await?;
        ensure!(num(&l, "remaining_ms")? > 0, "lease {lease}: {l}");
    }
    for (key, value) in [
        ("fixture-alpha", "alpha"),
        ("fixture-leased", "leased"),
        ("fixture-after", "after the snapshot"),
    ] {
        let v = get(&format!("/v1/kv/{key}")).await?;
        ensure!(v["value"] == value, "{key}: {v}");
    }
    let leased = get("/v1/kv/fixture-leased").await?;
    ensure!(leased["lease_id"] == lease_a, "fixture-leased: {leased}");
    let counter = get("/v1/counters/fixture-counter").await?;
    ensure!(counter["value"] == 42, "counter: {counter}");

    let lock = get("/v1/locks/fixture-lock").await?;
    ensure!(
        lock["holders"][0]["lease_id"] == lease_a && lock["holders"][0]["token"] == m["lock_token"],
        "fixture-lock holder: {lock}"
    );
    ensure!(
        lock["waiters"][0]["lease_id"] == lease_b,
        "the waiter queued before the upgrade: {lock}"
    );
    let shared = get("/v1/locks/fixture-shared").await?;
    ensure!(
        shared["holders"][0]["token"] == m["shared_token"]
            && shared["holders"][0]["mode"] == "shared",
        "fixture-shared: {shared}"
    );
    let election = get("/v1/elections/fixture-election").await?;
    ensure!(
        election["leader"]["value"] == "node-a"
            && election["leader"]["token"] == m["election_token"],
        "fixture-election: {election}"
    );

    // The cluster goes on from there: the old waiter is next, and tokens keep growing.
    let oldest_max = ["lock_token", "election_token", "shared_token"]
        .iter()
        .map(|k| num(&m, k))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    send(
        &http,
        reqwest::Method::POST,
        format!("{base}/v1/locks/fixture-lock/release"),
        Some(json!({ "lease_id": lease_a, "token": m["lock_token"] })),
    )
    .await?;
    let lock = get("/v1/locks/fixture-lock").await?;
    ensure!(
        lock["holders"][0]["lease_id"] == lease_b
            && num(&lock["holders"][0], "token")? > oldest_max,
        "the release did not hand the lock to the old waiter with a new token: {lock}"
    );
    let lease = send(
        &http,
        reqwest::Method::POST,
        format!("{base}/v1/leases"),
        Some(json!({ "ttl_ms": 60_000 })),
    )
    .await?;
    let grant = send(
        &http,
        reqwest::Method::POST,
        format!("{base}/v1/locks/after-upgrade/acquire"),
        Some(json!({ "lease_id": lease["lease_id"] })),
    )
    .await?;
    ensure!(num(&grant, "token")? > oldest_max, "new token: {grant}");
    println!(
        "{}: opened (written by {} at {}): snapshot {} and log to {}; new token {}",
        fixture.display(),
        m["written_by"],
        m["commit"],
        m["snapshot_index"],
        c["applied_index"],
        grant["token"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_dirs_of_earlier_releases_open_with_everything_in_them() -> anyhow::Result<()> {
    let fixtures = fixtures()?;
    for fixture in &fixtures {
        open_fixture(fixture, false)
            .await
            .with_context(|| format!("fixture {}", fixture.display()))?;
    }
    let newest = fixtures.last().context("no fixture")?;
    let control = open_fixture(newest, true).await;
    match control {
        Err(e)
            if ["applied", "fixture-after"]
                .iter()
                .any(|check| format!("{e:#}").starts_with(check)) =>
        {
            println!("control: without its log the fixture fails the checks: {e:#}")
        }
        other => anyhow::bail!("control: the checks did not miss the log's writes: {other:?}"),
    }
    Ok(())
}
