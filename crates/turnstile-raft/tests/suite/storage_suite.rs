//! Runs openraft's storage suite on the pair a node really uses, `SledLogStore<TypeConfig>` and
//! `StateMachineStore` (invariant checks on), each case in a fresh data dir laid out like a
//! node's (`raft-log/`, `snapshots/`). Then checks what the suite cannot see because it never
//! applies application entries: a snapshot of real state survives a reopen, installs on another
//! store byte for byte (same `state_digest`), a `.tmp` left by a crash mid-write is removed at
//! open instead of being mistaken for a snapshot, and a late, older snapshot write never
//! replaces a newer one.

use std::io;
use std::io::Cursor;
use std::path::Path;

use openraft::alias::EntryOf;
use openraft::entry::RaftEntry;
use openraft::storage::RaftStateMachine;
use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::Membership;
use openraft::RaftSnapshotBuilder;
use openraft::StorageError;
use tempfile::TempDir;
use turnstile_core::codec::state_digest;
use turnstile_core::Command;
use turnstile_core::Envelope;
use turnstile_raft::log_store::SledLogStore;
use turnstile_raft::snapshot_files::SnapshotDir;
use turnstile_raft::state_machine::StateMachineStore;
use turnstile_raft::types::LogId;
use turnstile_raft::types::Snapshot;
use turnstile_raft::types::StoredMembership;
use turnstile_raft::types::TypeConfig;

/// Where a node keeps its log and its snapshots inside its data dir.
const LOG_DIR: &str = "raft-log";
const SNAPSHOT_DIR: &str = "snapshots";

type LogStore = SledLogStore<TypeConfig>;

/// A fresh log store and state machine in a fresh data dir per suite case; the `TempDir` is the
/// guard the suite keeps alive until the case ends.
struct RealStores;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RealStores {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let read_err =
            |e: &dyn std::error::Error| StorageError::read(TypeConfig::err_from_string(e));
        let dir = tempfile::tempdir().map_err(|e| read_err(&e))?;
        let log = LogStore::open(&dir.path().join(LOG_DIR)).map_err(|e| read_err(&e))?;
        let sm = open_sm(dir.path()).map_err(|e| read_err(&e))?;
        Ok((dir, log, sm))
    }
}

#[tokio::test]
async fn openraft_storage_suite_on_real_stores() -> anyhow::Result<()> {
    Suite::test_all(RealStores).await?;
    Ok(())
}

fn open_sm(data_dir: &Path) -> io::Result<StateMachineStore> {
    StateMachineStore::open(&data_dir.join(SNAPSHOT_DIR), true)
}

fn normal(index: u64, command: Command) -> EntryOf<TypeConfig> {
    let env = Envelope {
        now_ms: 1_000 + index,
        request_id: Some(format!("req-{index}")),
        command,
    };
    EntryOf::<TypeConfig>::new_normal(log_id::<TypeConfig>(2, 1, index), env)
}

/// A log touching every kind of record: membership, cluster id, a lease holding a lock and a
/// key, a counter and a request record per entry. Returns the last log id.
fn history() -> (Vec<EntryOf<TypeConfig>>, LogId) {
    let membership = Membership::new_with_defaults(vec![[1, 2, 3].into()], []);
    let entries = vec![
        EntryOf::<TypeConfig>::new_blank(log_id::<TypeConfig>(1, 1, 1)),
        EntryOf::<TypeConfig>::new_membership(log_id::<TypeConfig>(1, 1, 2), membership),
        normal(
            3,
            Command::InitCluster {
                cluster_id: "c0ffee".into(),
            },
        ),
        normal(4, Command::LeaseGrant { ttl_ms: 60_000 }),
        normal(
            5,
            Command::LockAcquire {
                name: "jobs".into(),
                lease_id: 4,
            },
        ),
        normal(
            6,
            Command::KvPut {
                key: "owner".into(),
                value: "worker-7".into(),
                lease_id: Some(4),
                condition: None,
                fence: None,
            },
        ),
        normal(
            7,
            Command::CounterIncr {
                name: "hits".into(),
                by: 41,
            },
        ),
        normal(
            8,
            Command::CounterIncr {
                name: "hits".into(),
                by: 1,
            },
        ),
    ];
    (entries, log_id::<TypeConfig>(2, 1, 8))
}

async fn apply(sm: &mut StateMachineStore, entries: Vec<EntryOf<TypeConfig>>) -> io::Result<()> {
    sm.apply(futures::stream::iter(
        entries.into_iter().map(|e| Ok((e, None))),
    ))
    .await
}

/// What two stores must agree on: state digest, last applied, last membership.
async fn fingerprint(
    sm: &mut StateMachineStore,
) -> io::Result<(String, Option<LogId>, StoredMembership)> {
    let digest = state_digest(&sm.shared().read().state);
    let (applied, membership) = sm.applied_state().await?;
    Ok((digest, applied, membership))
}

async fn build_snapshot(sm: &mut StateMachineStore) -> io::Result<Snapshot> {
    sm.get_snapshot_builder().await.build_snapshot().await
}

/// Applies `history()` to a store in `data_dir`, builds a snapshot and returns it with the
/// store's fingerprint.
async fn snapshot_of_history(
    data_dir: &Path,
) -> anyhow::Result<(Snapshot, (String, Option<LogId>, StoredMembership))> {
    let mut sm = open_sm(data_dir)?;
    let (entries, last) = history();
    apply(&mut sm, entries).await?;
    let before = fingerprint(&mut sm).await?;
    assert_eq!(before.1, Some(last));
    assert_eq!(sm.shared().read().state.counters.get("hits"), Some(&42));
    assert!(sm.shared().read().state.locks.contains_key("jobs"));
    let snapshot = build_snapshot(&mut sm).await?;
    assert_eq!(snapshot.meta.last_log_id, Some(last));
    assert_eq!(snapshot.meta.last_membership, before.2);
    Ok((snapshot, before))
}

#[tokio::test]
async fn snapshot_survives_reopen() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (snapshot, before) = snapshot_of_history(dir.path()).await?;

    let mut reopened = open_sm(dir.path())?;
    assert_eq!(fingerprint(&mut reopened).await?, before);
    let current = reopened
        .get_current_snapshot()
        .await?
        .ok_or_else(|| anyhow::anyhow!("reopened store lost its snapshot"))?;
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(
        current.snapshot.into_inner(),
        snapshot.snapshot.into_inner()
    );
    Ok(())
}

#[tokio::test]
async fn installed_snapshot_matches_its_source() -> anyhow::Result<()> {
    let leader_dir = tempfile::tempdir()?;
    let (snapshot, leader) = snapshot_of_history(leader_dir.path()).await?;
    let bytes = snapshot.snapshot.into_inner();

    // The follower already has some other state; the snapshot must replace all of it.
    let follower_dir = tempfile::tempdir()?;
    let mut follower = open_sm(follower_dir.path())?;
    apply(
        &mut follower,
        vec![normal(
            1,
            Command::CounterIncr {
                name: "stale".into(),
                by: 5,
            },
        )],
    )
    .await?;
    follower
        .install_snapshot(&snapshot.meta, Cursor::new(bytes.clone()))
        .await?;
    assert_eq!(fingerprint(&mut follower).await?, leader);
    let current = follower
        .get_current_snapshot()
        .await?
        .ok_or_else(|| anyhow::anyhow!("installed snapshot is not the current one"))?;
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(current.snapshot.into_inner(), bytes);

    // The install was written to disk, not just applied in memory.
    drop(follower);
    let mut reopened = open_sm(follower_dir.path())?;
    assert_eq!(fingerprint(&mut reopened).await?, leader);
    Ok(())
}

#[tokio::test]
async fn leftover_tmp_is_removed_at_open() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, before) = snapshot_of_history(dir.path()).await?;

    // A crash mid-write of a NEWER snapshot leaves a partial temporary that sorts after the
    // complete one; it must neither be loaded nor survive the open.
    let snapshots = dir.path().join(SNAPSHOT_DIR);
    let tmp = snapshots.join(format!("snapshot-{:020}.snap.tmp", 99));
    std::fs::write(&tmp, b"torn write")?;

    let mut reopened = open_sm(dir.path())?;
    assert_eq!(fingerprint(&mut reopened).await?, before);
    assert!(!tmp.exists(), "{} survived open", tmp.display());
    let names: Vec<String> = std::fs::read_dir(&snapshots)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names, vec![format!("snapshot-{:020}.snap", 8)]);
    Ok(())
}

/// openraft builds snapshots in a spawned task, so a build that copied the state at index 3
/// can finish after a snapshot ending at 8 was installed. The late, older file must not replace
/// the installed one: the log below 8 may already be purged, and a restart from 3 would find a
/// hole.
#[test]
fn late_older_snapshot_does_not_replace_newer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let snapshots = SnapshotDir::open(dir.path())?;
    snapshots.write(8, b"installed at 8")?;
    snapshots.write(3, b"built at 3")?;
    assert_eq!(snapshots.read_newest()?, Some(b"installed at 8".to_vec()));
    let names: Vec<String> = std::fs::read_dir(dir.path())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names, vec![format!("snapshot-{:020}.snap", 8)]);
    Ok(())
}
