//! The data dir's free space, judged before the node takes on more to write. A node whose
//! filesystem has less than `--disk-reserve-mb` free refuses client writes (as the leader) and
//! new log entries (as a follower) with a clear error, rather than running into `ENOSPC` inside
//! sled, where a failed write stops the node (`turnstile_raft::log_store::SyncFailure`). When
//! space is freed it takes writes again by itself: no restart, no crash loop.
//!
//! The reserve is what the node may still need after the check: the entries in flight, the
//! next snapshot (about the state's size) and sled's own bookkeeping. Internal entries (lease
//! expiry, ticks, acks, aborted waits, the cluster id) are not refused: they are small, and
//! expiry must go on releasing locks whatever the disk.
//!
//! A check that found enough space stands for [`ENOUGH_STANDS_MS`]: a `statvfs(2)` per client
//! write was a path walk and a syscall on every request (about 15,000 a second on a busy
//! leader). A refusal is never kept, so a node takes writes again as soon as space is freed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use turnstile_core::Command;

/// Bytes in a MiB, for `--disk-reserve-mb`.
const MIB: u64 = 1024 * 1024;
/// How long a check that found at least the reserve free stands. What a leader appends in
/// that time is a small part of any reserve sized as docs/operations.md says (a snapshot and a
/// few seconds of writes).
pub const ENOUGH_STANDS_MS: u64 = 50;

/// Why the node refuses to write more.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiskSpaceError {
    #[error(
        "node {node_id}'s data dir has {free_mib} MiB free, below its reserve of {reserve_mib} \
         MiB (--disk-reserve-mb): writes are refused until space is freed (docs/operations.md, \
         \"Disk faults\")"
    )]
    Low {
        node_id: u64,
        free_mib: u64,
        reserve_mib: u64,
    },
    #[error("cannot read node {node_id}'s free disk space: {reason}")]
    Unreadable { node_id: u64, reason: String },
}

/// Free space of one data dir against its reserve.
#[derive(Debug)]
pub struct DiskSpace {
    node_id: u64,
    dir: PathBuf,
    reserve_bytes: u64,
    /// What `enough_until_us` counts from.
    started: Instant,
    /// Microseconds after `started` until which the last check's "enough" stands; 0: none.
    enough_until_us: AtomicU64,
}

impl DiskSpace {
    /// `reserve_mib` 0 turns the check off.
    pub fn new(node_id: u64, dir: &Path, reserve_mib: u64) -> DiskSpace {
        DiskSpace {
            node_id,
            dir: dir.to_path_buf(),
            reserve_bytes: reserve_mib.saturating_mul(MIB),
            started: Instant::now(),
            enough_until_us: AtomicU64::new(0),
        }
    }

    /// `Ok` when at least the reserve is free (or the check is off): one `statvfs(2)`, unless
    /// one found enough within the last [`ENOUGH_STANDS_MS`].
    pub fn check(&self) -> Result<(), DiskSpaceError> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), DiskSpaceError> {
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        let now_us = u64::try_from(now.saturating_duration_since(self.started).as_micros())
            .unwrap_or(u64::MAX);
        if now_us < self.enough_until_us.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.statvfs()?;
        let until_us = now_us.saturating_add(ENOUGH_STANDS_MS * 1_000);
        self.enough_until_us.fetch_max(until_us, Ordering::Relaxed);
        Ok(())
    }

    fn statvfs(&self) -> Result<(), DiskSpaceError> {
        let stat =
            nix::sys::statvfs::statvfs(&self.dir).map_err(|e| DiskSpaceError::Unreadable {
                node_id: self.node_id,
                reason: e.to_string(),
            })?;
        // Blocks available to an unprivileged user, in fragment-size units.
        let free_bytes = stat.blocks_available().saturating_mul(stat.fragment_size());
        if free_bytes >= self.reserve_bytes {
            return Ok(());
        }
        Err(DiskSpaceError::Low {
            node_id: self.node_id,
            free_mib: free_bytes / MIB,
            reserve_mib: self.reserve_bytes / MIB,
        })
    }

    /// [`DiskSpace::check`] for `command`, which passes whatever the disk when it is one of
    /// the node's own small entries that keep the cluster going (see the module comment).
    pub fn check_for(&self, command: &Command) -> Result<(), DiskSpaceError> {
        match command {
            Command::Tick
            | Command::InitCluster { .. }
            | Command::Expire { .. }
            | Command::AbortWaiter { .. }
            | Command::Ack { .. } => Ok(()),
            _ => self.check(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_at_zero_and_refuses_past_the_free_space() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(DiskSpace::new(1, dir.path(), 0).check(), Ok(()));
        assert_eq!(DiskSpace::new(1, dir.path(), 1).check(), Ok(()));
        // No filesystem here has an exbibyte free.
        let huge = DiskSpace::new(7, dir.path(), u64::MAX / MIB);
        let Err(DiskSpaceError::Low { node_id, .. }) = huge.check() else {
            panic!("an exbibyte reserve must be refused");
        };
        assert_eq!(node_id, 7);
        assert_eq!(huge.check_for(&Command::Tick), Ok(()));
        let missing = DiskSpace::new(1, &dir.path().join("gone"), 1);
        assert!(matches!(
            missing.check(),
            Err(DiskSpaceError::Unreadable { .. })
        ));
    }

    /// "Enough" stands for its window and no longer; a refusal stands for nothing, so the
    /// check that follows the fix sees it.
    #[test]
    fn enough_stands_for_its_window_and_a_refusal_not_at_all() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("data");
        let space = DiskSpace::new(1, &dir, 1);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        assert!(matches!(
            space.check_at(at(0)),
            Err(DiskSpaceError::Unreadable { .. })
        ));
        std::fs::create_dir(&dir).expect("create the data dir");
        assert_eq!(space.check_at(at(0)), Ok(()), "a refusal was kept");
        std::fs::remove_dir(&dir).expect("remove the data dir");
        assert_eq!(
            space.check_at(at(ENOUGH_STANDS_MS - 1)),
            Ok(()),
            "enough did not stand for its window"
        );
        assert!(matches!(
            space.check_at(at(ENOUGH_STANDS_MS + 1)),
            Err(DiskSpaceError::Unreadable { .. })
        ));
    }
}
