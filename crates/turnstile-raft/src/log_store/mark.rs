//! The sync mark: a small file beside sled's, saying how far the committed index had reached
//! at a log sync that succeeded.
//!
//! Why: sled recovers a prefix of its log after a crash, and takes a message whose CRC fails
//! for the end of the log, silently dropping every write after it. A flipped byte in an old,
//! synced part of the log would make the node forget entries and votes it had acknowledged,
//! and it would rejoin as if nothing were wrong (measured: a flip in the middle of a log of
//! 300 writes reopened at committed index 151). A crash only tears what was not synced yet, so
//! a store that reopens with its committed index below the mark lost synced writes: it is
//! refused at open ([`super::LogStoreError::LostSynced`]).
//!
//! The flusher writes the mark at most once per [`MARK_INTERVAL_MS`], after a successful sync,
//! with the committed index it read *before* that sync: the mark never claims more than is on
//! disk, so a torn tail never trips it. Limit: damage to the writes of the last interval
//! before a crash is not told apart from a torn tail.
//!
//! The file is written aside, fsynced and renamed over. The directory is not fsynced: if the
//! rename is lost, the older (lower) mark stays, which can only miss damage, never invent it.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// The mark's file name, in the log store's directory (sled leaves other files alone).
pub const MARK_FILE: &str = "turnstile-sync-mark";
/// Longest time between marks while the log is being written.
pub const MARK_INTERVAL_MS: u64 = 1_000;

/// The committed index of the last mark, if a mark was ever written (stores made before the
/// mark existed have none).
pub fn read(dir: &Path) -> io::Result<Option<u64>> {
    let text = match std::fs::read_to_string(dir.join(MARK_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let index = text
        .trim()
        .strip_prefix("committed ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{MARK_FILE} holds {text:?}, not \"committed N\""),
            )
        })?;
    Ok(Some(index))
}

/// Records that everything up to committed index `committed` is synced.
pub fn write(dir: &Path, committed: u64) -> io::Result<()> {
    let tmp = dir.join(format!("{MARK_FILE}.tmp"));
    let mut file = File::create(&tmp)?;
    writeln!(file, "committed {committed}")?;
    file.sync_data()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(MARK_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_a_missing_one_is_none() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        assert_eq!(read(dir.path())?, None);
        write(dir.path(), 42)?;
        write(dir.path(), 43)?;
        assert_eq!(read(dir.path())?, Some(43));
        std::fs::write(dir.path().join(MARK_FILE), "garbage")?;
        assert!(read(dir.path()).is_err());
        Ok(())
    }
}
