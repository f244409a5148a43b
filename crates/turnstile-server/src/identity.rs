//! The node's identity file, `<data-dir>/identity.json`: which node this data dir belongs to,
//! the cluster it joined, and where it stands in joining.
//!
//! The phase decides whether the node may vote. An empty node that votes can elect a leader
//! lacking committed entries (acknowledged grants lost), so a node votes only when it formed
//! the cluster (`Forming`/`Member`) or was explicitly re-admitted after a membership change.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name inside the data dir.
pub const IDENTITY_FILE: &str = "identity.json";

/// Where a node stands in joining its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Empty data dir; deciding whether to form a new cluster. Does not vote or serve.
    Empty,
    /// Committed to forming the cluster in `--initial-cluster`; votes; serves once a member.
    Forming,
    /// Part of the cluster: votes (if a voter) and serves.
    Member,
    /// Empty node of an existing cluster: waits to be re-added. Does not vote, serve, or
    /// accept log entries (a leader that still counts it as a voter must not see its log
    /// "revert" to empty).
    Awaiting,
    /// Re-added as a learner: catches up from the leader, but does not vote or serve until
    /// the leader admits it during promotion.
    Learning,
}

impl Phase {
    /// True if the node may grant votes.
    pub fn may_vote(self) -> bool {
        matches!(self, Phase::Forming | Phase::Member)
    }

    /// True if the node may accept log entries and snapshots from a leader.
    pub fn may_replicate(self) -> bool {
        matches!(self, Phase::Forming | Phase::Member | Phase::Learning)
    }

    /// True if the node answers client requests.
    pub fn may_serve(self) -> bool {
        matches!(self, Phase::Forming | Phase::Member)
    }
}

/// The content of `identity.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub node_id: u64,
    pub cluster_id: Option<String>,
    pub phase: Phase,
}

/// Why the data dir cannot be used by this node.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("data dir {dir} belongs to node {found}, not node {expected}")]
    WrongNode {
        dir: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("data dir {dir} has Raft state but no {IDENTITY_FILE}; refusing to guess whose it is")]
    MissingIdentity { dir: PathBuf },
    #[error("cannot read or write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is corrupt: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Loads the identity, if the file exists, and checks it names `node_id`.
pub fn load(dir: &Path, node_id: u64) -> Result<Option<Identity>, IdentityError> {
    let path = dir.join(IDENTITY_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(IdentityError::Io { path, source }),
    };
    let identity: Identity =
        serde_json::from_slice(&bytes).map_err(|source| IdentityError::Corrupt { path, source })?;
    if identity.node_id != node_id {
        return Err(IdentityError::WrongNode {
            dir: dir.into(),
            found: identity.node_id,
            expected: node_id,
        });
    }
    Ok(Some(identity))
}

/// Durably replaces the identity file (write temp, fsync, rename, fsync dir).
pub fn store(dir: &Path, identity: &Identity) -> Result<(), IdentityError> {
    let path = dir.join(IDENTITY_FILE);
    let io_err = |source| IdentityError::Io {
        path: path.clone(),
        source,
    };
    // One store at a time in this process: two at once would share the temp file, and the
    // second rename would find it gone ("No such file or directory"). A fixed temp name (not
    // one per call) so a crash mid-store leaves nothing the next store does not overwrite.
    static STORING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _storing = STORING.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(identity).map_err(|source| IdentityError::Corrupt {
        path: path.clone(),
        source,
    })?;
    let mut f = File::create(&tmp).map_err(io_err)?;
    f.write_all(&bytes).map_err(io_err)?;
    f.sync_all().map_err(io_err)?;
    fs::rename(&tmp, &path).map_err(io_err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_stores_all_succeed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let phases = [Phase::Learning, Phase::Member];
        std::thread::scope(|s| {
            for phase in phases {
                let dir = dir.path();
                s.spawn(move || {
                    for _ in 0..200 {
                        let id = Identity {
                            node_id: 1,
                            cluster_id: Some("c".into()),
                            phase,
                        };
                        store(dir, &id).expect("a store racing another must succeed");
                    }
                });
            }
        });
        let last = load(dir.path(), 1).expect("load").expect("stored");
        assert!(phases.contains(&last.phase), "{last:?}");
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .expect("read dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n != IDENTITY_FILE)
            .collect();
        assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    }

    #[test]
    fn round_trip_and_wrong_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(load(dir.path(), 1).expect("load"), None);
        let id = Identity {
            node_id: 1,
            cluster_id: Some("c".into()),
            phase: Phase::Member,
        };
        store(dir.path(), &id).expect("store");
        assert_eq!(load(dir.path(), 1).expect("load"), Some(id));
        assert!(matches!(
            load(dir.path(), 2),
            Err(IdentityError::WrongNode {
                found: 1,
                expected: 2,
                ..
            })
        ));
    }
}
