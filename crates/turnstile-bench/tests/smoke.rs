//! Smoke test of the benchmark harness, so it cannot rot: `turnstile-bench --quick` against
//! Turnstile alone (no etcd), a few seconds on a real 3-node cluster of `turnstile serve`
//! processes. It asserts that every workload completed some operations and that the table was
//! written, and nothing about speed.
//!
//! It needs the `turnstile` binary, which this package cannot depend on (a binary of another
//! package gets no `CARGO_BIN_EXE_*` here). It takes the one in the same target directory as
//! `turnstile-bench` (`target/<profile>/turnstile`), which `cargo test --workspace` builds for
//! the `turnstile` package's own integration tests, so the two come from the same build; or the
//! one named by `TURNSTILE_BIN`. If there is none it fails saying how to build it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The whole quick run must finish within this (it takes about ten seconds).
const RUN_S_MAX: u64 = 180;

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

#[test]
fn quick_run_against_turnstile_completes_every_workload() {
    let bin = turnstile_bin();
    assert!(
        bin.is_file(),
        "no turnstile binary at {}: build it first (cargo build --release -p turnstile, or \
         cargo test --workspace --release, which builds it), or set TURNSTILE_BIN",
        bin.display()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("results.md");
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile-bench"))
        .args(["--systems", "turnstile", "--quick", "--out"])
        .arg(&out)
        .arg("--turnstile-bin")
        .arg(&bin)
        .arg("--work-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("start turnstile-bench");
    let deadline = Instant::now() + Duration::from_secs(RUN_S_MAX);
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll turnstile-bench") {
            break status;
        }
        if Instant::now() > deadline {
            stop(&mut child);
            panic!("turnstile-bench --quick did not finish within {RUN_S_MAX} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
    for w in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
        let ops: u64 = entries
            .iter()
            .filter(|e| e["workload"] == w && e["system"] == "turnstile")
            .filter_map(|e| e["ops"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(ops > 0, "{w} completed no operation:\n{md}");
    }
}
