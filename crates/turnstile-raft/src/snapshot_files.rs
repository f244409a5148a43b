//! Snapshots as their own files, outside sled (which never syncs items it puts in `blobs/`).
//!
//! A snapshot is written to a temporary file, fsynced, renamed into place, and then the
//! directory is fsynced, so after a crash either the old or the new snapshot is complete on
//! disk. Only the newest snapshot is kept. The same bytes travel to followers as
//! `SnapshotData`, so what a follower installs is exactly what the leader wrote.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use turnstile_core::{codec, State};

use crate::types::{LogId, StoredMembership};

/// Distinguishes concurrent writers' temporary files.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Version of the snapshot file layout written today.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 1;

/// The decoded content of a snapshot file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotFile {
    pub format: u32,
    pub last_log_id: Option<LogId>,
    pub last_membership: StoredMembership,
    /// `turnstile_core::codec::encode_state` output (itself versioned).
    pub state: Vec<u8>,
}

impl SnapshotFile {
    /// The snapshot of `state` after applying `last_log_id`.
    pub fn of(
        state: &State,
        last_log_id: Option<LogId>,
        last_membership: StoredMembership,
    ) -> io::Result<SnapshotFile> {
        Ok(SnapshotFile {
            format: SNAPSHOT_FORMAT_VERSION,
            last_log_id,
            last_membership,
            state: codec::encode_state(state).map_err(io::Error::other)?,
        })
    }

    pub fn encode(&self) -> io::Result<Vec<u8>> {
        codec::encode(self).map_err(io::Error::other)
    }

    pub fn decode(bytes: &[u8]) -> io::Result<SnapshotFile> {
        let file: SnapshotFile =
            codec::decode(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if file.format > SNAPSHOT_FORMAT_VERSION {
            let msg = format!(
                "snapshot format {} is newer than {SNAPSHOT_FORMAT_VERSION}",
                file.format
            );
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        Ok(file)
    }
}

/// The directory holding the current snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotDir {
    dir: PathBuf,
}

impl SnapshotDir {
    /// Opens (creating) the directory and removes temporaries left by a crash mid-write.
    pub fn open(dir: &Path) -> io::Result<SnapshotDir> {
        fs::create_dir_all(dir)?;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                fs::remove_file(&path)?;
            }
        }
        Ok(SnapshotDir {
            dir: dir.to_path_buf(),
        })
    }

    /// Path of the newest complete snapshot, if any. Names sort by zero-padded index.
    fn newest(&self) -> io::Result<Option<PathBuf>> {
        let mut names: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "snap"))
            .collect();
        names.sort();
        Ok(names.pop())
    }

    /// Reads the newest snapshot's bytes.
    pub fn read_newest(&self) -> io::Result<Option<Vec<u8>>> {
        match self.newest()? {
            Some(path) => Ok(Some(fs::read(path)?)),
            None => Ok(None),
        }
    }

    /// Durably writes `bytes` as the snapshot ending at `last_index`, then drops every snapshot
    /// but the newest. openraft builds snapshots in a task of their own, so a build that copied
    /// the state before an `install_snapshot` can finish after it: its older file must not
    /// replace the installed one (the log below the installed snapshot may be purged already).
    /// So the newest name ever written survives any interleaving of writers, and an older
    /// snapshot written late is deleted at once.
    pub fn write(&self, last_index: u64, bytes: &[u8]) -> io::Result<()> {
        let name = format!("snapshot-{last_index:020}.snap");
        // A unique temp name: a snapshot build and an install at the same index may write
        // concurrently, and must not interleave bytes in one file.
        let seq = TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!("{name}.{seq}.tmp"));
        let path = self.dir.join(&name);
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        let Some(newest) = self.newest()? else {
            return Ok(());
        };
        for entry in fs::read_dir(&self.dir)? {
            let old = entry?.path();
            if old != newest && old.extension().is_some_and(|e| e == "snap") {
                // A concurrent writer may have removed it first.
                match fs::remove_file(old) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
