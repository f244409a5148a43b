//! Opening a log store's directory: sled's configuration, the wait for sled's lock, the
//! `blobs/` guard, and the one-time fsync of the files and directories sled never syncs.

use std::fs::File;
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use super::LogStoreError;
use super::SLED_SEGMENT_BYTES;

/// sled page cache. The log is read mostly at its tail (replication, apply), so a small cache
/// serves it; the state machine keeps its own data elsewhere.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// How long `open` waits for sled's file lock, and how often it retries (see `open_db`).
const OPEN_LOCK_WAIT_MS_MAX: u64 = 5_000;
const OPEN_LOCK_RETRY_MS: u64 = 10;

/// Refuses a store whose `<dir>/blobs/` holds anything (absent or empty is fine).
pub fn check_blobs_empty(dir: &Path) -> Result<(), LogStoreError> {
    let path = dir.join("blobs");
    let mut entries = match std::fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(LogStoreError::ReadBlobs { path, source }),
    };
    match entries.next() {
        None => Ok(()),
        Some(Ok(_)) => Err(LogStoreError::BlobsNotEmpty { path }),
        Some(Err(source)) => Err(LogStoreError::ReadBlobs { path, source }),
    }
}

/// Opens sled, waiting up to `OPEN_LOCK_WAIT_MS_MAX` for its lock on `<dir>/db`. After the last
/// handle of a previous store drops, sled's own thread pool can still hold the file for a moment
/// (buffer writes, segment truncation), so a restart in the same process may find it locked.
/// A store held by another live process is still refused, after the wait. Public for the
/// `log_sync_floor` example, which times appends through sled opened exactly so.
pub fn open_db(dir: &Path) -> Result<sled::Db, LogStoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .segment_size(SLED_SEGMENT_BYTES)
        // We flush (and fdatasync) explicitly; a background flush would only add non-durable
        // `sync_file_range` calls.
        .flush_every_ms(None);
    let deadline = Instant::now() + Duration::from_millis(OPEN_LOCK_WAIT_MS_MAX);
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(err) if is_lock_busy(&err) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(OPEN_LOCK_RETRY_MS));
            }
            Err(err) if is_lock_busy(&err) => {
                return Err(LogStoreError::Locked {
                    path: dir.to_path_buf(),
                });
            }
            Err(source) => {
                return Err(LogStoreError::OpenDb {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// sled 0.34.7 reports a held lock only as an `Other` io error with this message (config.rs);
/// the exact version pin keeps the match valid.
fn is_lock_busy(err: &sled::Error) -> bool {
    matches!(err, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// fsyncs the files sled created, once per open, and returns the handle the flusher fdatasyncs.
/// sled never syncs `conf` or any directory, and an fdatasync'd `db` whose directory entry is
/// lost in a power cut is lost with it. fdatasync acts on the inode, so a read-only handle works.
pub(super) fn sync_store_files(dir: &Path) -> Result<File, LogStoreError> {
    let open_and_sync = |path: PathBuf| {
        File::open(&path)
            .and_then(|file| file.sync_all().map(|()| file))
            .map_err(|source| LogStoreError::SyncFile { path, source })
    };
    let db_file = open_and_sync(dir.join("db"))?;
    open_and_sync(dir.join("conf"))?;
    open_and_sync(dir.to_path_buf())?;
    // sled may have just created `dir` itself; its entry lives in the parent.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        open_and_sync(parent.to_path_buf())?;
    }
    Ok(db_file)
}
