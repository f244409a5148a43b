//! Snapshots as their own files, outside sled (which never syncs items it puts in `blobs/`).
//!
//! A snapshot is written to a temporary file, fsynced, renamed into place, and then the
//! directory is fsynced, so after a crash either the old or the new snapshot is complete on
//! disk. Only the newest snapshot is kept. The same bytes travel to followers as
//! `SnapshotData`, so what a follower installs is exactly what the leader wrote.
//!
//! The bytes are framed: [`FRAME_MAGIC`], the SHA-256 of the body, then the body (the
//! bincode `SnapshotFile`). A flipped bit on disk or on the wire fails the hash, and the
//! snapshot is refused as [`SnapshotCorrupt`] rather than loaded as a different state: a
//! mangled string or number would otherwise decode fine and be served. Unframed bytes are the
//! format written before the frame existed, read as they are (no hash to check).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use turnstile_core::{codec, State};

use crate::types::{LogId, StoredMembership};

/// Distinguishes concurrent writers' temporary files.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Version of the snapshot file layout written today.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 1;
/// Starts framed snapshot bytes. An unframed body starts with its `format` (a bincode varint,
/// byte 0x01 today), never with this.
pub const FRAME_MAGIC: &[u8; 8] = b"TSNAP\x00\x00\x02";
/// Magic plus the SHA-256 of the body.
pub const FRAME_HEADER_BYTES: usize = 8 + 32;

/// Snapshot bytes whose hash does not match their body: they were changed after they were
/// written (a flipped bit on disk or in transit). Nothing in them is used.
#[derive(Debug, thiserror::Error)]
#[error("snapshot bytes are corrupt: their SHA-256 is {actual}, the frame says {expected}")]
pub struct SnapshotCorrupt {
    pub expected: String,
    pub actual: String,
}

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

    /// The framed bytes: magic, the body's SHA-256, the body.
    pub fn encode(&self) -> io::Result<Vec<u8>> {
        let body = codec::encode(self).map_err(io::Error::other)?;
        let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
        out.extend_from_slice(FRAME_MAGIC);
        out.extend_from_slice(&Sha256::digest(&body));
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes framed bytes after checking their hash (an `InvalidData` error wrapping
    /// [`SnapshotCorrupt`] if it fails), or unframed bytes as they are.
    pub fn decode(bytes: &[u8]) -> io::Result<SnapshotFile> {
        let body = Self::checked_body(bytes)?;
        let file: SnapshotFile =
            codec::decode(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SnapshotFile {
    /// Checks framed bytes' hash without decoding them (a follower does, before it hands a
    /// received snapshot to openraft, which takes an install error for a fatal one).
    pub fn verify(bytes: &[u8]) -> io::Result<()> {
        Self::checked_body(bytes).map(|_| ())
    }

    /// The body of framed bytes whose hash matches, or unframed bytes as they are.
    fn checked_body(bytes: &[u8]) -> io::Result<&[u8]> {
        let Some(framed) = bytes.strip_prefix(FRAME_MAGIC.as_slice()) else {
            return Ok(bytes);
        };
        let (expected, body) = framed.split_at_checked(32).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "snapshot frame cut short")
        })?;
        let actual = Sha256::digest(body);
        if actual.as_slice() != expected {
            let corrupt = SnapshotCorrupt {
                expected: hex(expected),
                actual: hex(&actual),
            };
            return Err(io::Error::new(io::ErrorKind::InvalidData, corrupt));
        }
        Ok(body)
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
        Ok(self.read_newest_at()?.map(|(_, bytes)| bytes))
    }

    /// The newest snapshot's path and bytes.
    pub fn read_newest_at(&self) -> io::Result<Option<(PathBuf, Vec<u8>)>> {
        match self.newest()? {
            Some(path) => {
                let bytes = fs::read(&path)?;
                Ok(Some((path, bytes)))
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> io::Result<SnapshotFile> {
        let state = State {
            cluster_id: Some("c0ffee".into()),
            ..State::default()
        };
        SnapshotFile::of(&state, None, StoredMembership::default())
    }

    #[test]
    fn every_flipped_bit_is_refused() -> io::Result<()> {
        let bytes = file()?.encode()?;
        assert!(bytes.starts_with(FRAME_MAGIC));
        for at in FRAME_MAGIC.len()..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            let e = SnapshotFile::decode(&flipped).err();
            let corrupt = e
                .as_ref()
                .and_then(|e| e.get_ref()?.downcast_ref::<SnapshotCorrupt>());
            assert!(corrupt.is_some(), "byte {at} flipped: {e:?}");
        }
        Ok(())
    }

    #[test]
    fn unframed_bytes_from_before_the_frame_still_load() -> io::Result<()> {
        let bytes = file()?.encode()?;
        let legacy = &bytes[FRAME_HEADER_BYTES..];
        let decoded = SnapshotFile::decode(legacy)?;
        let state = codec::decode_state(&decoded.state).map_err(io::Error::other)?;
        assert_eq!(state.cluster_id.as_deref(), Some("c0ffee"));
        Ok(())
    }
}
