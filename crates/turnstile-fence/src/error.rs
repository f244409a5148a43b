//! [`FenceError`]: why a fenced read or write was refused.

/// A refused fenced access. Nothing was run and nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The holder was superseded: a newer grant has already read or written this resource.
    #[error("fenced: token {token} is older than token {highest}, already seen for this resource")]
    Stale {
        /// The highest token the resource has seen.
        highest: u64,
        /// The token presented.
        token: u64,
    },
    /// The token comes from a different Turnstile cluster; its indexes mean nothing here.
    #[error(
        "fenced: token from cluster {got:?}, but this fence accepts only cluster {expected:?}"
    )]
    ForeignCluster {
        /// The cluster this fence is pinned to.
        expected: String,
        /// The cluster named by the token.
        got: String,
    },
    /// The resource is guarded by another lock. Tokens of one lock grow from grant to grant;
    /// holders of two different locks are not mutually excluded, so mixing them is refused.
    #[error("fenced: resource is guarded by lock {expected:?}, not {got:?}")]
    WrongLock {
        /// The lock whose tokens this resource accepts (the first one it saw).
        expected: String,
        /// The lock named by the token.
        got: String,
    },
    /// The fence tracks as many resources as it may; a resource it has never seen is refused.
    #[error("fence already tracks {max} resources; refusing a new one")]
    TooManyResources {
        /// The configured limit.
        max: usize,
    },
    /// The resource name or the token is malformed.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl FenceError {
    /// True when the caller was superseded or presented a grant that cannot guard this
    /// resource (as opposed to a malformed request or a full fence).
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            FenceError::Stale { .. }
                | FenceError::ForeignCluster { .. }
                | FenceError::WrongLock { .. }
        )
    }

    /// A short stable name for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            FenceError::Stale { .. } => "stale",
            FenceError::ForeignCluster { .. } => "foreign_cluster",
            FenceError::WrongLock { .. } => "wrong_lock",
            FenceError::TooManyResources { .. } => "too_many_resources",
            FenceError::Invalid { .. } => "invalid",
        }
    }
}
