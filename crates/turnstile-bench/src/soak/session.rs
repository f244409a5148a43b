//! `Session`: one soak client's calls (try-acquire, release, keepalive) on one node, each
//! counted in the shared `Counters`. With acknowledgments on it behaves as the Rust client's
//! `attempt` does: every request carries up to 64 pending ids in `x-turnstile-ack`, ids whose
//! request got no answer go back to the queue, and every id that got an answer other than
//! `indeterminate` is queued for the next request. It never retries: a failure is counted, and
//! the load loop carries on with a fresh id.

use std::sync::Arc;

use serde_json::{json, Value};

use super::counters::Counters;
use crate::turnstile_api::TurnstileApi;
use turnstile_client::{PendingAcks, ACK_HEADER};

/// The error code of an answer whose outcome is unknown; its id is not acknowledged, since a
/// client may still resend it to learn the outcome (as the Rust client allows).
const INDETERMINATE_CODE: &str = "indeterminate";

/// The error code of an acquire refused because the lock is held; its `current_token` names
/// the hold.
pub const LOCK_HELD_CODE: &str = "lock_held";

/// Why a call did not succeed (already counted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A non-2xx answer, with its error code and, for `lock_held`, the holder's token.
    Refused {
        status: u16,
        code: String,
        current_token: Option<u64>,
    },
    /// No answer: the request may or may not have been applied.
    NoAnswer,
}

impl Failure {
    /// A refusal that says the request was applied as a final "no" (4xx): retrying the same
    /// operation cannot succeed, unlike after a 5xx or no answer.
    pub fn is_final(&self) -> bool {
        matches!(self, Failure::Refused { status, .. } if (400..500).contains(status))
    }

    /// The token of the hold that refused an acquire with `lock_held`, if it names one.
    pub fn held_by(&self) -> Option<u64> {
        match self {
            Failure::Refused {
                code,
                current_token: Some(t),
                ..
            } if code == LOCK_HELD_CODE && *t > 0 => Some(*t),
            _ => None,
        }
    }
}

/// One client's calls; shared by its load loop and its keepalive loop, as one Rust client is.
pub struct Session {
    api: TurnstileApi,
    /// `None` with `--no-ack`.
    acks: Option<PendingAcks>,
    counters: Arc<Counters>,
}

impl Session {
    pub fn new(api: TurnstileApi, ack: bool, counters: Arc<Counters>) -> Session {
        Session {
            api,
            acks: ack.then(PendingAcks::default),
            counters,
        }
    }

    /// Try-acquire (`wait_ms: 0`) of `name` for `lease`; returns the token.
    pub async fn acquire(&self, name: &str, lease: u64, request_id: &str) -> Result<u64, Failure> {
        let path = format!("/v1/locks/{name}/acquire");
        let body = json!({ "lease_id": lease, "wait_ms": 0, "request_id": request_id });
        let v = self.call(&path, Some(body), Some(request_id)).await?;
        self.field(&v, "token", &path)
    }

    /// Releases the hold `{token, lease}`.
    pub async fn release(
        &self,
        name: &str,
        lease: u64,
        token: u64,
        request_id: &str,
    ) -> Result<(), Failure> {
        let path = format!("/v1/locks/{name}/release");
        let body = json!({ "lease_id": lease, "token": token, "request_id": request_id });
        let v = self.call(&path, Some(body), Some(request_id)).await?;
        self.field(&v, "revision", &path).map(|_| ())
    }

    /// Renews `lease` (no `request_id`: repeating a keepalive is harmless).
    pub async fn keepalive(&self, lease: u64) -> Result<(), Failure> {
        let path = format!("/v1/leases/{lease}/keepalive");
        self.call(&path, None, None).await.map(|_| ())
    }

    /// One POST, counted; the answer's body if it was 2xx.
    async fn call(
        &self,
        path: &str,
        body: Option<Value>,
        request_id: Option<&str>,
    ) -> Result<Value, Failure> {
        if request_id.is_some() {
            self.counters.id_used();
        }
        let taken = self.acks.as_ref().and_then(PendingAcks::take);
        let headers: Vec<(&str, &str)> = taken
            .iter()
            .map(|(_, header)| (ACK_HEADER, header.as_str()))
            .collect();
        let answer = self
            .api
            .exchange(reqwest::Method::POST, path, body.as_ref(), &headers)
            .await;
        let x = match answer {
            Ok(x) => x,
            Err(e) => {
                // Maybe not delivered: send them again with the next request (acknowledging
                // an id twice is harmless).
                if let (Some(acks), Some((ids, _))) = (&self.acks, taken) {
                    acks.restore(ids);
                }
                self.counters.unanswered(&format!("{e:#}"));
                return Err(Failure::NoAnswer);
            }
        };
        if let Some((ids, _)) = &taken {
            self.counters.acked(ids.len());
        }
        if let (Some(acks), Some(id)) = (&self.acks, request_id) {
            if x.code() != INDETERMINATE_CODE {
                acks.push(id.to_string());
            }
        }
        if !(200..300).contains(&x.status) {
            self.counters
                .refused(x.status, x.code(), &x.body.to_string());
            return Err(Failure::Refused {
                status: x.status,
                code: x.code().to_string(),
                current_token: x.body.get("current_token").and_then(Value::as_u64),
            });
        }
        self.counters.answered_ok();
        Ok(x.body)
    }

    /// An integer field of a 2xx answer; its absence is counted as a refusal of its own.
    fn field(&self, v: &Value, name: &str, path: &str) -> Result<u64, Failure> {
        v.get(name).and_then(Value::as_u64).ok_or_else(|| {
            let code = format!("no {name}");
            self.counters.refused(200, &code, &format!("{path}: {v}"));
            Failure::Refused {
                status: 200,
                code,
                current_token: None,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(status: u16, code: &str, current_token: Option<u64>) -> Failure {
        Failure::Refused {
            status,
            code: code.into(),
            current_token,
        }
    }

    #[test]
    fn only_client_errors_are_final() {
        assert!(refused(409, "not_holder", None).is_final());
        assert!(!refused(503, "unavailable", None).is_final());
        assert!(!refused(200, "no token", None).is_final());
        assert!(!Failure::NoAnswer.is_final());
    }

    #[test]
    fn a_lock_held_refusal_names_the_hold() {
        assert_eq!(refused(409, LOCK_HELD_CODE, Some(7)).held_by(), Some(7));
        assert_eq!(
            refused(409, LOCK_HELD_CODE, Some(0)).held_by(),
            None,
            "only waited for"
        );
        assert_eq!(refused(409, "wait_timeout", Some(7)).held_by(), None);
        assert_eq!(Failure::NoAnswer.held_by(), None);
    }
}
