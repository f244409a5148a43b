//! Proves that `turnstile serve` acknowledges a write only after an `fdatasync` of its Raft log,
//! by watching the real binary from outside with strace, and measures group commit.
//!
//! A single-node cluster runs under
//! `strace -f -ttt -y -e trace=fdatasync,fsync -o trace.txt turnstile serve ...`:
//! `-ttt` is the `-tt` wall clock written as seconds since the epoch, so it compares directly
//! with `SystemTime::now()` here (no time zone, no midnight wrap), and `-y` prints the path
//! behind each fd, so only syncs of sled's log file (`raft-log/db`) are counted.
//!
//! Why per-write time windows are a sound proof: for each of the `SEQUENTIAL_WRITES` strictly
//! sequential increments, the test reads the clock just before sending and just after the 200
//! arrives. The server writes the entry to sled after the request arrived, and the flusher only
//! acknowledges it after an `fdatasync` that began after the entry was written. strace stamps a
//! syscall while the calling thread is stopped at the syscall's entry (stopped threads cannot
//! finish the sync), so that sync's stamp lies inside the write's window. The windows are
//! disjoint, so finding a log `fdatasync` inside every window also proves at least
//! `SEQUENTIAL_WRITES` of them. The server's own `log.fdatasyncs` counter must agree.
//!
//! Then `CONCURRENT_WRITES` increments run at once and the test prints the syncs per
//! acknowledged write (group commit should put it well under 1); it asserts only that every
//! write was acknowledged and that between 1 and `CONCURRENT_WRITES` syncs were made.
//!
//! strace is required, not optional: without it the test fails and says to install it.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use anyhow::bail;
use anyhow::Context;
use serde_json::json;
use serde_json::Value;
use tokio::task::JoinSet;

/// Sequential increments, each of which must get its own log sync.
const SEQUENTIAL_WRITES: usize = 20;
/// Increments in flight at once in the group-commit phase.
const CONCURRENT_WRITES: usize = 64;
/// A debug build under ptrace on a loaded 2-core box can take a while to elect itself.
const STARTUP_MS_MAX: u64 = 60_000;
/// Interval between `/v1/cluster` polls while waiting for a condition.
const POLL_MS: u64 = 50;
/// Deadline of one HTTP request.
const REQUEST_MS_MAX: u64 = 10_000;
/// How long strace may take to notice the killed server and exit.
const STRACE_EXIT_MS_MAX: u64 = 10_000;
/// The suffix `-y` prints for the fd of sled's log file in the node's data dir.
const LOG_DB_SUFFIX: &str = "/raft-log/db>";

/// Fails (never skips) when strace is missing: CI installs it, and a silent skip would let a
/// durability regression through.
fn require_strace() -> anyhow::Result<()> {
    match Command::new("strace").arg("-V").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!(
            "`strace -V` failed ({}); this test needs a working strace",
            out.status
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "strace is not installed; this test needs it to observe fdatasync calls. \
             Install it with `apt-get install -y strace` (CI installs it)"
        ),
        Err(e) => Err(e).context("cannot run `strace -V`"),
    }
}

/// A port free right now: bind port 0, read the port, release it for the server.
fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr().map(|a| a.port())
}

/// Pids whose parent is `parent`, from `/proc/<pid>/stat` (field 4, after the `(comm)`).
fn child_pids(parent: u32) -> io::Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit between the listing and the read.
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

fn signal(target: &str) {
    // The target may be gone already; there is nothing more to do then.
    let _ = Command::new("kill")
        .args(["-KILL", "--", target])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// strace with the server as its only child, in a process group of their own. Dropping it
/// kills both, so a failing assertion never leaves a server behind.
struct TracedServer {
    strace: Child,
    /// The server's pid, strace's child; found once the server answers.
    server_pid: Option<u32>,
    /// Set once strace has exited and been reaped: its pid (and group id) may be reused then.
    reaped: bool,
    trace_path: PathBuf,
    log_path: PathBuf,
    base_url: String,
}

impl TracedServer {
    fn start(dir: &Path) -> anyhow::Result<TracedServer> {
        use std::os::unix::process::CommandExt;

        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let trace_path = dir.join("trace.txt");
        let log_path = dir.join("server.log");
        let log = fs::File::create(&log_path)?;
        let strace = Command::new("strace")
            .args(["-f", "-ttt", "-y", "-e", "trace=fdatasync,fsync", "-o"])
            .arg(&trace_path)
            .arg(env!("CARGO_BIN_EXE_turnstile"))
            .args(["serve", "--id", "1", "--listen", &listen, "--data-dir"])
            .arg(dir.join("data"))
            .args(["--initial-cluster", &format!("1={listen}")])
            .args(["--cluster-secret", "fsync-strace-secret"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("cannot spawn strace")?;
        Ok(TracedServer {
            strace,
            server_pid: None,
            reaped: false,
            trace_path,
            log_path,
            base_url: format!("http://{listen}"),
        })
    }

    /// Fails with the server's output if strace (hence the server) has exited.
    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.strace.try_wait()? {
            self.reaped = true;
            let log = fs::read_to_string(&self.log_path).unwrap_or_default();
            bail!("strace/server exited early ({status}); output:\n{log}");
        }
        Ok(())
    }

    /// Records the server's pid: strace's one child process.
    fn find_server_pid(&mut self) -> anyhow::Result<()> {
        let pids = child_pids(self.strace.id())?;
        match pids.as_slice() {
            [pid] => self.server_pid = Some(*pid),
            other => bail!("expected strace to have one child, found {other:?}"),
        }
        Ok(())
    }

    /// Kills the server and waits for strace, its parent, to reap it, finish the trace and exit.
    fn kill_server_and_wait(&mut self) -> anyhow::Result<()> {
        let pid = self.server_pid.context("server pid unknown")?;
        // strace outlives its tracee, so a running strace means `pid` is still the server.
        if self.strace.try_wait()?.is_none() {
            signal(&pid.to_string());
        }
        let deadline = Instant::now() + Duration::from_millis(STRACE_EXIT_MS_MAX);
        while self.strace.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!("strace did not exit after the server was killed");
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
        self.reaped = true;
        Ok(())
    }

    /// Stops the server and returns the complete trace.
    fn stop(&mut self) -> anyhow::Result<String> {
        self.kill_server_and_wait()?;
        Ok(fs::read_to_string(&self.trace_path)?)
    }
}

impl Drop for TracedServer {
    /// Prefers killing just the server so strace reaps it; falls back to killing the whole
    /// process group (server pid unknown, or strace stuck).
    fn drop(&mut self) {
        if !self.reaped && self.server_pid.is_none() {
            let _ = self.find_server_pid();
        }
        if self.reaped || (self.server_pid.is_some() && self.kill_server_and_wait().is_ok()) {
            return;
        }
        signal(&format!("-{}", self.strace.id()));
        let _ = self.strace.kill();
        let _ = self.strace.wait();
    }
}

/// One `fdatasync` of the log file seen by strace: its entry time in µs since the epoch.
fn log_sync_stamps_us(trace: &str) -> Vec<u128> {
    trace.lines().filter_map(log_sync_stamp_us).collect()
}

/// Parses `[pid] secs.micros fdatasync(fd</…/raft-log/db>) = 0` (or its `<unfinished ...>`
/// first half); `<... fdatasync resumed>` lines and other syscalls are not counted.
fn log_sync_stamp_us(line: &str) -> Option<u128> {
    let mut fields = line.split_whitespace().peekable();
    if fields.peek()?.bytes().all(|b| b.is_ascii_digit()) {
        fields.next();
    }
    let (secs, micros) = fields.next()?.split_once('.')?;
    let call = fields.next()?;
    if !call.starts_with("fdatasync(") || !call.contains(LOG_DB_SUFFIX) {
        return None;
    }
    Some(secs.parse::<u128>().ok()? * 1_000_000 + micros.parse::<u128>().ok()?)
}

fn now_us() -> anyhow::Result<u128> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros())
}

async fn cluster(http: &reqwest::Client, base: &str) -> anyhow::Result<Value> {
    let url = format!("{base}/v1/cluster");
    Ok(http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

fn log_fdatasyncs(cluster: &Value) -> anyhow::Result<u64> {
    cluster["log"]["fdatasyncs"]
        .as_u64()
        .with_context(|| format!("no log.fdatasyncs in {cluster}"))
}

/// Polls `/v1/cluster` until this node leads and the replicated cluster id is set.
async fn wait_for_leader(server: &mut TracedServer, http: &reqwest::Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(STARTUP_MS_MAX);
    loop {
        server.check_running()?;
        let last = match cluster(http, &server.base_url).await {
            Ok(c)
                if c["state"] == "Leader" && c["leader_id"] == 1 && c["cluster_id"].is_string() =>
            {
                return Ok(())
            }
            Ok(c) => c.to_string(),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!("no leader with a cluster id within {STARTUP_MS_MAX} ms; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// One acknowledged increment of `name`; returns the counter's new value.
async fn incr(http: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<i64> {
    let url = format!("{base}/v1/counters/{name}/incr");
    let resp = http.post(url).json(&json!({"by": 1})).send().await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    if status != reqwest::StatusCode::OK {
        bail!("increment of {name} answered {status}: {body}");
    }
    body["value"]
        .as_i64()
        .with_context(|| format!("no value in {body}"))
}

/// Runs the sequential increments; returns each one's `(send, ack)` window in µs.
async fn sequential_writes(
    http: &reqwest::Client,
    base: &str,
) -> anyhow::Result<Vec<(u128, u128)>> {
    let mut windows = Vec::with_capacity(SEQUENTIAL_WRITES);
    for i in 1..=SEQUENTIAL_WRITES {
        let sent_us = now_us()?;
        let value = incr(http, base, "fsync-sequential").await?;
        let acked_us = now_us()?;
        assert_eq!(value, i64::try_from(i)?, "write {i} returned a wrong value");
        windows.push((sent_us, acked_us));
    }
    Ok(windows)
}

/// Runs the concurrent increments; every one must be acknowledged with a distinct value.
async fn concurrent_writes(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    for _ in 0..CONCURRENT_WRITES {
        let (http, base) = (http.clone(), base.to_owned());
        tasks.spawn(async move { incr(&http, &base, "fsync-concurrent").await });
    }
    let mut values = Vec::with_capacity(CONCURRENT_WRITES);
    while let Some(joined) = tasks.join_next().await {
        values.push(joined??);
    }
    values.sort_unstable();
    let expected: Vec<i64> = (1..=i64::try_from(CONCURRENT_WRITES)?).collect();
    assert_eq!(
        values, expected,
        "not every concurrent write was acknowledged once"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_were_fdatasynced() -> anyhow::Result<()> {
    require_strace()?;
    let dir = tempfile::tempdir()?;
    let mut server = TracedServer::start(dir.path())?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(REQUEST_MS_MAX))
        .build()?;
    let base = server.base_url.clone();
    wait_for_leader(&mut server, &http).await?;
    server.find_server_pid()?;

    let syncs_start = log_fdatasyncs(&cluster(&http, &base).await?)?;
    let windows = sequential_writes(&http, &base).await?;
    let syncs_sequential = log_fdatasyncs(&cluster(&http, &base).await?)? - syncs_start;

    let concurrent_start_us = now_us()?;
    concurrent_writes(&http, &base).await?;
    let concurrent_end_us = now_us()?;
    let syncs_concurrent =
        log_fdatasyncs(&cluster(&http, &base).await?)? - syncs_start - syncs_sequential;

    let trace = server.stop()?;
    let stamps = log_sync_stamps_us(&trace);
    let in_window =
        |(from, to): (u128, u128)| stamps.iter().filter(|&&t| from <= t && t <= to).count();

    let n = u64::try_from(SEQUENTIAL_WRITES)?;
    println!(
        "sequential: {SEQUENTIAL_WRITES} writes, {syncs_sequential} log fdatasyncs by the server's count, {} seen by strace in the write windows: {:.2} syncs per write",
        windows.iter().map(|&w| in_window(w)).sum::<usize>(),
        syncs_sequential as f64 / n as f64,
    );
    let traced_concurrent = in_window((concurrent_start_us, concurrent_end_us));
    println!(
        "concurrent: {CONCURRENT_WRITES} writes, {syncs_concurrent} log fdatasyncs by the server's count ({traced_concurrent} seen by strace): {:.3} syncs per acknowledged write",
        syncs_concurrent as f64 / CONCURRENT_WRITES as f64,
    );

    assert!(
        syncs_sequential >= n,
        "{SEQUENTIAL_WRITES} sequential acknowledged writes but only {syncs_sequential} fdatasyncs counted"
    );
    let first_sent_us = windows.first().map_or(0, |w| w.0);
    let traced_after_first = stamps.iter().filter(|&&t| t >= first_sent_us).count();
    assert!(
        traced_after_first >= SEQUENTIAL_WRITES,
        "strace saw only {traced_after_first} log fdatasyncs after the first write was sent"
    );
    for (i, &window) in windows.iter().enumerate() {
        assert!(
            in_window(window) >= 1,
            "write {} was acknowledged with no log fdatasync between send and ack {window:?}",
            i + 1
        );
    }
    let concurrent_max = u64::try_from(CONCURRENT_WRITES)?;
    assert!(
        (1..=concurrent_max).contains(&syncs_concurrent),
        "{syncs_concurrent} fdatasyncs for {CONCURRENT_WRITES} concurrent writes"
    );
    Ok(())
}
