//! Byte layout of the log store: big-endian index keys, bincode 2 (serde, standard config)
//! values, and the checks made before writing (entry size, consecutive indexes) and after
//! reading (every byte used).

use std::io;
use std::ops::Bound;
use std::ops::RangeBounds;

use openraft::entry::RaftEntry;
use openraft::RaftTypeConfig;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ENTRY_BYTES_MAX;

/// One encoded log entry: its sled key and value.
pub(super) type EncodedEntry = ([u8; 8], Vec<u8>);

/// Encodes entries in index order, refusing oversized entries and non-consecutive indexes
/// before anything is written.
pub(super) fn encode_entries<'a, C, I>(entries: I) -> io::Result<Vec<EncodedEntry>>
where
    C: RaftTypeConfig,
    I: IntoIterator<Item = &'a C::Entry>,
{
    let mut encoded = Vec::new();
    let mut prev_index: Option<u64> = None;
    for entry in entries {
        let index = entry.index();
        if let Some(prev) = prev_index {
            if prev + 1 != index {
                let msg = format!("append of non-consecutive entries {prev} then {index}");
                return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
            }
        }
        let value = encode(entry)?;
        if value.len() > ENTRY_BYTES_MAX {
            let msg = format!(
                "log entry {index} encodes to {} bytes, above ENTRY_BYTES_MAX {ENTRY_BYTES_MAX}",
                value.len()
            );
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        }
        encoded.push((index_key(index), value));
        prev_index = Some(index);
    }
    Ok(encoded)
}

/// Big-endian so that sled's byte order is index order.
pub(super) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

pub(super) fn key_index(key: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| invalid_data(format!("log key of {} bytes, expected 8", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// The sled key range of an index range; big-endian keys make the two orders agree.
pub(super) fn key_range<R: RangeBounds<u64>>(range: &R) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |bound: Bound<&u64>| match bound {
        Bound::Included(&i) => Bound::Included(index_key(i)),
        Bound::Excluded(&i) => Bound::Excluded(index_key(i)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

pub(super) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))
}

/// Decodes a value and checks that it used every byte, so a value of another type or layout is
/// caught here rather than later. Bounded like every decode (`turnstile_core::codec::decode`):
/// a damaged length prefix on disk is an error, not an allocation of what it claims.
pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    turnstile_core::codec::decode(bytes).map_err(|err| invalid_data(err.to_string()))
}

pub(super) fn invalid_data(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
