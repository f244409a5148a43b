//! [`FenceToken`]: the grant a lock holder presents with every fenced access.

use serde::{Deserialize, Serialize};

use crate::error::FenceError;
use crate::limits::{CLUSTER_ID_BYTES_MAX, LOCK_NAME_BYTES_MAX};

/// A Turnstile lock grant, exactly as the acquire response returns it.
///
/// `token` is the Raft log index of the entry that granted `lock`; for one lock, tokens grow
/// from grant to grant, across leader changes and restarts. Tokens of different clusters are
/// not comparable, hence `cluster_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FenceToken {
    /// The `cluster_id` of the Turnstile cluster that made the grant.
    pub cluster_id: String,
    /// The lock that was granted.
    pub lock: String,
    /// The grant's fencing token (a log index, so never 0).
    pub token: u64,
}

impl FenceToken {
    /// Builds a token.
    pub fn new(cluster_id: impl Into<String>, lock: impl Into<String>, token: u64) -> Self {
        FenceToken {
            cluster_id: cluster_id.into(),
            lock: lock.into(),
            token,
        }
    }

    /// Checks the shape of the token (sizes, non-empty names, a non-zero index).
    pub fn validate(&self) -> Result<(), FenceError> {
        validate_cluster_id(&self.cluster_id)?;
        if self.lock.is_empty() || self.lock.len() > LOCK_NAME_BYTES_MAX {
            return Err(FenceError::Invalid {
                field: "lock",
                reason: "must be 1 to LOCK_NAME_BYTES_MAX (256) bytes",
            });
        }
        if self.token == 0 {
            return Err(FenceError::Invalid {
                field: "token",
                reason: "must be at least 1 (tokens are Raft log indexes)",
            });
        }
        Ok(())
    }
}

/// Checks a `cluster_id`: non-empty and at most [`CLUSTER_ID_BYTES_MAX`] bytes.
pub(crate) fn validate_cluster_id(cluster_id: &str) -> Result<(), FenceError> {
    if cluster_id.is_empty() || cluster_id.len() > CLUSTER_ID_BYTES_MAX {
        return Err(FenceError::Invalid {
            field: "cluster_id",
            reason: "must be 1 to CLUSTER_ID_BYTES_MAX (128) bytes",
        });
    }
    Ok(())
}
