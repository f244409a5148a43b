//! Runs openraft's storage test suite against `SledLogStore`. The suite needs a state machine
//! too; `ToySm` is the smallest one that satisfies it (it records applied ids and membership and
//! snapshots nothing else), so every failure here points at the log store.

use std::io;
use std::io::Cursor;
use std::sync::Arc;

use futures::Stream;
use futures::TryStreamExt;
use openraft::alias::LogIdOf;
use openraft::alias::SnapshotMetaOf;
use openraft::alias::SnapshotOf;
use openraft::alias::StoredMembershipOf;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::storage::RaftStateMachine;
use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::type_config::TypeConfigExt;
use openraft::OptionalSend;
use openraft::RaftSnapshotBuilder;
use openraft::StorageError;
use tempfile::TempDir;
use tokio::sync::Mutex;

use super::Store;
use super::TestConfig;

#[derive(Default)]
struct ToyState {
    applied: Option<LogIdOf<TestConfig>>,
    membership: StoredMembershipOf<TestConfig>,
    snapshot: Option<SnapshotMetaOf<TestConfig>>,
}

#[derive(Clone, Default)]
struct ToySm(Arc<Mutex<ToyState>>);

impl RaftSnapshotBuilder<TestConfig> for ToySm {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<TestConfig, Self::SnapshotData>, io::Error> {
        let mut state = self.0.lock().await;
        let meta = SnapshotMetaOf::<TestConfig> {
            last_log_id: state.applied,
            last_membership: state.membership.clone(),
        };
        state.snapshot = Some(meta.clone());
        Ok(SnapshotOf::<TestConfig, _> {
            meta,
            snapshot: Cursor::new(Vec::new()),
        })
    }
}

impl RaftStateMachine<TestConfig> for ToySm {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TestConfig>>, StoredMembershipOf<TestConfig>), io::Error> {
        let state = self.0.lock().await;
        Ok((state.applied, state.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TestConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut state = self.0.lock().await;
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id();
            state.applied = Some(log_id);
            if let Some(membership) = entry.get_membership() {
                state.membership = StoredMembershipOf::<TestConfig>::new(Some(log_id), membership);
            }
            if let Some(responder) = responder {
                responder.send(String::new());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TestConfig>,
        _snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let mut state = self.0.lock().await;
        state.applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        state.snapshot = Some(meta.clone());
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TestConfig, Self::SnapshotData>>, io::Error> {
        let state = self.0.lock().await;
        Ok(state
            .snapshot
            .clone()
            .map(|meta| SnapshotOf::<TestConfig, _> {
                meta,
                snapshot: Cursor::new(Vec::new()),
            }))
    }
}

/// A fresh store in a fresh directory per suite case; the `TempDir` outlives the store.
struct Builder;

impl StoreBuilder<TestConfig, Store, ToySm, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, Store, ToySm), StorageError<TestConfig>> {
        let read_err =
            |e: &dyn std::error::Error| StorageError::read(TestConfig::err_from_string(e));
        let dir = tempfile::tempdir().map_err(|e| read_err(&e))?;
        let store = Store::open(dir.path()).map_err(|e| read_err(&e))?;
        Ok((dir, store, ToySm::default()))
    }
}

#[tokio::test]
async fn openraft_storage_suite() -> anyhow::Result<()> {
    Suite::test_all(Builder).await?;
    Ok(())
}
