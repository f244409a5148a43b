//! Backup files and restoring a new cluster from one.
//!
//! A backup is the leader's snapshot (state, last applied log id, membership) plus the source
//! cluster's id. `restore` seeds one node's empty data dir from it for a **new** cluster:
//!
//! - a fresh `cluster_id` goes into the state and the identity file, so a token of the old
//!   cluster is refused by resources pinned to the new one (and vice versa);
//! - the log continues at the backup's last index, so the next grant's token is above every
//!   token the backup knew;
//! - the membership is the new `--initial-cluster`, all voters;
//! - the snapshot's log id is re-stamped with term 0: the new cluster's first election is
//!   term 1, and its entries must sort after the restored snapshot.
//!
//! Every node of the new cluster is restored from the same file with the same cluster id and
//! the same `--initial-cluster`, then started with `turnstile serve` as usual.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Membership};
use serde::{Deserialize, Serialize};
use turnstile_core::codec;
use turnstile_raft::log_store::{LogStoreError, SledLogStore};
use turnstile_raft::snapshot_files::{SnapshotDir, SnapshotFile};
use turnstile_raft::types::{StoredMembership, TypeConfig};

use crate::identity::{self, Identity, IdentityError, Phase};
use crate::node::{LOG_DIR, SNAPSHOT_DIR};

/// Version of the backup file layout written today.
pub const BACKUP_FORMAT_VERSION: u32 = 1;
/// Magic prefix, so `restore` refuses a file that is not a backup before decoding it.
const MAGIC: &[u8; 8] = b"TSBACKUP";

/// The content of a backup file (after [`MAGIC`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupFile {
    pub format: u32,
    /// The cluster the backup was taken from.
    pub source_cluster_id: Option<String>,
    pub snapshot: SnapshotFile,
}

/// Why a restore was refused or failed. Nothing is left half-written in a dir that was not
/// empty; a failed restore into an empty dir leaves files to delete before retrying.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{path} is not a Turnstile backup file")]
    NotABackup { path: PathBuf },
    #[error("backup file {path}: {source}")]
    Corrupt { path: PathBuf, source: io::Error },
    #[error("backup format {found} is newer than this binary's {BACKUP_FORMAT_VERSION}")]
    NewerFormat { found: u32 },
    #[error("data dir {dir} is not empty; restore only into a new, empty data dir")]
    DirNotEmpty { dir: PathBuf },
    #[error("the new cluster id must differ from the backup's ({0}): tokens of the two clusters must never be confused")]
    SameClusterId(String),
    #[error("node {id} is not in --initial-cluster")]
    NotInCluster { id: u64 },
    #[error("--initial-cluster: {0}")]
    Membership(String),
    #[error("backup has no applied entries; there is nothing to restore")]
    Empty,
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("log store: {0}")]
    LogStore(#[from] LogStoreError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl BackupFile {
    pub fn new(source_cluster_id: Option<String>, snapshot: SnapshotFile) -> BackupFile {
        BackupFile {
            format: BACKUP_FORMAT_VERSION,
            source_cluster_id,
            snapshot,
        }
    }

    pub fn encode(&self) -> io::Result<Vec<u8>> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(codec::encode(self).map_err(io::Error::other)?);
        Ok(bytes)
    }

    pub fn read(path: &Path) -> Result<BackupFile, RestoreError> {
        let bytes = std::fs::read(path).map_err(|source| RestoreError::Corrupt {
            path: path.into(),
            source,
        })?;
        let Some(body) = bytes.strip_prefix(MAGIC.as_slice()) else {
            return Err(RestoreError::NotABackup { path: path.into() });
        };
        let file: BackupFile = codec::decode(body).map_err(|e| RestoreError::Corrupt {
            path: path.into(),
            source: io::Error::new(io::ErrorKind::InvalidData, e),
        })?;
        if file.format > BACKUP_FORMAT_VERSION {
            return Err(RestoreError::NewerFormat { found: file.format });
        }
        Ok(file)
    }

    /// The last log index the backup holds (every token it knows is at or below it).
    pub fn last_index(&self) -> u64 {
        self.snapshot.last_log_id.map_or(0, |l| l.index)
    }
}

/// What `restore` needs to seed one node.
#[derive(Debug, Clone)]
pub struct RestorePlan {
    pub backup: PathBuf,
    pub data_dir: PathBuf,
    pub node_id: u64,
    pub initial_cluster: BTreeMap<u64, SocketAddr>,
    /// The new cluster's id; the same on every node of the new cluster.
    pub cluster_id: String,
}

/// What a restore wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub last_index: u64,
    pub source_cluster_id: Option<String>,
    pub cluster_id: String,
}

/// A fresh cluster id (128 random bits, hex), as a new cluster would get.
pub fn new_cluster_id() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Seeds `plan.data_dir` (absent or empty) from the backup for a new cluster.
pub async fn restore(plan: &RestorePlan) -> Result<Restored, RestoreError> {
    let backup = BackupFile::read(&plan.backup)?;
    if backup.source_cluster_id.as_deref() == Some(plan.cluster_id.as_str()) {
        return Err(RestoreError::SameClusterId(plan.cluster_id.clone()));
    }
    if !plan.initial_cluster.contains_key(&plan.node_id) {
        return Err(RestoreError::NotInCluster { id: plan.node_id });
    }
    ensure_empty(&plan.data_dir)?;
    let corrupt = |source: io::Error| RestoreError::Corrupt {
        path: plan.backup.clone(),
        source,
    };
    let mut state = codec::decode_state(&backup.snapshot.state)
        .map_err(|e| corrupt(io::Error::new(io::ErrorKind::InvalidData, e)))?;
    let Some(mut last_log_id) = backup.snapshot.last_log_id else {
        return Err(RestoreError::Empty);
    };
    last_log_id.leader_id.term = 0;
    state.cluster_id = Some(plan.cluster_id.clone());

    let voters: BTreeSet<u64> = plan.initial_cluster.keys().copied().collect();
    let nodes: BTreeMap<u64, BasicNode> = plan
        .initial_cluster
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr.to_string())))
        .collect();
    let membership = Membership::new(vec![voters], nodes)
        .map_err(|e| RestoreError::Membership(e.to_string()))?;
    let stored = StoredMembership::new(Some(last_log_id), membership);
    let snapshot = SnapshotFile::of(&state, Some(last_log_id), stored).map_err(corrupt)?;

    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RestoreError::Io { path, source }
    };
    let snap_dir = plan.data_dir.join(SNAPSHOT_DIR);
    let bytes = snapshot.encode().map_err(io_err(&snap_dir))?;
    SnapshotDir::open(&snap_dir)
        .and_then(|d| d.write(last_log_id.index, &bytes))
        .map_err(io_err(&snap_dir))?;
    // The log starts behind the snapshot: everything up to its index counts as purged, so
    // openraft sees a log that ends where the snapshot does.
    let mut log = SledLogStore::<TypeConfig>::open(&plan.data_dir.join(LOG_DIR))?;
    log.purge(last_log_id)
        .await
        .map_err(io_err(&plan.data_dir.join(LOG_DIR)))?;
    drop(log);
    identity::store(
        &plan.data_dir,
        &Identity {
            node_id: plan.node_id,
            cluster_id: Some(plan.cluster_id.clone()),
            phase: Phase::Member,
        },
    )?;
    Ok(Restored {
        last_index: last_log_id.index,
        source_cluster_id: backup.source_cluster_id,
        cluster_id: plan.cluster_id.clone(),
    })
}

/// Creates `dir` if absent; refuses one with anything in it.
fn ensure_empty(dir: &Path) -> Result<(), RestoreError> {
    let io_err = |source| RestoreError::Io {
        path: dir.into(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io_err)?;
    if std::fs::read_dir(dir).map_err(io_err)?.next().is_some() {
        return Err(RestoreError::DirNotEmpty { dir: dir.into() });
    }
    Ok(())
}
