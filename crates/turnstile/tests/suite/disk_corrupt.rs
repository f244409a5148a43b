//! Damaged bytes on a node's disk, with a real `turnstile serve`: the node refuses to start
//! from them (non-zero exit, a message naming the damage and how to re-add the node) instead
//! of serving a state nobody wrote or forgetting writes it acknowledged.
//!
//! - A flipped byte in a snapshot, inside a value the test wrote, where the snapshot still
//!   decodes: only the frame's SHA-256 can tell. Negative control: the same flip without the
//!   frame (the format read for files written before the frame existed, which has no hash)
//!   starts and serves the flipped value.
//! - A flipped byte in the middle of the synced log: sled takes it for the end of its log and
//!   silently drops every later write; the sync mark tells. Negative control: the same flip
//!   without the mark (as in a data dir from before the mark) starts, with the acknowledged
//!   writes after the flip gone.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use turnstile_raft::log_store::mark::{self, MARK_FILE};
use turnstile_raft::snapshot_files::FRAME_HEADER_BYTES;

use crate::common::*;

/// Keys written before the log is damaged, and the one whose entry the flip lands in.
const LOG_KEYS: u64 = 300;
const LOG_FLIP_KEY: u64 = 150;

/// The value the test writes, and the same with one byte flipped (`A` to `a`).
const WRITTEN: &str = "snapshot-probe-value-ABCDEF";
const FLIPPED: &str = "snapshot-probe-value-aBCDEF";

/// The one snapshot file in `data`.
fn snapshot_file(data: &Path) -> anyhow::Result<PathBuf> {
    let mut snaps: Vec<PathBuf> = std::fs::read_dir(data.join("snapshots"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    ensure!(snaps.len() == 1, "expected one snapshot: {snaps:?}");
    snaps.pop().context("no snapshot")
}

/// Starts the server on the damaged data dir: it must exit non-zero, saying `says` (the first
/// is what its line is found by) and how to re-add the node.
fn refuses_to_start(dir: &Path, listen: &str, says: &[&str]) -> anyhow::Result<()> {
    let mut server = start_server(dir, listen)?;
    let status = server.wait_exit()?;
    let log = std::fs::read_to_string(dir.join("server.log"))?;
    ensure!(!status.success(), "started from damaged data:\n{log}");
    for said in says.iter().chain(&["re-add", "Replacing a node"]) {
        ensure!(
            log.contains(said),
            "the refusal does not say {said:?}:\n{log}"
        );
    }
    let line = log
        .lines()
        .find(|l| l.contains(says[0]))
        .unwrap_or_default();
    println!("refused ({status}): {line}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_snapshot_is_refused_not_served() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();

    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    put_value(&http, &base, "probe", WRITTEN).await?;
    let snap = http
        .post(format!("{base}/v1/admin/snapshot"))
        .json(&json!({}))
        .send()
        .await?;
    ensure!(
        snap.status().is_success(),
        "snapshot: {}",
        snap.text().await?
    );
    // The snapshot is durable before it is reported; SIGKILL is as good as a clean stop.
    drop(server);

    let path = snapshot_file(&data)?;
    let mut bytes = std::fs::read(&path)?;
    let at = bytes
        .windows(WRITTEN.len())
        .position(|w| w == WRITTEN.as_bytes())
        .context("the value is not in the snapshot as written")?
        + WRITTEN.find('A').context("no A")?;
    bytes[at] ^= b'A' ^ b'a';
    std::fs::write(&path, &bytes)?;

    let name = path.file_name().context("name")?.to_string_lossy();
    refuses_to_start(dir.path(), &listen, &["corrupt", name.as_ref()])?;

    // Negative control: no frame, no hash; the flipped byte is served.
    std::fs::write(&path, &bytes[FRAME_HEADER_BYTES..])?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    let v: Value = get_json(&http, &format!("{base}/v1/kv/probe")).await?;
    if v["value"] != FLIPPED {
        bail!("the control did not serve the flipped value: {v}");
    }
    println!(
        "control: without the frame the node served {:?}",
        v["value"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_synced_log_is_refused_not_forgotten() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log_dir = dir.path().join("data").join("raft-log");
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();

    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    let mut flip_revision = 0;
    for i in 1..=LOG_KEYS {
        let key = format!("log-probe-{i}");
        let v = put_value(&http, &base, &key, &format!("log-probe-value-{i}-XYZ")).await?;
        if i == LOG_FLIP_KEY {
            flip_revision = v["revision"].as_u64().context("revision")?;
        }
    }
    // A mark past the entry the flip lands in: that entry was synced, with writes after it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(WAIT_MS_MAX);
    loop {
        let marked = mark::read(&log_dir)?.unwrap_or(0);
        if marked > flip_revision {
            println!("sync mark at committed index {marked}; the flip is in entry {flip_revision}");
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "no sync mark passed {flip_revision}: {marked}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(POLL_MS)).await;
    }
    drop(server);

    let db = log_dir.join("db");
    let mut bytes = std::fs::read(&db)?;
    let probe = format!("log-probe-value-{LOG_FLIP_KEY}-XYZ");
    let at = bytes
        .windows(probe.len())
        .position(|w| w == probe.as_bytes())
        .context("the entry is not in the log as written")?
        + probe.len()
        - 1;
    bytes[at] ^= 0x20;
    std::fs::write(&db, &bytes)?;

    refuses_to_start(dir.path(), &listen, &["lost writes it had synced"])?;

    // Negative control: without the mark the same log opens, short of acknowledged writes.
    std::fs::remove_file(log_dir.join(MARK_FILE))?;
    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    let last = get_json(&http, &format!("{base}/v1/kv/log-probe-{LOG_KEYS}")).await?;
    ensure!(
        last["code"] == "key_not_found",
        "the control kept the writes after the flip, so this flip shows nothing: {last}"
    );
    let c = get_json(&http, &format!("{base}/v1/cluster?digest=false")).await?;
    println!(
        "control: without the mark the node started at commit index {} and lost log-probe-{LOG_KEYS}",
        c["commit_index"]
    );
    Ok(())
}
