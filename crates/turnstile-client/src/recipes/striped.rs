//! [`StripedLock`]: the seed's `lock:account:{shard}` pattern. An unbounded key space (every
//! account) shares N locks named `{prefix}{shard}`, where `shard` is a stable hash of the key
//! modulo N.
//!
//! The trade-off: the cluster holds at most N lock records however many keys there are, and a
//! holder takes one lock instead of one per key; but two keys on the same stripe exclude each
//! other (false contention, about 1/N of unrelated pairs), and the fencing token belongs to the
//! stripe, so a fenced resource keys its fence by the stripe's lock name, not by the key.
//! Changing N moves keys between stripes: every client must use the same prefix and N, and a
//! change of N needs all holders of the old stripes gone first.
//!
//! The hash is FNV-1a (64-bit) of the key's UTF-8 bytes, so clients in other languages can
//! compute the same stripe: `stripe = fnv1a64(key) % N`.

use crate::{Error, LockGuard, LockOptions, Session};

/// Most stripes one striped lock may have: each is a lock record while held.
pub const STRIPES_MAX: u32 = 65_536;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The stripe (0..stripes) of `key`: FNV-1a 64 of its bytes, modulo `stripes`.
pub fn stripe_of(key: &str, stripes: u32) -> u32 {
    let hash = key.bytes().fold(FNV_OFFSET_BASIS, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    // `stripes` is at least 1 (checked by `StripedLock::new`; `max(1)` keeps this total).
    (hash % u64::from(stripes.max(1))) as u32
}

/// N locks `{prefix}0` .. `{prefix}{N-1}` standing for an unbounded set of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripedLock {
    prefix: String,
    stripes: u32,
}

impl StripedLock {
    /// `stripes` in `1..=STRIPES_MAX`; the lock names are `prefix` followed by the stripe.
    pub fn new(prefix: impl Into<String>, stripes: u32) -> Result<StripedLock, Error> {
        if !(1..=STRIPES_MAX).contains(&stripes) {
            return Err(Error::Config {
                message: format!("a striped lock has 1 to {STRIPES_MAX} stripes, not {stripes}"),
            });
        }
        Ok(StripedLock {
            prefix: prefix.into(),
            stripes,
        })
    }

    pub fn stripes(&self) -> u32 {
        self.stripes
    }

    /// The name of the lock that guards `key`.
    pub fn lock_name(&self, key: &str) -> String {
        format!("{}{}", self.prefix, stripe_of(key, self.stripes))
    }

    /// Takes the stripe of `key` under `session`. The guard's token and fence name the
    /// stripe's lock.
    pub async fn lock(
        &self,
        session: &Session,
        key: &str,
        opts: LockOptions,
    ) -> Result<LockGuard, Error> {
        session.lock(&self.lock_name(key), opts).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned values: other clients (and later versions) must map keys to the same stripes.
    #[test]
    fn stripes_are_stable_and_in_range() {
        assert_eq!(
            stripe_of("", 1_000_000_007),
            (FNV_OFFSET_BASIS % 1_000_000_007) as u32
        );
        // FNV-1a 64 test vectors: "a" -> af63dc4c8601ec8c, "foobar" -> 85944171f73967e8.
        assert_eq!(
            stripe_of("a", u32::MAX),
            (0xaf63_dc4c_8601_ec8c_u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            stripe_of("foobar", u32::MAX),
            (0x8594_4171_f739_67e8_u64 % u64::from(u32::MAX)) as u32
        );
        for key in ["account:1", "account:2", "ü", ""] {
            assert!(stripe_of(key, 16) < 16);
        }
        let s = StripedLock::new("lock:account:", 16).expect("valid");
        assert_eq!(
            s.lock_name("a"),
            format!("lock:account:{}", 0xaf63_dc4c_8601_ec8c_u64 % 16)
        );
    }

    #[test]
    fn stripe_count_is_bounded() {
        assert!(StripedLock::new("p", 0).is_err());
        assert!(StripedLock::new("p", STRIPES_MAX + 1).is_err());
        assert!(StripedLock::new("p", STRIPES_MAX).is_ok());
    }
}
