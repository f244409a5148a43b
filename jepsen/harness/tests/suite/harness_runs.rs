//! Short seeded chaos runs of the whole harness against real node processes in network
//! namespaces: with a correct server every checker must pass (and the run must have had its
//! faults and leader changes); with each bug switch on, the checker meant for that bug must
//! report a violation. Runs are secure (TLS, the `root` client certificate), as `RunConfig`
//! makes them by default. Runs take turns (one at a time): two 5-node clusters on 2 cores would
//! measure the machine, not the server.

use std::path::PathBuf;
use std::time::Duration;

use turnstile_checker::Validity;
use turnstile_jepsen::nemesis::Fault;
use turnstile_jepsen::run::{run, RunConfig, RunSummary};
use turnstile_jepsen::tls::Mode;

/// Length of a correct run's fault phase.
const CORRECT_RUN_S: u64 = 30;
/// Length of a bug-injection run's fault phase.
const BUG_RUN_S: u64 = 20;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(seed: u64, seconds: u64, bugs: &str) -> RunConfig {
    let mut cfg = RunConfig::new(
        seed,
        Duration::from_secs(seconds),
        PathBuf::from(env!("CARGO_BIN_EXE_turnstile-jepsen")),
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jepsen-runs"),
    );
    cfg.bugs = bugs.to_string();
    cfg
}

async fn run_one(cfg: RunConfig) -> RunSummary {
    let _turn = ONE_AT_A_TIME.lock().await;
    let summary = run(cfg).await.expect("the run itself failed");
    println!("{}", summary.render());
    summary
}

async fn correct_run(seed: u64) {
    correct_run_of(config(seed, CORRECT_RUN_S, "")).await;
}

/// Runs `cfg` (a correct server) and demands that every checker passes; returns the summary.
async fn correct_run_of(cfg: RunConfig) -> RunSummary {
    let seed = cfg.seed;
    let etcd_workers = cfg.etcd_register_workers;
    let s = run_one(cfg).await;
    assert_eq!(s.mode, Mode::Secure, "CI's runs are secure");
    assert!(s.too_gentle.is_none(), "run too gentle: {:?}", s.too_gentle);
    // The etcd port's register workers took part (a worker that never connected would only
    // leave the check vacuous for them).
    assert!(
        etcd_workers == 0 || s.etcd_ok > 0,
        "seed {seed}: no etcd register operation completed"
    );
    let not_valid: Vec<_> = s
        .results
        .iter()
        .filter(|r| r.validity != Validity::Valid)
        .collect();
    assert!(
        not_valid.is_empty(),
        "seed {seed}: checkers did not pass: {not_valid:#?}\nfolder {}",
        s.dir.display()
    );
    s
}

// Two seeds with every default fault (a third, 303, was dropped on 2026-12-04 to keep the
// fresh-clone CI under 30 minutes as the etcd port was added; it is in `turnstile-jepsen run
// --seeds` like any other), plus seed 404's storage and membership faults below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correct_server_passes_seed_101() {
    correct_run(101).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correct_server_passes_seed_202() {
    correct_run(202).await;
}

/// Lost disks replaced through membership changes and failing fdatasync, mixed with kills and
/// partitions: every checker passes, including convergence of the re-added nodes' digests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correct_server_passes_storage_and_membership_faults_seed_404() {
    let mut cfg = config(404, CORRECT_RUN_S, "");
    cfg.faults = vec![
        Fault::WipeReplace,
        Fault::MemberChurn,
        Fault::DiskSyncFail,
        Fault::Kill,
        Fault::IsolateLeader,
        Fault::MajorityMinority,
    ];
    let s = correct_run_of(cfg).await;
    for kind in [Fault::WipeReplace, Fault::MemberChurn, Fault::DiskSyncFail] {
        assert!(
            s.fault_kinds.get(kind.name()).is_some_and(|&n| n > 0),
            "seed 404 applied no {}: {:?}",
            kind.name(),
            s.fault_kinds
        );
    }
}

/// Runs with `bug` on (and, if given, only `faults`) and demands that `checker`, the one meant
/// for it, reports a violation.
async fn bug_is_caught(bug: &str, checker: &str, faults: Option<Vec<Fault>>) {
    bug_is_caught_by_one_of(bug, &[checker], faults).await;
}

/// Like [`bug_is_caught`], for a bug that more than one checker is meant for: at least one of
/// `checkers` must report a violation.
async fn bug_is_caught_by_one_of(bug: &str, checkers: &[&str], faults: Option<Vec<Fault>>) {
    let mut cfg = config(7, BUG_RUN_S, bug);
    if let Some(f) = faults {
        cfg.faults = f;
    }
    let s = run_one(cfg).await;
    assert_caught(&s, bug, checkers);
}

/// Demands that at least one of `checkers` found `bug` in run `s`.
fn assert_caught(s: &RunSummary, bug: &str, checkers: &[&str]) {
    let invalid = s.invalid();
    assert!(
        invalid.iter().any(|n| checkers.contains(&n.as_str())),
        "bug {bug} was not caught by any of {checkers:?}; invalid: {invalid:?}; mode {:?}; folder {}",
        s.mode,
        s.dir.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_fence_check_loses_adds() {
    bug_is_caught("skip-fence", "set-lost-adds", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_reads_are_not_linearizable() {
    // A follower answering reads from its own state makes stale register reads and stale
    // counter reads alike; which model meets one first in a 20 s run depends on timing (on a
    // loaded machine one secure run showed only the counter's), so either checker counts.
    bug_is_caught_by_one_of(
        "local-reads",
        &["linearizable-register", "linearizable-counter"],
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_request_id_dedup_double_counts() {
    bug_is_caught("skip-dedup", "counter-bounds", None).await;
}

/// A node whose disk was wiped votes at once as the same voter: with the nodes that hold the
/// newest entries paused, it elects a lagging node, whose log then overwrites acknowledged
/// entries. Held longer than by default, so that the election happens inside the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_that_votes_loses_acknowledged_writes() {
    let mut cfg = config(7, BUG_RUN_S, "wiped-node-votes");
    cfg.faults = vec![Fault::WipeReplace];
    cfg.hold_ms = (3_000, 4_000);
    let s = run_one(cfg).await;
    // Which history shows the lost entries first depends on what the overwritten entries held.
    let meant = [
        "lock-minority-grants",
        "linearizable-register",
        "linearizable-counter",
        "set-lost-adds",
        "lock-token-unique",
        "counter-bounds",
    ];
    assert_caught(&s, "wiped-node-votes", &meant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granting_a_due_waiter_is_caught() {
    // The bug needs a holder's and a waiter's lease to fall due in the same entry. Under steady
    // load entries are milliseconds apart, so that is rare; a leader stall shorter than an
    // election makes the leader's first entry after it expire every lease that fell due
    // meanwhile. With the default mix (6 lock workers, a stall every 1-2.5 s) that happened
    // only a few times per 20 s run, and one CI run (seed 7, secure) met it zero times: a
    // control that misses by chance. So this run is shaped for the bug: lock workers only
    // (queues behind every stalled holder), and stalls back to back, which covers about 40%
    // of the run instead of 15%.
    let mut cfg = config(7, BUG_RUN_S, "grant-due-waiters");
    cfg.faults = vec![Fault::StallLeader];
    cfg.register_workers = 1;
    cfg.etcd_register_workers = 0;
    cfg.counter_workers = 1;
    cfg.lock_workers = 10;
    cfg.quiet_ms = (300, 700);
    let s = run_one(cfg).await;
    assert_caught(&s, "grant-due-waiters", &["lock-no-grant-to-expired-lease"]);
}
