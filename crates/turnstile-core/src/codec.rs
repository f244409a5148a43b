//! Versioned bincode encodings of entries and state, and the state digest.
//!
//! Entries are encoded as bare `Envelope`s (compatibility comes from the append-only command
//! enum). State, which changes shape more often, is framed with a format version so a newer
//! binary can migrate an older snapshot instead of misreading it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::command::{Command, Envelope};
use crate::state::State;

/// Version of the state encoding written today.
pub const STATE_FORMAT_VERSION: u32 = 1;

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
}

#[derive(Serialize, Deserialize)]
struct StateFrame<T> {
    version: u32,
    state: T,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes any serde value with Turnstile's bincode configuration.
///
/// Encoding our own plain-data types cannot fail (no maps with non-string keys issues, no
/// `serialize_any`); a failure here is a programming error, so it is surfaced as a typed error
/// rather than a panic for callers that can report it.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// Decodes a value and insists every byte was consumed.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())?;
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
    encode(&StateFrame {
        version: STATE_FORMAT_VERSION,
        state,
    })
}

/// Decodes a framed state written by this or an older binary.
pub fn decode_state(bytes: &[u8]) -> Result<State, CodecError> {
    let (version, _): (u32, usize) = bincode::serde::decode_from_slice(bytes, config())?;
    if version > STATE_FORMAT_VERSION {
        return Err(CodecError::UnknownStateVersion {
            found: version,
            known: STATE_FORMAT_VERSION,
        });
    }
    let frame: StateFrame<State> = decode(bytes)?;
    Ok(frame.state)
}

/// SHA-256 of the encoded state, hex. Equal digests at equal `applied_index` mean the replicas
/// agree byte for byte.
pub fn state_digest(state: &State) -> String {
    let bytes = encode_state(state).unwrap_or_default();
    hex::encode(Sha256::digest(bytes))
}
