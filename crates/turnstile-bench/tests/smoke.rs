//! Smoke test of the benchmark harness, so it cannot rot: `turnstile-bench --quick` against
//! Turnstile alone (no etcd), a few seconds on a real 3-node cluster of `turnstile serve`
//! processes. It asserts that every workload completed some operations and that the table was
//! written, and nothing about speed. Then a few seconds of `turnstile-bench soak`, which must
//! see no refusal and, with acknowledgments, far fewer request-id records than ids used. And a
//! few seconds of W1 and W4 over both transports, so the TLS mode (certificates, HTTPS, client
//! authentication) keeps working.
//!
//! It needs the `turnstile` binary, which this package cannot depend on (a binary of another
//! package gets no `CARGO_BIN_EXE_*` here). It takes the one in the same target directory as
//! `turnstile-bench` (`target/<profile>/turnstile`), which `cargo test --workspace` builds for
//! the `turnstile` package's own integration tests, so the two come from the same build; or the
//! one named by `TURNSTILE_BIN`. If there is none it fails saying how to build it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The whole quick run must finish within this (it takes about ten seconds).
const RUN_S_MAX: u64 = 180;
/// Length of the soak smoke, in seconds (plus a second or two to start the cluster).
const SOAK_SMOKE_S: f64 = 6.0;
/// Clients of the soak smoke.
const SOAK_SMOKE_CLIENTS: usize = 4;
/// With acknowledgments, records held at once stay far below the ids used: each is kept from
/// its answer to its acknowledgment's commit (a node proposes acks every 100 ms), so a 6 s run
/// holds about one fiftieth at most; without them every id is still held at the end.
const SOAK_SMOKE_RECORDS_SHARE_MAX: u64 = 4;

/// The tests start clusters of three nodes each; one at a time keeps them from starving each
/// other of CPU on a small CI machine.
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn turnstile_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TURNSTILE_BIN") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_BIN_EXE_turnstile-bench"))
        .parent()
        .expect("the bench binary lives in target/<profile>/")
        .join("turnstile")
}

/// SIGTERM first, so the bench kills its nodes and removes their data dirs; SIGKILL if it
/// does not exit.
fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `turnstile-bench args...` with its output under `dir`, within [`RUN_S_MAX`].
fn run_bench(args: &[&str], dir: &Path) -> ExitStatus {
    let bin = turnstile_bin();
    assert!(
        bin.is_file(),
        "no turnstile binary at {}: build it first (cargo build --release -p turnstile, or \
         cargo test --workspace --release, which builds it), or set TURNSTILE_BIN",
        bin.display()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile-bench"))
        .args(args)
        .arg("--turnstile-bin")
        .arg(&bin)
        .arg("--work-dir")
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("start turnstile-bench");
    let deadline = Instant::now() + Duration::from_secs(RUN_S_MAX);
    loop {
        if let Some(status) = child.try_wait().expect("poll turnstile-bench") {
            return status;
        }
        if Instant::now() > deadline {
            stop(&mut child);
            panic!("turnstile-bench {args:?} did not finish within {RUN_S_MAX} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn quick_run_against_turnstile_completes_every_workload() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results.md");
    let out_arg = out.to_str().expect("the temp dir's path is UTF-8");
    let status = run_bench(
        &["--systems", "turnstile", "--quick", "--out", out_arg],
        dir.path(),
    );
    assert!(status.success(), "turnstile-bench --quick failed: {status}");

    let md = std::fs::read_to_string(&out).expect("the Markdown table was written");
    assert!(md.contains("| Workload | Figure |"), "no table in:\n{md}");
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.with_extension("json")).expect("the JSON was written"),
    )
    .expect("valid JSON");
    assert_eq!(
        json["failures"].as_array().map(Vec::len),
        Some(0),
        "{json:#}"
    );
    let entries = json["entries"].as_array().expect("entries");
    for w in ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8"] {
        let ops: u64 = entries
            .iter()
            .filter(|e| e["workload"] == w && e["system"] == "turnstile")
            .filter_map(|e| e["ops"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(ops > 0, "{w} completed no operation:\n{md}");
    }
}

#[test]
fn quick_tls_run_beside_plain_completes_and_prices_tls() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("tls.md");
    let out_arg = out.to_str().expect("the temp dir's path is UTF-8");
    let status = run_bench(
        &[
            "--systems",
            "turnstile,turnstile-etcd",
            "--quick",
            "--workloads",
            "w1,w4",
            "--w1-clients",
            "8",
            "--transport",
            "plain,tls",
            "--out",
            out_arg,
        ],
        dir.path(),
    );
    let md = std::fs::read_to_string(&out).expect("the Markdown table was written");
    assert!(
        status.success(),
        "turnstile-bench --transport plain,tls failed: {status}\n{md}"
    );
    assert!(md.contains("## Cost of TLS and authentication"), "{md}");
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.with_extension("json")).expect("the JSON was written"),
    )
    .expect("valid JSON");
    let entries = json["entries"].as_array().expect("entries");
    // Turnstile's etcd port too: the etcd client's requests, plain and over TLS.
    let runs = ["W1", "W4"].into_iter().flat_map(|w| {
        ["turnstile", "turnstile-etcd"]
            .into_iter()
            .flat_map(move |s| ["plain", "tls"].map(move |t| (w, s, t)))
    });
    for (w, system, transport) in runs {
        let errors: u64 = entries
            .iter()
            .filter(|e| e["workload"] == w && e["transport"] == transport)
            .filter(|e| e["system"] == system)
            .filter_map(|e| e["errors"].as_u64())
            .sum();
        let ops: u64 = entries
            .iter()
            .filter(|e| e["workload"] == w && e["transport"] == transport)
            .filter(|e| e["system"] == system)
            .filter_map(|e| e["ops"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(
            ops > 0 && errors == 0,
            "{w} on {system} over {transport}: {ops} ops, {errors} errors\n{md}"
        );
    }
}

#[test]
fn short_soak_sees_no_refusal_and_acknowledged_records_go() {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("soak.md");
    let out_arg = out.to_str().expect("the temp dir's path is UTF-8");
    let minutes = (SOAK_SMOKE_S / 60.0).to_string();
    let clients = SOAK_SMOKE_CLIENTS.to_string();
    let status = run_bench(
        &[
            "soak",
            "--minutes",
            &minutes,
            "--clients",
            &clients,
            "--sample-s",
            "1",
            "--out",
            out_arg,
        ],
        dir.path(),
    );
    let md = std::fs::read_to_string(&out).expect("the Markdown report was written");
    assert!(
        status.success(),
        "turnstile-bench soak failed: {status}\n{md}"
    );
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.with_extension("json")).expect("the JSON was written"),
    )
    .expect("valid JSON");
    let refusals = json["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "zero refusals"))
        .expect("a refusals verdict");
    assert_eq!(refusals["judgement"], "Pass", "{md}");
    let totals = &json["totals"];
    let cycles = totals["cycles"].as_u64().expect("cycles");
    let ids_used = totals["ids_used"].as_u64().expect("ids_used");
    assert!(cycles > 0, "no cycle completed:\n{md}");
    assert!(
        totals["ids_acked"].as_u64() > Some(0),
        "nothing acknowledged:\n{md}"
    );
    let records_max = json["records_total_max"]
        .as_u64()
        .expect("records were sampled");
    assert!(
        records_max * SOAK_SMOKE_RECORDS_SHARE_MAX < ids_used,
        "{records_max} records held at once for {ids_used} ids used: acknowledgments did not \
         remove them\n{md}"
    );
}
