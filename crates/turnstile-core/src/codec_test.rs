//! Hostile bytes: lengths claiming far more than the input holds, truncations and random
//! bytes are decode errors, never an abort or an allocation of the claimed size.

use super::*;
use crate::command::{Command, Envelope};

/// A bincode varint claiming a length of 2^45 (0xFD, then eight little-endian bytes).
fn huge_len_prefix() -> Vec<u8> {
    let mut bytes = vec![0xFD];
    bytes.extend_from_slice(&(1u64 << 45).to_le_bytes());
    bytes
}

#[test]
fn a_string_claiming_2_pow_45_bytes_is_an_error() {
    // This is the 10-byte reply that once aborted a leader with a 32 TiB allocation.
    let mut bytes = huge_len_prefix();
    bytes.push(b'x');
    let err = decode::<String>(&bytes).expect_err("refused");
    assert!(
        matches!(
            err,
            CodecError::Decode(bincode::error::DecodeError::LimitExceeded)
        ),
        "{err}"
    );
    // serde reads a `Vec<u8>` as a sequence, one byte at a time: it runs out of input.
    assert!(decode::<Vec<u8>>(&bytes).is_err());
    // The same claim inside a whole peer reply.
    let mut reply = vec![0u8]; // Ok variant of Result<String, String>
    reply.extend_from_slice(&bytes);
    assert!(decode::<Result<String, String>>(&reply).is_err());
}

#[test]
fn the_claim_limit_scales_with_the_input_so_honest_large_values_decode() {
    // A 3 MiB string: well past the smallest tier, still decoded.
    let big = "v".repeat(3 << 20);
    let bytes = encode(&big).expect("encodes");
    assert_eq!(decode::<String>(&bytes).expect("decodes"), big);
    // Many small integers: each claims 8 bytes of memory for 1 byte of input.
    let ints: Vec<u64> = (0..100_000).map(|i| i % 100).collect();
    let bytes = encode(&ints).expect("encodes");
    assert_eq!(decode::<Vec<u64>>(&bytes).expect("decodes"), ints);
}

#[test]
fn a_sequence_claiming_billions_of_items_fails_on_the_missing_bytes() {
    let bytes = huge_len_prefix();
    assert!(decode::<Vec<u64>>(&bytes).is_err());
    assert!(decode::<Vec<String>>(&bytes).is_err());
    assert!(decode_state(&bytes).is_err());
}

#[test]
fn truncated_envelopes_are_errors() {
    let env = Envelope {
        now_ms: 5,
        request_id: Some("r-1".into()),
        command: Command::LockRelease {
            name: "a-lock".into(),
            lease_id: 7,
            token: 9,
        },
    };
    let bytes = encode_envelope(&env).expect("encodes");
    for cut in 0..bytes.len() {
        assert!(
            decode_envelope(&bytes[..cut]).is_err(),
            "a {cut}-byte prefix decoded"
        );
    }
    assert_eq!(decode_envelope(&bytes).expect("decodes"), env);
}

#[test]
fn random_bytes_never_abort() {
    // A fixed-seed xorshift: the same 20,000 inputs every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..20_000 {
        let len = (round % 64) + 1;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        // Any result is fine; returning at all is the test.
        let _ = decode_envelope(&bytes);
        let _ = decode_state(&bytes);
        let _ = decode::<Result<Vec<String>, String>>(&bytes);
    }
}
