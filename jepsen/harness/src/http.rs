//! One HTTP attempt against one node, classified the way the history needs it: `ok`, `fail`
//! (definitely no effect: the API's documented "nothing happened" answers) or `info`
//! (unknown: a timeout, a dropped connection, `504 indeterminate`, or `503 unavailable` on a
//! write). Reads that fail are `fail`: a read has no effect to be unsure about.

use std::time::Duration;

use serde_json::Value;
use turnstile_checker::history::EventType;

use crate::tls::RunCerts;

/// How long one client request may take before the harness calls it unknown. Longer than the
/// server's 5 s commit deadline, so a server-side `504` normally arrives first.
pub const CLIENT_TIMEOUT_MS: u64 = 7_000;

/// A classified answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub kind: EventType,
    /// HTTP status, `None` if no answer arrived.
    pub status: Option<u16>,
    pub body: Value,
    /// The API's `code`, the transport error, or the status, for the history's `error` field.
    pub error: Option<String>,
}

impl Answer {
    pub fn is_ok(&self) -> bool {
        self.kind == EventType::Ok
    }

    pub fn code(&self) -> Option<&str> {
        self.body.get("code").and_then(Value::as_str)
    }
}

/// Whether the request changes state (decides how an unclear failure is classified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Read,
    Write,
}

/// A shared HTTP client for the workers, the watchers and the monitor.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    /// A client for a cluster with `certs` (trusting only its CA, presenting `root`), or for an
    /// insecure one with `None`.
    pub fn new(certs: Option<&RunCerts>) -> anyhow::Result<Http> {
        Ok(Http {
            client: crate::tls::client_builder(certs)?
                .timeout(Duration::from_millis(CLIENT_TIMEOUT_MS))
                .connect_timeout(Duration::from_millis(1_000))
                .pool_max_idle_per_host(16)
                .build()?,
        })
    }

    pub fn inner(&self) -> &reqwest::Client {
        &self.client
    }

    /// Sends one request and classifies the answer.
    pub async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
        effect: Effect,
        timeout: Option<Duration>,
    ) -> Answer {
        let mut req = self.client.request(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let unknown = match effect {
            Effect::Read => EventType::Fail,
            Effect::Write => EventType::Info,
        };
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                // Refused before connecting: nothing reached the node, so nothing happened.
                let kind = if e.is_connect() {
                    EventType::Fail
                } else {
                    unknown
                };
                return Answer {
                    kind,
                    status: None,
                    body: Value::Null,
                    error: Some(transport_error(&e)),
                };
            }
        };
        let status = resp.status().as_u16();
        let body = match resp.text().await {
            Ok(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            Err(e) => {
                return Answer {
                    kind: unknown,
                    status: Some(status),
                    body: Value::Null,
                    error: Some(transport_error(&e)),
                }
            }
        };
        let code = body.get("code").and_then(Value::as_str).map(str::to_string);
        let kind = classify(status, code.as_deref(), effect);
        Answer {
            kind,
            status: Some(status),
            error: if kind == EventType::Ok {
                None
            } else {
                Some(code.unwrap_or_else(|| status.to_string()))
            },
            body,
        }
    }
}

fn transport_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        "connection".into()
    }
}

/// The API's status and code mapping (docs/api.md, "Errors") onto the history's outcomes.
fn classify(status: u16, code: Option<&str>, effect: Effect) -> EventType {
    match (status, code) {
        (200..=299, _) => EventType::Ok,
        // The commit is unknown: the entry may have been appended.
        (504, _) => match effect {
            Effect::Read => EventType::Fail,
            Effect::Write => EventType::Info,
        },
        // Nothing appended.
        (503, Some("no_quorum" | "not_member")) => EventType::Fail,
        // Stopped Raft or a refused forward: the write's fate is unknown.
        (503, _) => match effect {
            Effect::Read => EventType::Fail,
            Effect::Write => EventType::Info,
        },
        // Every 4xx is either refused before proposing or a committed entry that changed
        // nothing: definitely no effect.
        (400..=499, _) => EventType::Fail,
        _ => match effect {
            Effect::Read => EventType::Fail,
            Effect::Write => EventType::Info,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_the_api_table() {
        assert_eq!(classify(200, None, Effect::Write), EventType::Ok);
        assert_eq!(classify(504, None, Effect::Write), EventType::Info);
        assert_eq!(classify(504, None, Effect::Read), EventType::Fail);
        assert_eq!(
            classify(503, Some("no_quorum"), Effect::Write),
            EventType::Fail
        );
        assert_eq!(
            classify(503, Some("unavailable"), Effect::Write),
            EventType::Info
        );
        assert_eq!(
            classify(409, Some("fenced"), Effect::Write),
            EventType::Fail
        );
        assert_eq!(
            classify(412, Some("compare_failed"), Effect::Write),
            EventType::Fail
        );
    }
}
