//! Unit tests of `SledLogStore`: the log contract (append, read, truncate, purge, state), vote
//! and committed round trips across reopen, group commit counters and histograms, the entry
//! size cap, the `blobs/` guard, and openraft's own storage suite. The crash test is in
//! `tests/log_store_reopen.rs`.

use std::io;
use std::path::Path;

use openraft::alias::EntryOf;
use openraft::alias::LogIdOf;
use openraft::alias::VoteOf;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::RaftLogReader;
use openraft::RaftTypeConfig;

use super::check_blobs_empty;
use super::LogStoreError;
use super::SledLogStore;
use super::SyncStats;
use super::ENTRY_BYTES_MAX;
use super::KEY_LAST_PURGED;

mod suite;

openraft::declare_raft_types!(TestConfig: D = String, R = String, Node = openraft::BasicNode);

// Classic-Raft leader ids serialize through a custom serde module; check they survive bincode.
openraft::declare_raft_types!(
    StdConfig: D = String, R = String, LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>
);

type Store = SledLogStore<TestConfig>;

fn entry(term: u64, index: u64, data: &str) -> EntryOf<TestConfig> {
    EntryOf::<TestConfig>::new_normal(log_id::<TestConfig>(term, 1, index), data.to_owned())
}

fn entries(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<EntryOf<TestConfig>> {
    indexes
        .map(|i| entry(term, i, &format!("cmd-{i}")))
        .collect()
}

/// Appends and waits for the durability callback.
async fn append_durable<C: RaftTypeConfig>(
    store: &mut SledLogStore<C>,
    batch: Vec<C::Entry>,
) -> io::Result<()>
where
    C::Entry: Clone,
{
    let (tx, rx) = C::oneshot();
    store.append(batch, IOFlushed::signal(tx)).await?;
    rx.await.map_err(|e| io::Error::other(e.to_string()))?
}

async fn indexes(store: &mut Store) -> io::Result<Vec<u64>> {
    Ok(store
        .try_get_log_entries(..)
        .await?
        .iter()
        .map(|e| e.index())
        .collect())
}

/// The stored indexes once the purge thread has deleted everything at or below `purged`
/// (polled: the deletion runs beside `purge`, see `purger.rs`).
async fn indexes_after_purge(store: &mut Store, purged: u64) -> anyhow::Result<Vec<u64>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The raw tree, not a read of the whole log: a read across keys being deleted can see a
    // hole, which openraft never meets (it reads only above `last_purged`).
    loop {
        let first = match store.shared.log.first()? {
            Some((key, _)) => Some(super::codec::key_index(&key)?),
            None => None,
        };
        if first.is_none_or(|first| first > purged) {
            return Ok(indexes(store).await?);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "entries at or below {purged} still stored from {first:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn log_state(store: &mut Store) -> io::Result<(Option<u64>, Option<u64>)> {
    let state = store.get_log_state().await?;
    let index = |id: Option<LogIdOf<TestConfig>>| id.map(|id| id.index());
    Ok((index(state.last_purged_log_id), index(state.last_log_id)))
}

#[tokio::test]
async fn append_read_truncate_purge() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    assert_eq!(log_state(&mut store).await?, (None, None));

    append_durable(&mut store, entries(1, 1..=4)).await?;
    append_durable(&mut store, entries(2, 5..=10)).await?;
    assert_eq!(indexes(&mut store).await?, (1..=10).collect::<Vec<_>>());
    let middle = store.try_get_log_entries(3..6).await?;
    assert_eq!(
        middle,
        vec![
            entry(1, 3, "cmd-3"),
            entry(1, 4, "cmd-4"),
            entry(2, 5, "cmd-5")
        ]
    );
    assert!(store.try_get_log_entries(11..).await?.is_empty());
    let inverted = (std::ops::Bound::Included(6), std::ops::Bound::Excluded(3));
    assert!(store.try_get_log_entries(inverted).await?.is_empty());
    let past_max = (
        std::ops::Bound::Excluded(u64::MAX),
        std::ops::Bound::Unbounded,
    );
    assert!(store.try_get_log_entries(past_max).await?.is_empty());
    assert_eq!(log_state(&mut store).await?, (None, Some(10)));

    store
        .truncate_after(Some(log_id::<TestConfig>(2, 1, 7)))
        .await?;
    assert_eq!(indexes(&mut store).await?, (1..=7).collect::<Vec<_>>());
    append_durable(&mut store, entries(3, 8..=9)).await?;
    assert_eq!(
        store.try_get_log_entries(8..=8).await?,
        vec![entry(3, 8, "cmd-8")]
    );

    store.purge(log_id::<TestConfig>(1, 1, 3)).await?;
    assert_eq!(log_state(&mut store).await?, (Some(3), Some(9)));
    assert_eq!(
        indexes_after_purge(&mut store, 3).await?,
        (4..=9).collect::<Vec<_>>()
    );

    // An empty log reports the last purged id as its last id, whether or not the purge
    // thread has deleted the entries yet.
    store.purge(log_id::<TestConfig>(3, 1, 9)).await?;
    assert_eq!(log_state(&mut store).await?, (Some(9), Some(9)));
    assert_eq!(indexes_after_purge(&mut store, 9).await?, Vec::<u64>::new());
    assert_eq!(log_state(&mut store).await?, (Some(9), Some(9)));

    store.truncate_after(None).await?;
    append_durable(&mut store, entries(4, 10..=10)).await?;
    assert_eq!(log_state(&mut store).await?, (Some(9), Some(10)));
    Ok(())
}

#[tokio::test]
async fn limited_read_returns_a_nonempty_prefix() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    // 120 entries of ~90 KiB exceed the 8 MiB read budget.
    let big = "x".repeat(90 * 1024);
    let batch: Vec<_> = (1..=120).map(|i| entry(1, i, &big)).collect();
    append_durable(&mut store, batch).await?;
    let got = store.limited_get_log_entries(1, 121).await?;
    assert!(
        !got.is_empty() && got.len() < 120,
        "got {} entries",
        got.len()
    );
    assert_eq!(got.first().map(|e| e.index()), Some(1));
    assert_eq!(store.try_get_log_entries(1..121).await?.len(), 120);
    Ok(())
}

/// Reads of the newest entries come from the in-memory tail; after a reopen, and below what the
/// tail holds, from sled; both give the same entries.
#[tokio::test]
async fn newest_entries_are_read_from_the_tail() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let mut store = Store::open(dir.path())?;
        append_durable(&mut store, entries(1, 1..=5)).await?;
        let got = store.try_get_log_entries(2..5).await?;
        assert_eq!(got.iter().map(|e| e.index()).collect::<Vec<_>>(), [2, 3, 4]);
        let stats = store.sync_stats();
        assert_eq!(
            (stats.entries_read_from_tail, stats.entries_read_from_tree),
            (3, 0)
        );
        store
            .truncate_after(Some(log_id::<TestConfig>(1, 1, 3)))
            .await?;
        append_durable(&mut store, entries(2, 4..=4)).await?;
        assert_eq!(
            store.limited_get_log_entries(3, 10).await?,
            vec![entry(1, 3, "cmd-3"), entry(2, 4, "cmd-4")]
        );
        assert_eq!(store.sync_stats().entries_read_from_tree, 0);
    }
    let mut store = Store::open(dir.path())?;
    assert_eq!(
        store.try_get_log_entries(3..).await?,
        vec![entry(1, 3, "cmd-3"), entry(2, 4, "cmd-4")]
    );
    let stats = store.sync_stats();
    assert_eq!(
        (stats.entries_read_from_tail, stats.entries_read_from_tree),
        (0, 2)
    );
    append_durable(&mut store, entries(2, 5..=6)).await?;
    assert_eq!(
        indexes(&mut store).await?,
        [1, 2, 3, 4, 5, 6],
        "a read from below the tail"
    );
    assert_eq!(store.try_get_log_entries(5..).await?.len(), 2);
    assert_eq!(store.sync_stats().entries_read_from_tail, 2);
    Ok(())
}

async fn vote_round_trip<C>(dir: &Path, vote: VoteOf<C>) -> anyhow::Result<()>
where
    C: RaftTypeConfig,
    C::Entry: Clone,
{
    {
        let mut store = SledLogStore::<C>::open(dir)?;
        assert_eq!(store.read_vote().await?, None);
        store.save_vote(&vote).await?;
        assert_eq!(store.read_vote().await?, Some(vote.clone()));
        assert!(
            store.sync_stats().fdatasyncs >= 1,
            "save_vote must fdatasync"
        );
    }
    // The last handle is gone, so the flusher has stopped and sled's lock is released.
    let mut store = SledLogStore::<C>::open(dir)?;
    assert_eq!(store.read_vote().await?, Some(vote));
    Ok(())
}

#[tokio::test]
async fn vote_survives_reopen() -> anyhow::Result<()> {
    let adv = tempfile::tempdir()?;
    vote_round_trip::<TestConfig>(adv.path(), VoteOf::<TestConfig>::new_committed(3, 2)).await?;
    let std = tempfile::tempdir()?;
    vote_round_trip::<StdConfig>(std.path(), VoteOf::<StdConfig>::new(5, 1)).await
}

#[tokio::test]
async fn committed_round_trip() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let committed = Some(log_id::<TestConfig>(2, 1, 7));
    {
        let mut store = Store::open(dir.path())?;
        assert_eq!(store.read_committed().await?, None);
        store.save_committed(committed).await?;
        assert_eq!(store.read_committed().await?, committed);
        store.save_committed(None).await?;
        assert_eq!(store.read_committed().await?, None);
        store.save_committed(committed).await?;
    }
    // Dropping the store ran a final sync, so even the unsynced write is back.
    let mut store = Store::open(dir.path())?;
    assert_eq!(store.read_committed().await?, committed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_acks_every_append() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    append_durable(&mut store, entries(1, 1..=1)).await?;
    let after_one = store.sync_stats();
    assert!(after_one.fdatasyncs >= 1);
    assert_eq!((after_one.append_batches, after_one.acked_batches), (1, 1));

    // Eight writers, each on its own index range (the store does not check order across
    // calls), racing into the same group commits.
    let mut tasks = Vec::new();
    for writer in 0..8u64 {
        let mut handle = store.clone();
        let first = 2 + writer * 4;
        tasks.push(tokio::spawn(async move {
            append_durable(&mut handle, entries(1, first..=first + 3)).await
        }));
    }
    for task in tasks {
        task.await??;
    }
    let stats = store.sync_stats();
    assert_eq!(stats.append_batches, 9);
    assert_eq!(stats.entries_appended, 1 + 8 * 4);
    assert_eq!(stats.acked_batches, stats.append_batches);
    // Every sync serves at least one queued append (no votes here), never one per entry.
    assert!(
        (1..=stats.append_batches).contains(&stats.fdatasyncs),
        "{stats:?}"
    );
    // The histograms describe the same syncs and appends as the counters (every callback
    // fires after its figures are recorded).
    let h = store.stats_handle().histograms();
    assert_eq!(h.sync_us.count(), stats.fdatasyncs);
    assert_eq!(h.sync_batch_entries.count(), stats.fdatasyncs);
    assert_eq!(h.sync_batch_entries.sum, stats.entries_appended);
    assert_eq!(h.append_durable_us.count(), stats.acked_batches);
    assert_eq!(indexes(&mut store).await?, (1..=33).collect::<Vec<_>>());
    Ok(())
}

#[tokio::test]
async fn oversized_entry_is_refused_and_nothing_is_written() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    let batch = vec![
        entry(1, 1, "small"),
        entry(1, 2, &"x".repeat(ENTRY_BYTES_MAX)),
    ];
    let (tx, rx) = TestConfig::oneshot();
    let err = store.append(batch, IOFlushed::signal(tx)).await.err();
    assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
    assert!(rx.await.is_err(), "a refused append never reports durable");
    assert_eq!(log_state(&mut store).await?, (None, None));
    assert_eq!(store.sync_stats(), SyncStats::default());
    Ok(())
}

#[tokio::test]
async fn non_consecutive_batch_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    let err = store
        .append(vec![entry(1, 1, "a"), entry(1, 3, "c")], IOFlushed::noop())
        .await
        .err();
    assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
    assert_eq!(log_state(&mut store).await?, (None, None));
    Ok(())
}

#[test]
fn blobs_check_refuses_a_nonempty_blob_dir() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    check_blobs_empty(dir.path())?;
    std::fs::create_dir(dir.path().join("blobs"))?;
    check_blobs_empty(dir.path())?;
    std::fs::write(dir.path().join("blobs").join("42"), b"unsynced")?;
    let refused = check_blobs_empty(dir.path());
    assert!(
        matches!(refused, Err(LogStoreError::BlobsNotEmpty { .. })),
        "{refused:?}"
    );
    let opened = Store::open(dir.path());
    assert!(
        matches!(opened, Err(LogStoreError::BlobsNotEmpty { .. })),
        "{opened:?}"
    );
    Ok(())
}

/// The cap is only useful if a sled leaf full of maximal entries stays below the blob threshold.
/// With sled's default segment size this workload puts files in `blobs/`.
#[tokio::test]
async fn maximal_entries_never_reach_blobs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = Store::open(dir.path())?;
    let big = "x".repeat(ENTRY_BYTES_MAX - 64);
    let mut next = 1u64;
    for round in 0..6u64 {
        let batch: Vec<_> = (next..next + 25)
            .map(|i| entry(1 + round, i, &big))
            .collect();
        append_durable(&mut store, batch).await?;
        // Truncate a few and purge some so sled splits, merges and rewrites leaves.
        let keep = next + 20;
        store
            .truncate_after(Some(log_id::<TestConfig>(1 + round, 1, keep)))
            .await?;
        store
            .purge(log_id::<TestConfig>(1 + round, 1, next + 5))
            .await?;
        next = keep + 1;
        check_blobs_empty(dir.path())?;
    }
    drop(store);
    check_blobs_empty(dir.path())?;
    let mut store = Store::open(dir.path())?;
    assert_eq!(log_state(&mut store).await?.1, Some(next - 1));
    Ok(())
}

#[tokio::test]
async fn open_finishes_an_interrupted_purge() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let mut store = Store::open(dir.path())?;
        append_durable(&mut store, entries(1, 1..=8)).await?;
        // What a crash between purge's synced `last_purged` and its deletion leaves behind.
        store.insert_meta(KEY_LAST_PURGED, &log_id::<TestConfig>(1, 1, 5))?;
    }
    let mut store = Store::open(dir.path())?;
    assert_eq!(indexes(&mut store).await?, vec![6, 7, 8]);
    assert_eq!(log_state(&mut store).await?, (Some(5), Some(8)));
    Ok(())
}

/// A purge of many entries returns once `last_purged` is durable; the deletion follows in
/// batches beside appends, which go on meanwhile, and the store reports the right state
/// throughout. Dropping the store mid-purge releases the directory, and `open` finishes.
#[tokio::test]
async fn a_large_purge_runs_beside_appends() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let total = 3 * super::purger::PURGE_KEYS_PER_BATCH as u64 + 17;
    {
        let mut store = Store::open(dir.path())?;
        for chunk in (1..=total).collect::<Vec<_>>().chunks(1_000) {
            let (first, last) = (chunk[0], chunk[chunk.len() - 1]);
            append_durable(&mut store, entries(1, first..=last)).await?;
        }
        store.purge(log_id::<TestConfig>(1, 1, total - 2)).await?;
        append_durable(&mut store, entries(2, total + 1..=total + 3)).await?;
        assert_eq!(
            log_state(&mut store).await?,
            (Some(total - 2), Some(total + 3))
        );
        assert_eq!(
            indexes_after_purge(&mut store, total - 2).await?,
            (total - 1..=total + 3).collect::<Vec<_>>()
        );
        // A second large purge, and the store dropped while it may still run.
        append_durable(&mut store, entries(2, total + 4..=total + 9_000)).await?;
        store
            .purge(log_id::<TestConfig>(2, 1, total + 8_990))
            .await?;
    }
    let mut store = Store::open(dir.path())?;
    assert_eq!(
        indexes(&mut store).await?,
        (total + 8_991..=total + 9_000).collect::<Vec<_>>()
    );
    assert_eq!(
        log_state(&mut store).await?,
        (Some(total + 8_990), Some(total + 9_000))
    );
    Ok(())
}

/// Two stores on one directory would interleave two logs; the second open must fail (after
/// `open` has waited out its lock timeout).
#[test]
fn second_open_of_a_live_store_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let _first = Store::open(dir.path())?;
    let second = Store::open(dir.path());
    assert!(
        matches!(second, Err(LogStoreError::Locked { .. })),
        "{second:?}"
    );
    Ok(())
}

#[test]
fn store_is_send_sync_and_clone() {
    fn assert_traits<T: Send + Sync + Clone + 'static>() {}
    assert_traits::<Store>();
}
