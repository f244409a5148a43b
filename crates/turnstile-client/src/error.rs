//! The client's one error type. Server refusals mirror the server's `{code, message}` bodies
//! one variant per code; "outcome unknown" ([`Error::Indeterminate`]) is kept apart from every
//! failure, because a caller that treats it as "failed" and retries under a new `request_id`
//! could acquire twice.

use serde::Deserialize;

/// Everything a client call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Try-acquire (`wait` zero) of a lock someone holds; `current_token` is the holder's.
    #[error("lock held{}: {message}", token_note(*current_token))]
    LockHeld {
        current_token: Option<u64>,
        message: String,
    },
    /// Release of a hold that this `{token, lease_id}` does not have.
    #[error("not the holder: {message}")]
    NotHolder { message: String },
    /// Proclaim or resign by a `{lease_id, token}` that is not the election's leader.
    #[error("not the leader: {message}")]
    NotLeader { message: String },
    /// The lease does not exist or was due when the entry applied.
    #[error("lease not found: {message}")]
    LeaseNotFound { message: String },
    /// A blocking acquire's wait ended without a grant (its queue entry was cancelled).
    #[error("wait timed out: {message}")]
    WaitTimeout { message: String },
    /// The lock is held in another mode or with other permits than asked.
    #[error("mode mismatch: {message}")]
    ModeMismatch { message: String },
    /// The server broke a wait-for cycle by refusing this waiter.
    #[error("deadlock victim: {message}")]
    DeadlockVictim { message: String },
    /// A fenced write whose token is not the lock's current grant.
    #[error("fenced{}: {message}", token_note(*current_token))]
    Fenced {
        current_token: Option<u64>,
        message: String,
    },
    /// The `if` condition of a key write did not hold.
    #[error("compare failed: {message}")]
    CompareFailed { message: String },
    /// This `request_id` was used before for a different request.
    #[error("request id reused: {message}")]
    RequestIdReused { message: String },
    /// A counter increment would overflow.
    #[error("counter overflow: {message}")]
    CounterOverflow { message: String },
    /// A server-wide limit (leases, keys) is reached.
    #[error("limit reached: {message}")]
    LimitReached { message: String },
    /// The request was malformed or out of a limit; nothing was proposed.
    #[error("bad request: {message}")]
    BadRequest { message: String },
    /// The server does not support this feature (yet); nothing was proposed.
    #[error("unsupported by the server: {message}")]
    Unsupported { message: String },
    /// The key does not exist (only from reads; [`crate::Client::get`] answers `None`).
    #[error("key not found: {message}")]
    KeyNotFound { message: String },
    /// No such route (an older server without the feature, or a test hook that is off).
    #[error("not found: {message}")]
    NotFound { message: String },
    /// No leader able to commit was reachable until the deadline; nothing was appended.
    #[error("no quorum: {message}")]
    NoQuorum { message: String },
    /// Every node tried is not (yet, or any more) a serving member of the cluster.
    #[error("not a member: {message}")]
    NotMember { message: String },
    /// A read could not be served (the node's Raft stopped) until the deadline.
    #[error("unavailable: {message}")]
    Unavailable { message: String },
    /// **Outcome unknown**: a write may or may not have been applied when the deadline passed.
    /// Resend the same request (same `request_id`, see [`crate::Prepared`]) to learn the
    /// outcome; it never acts twice.
    #[error("outcome unknown{}: {message}", request_id_note(request_id.as_deref()))]
    Indeterminate {
        request_id: Option<String>,
        message: String,
    },
    /// No node could be reached until the deadline, and no write can have been sent.
    #[error("unreachable: {message}")]
    Unreachable { message: String },
    /// A watch asked for history the server no longer keeps; restart from `oldest_revision`
    /// or later.
    #[error("watch history compacted; oldest retained revision is {oldest_revision}")]
    Compacted { oldest_revision: u64 },
    /// The lock was granted only after the session's local deadline had passed; the grant was
    /// released, not used.
    #[error("session lost before the grant arrived; the grant was released")]
    LostBeforeGrant,
    /// The session's lease is gone or no longer trusted (see [`crate::LostReason`]).
    #[error("session lost: {reason}")]
    SessionLost { reason: crate::LostReason },
    /// (The server's `message` of these three already starts with what happened, e.g.
    /// "permission denied: ...", so it is shown as it is.)
    ///
    /// `401 unauthenticated`: no credential, or one the cluster does not accept (unknown,
    /// revoked or expired token; a certificate of another CA is a [`Error::Tls`] instead).
    /// Final: resending cannot help.
    #[error("{message}")]
    Unauthenticated { message: String },
    /// `403 permission_denied`: the principal lacks a permission; `message` names it. Final.
    #[error("{message}")]
    PermissionDenied { message: String },
    /// `429 quota_exceeded`: this principal is at one of its quotas; `message` names it. Final
    /// (not a rate limit: waiting does not help until the principal frees something).
    #[error("{message}")]
    QuotaExceeded { message: String },
    /// The TLS handshake with `endpoint` failed (an unknown CA, a name mismatch, a client
    /// certificate refused). Final: it fails the same way until the configuration changes.
    #[error("TLS handshake with {endpoint} failed: {message}")]
    Tls { endpoint: String, message: String },
    /// Any other refusal the server answered with (`membership_refused`, `body_too_large`, ...).
    #[error("server refused ({status} {code}): {message}")]
    Server {
        status: u16,
        code: String,
        message: String,
    },
    /// An answer the client could not understand (not the documented shape).
    #[error("protocol error: {message}")]
    Protocol { message: String },
    /// The client was configured wrongly (no endpoints, an unparsable endpoint).
    #[error("invalid client configuration: {message}")]
    Config { message: String },
}

/// The JSON error body every server refusal carries.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    pub code: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub current_token: Option<u64>,
}

/// What a failed attempt means for the retry loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A final answer: stop and return it.
    No,
    /// Nothing was appended: retrying is safe and cannot act twice, even without an id.
    Safe,
    /// The write may have been appended: retry only with the same `request_id`.
    Uncertain,
}

impl Error {
    /// Maps a server refusal to its variant.
    pub(crate) fn from_body(status: u16, body: ErrorBody) -> Error {
        let ErrorBody {
            code,
            message,
            current_token,
        } = body;
        match code.as_str() {
            "lock_held" => Error::LockHeld {
                current_token,
                message,
            },
            "not_holder" => Error::NotHolder { message },
            "not_leader" => Error::NotLeader { message },
            "lease_not_found" => Error::LeaseNotFound { message },
            "wait_timeout" => Error::WaitTimeout { message },
            "mode_mismatch" => Error::ModeMismatch { message },
            "deadlock_victim" => Error::DeadlockVictim { message },
            "fenced" => Error::Fenced {
                current_token,
                message,
            },
            "compare_failed" => Error::CompareFailed { message },
            "request_id_reused" => Error::RequestIdReused { message },
            "counter_overflow" => Error::CounterOverflow { message },
            "limit_reached" => Error::LimitReached { message },
            "bad_request" => Error::BadRequest { message },
            "unsupported" => Error::Unsupported { message },
            "key_not_found" => Error::KeyNotFound { message },
            "not_found" => Error::NotFound { message },
            "no_quorum" => Error::NoQuorum { message },
            "not_member" => Error::NotMember { message },
            "unavailable" => Error::Unavailable { message },
            "unauthenticated" => Error::Unauthenticated { message },
            "permission_denied" => Error::PermissionDenied { message },
            "quota_exceeded" => Error::QuotaExceeded { message },
            "indeterminate" => Error::Indeterminate {
                request_id: None,
                message,
            },
            _ => Error::Server {
                status,
                code,
                message,
            },
        }
    }

    /// Whether, and how, a request that failed with this error may be sent again.
    pub(crate) fn retry(&self) -> Retry {
        match self {
            // `unreachable` is only built for failures before a request could be sent.
            Error::NoQuorum { .. } | Error::NotMember { .. } | Error::Unreachable { .. } => {
                Retry::Safe
            }
            // `unavailable`: the node's Raft stopped, perhaps after appending.
            Error::Unavailable { .. } | Error::Indeterminate { .. } => Retry::Uncertain,
            Error::Server { status, .. } if *status >= 500 => Retry::Uncertain,
            // Every 4xx (401, 403, 429 included), TLS failures, and the rest: final.
            _ => Retry::No,
        }
    }

    /// A refusal by status alone (no `{code, message}` body, e.g. from a proxy): 401 and 403
    /// keep their meaning, so they stay typed and final.
    pub(crate) fn from_status(status: u16, message: String) -> Error {
        match status {
            401 => Error::Unauthenticated { message },
            403 => Error::PermissionDenied { message },
            s if s >= 500 => Error::Server {
                status,
                code: String::new(),
                message,
            },
            _ => Error::Protocol { message },
        }
    }

    /// True for the outcome-unknown error.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, Error::Indeterminate { .. })
    }
}

/// `" (current token N)"`, or nothing when the server named none.
fn token_note(current_token: Option<u64>) -> String {
    current_token.map_or_else(String::new, |t| format!(" (current token {t})"))
}

/// `" (request_id ID)"`, or nothing when the request had none.
fn request_id_note(request_id: Option<&str>) -> String {
    request_id.map_or_else(String::new, |id| format!(" (request_id {id})"))
}

/// An error and its sources, `outer: inner: innermost`, skipping a source whose text its
/// parent already shows (reqwest and hyper often repeat it).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(source) = next {
        let text = source.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = source.source();
    }
    out
}

/// The rustls error inside a transport error, if TLS is what failed. `io::Error` hides its
/// payload from `source()` (and hyper-rustls wraps tokio-rustls's `io::Error` in another), so
/// an `io::Error` link is followed into its payload with `get_ref` instead.
pub(crate) fn tls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    // Bounded: a chain is a handful of links; a cycle cannot loop forever.
    for _ in 0..32 {
        let link = next?;
        if let Some(tls) = link.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match link.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => link.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: &str, current_token: Option<u64>) -> ErrorBody {
        ErrorBody {
            code: code.into(),
            message: "m".into(),
            current_token,
        }
    }

    #[test]
    fn auth_refusals_are_typed_and_final() {
        let table = [
            ("unauthenticated", 401),
            ("permission_denied", 403),
            ("quota_exceeded", 429),
        ];
        for (code, status) in table {
            let e = Error::from_body(status, body(code, None));
            assert_eq!(e.retry(), Retry::No, "{code}");
            assert!(!matches!(e, Error::Server { .. }), "{code}: {e:?}");
            // The server's message is shown as it is (it names what happened itself).
            assert_eq!(e.to_string(), "m", "{e:?}");
        }
        assert!(matches!(
            Error::from_status(401, "x".into()),
            Error::Unauthenticated { .. }
        ));
        assert_eq!(Error::from_status(429, "x".into()).retry(), Retry::No);
    }

    #[test]
    fn display_shows_no_debug_text() {
        let shown = [
            Error::from_body(409, body("lock_held", Some(634))).to_string(),
            Error::from_body(409, body("lock_held", None)).to_string(),
            Error::from_body(409, body("fenced", Some(7))).to_string(),
            Error::Indeterminate {
                request_id: Some("ab12".into()),
                message: "m".into(),
            }
            .to_string(),
        ];
        assert_eq!(shown[0], "lock held (current token 634): m");
        assert_eq!(shown[1], "lock held: m");
        assert_eq!(shown[2], "fenced (current token 7): m");
        assert_eq!(shown[3], "outcome unknown (request_id ab12): m");
        assert!(shown.iter().all(|s| !s.contains("Some(")));
    }

    #[test]
    fn codes_map_to_variants_and_retry_classes() {
        let table: [(&str, u16, Retry); 8] = [
            ("lock_held", 409, Retry::No),
            ("wait_timeout", 409, Retry::No),
            ("no_quorum", 503, Retry::Safe),
            ("not_member", 503, Retry::Safe),
            ("unavailable", 503, Retry::Uncertain),
            ("indeterminate", 504, Retry::Uncertain),
            ("membership_refused", 409, Retry::No),
            ("something_new", 502, Retry::Uncertain),
        ];
        for (code, status, retry) in table {
            let e = Error::from_body(status, body(code, None));
            assert_eq!(e.retry(), retry, "{code}");
        }
        assert_eq!(
            Error::from_body(409, body("lock_held", Some(7))),
            Error::LockHeld {
                current_token: Some(7),
                message: "m".into()
            }
        );
        assert!(Error::from_body(504, body("indeterminate", None)).is_indeterminate());
        let unreachable = Error::Unreachable {
            message: "m".into(),
        };
        assert_eq!(unreachable.retry(), Retry::Safe);
        assert!(matches!(
            Error::from_body(409, body("deadlock_victim", None)),
            Error::DeadlockVictim { .. }
        ));
    }
}
