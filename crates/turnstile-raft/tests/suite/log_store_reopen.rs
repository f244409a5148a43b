//! Proves that what `SledLogStore` acknowledges survives an unclean exit. The test re-runs its
//! own binary as a child that saves a vote, appends entries, waits for the durability callbacks,
//! prints `ACKED`, appends a few more without waiting, and calls `process::exit` so no
//! destructor flushes anything. The parent reopens the directory and finds the vote and every
//! acknowledged entry, with no hole.
//!
//! A process exit keeps the OS page cache, so this checks sled-level durability (explicit
//! flush before the ack); the fdatasync itself is checked by counting it.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use openraft::alias::EntryOf;
use openraft::alias::VoteOf;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::RaftLogReader;
use turnstile_raft::log_store::SledLogStore;

openraft::declare_raft_types!(TestConfig: D = String, R = String, Node = openraft::BasicNode);

/// Set in the child's environment to the store directory it must use.
const CHILD_DIR_ENV: &str = "TURNSTILE_LOG_STORE_REOPEN_CHILD_DIR";
/// The test's name as the harness knows it: its module path within the test binary.
fn test_name() -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, m)| m)
        .to_string();
    format!("{module}::acked_vote_and_entries_survive_unclean_exit")
}
/// Acknowledged entries: `BATCHES` appends of `BATCH_ENTRIES` each.
const BATCHES: u64 = 20;
const BATCH_ENTRIES: u64 = 5;
const ACKED_LAST_INDEX: u64 = BATCHES * BATCH_ENTRIES;
/// Entries appended after `ACKED`, never waited for: they may or may not survive.
const UNACKED_ENTRIES: u64 = 7;

fn vote() -> VoteOf<TestConfig> {
    VoteOf::<TestConfig>::new_committed(7, 3)
}

fn entry(index: u64) -> EntryOf<TestConfig> {
    EntryOf::<TestConfig>::new_normal(log_id::<TestConfig>(2, 3, index), format!("cmd-{index}"))
}

#[test]
fn acked_vote_and_entries_survive_unclean_exit() -> anyhow::Result<()> {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        run_child(Path::new(&dir))?;
        unreachable!("the child exits inside run_child");
    }
    let dir = tempfile::tempdir()?;
    let output = Command::new(std::env::current_exe()?)
        .args(["--exact", &test_name(), "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("ACKED"),
        "child never acked: {stdout}\n{stderr}"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut store = SledLogStore::<TestConfig>::open(dir.path())?;
        assert_eq!(store.read_vote().await?, Some(vote()));
        let entries = store.try_get_log_entries(..).await?;
        let indexes: Vec<u64> = entries.iter().map(|e| e.index()).collect();
        // A prefix of everything appended, no hole, and at least every acknowledged entry.
        let last = indexes.last().copied().unwrap_or(0);
        assert_eq!(indexes, (1..=last).collect::<Vec<_>>());
        assert!(
            last >= ACKED_LAST_INDEX,
            "acked up to {ACKED_LAST_INDEX}, found {last}"
        );
        assert!(last <= ACKED_LAST_INDEX + UNACKED_ENTRIES);
        assert!(entries.iter().all(|e| *e == entry(e.index())));
        anyhow::Ok(())
    })
}

/// Never returns: ends with `process::exit(0)` while the store is still open.
fn run_child(dir: &Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut store = SledLogStore::<TestConfig>::open(dir)?;
        store.save_vote(&vote()).await?;
        let mut acks = Vec::new();
        for batch in 0..BATCHES {
            let first = 1 + batch * BATCH_ENTRIES;
            let (tx, rx) = TestConfig::oneshot();
            let batch_entries = (first..first + BATCH_ENTRIES).map(entry);
            store.append(batch_entries, IOFlushed::signal(tx)).await?;
            acks.push(rx);
        }
        for ack in acks {
            ack.await??;
        }
        let stats = store.sync_stats();
        assert!(
            stats.fdatasyncs >= 2,
            "vote and appends must be fdatasync'd: {stats:?}"
        );
        assert_eq!(stats.acked_batches, BATCHES);
        println!("ACKED {stats:?}");
        std::io::stdout().flush()?;

        let unacked = (ACKED_LAST_INDEX + 1..=ACKED_LAST_INDEX + UNACKED_ENTRIES).map(entry);
        store.append(unacked, IOFlushed::noop()).await?;
        // No destructor may run: dropping the last handle would flush and sync on the way out.
        std::mem::forget(store);
        anyhow::Ok(())
    })?;
    std::process::exit(0)
}
