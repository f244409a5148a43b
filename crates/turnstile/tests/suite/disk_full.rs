//! A full disk, with a real `turnstile serve` whose data dir is on a small tmpfs this test
//! mounts (root only, as CI runs): once free space falls below `--disk-reserve-mb`, writes are
//! refused with `503 unavailable` saying why, reads still work, the node keeps running, and
//! when space is freed it takes writes again by itself.
//!
//! Negative control: the same fill with the reserve off (`--disk-reserve-mb 0`) runs sled into
//! `ENOSPC`, and the node stops (exit 74, the failed-sync policy): the reserve is what keeps it
//! serving, and the test's "still running" check is what would notice it gone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::common::*;
use turnstile_server::SYNC_FAILED_EXIT_CODE;

/// Size of the tmpfs holding the data dir.
const TMPFS_MIB: u64 = 96;
/// The node's reserve in the main test.
const RESERVE_MIB: u64 = 24;
/// Free space the filler leaves: below the reserve, and enough for the node's first writes.
const LEFT_FREE_MIB: u64 = 8;
/// Values written in the negative control before giving up on seeing the node stop.
const CONTROL_WRITES_MAX: u64 = 2_000;

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, mib: u64) -> anyhow::Result<Tmpfs> {
        std::fs::create_dir_all(dir)?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .context("cannot run mount")?;
        if !status.success() {
            bail!("mounting a tmpfs failed ({status}); this test needs root, as CI runs it");
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }

    fn free_mib(&self) -> anyhow::Result<u64> {
        let s = nix::sys::statvfs::statvfs(&self.dir)?;
        Ok(s.blocks_available() * s.fragment_size() / (1024 * 1024))
    }

    /// Fills the filesystem until `left_mib` are free, with one file at `name`.
    fn fill_to(&self, name: &str, left_mib: u64) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        let mib = self.free_mib()?.saturating_sub(left_mib);
        let status = Command::new("fallocate")
            .args(["-l", &format!("{mib}MiB")])
            .arg(&path)
            .status()
            .context("cannot run fallocate")?;
        if !status.success() {
            bail!("fallocate of {mib} MiB failed ({status})");
        }
        Ok(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Starts a one-node server with its data dir on `fs` and the given reserve.
async fn start_on(
    dir: &Path,
    fs: &Tmpfs,
    reserve_mib: u64,
    http: &reqwest::Client,
) -> anyhow::Result<(Proc, String)> {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let binary = Path::new(env!("CARGO_BIN_EXE_turnstile"));
    let mut cmd = serve_command(binary, &fs.dir.join("data"), &listen);
    cmd.args(["--disk-reserve-mb", &reserve_mib.to_string()]);
    let mut server = spawn_server(cmd, dir)?;
    let base = format!("http://{listen}");
    wait_for_leader(&mut server, http, &base, dir).await?;
    Ok((server, base))
}

async fn put(http: &reqwest::Client, base: &str, key: &str, value: &str) -> (u16, Value) {
    let sent = http
        .put(format!("{base}/v1/kv/{key}"))
        .json(&json!({ "value": value }))
        .send()
        .await;
    match sent {
        Ok(r) => {
            let code = r.status().as_u16();
            (code, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (0, json!(e.to_string())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_and_recovers_when_space_is_freed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = Tmpfs::mount(&dir.path().join("fs"), TMPFS_MIB)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let (mut server, base) = start_on(dir.path(), &fs, RESERVE_MIB, &http).await?;
    assert_eq!(put(&http, &base, "before", "1").await.0, 200);

    let filler = fs.fill_to("filler", LEFT_FREE_MIB)?;
    // A check that found enough space stands for `disk_space::ENOUGH_STANDS_MS`, so a write right after
    // the fill may still be taken; the refusal must come within that window.
    let filled = Instant::now();
    let (code, body) = loop {
        let (code, body) = put(&http, &base, "full", "2").await;
        if code != 200 || filled.elapsed() > Duration::from_millis(WAIT_MS_MAX) {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    };
    eprintln!(
        "write with {} MiB free, {} ms after the fill: {code} {body}",
        fs.free_mib()?,
        filled.elapsed().as_millis()
    );
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["code"], "unavailable", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("below its reserve"), "{message}");
    let read = get_json(&http, &format!("{base}/v1/kv/before")).await?;
    assert_eq!(read["value"], "1", "reads still work: {read}");
    assert!(
        server.child.try_wait()?.is_none(),
        "the node must keep running"
    );

    std::fs::remove_file(&filler)?;
    let freed = Instant::now();
    let deadline = freed + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (code, body) = put(&http, &base, "after", "3").await;
        if code == 200 {
            break;
        }
        if Instant::now() > deadline {
            bail!("writes still refused after space was freed: {code} {body}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    eprintln!(
        "writes taken again {} ms after space was freed",
        freed.elapsed().as_millis()
    );
    assert!(server.child.try_wait()?.is_none(), "the node never stopped");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_the_reserve_a_full_disk_stops_the_node() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let fs = Tmpfs::mount(&dir.path().join("fs"), TMPFS_MIB)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;
    let (mut server, base) = start_on(dir.path(), &fs, 0, &http).await?;
    fs.fill_to("filler", 0)?;
    let value = "x".repeat(4096);
    let mut exited = None;
    for i in 0..CONTROL_WRITES_MAX {
        let _ = put(&http, &base, &format!("k{i}"), &value).await;
        if let Some(status) = server.child.try_wait()? {
            exited = Some((i, status.code()));
            break;
        }
    }
    eprintln!("with the reserve off: {exited:?} (writes sent, exit code)");
    let Some((_, code)) = exited else {
        bail!("the node kept running on a full disk with the reserve off");
    };
    assert_eq!(code, Some(SYNC_FAILED_EXIT_CODE));
    Ok(())
}
