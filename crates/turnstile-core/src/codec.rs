//! Versioned bincode encodings of entries and state, and the state digest.
//!
//! Entries are encoded as bare `Envelope`s (compatibility comes from the append-only command
//! enum). State, which changes shape more often, is framed with a format version so a newer
//! binary can migrate an older snapshot instead of misreading it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::command::{Command, Envelope};
use crate::state::State;

/// Version of the state encoding written today. 2 appends the auth state (`crate::auth`) after
/// the state; 3 appends the election campaigns (`crate::elections`) after that. An older
/// frame decodes with what it lacks empty.
pub const STATE_FORMAT_VERSION: u32 = 3;

/// Why bytes could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("decode failed: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    #[error("encode failed: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    #[error("state format version {found} is newer than this binary understands ({known})")]
    UnknownStateVersion { found: u32, known: u32 },
    #[error("{trailing} trailing bytes after the encoded value")]
    TrailingBytes { trailing: usize },
    #[error("{bytes} bytes is more than any decode accepts ({max})")]
    TooLarge { bytes: usize, max: usize },
}

#[derive(Serialize, Deserialize)]
struct StateFrame<T> {
    version: u32,
    state: T,
}

#[derive(Serialize, Deserialize)]
struct StateFrameV2<T, A> {
    version: u32,
    state: T,
    auth: A,
}

#[derive(Serialize, Deserialize)]
struct StateFrameV3<T, A, C> {
    version: u32,
    state: T,
    auth: A,
    campaigns: C,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// How many bytes of memory a decode may claim per byte of input. bincode claims the
/// in-memory size of every primitive it reads (8 for a `u64` that a varint stores in one byte)
/// and the full length of every string or byte buffer before it allocates it; no honest
/// encoding of our types claims more than 8 per input byte.
const CLAIM_BYTES_PER_INPUT_BYTE: usize = 8;

/// The limits a decode can run under, smallest first, each 16 times the one before. A decode
/// gets the smallest one at least [`CLAIM_BYTES_PER_INPUT_BYTE`] times its input, so bytes
/// claiming a string longer than the input allows fail with `LimitExceeded` instead of
/// allocating what they claim (10 hostile bytes claiming 2^45 once aborted a node).
const DECODE_CLAIM_BYTES_TIERS: [usize; 5] = [1 << 20, 1 << 24, 1 << 28, 1 << 32, 1 << 36];

/// Largest input any decode accepts: the largest tier's share. Nothing Turnstile writes
/// (entries, snapshots, backups, peer messages) comes near it.
pub const DECODE_INPUT_BYTES_MAX: usize = (1 << 36) / CLAIM_BYTES_PER_INPUT_BYTE;

/// Decodes the first value of `bytes` under the smallest claim limit that fits the input.
fn decode_prefix<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    let claim = bytes.len().saturating_mul(CLAIM_BYTES_PER_INPUT_BYTE);
    let tier = DECODE_CLAIM_BYTES_TIERS
        .iter()
        .position(|&t| claim <= t)
        .ok_or(CodecError::TooLarge {
            bytes: bytes.len(),
            max: DECODE_INPUT_BYTES_MAX,
        })?;
    let decoded = match tier {
        0 => bincode::serde::decode_from_slice(bytes, config().with_limit::<{ 1 << 20 }>()),
        1 => bincode::serde::decode_from_slice(bytes, config().with_limit::<{ 1 << 24 }>()),
        2 => bincode::serde::decode_from_slice(bytes, config().with_limit::<{ 1 << 28 }>()),
        3 => bincode::serde::decode_from_slice(bytes, config().with_limit::<{ 1 << 32 }>()),
        _ => bincode::serde::decode_from_slice(bytes, config().with_limit::<{ 1 << 36 }>()),
    };
    Ok(decoded?)
}

/// Encodes any serde value with Turnstile's bincode configuration.
///
/// Encoding our own plain-data types cannot fail (no maps with non-string keys issues, no
/// `serialize_any`); a failure here is a programming error, so it is surfaced as a typed error
/// rather than a panic for callers that can report it.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// Decodes a value and insists every byte was consumed. Safe on bytes from anywhere: what the
/// decode may allocate is bounded by a multiple of the input's length (see
/// [`CLAIM_BYTES_PER_INPUT_BYTE`]), so a hostile length prefix is an error, never an abort.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = decode_prefix::<T>(bytes)?;
    if used != bytes.len() {
        return Err(CodecError::TrailingBytes {
            trailing: bytes.len() - used,
        });
    }
    Ok(value)
}

/// Encodes a command for hashing. Infallible for our types (see [`encode`]).
pub fn encode_command(cmd: &Command) -> Vec<u8> {
    encode(cmd).unwrap_or_default()
}

pub fn encode_envelope(env: &Envelope) -> Result<Vec<u8>, CodecError> {
    encode(env)
}

pub fn decode_envelope(bytes: &[u8]) -> Result<Envelope, CodecError> {
    decode(bytes)
}

/// Encodes the state, framed with [`STATE_FORMAT_VERSION`].
pub fn encode_state(state: &State) -> Result<Vec<u8>, CodecError> {
    encode(&StateFrameV3 {
        version: STATE_FORMAT_VERSION,
        state,
        auth: &state.auth,
        campaigns: &state.campaigns,
    })
}

/// Decodes a framed state written by this or an older binary.
pub fn decode_state(bytes: &[u8]) -> Result<State, CodecError> {
    let (version, _): (u32, usize) = decode_prefix(bytes)?;
    if version > STATE_FORMAT_VERSION {
        return Err(CodecError::UnknownStateVersion {
            found: version,
            known: STATE_FORMAT_VERSION,
        });
    }
    let mut state = if version == 1 {
        let frame: StateFrame<State> = decode(bytes)?;
        frame.state
    } else if version == 2 {
        let frame: StateFrameV2<State, crate::auth::AuthState> = decode(bytes)?;
        let mut state = frame.state;
        state.auth = frame.auth;
        state
    } else {
        type Campaigns = crate::cow::Map<(String, u64), crate::elections::Campaign>;
        let frame: StateFrameV3<State, crate::auth::AuthState, Campaigns> = decode(bytes)?;
        let mut state = frame.state;
        state.auth = frame.auth;
        state.campaigns = frame.campaigns;
        state
    };
    state.rebuild_derived();
    Ok(state)
}

#[cfg(test)]
#[path = "codec_test.rs"]
mod codec_test;

/// SHA-256 of the encoded state, hex. Equal digests at equal `applied_index` mean the replicas
/// agree byte for byte.
pub fn state_digest(state: &State) -> String {
    let bytes = encode_state(state).unwrap_or_default();
    hex::encode(Sha256::digest(bytes))
}
