//! A rolling restart under load with real SIGTERM: each node in turn drains (a leader hands
//! leadership to a caught-up voter first), exits cleanly, restarts on its data dir and catches
//! up, while clients keep acquiring locks and writing through their fences. No acknowledged
//! grant or write is lost, tokens keep growing, and the only errors clients see are the
//! documented hand-over ones (`503 no_quorum`, `504 indeterminate`) and refused connections
//! to the node that is down.
//!
//! The same roll is also a rolling *upgrade*: the cluster starts on an older release's
//! `turnstile-jepsen` and each node restarts on this build, so for a while old and new nodes
//! replicate to each other. Building the old release takes about ten minutes on two cores, more
//! than CI's budget, so that test is `#[ignore]`d and `jepsen/upgrade.sh` builds the old release
//! and runs it; CI runs the same-binary roll and the data-dir fixtures of
//! `crates/turnstile/tests/suite/upgrade_fixture.rs`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::common::*;
use turnstile_tests::load::{LoadHttp, LockLoad};

/// Lock-cycling clients during the restarts.
const WORKERS: u64 = 4;
/// How long a node may take to drain and exit after SIGTERM.
const EXIT_WAIT_MS_MAX: u64 = 20_000;
/// Timeout of one load request: what `turnstile_tests::load::http_builder` gives a plain load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(8);
/// What clients may see besides success while nodes restart.
const ALLOWED: [&str; 3] = ["503 no_quorum", "504 indeterminate", "transport"];

/// The `handover_ms` a node logged when it handed leadership over, if it did.
fn logged_handover_ms(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("leadership handed over"))?;
    let line = strip_ansi(line);
    let rest = &line[line.find("handover_ms=")? + "handover_ms=".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The text of a log line without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The variable naming the older release's `turnstile-jepsen` for the upgrade test.
const UPGRADE_FROM_ENV: &str = "TURNSTILE_UPGRADE_FROM";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_under_load_loses_nothing() -> anyhow::Result<()> {
    let tc = start_cluster(3, "").await?;
    roll(tc, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an older release's turnstile-jepsen in TURNSTILE_UPGRADE_FROM: run jepsen/upgrade.sh"]
async fn rolling_upgrade_from_an_older_release_loses_nothing() -> anyhow::Result<()> {
    let old = std::env::var_os(UPGRADE_FROM_ENV)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("{UPGRADE_FROM_ENV} is not set"))?;
    anyhow::ensure!(old.is_file(), "{} is not a file", old.display());
    eprintln!("starting on {}, upgrading to {BIN}", old.display());
    let tc = start_cluster_of(3, &old).await?;
    let old = old.canonicalize()?;
    for id in tc.ids() {
        let running = tc.executable(id);
        anyhow::ensure!(running.as_ref() == Some(&old), "node {id} runs {running:?}");
    }
    roll(tc, Some(PathBuf::from(BIN))).await
}

/// Stops each node in turn with SIGTERM and starts it again (on `upgrade_to` if given) under
/// lock load, then checks what the clients saw and that the nodes converge.
async fn roll(mut tc: TestCluster, upgrade_to: Option<PathBuf>) -> anyhow::Result<()> {
    let endpoints = Arc::new(RwLock::new(
        tc.ids().iter().map(|&id| tc.addr(id)).collect::<Vec<_>>(),
    ));
    // The load speaks the cluster's TLS and presents its `root` certificate.
    let http = LoadHttp {
        client: tc.http_builder()?.timeout(LOAD_TIMEOUT).build()?,
        scheme: tc.mode().scheme(),
    };
    let load = LockLoad::start_with(endpoints, WORKERS, http);
    load.wait_grants(20).await?;

    let mut handovers = Vec::new();
    // Every restart below starts the upgrade: stopped nodes come back on the new build.
    if let Some(binary) = &upgrade_to {
        tc.set_binary(binary.clone());
    }
    for id in tc.ids() {
        let (leader, _) = tc.leader().await?;
        let exit = tc.terminate(id, Duration::from_millis(EXIT_WAIT_MS_MAX))?;
        if id == leader {
            let log = std::fs::read_to_string(tc.log_path(id))?;
            let ms = logged_handover_ms(&log).ok_or_else(|| {
                anyhow::anyhow!("leader {id} did not hand over:\n{}", tc.log_tail(id, 30))
            })?;
            handovers.push(ms);
        }
        eprintln!(
            "node {id}{} exited {} ms after SIGTERM",
            if id == leader { " (leader)" } else { "" },
            ms(exit)
        );
        // The others keep granting while it is down.
        load.wait_grants(10).await?;
        let restarted = Instant::now();
        tc.restart(id)?;
        let (leader, _) = tc.leader().await?;
        let target = tc.status(leader).await?["commit_index"]
            .as_u64()
            .unwrap_or(0);
        wait_until(
            "the restarted node to catch up",
            Duration::from_secs(20),
            || async {
                let s = tc.status(id).await.ok()?;
                (s["phase"] == "member" && s["applied_index"].as_u64()? >= target).then_some(())
            },
        )
        .await?;
        eprintln!(
            "node {id} back and caught up in {} ms",
            ms(restarted.elapsed())
        );
        load.wait_grants(10).await?;
    }
    assert!(!handovers.is_empty(), "no node was leader when stopped");
    eprintln!("leader hand-over on SIGTERM: {handovers:?} ms");

    let report = load.stop().await?;
    let unexpected: BTreeSet<&String> = report
        .answers
        .keys()
        .filter(|k| !ALLOWED.contains(&k.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "clients saw {unexpected:?} (all answers: {:?})",
        report.answers
    );
    let converged = tc.converged().await?;
    if let Some(binary) = &upgrade_to {
        let want = binary.canonicalize()?;
        for id in tc.ids() {
            let running = tc.executable(id);
            anyhow::ensure!(
                running.as_ref() == Some(&want),
                "node {id} runs {running:?}, not the upgrade {}",
                want.display()
            );
        }
    }
    eprintln!(
        "{} grants across the restarts; answers {:?}; converged {:?}",
        report.grants, report.answers, converged
    );
    Ok(())
}
