//! Shared by the CLI tests: real `turnstile` processes (killed and reaped on drop), a
//! one-node `turnstile serve` (of this package's binary or another build), and waiting for it
//! to lead.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// A debug build on a loaded 2-core box can take a while to elect itself.
pub const STARTUP_MS_MAX: u64 = 60_000;
/// Deadline of any other wait in this test.
pub const WAIT_MS_MAX: u64 = 20_000;
/// Interval between polls while waiting for a condition.
pub const POLL_MS: u64 = 50;
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process killed (SIGKILL, with its process group when it leads one) and reaped on
/// drop, so a failing assertion leaves nothing running.
pub struct Proc {
    pub child: Child,
    /// Another process group to kill on drop (CMD's, which `lock` puts in a group of its own).
    pub extra_group: Option<u32>,
}

impl Proc {
    pub fn new(child: Child) -> Proc {
        Proc {
            child,
            extra_group: None,
        }
    }

    /// Waits for the process to exit, failing after `WAIT_MS_MAX`.
    pub fn wait_exit(&mut self) -> anyhow::Result<ExitStatus> {
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

pub fn turnstile() -> Command {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
}

/// Starts a one-node `turnstile serve` on `listen` with its data in `dir/data` and its output
/// in `dir/server.log`.
pub fn start_server(dir: &Path, listen: &str) -> anyhow::Result<Proc> {
    start_server_on(dir, &dir.join("data"), listen)
}

/// Like [`start_server`], with the data dir given.
pub fn start_server_on(dir: &Path, data_dir: &Path, listen: &str) -> anyhow::Result<Proc> {
    let binary = Path::new(env!("CARGO_BIN_EXE_turnstile"));
    spawn_server(serve_command(binary, data_dir, listen), dir)
}

/// `<binary> serve` as a one-node cluster on `listen` (`binary`: this package's `turnstile`, or
/// another build of it).
pub fn serve_command(binary: &Path, data_dir: &Path, listen: &str) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args(["serve", "--id", "1", "--listen", listen, "--data-dir"])
        .arg(data_dir)
        .args(["--initial-cluster", &format!("1={listen}")])
        .args(["--cluster-secret", "cli-lock-test-secret"]);
    cmd
}

/// Spawns a server `command` in a process group of its own, its output in `dir/server.log`.
pub fn spawn_server(mut command: Command, dir: &Path) -> anyhow::Result<Proc> {
    use std::os::unix::process::CommandExt;
    let log = fs::File::create(dir.join("server.log"))?;
    let child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot spawn turnstile serve")?;
    Ok(Proc::new(child))
}

pub async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    Ok(http.get(url).send().await?.json().await?)
}

/// `PUT /v1/kv/{key}` with `value` at `base`; the answer, or an error unless it is a success.
pub async fn put_value(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<Value> {
    let resp = http
        .put(format!("{base}/v1/kv/{key}"))
        .json(&serde_json::json!({ "value": value }))
        .send()
        .await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "put {key}: {}",
        resp.text().await?
    );
    Ok(resp.json().await?)
}

pub async fn wait_for_leader(
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
