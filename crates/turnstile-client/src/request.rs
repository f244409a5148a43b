//! One HTTP request and its retries. A [`Prepared`] request is built once, with its
//! `request_id` fixed inside its body, and may be sent any number of times: the server applies
//! it at most once and answers every resend with the first outcome. The retry loop resends the
//! same request on `503 no_quorum`, `503 not_member`, `503 unavailable`, `504 indeterminate` and
//! transport errors, moving to the next endpoint, with jittered exponential backoff, until the
//! caller's deadline.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ErrorBody, Retry};
use crate::{Client, Error};

/// First pause after a failed attempt; doubles up to [`BACKOFF_MS_MAX`], with jitter.
const BACKOFF_MS_MIN: u64 = 50;
/// Longest pause between two attempts.
const BACKOFF_MS_MAX: u64 = 1_000;
/// Shortest HTTP timeout given to an attempt, even when the deadline is closer.
pub(crate) const ATTEMPT_MS_MIN: u64 = 200;
/// Largest answer read for a call: far above any the server sends (a lock view with 10,000
/// waiters is about 1 MiB), so a hostile or broken endpoint cannot make the client allocate
/// what it likes.
pub const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest backup read: four times what a node accepts as a whole snapshot from a peer (256
/// MiB), past which the cluster itself could not bring a follower up to date.
pub const BACKUP_BYTES_MAX: usize = 1024 * 1024 * 1024;

/// A request ready to send, with its `request_id` (for writes) fixed. Sending it again is how
/// a caller resolves an [`Error::Indeterminate`]: the server dedups by `request_id` and
/// returns the first outcome, so a resent acquire never acquires twice.
#[derive(Debug, Clone)]
pub struct Prepared<T> {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) body: Option<Value>,
    pub(crate) request_id: Option<String>,
    /// Time the server may hold the request before answering (a blocking acquire's wait). It
    /// is added to the HTTP timeout and to the retry deadline.
    pub(crate) server_wait: Duration,
    pub(crate) mutating: bool,
    /// Whether an attempt whose outcome is unknown may be sent again. False for a
    /// non-idempotent call without a `request_id` (creating a token): a resend would act twice.
    pub(crate) resend_uncertain: bool,
    /// Largest answer body read ([`ANSWER_BYTES_MAX`] unless raised, for backups).
    pub(crate) answer_bytes_max: usize,
    answer: PhantomData<fn() -> T>,
}

impl<T> Prepared<T> {
    fn new(method: Method, path: String, body: Option<Value>, mutating: bool) -> Prepared<T> {
        Prepared {
            method,
            path,
            body,
            request_id: None,
            server_wait: Duration::ZERO,
            mutating,
            resend_uncertain: true,
            answer_bytes_max: ANSWER_BYTES_MAX,
            answer: PhantomData,
        }
    }

    /// A read (GET); retried freely.
    pub(crate) fn read(path: String) -> Prepared<T> {
        Prepared::new(Method::GET, path, None, false)
    }

    /// A read sent as a POST with a body (`/v1/fence/check`); retried freely.
    pub(crate) fn query(path: String, body: Value) -> Prepared<T> {
        Prepared::new(Method::POST, path, Some(body), false)
    }

    /// A write that carries a fresh `request_id` in its JSON body.
    pub(crate) fn write(method: Method, path: String, mut body: Value) -> Prepared<T> {
        let id = new_request_id();
        if let Value::Object(map) = &mut body {
            map.insert("request_id".into(), Value::String(id.clone()));
        }
        let mut p = Prepared::new(method, path, Some(body), true);
        p.request_id = Some(id);
        p
    }

    /// An operator call (membership, snapshot) without a `request_id`: a resend of a change
    /// that went through is refused with a message saying so.
    pub(crate) fn admin(method: Method, path: String, body: Option<Value>) -> Prepared<T> {
        Prepared::new(method, path, body, true)
    }

    /// A write without a `request_id` (keepalive: repeating it is harmless).
    pub(crate) fn idempotent_write(method: Method, path: String) -> Prepared<T> {
        Prepared::new(method, path, None, true)
    }

    /// Never resent once it may have been delivered (see `resend_uncertain`).
    pub(crate) fn not_resent_when_uncertain(mut self) -> Prepared<T> {
        self.resend_uncertain = false;
        self
    }

    pub(crate) fn with_answer_bytes_max(mut self, max: usize) -> Prepared<T> {
        self.answer_bytes_max = max;
        self
    }

    pub(crate) fn with_server_wait(mut self, wait: Duration) -> Prepared<T> {
        self.server_wait = wait;
        self
    }

    /// The `request_id` the server dedups this request by (`None` for reads and keepalives).
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The request path, e.g. `/v1/locks/job/acquire`.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// A fresh, unique request id: 128 random bits in hex.
pub fn new_request_id() -> String {
    hex::encode(rand::thread_rng().gen::<[u8; 16]>())
}

/// A failed attempt and what it allows next.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: Error,
    pub retry: Retry,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let retry = error.retry();
        Failure { error, retry }
    }
}

struct Backoff {
    next_ms: u64,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next_ms: BACKOFF_MS_MIN,
        }
    }

    /// The next pause: uniformly within [half, full] of the current step, so clients that
    /// failed together do not retry in lockstep.
    fn next(&mut self) -> Duration {
        let full = self.next_ms;
        self.next_ms = (self.next_ms * 2).min(BACKOFF_MS_MAX);
        Duration::from_millis(rand::thread_rng().gen_range(full / 2..=full))
    }
}

impl Client {
    /// Sends `req`, retrying it (same `request_id`) until the client's retry budget, plus the
    /// request's server-side wait, has passed.
    pub async fn send<T: DeserializeOwned>(&self, req: &Prepared<T>) -> Result<T, Error> {
        let deadline = Instant::now() + self.config.retry_budget + req.server_wait;
        self.send_until(req, deadline).await
    }

    /// Sends `req`, retrying it (same `request_id`) until `deadline`.
    pub async fn send_until<T: DeserializeOwned>(
        &self,
        req: &Prepared<T>,
        deadline: Instant,
    ) -> Result<T, Error> {
        self.retry_until(req, deadline, decode_json).await
    }

    /// Sends a request whose answer is raw bytes (a backup), with the same retries.
    pub(crate) async fn send_bytes(&self, req: &Prepared<Vec<u8>>) -> Result<Vec<u8>, Error> {
        let deadline = Instant::now() + self.config.retry_budget + req.server_wait;
        self.retry_until(req, deadline, |_, bytes| Ok(bytes.to_vec()))
            .await
    }

    /// The retry loop: one attempt after another, each answer decoded by `decode`.
    async fn retry_until<T, D>(
        &self,
        req: &Prepared<T>,
        deadline: Instant,
        decode: D,
    ) -> Result<T, Error>
    where
        D: Fn(&str, &[u8]) -> Result<T, Error>,
    {
        let result = self.retry_loop(req, deadline, decode).await;
        // Answered, one way or the other: the server may forget the record. An indeterminate
        // write is not acknowledged: the caller may still resend it to learn its outcome.
        if let Some(id) = &req.request_id {
            if !matches!(&result, Err(e) if e.is_indeterminate()) {
                self.acks.push(id.clone());
            }
        }
        result
    }

    async fn retry_loop<T, D>(
        &self,
        req: &Prepared<T>,
        deadline: Instant,
        decode: D,
    ) -> Result<T, Error>
    where
        D: Fn(&str, &[u8]) -> Result<T, Error>,
    {
        let mut backoff = Backoff::new();
        let mut uncertain = false;
        loop {
            let timeout = self.attempt_timeout(req, deadline);
            let failure = match self.send_once_with(req, timeout, &decode).await {
                Ok(v) => return Ok(v),
                Err(f) => f,
            };
            match failure.retry {
                Retry::No => return Err(failure.error),
                Retry::Safe => {}
                Retry::Uncertain if !req.resend_uncertain => {
                    return Err(out_of_time(req, failure.error, true))
                }
                Retry::Uncertain => uncertain = true,
            }
            let pause = backoff.next();
            if Instant::now() + pause >= deadline {
                return Err(out_of_time(req, failure.error, uncertain));
            }
            tracing::debug!(path = %req.path, error = %failure.error, "retrying");
            tokio::time::sleep(pause).await;
        }
    }

    fn attempt_timeout<T>(&self, req: &Prepared<T>, deadline: Instant) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now());
        (self.config.request_timeout + req.server_wait)
            .min(left)
            .max(Duration::from_millis(ATTEMPT_MS_MIN))
    }

    /// One attempt on the preferred endpoint, moving the preference on failure.
    pub(crate) async fn send_once<T: DeserializeOwned>(
        &self,
        req: &Prepared<T>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        self.send_once_with(req, timeout, decode_json).await
    }

    async fn send_once_with<T, D>(
        &self,
        req: &Prepared<T>,
        timeout: Duration,
        decode: D,
    ) -> Result<T, Failure>
    where
        D: Fn(&str, &[u8]) -> Result<T, Error>,
    {
        let (i, base) = self.endpoints.current();
        let url = format!("{base}{}", req.path);
        let result = self.attempt(&url, req, timeout).await;
        match &result {
            Err(f) if f.retry != Retry::No || matches!(f.error, Error::Tls { .. }) => {
                self.endpoints.failed(i)
            }
            _ => self.endpoints.answered(i),
        }
        Ok(decode(&url, &result?)?)
    }

    /// One HTTP exchange: the body of a 2xx answer, or the refusal.
    async fn attempt<T>(
        &self,
        url: &str,
        req: &Prepared<T>,
        timeout: Duration,
    ) -> Result<bytes::Bytes, Failure> {
        let mut rb = self.http.request(req.method.clone(), url).timeout(timeout);
        if let Some(body) = &req.body {
            rb = rb.json(body);
        }
        let acks = self.acks.take();
        if let Some((_, header)) = &acks {
            rb = rb.header(crate::acks::ACK_HEADER, header);
        }
        let resp = match rb.send().await {
            Ok(resp) => resp,
            Err(e) => {
                // Maybe not delivered: send them again with the next request (acknowledging
                // an id twice is harmless).
                if let Some((ids, _)) = acks {
                    self.acks.restore(ids);
                }
                return Err(transport(url, &e));
            }
        };
        let status = resp.status().as_u16();
        let bytes = read_capped(url, resp, req.answer_bytes_max).await?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        Err(refusal(url, status, &bytes).into())
    }
}

/// Reads an answer body, refusing (without reading on) one over `max` bytes.
async fn read_capped(
    url: &str,
    mut resp: reqwest::Response,
    max: usize,
) -> Result<bytes::Bytes, Failure> {
    let too_large = || Failure {
        error: Error::Protocol {
            message: format!("{url}: answer over {max} bytes; not read"),
        },
        retry: Retry::No,
    };
    if resp.content_length().is_some_and(|len| len > max as u64) {
        return Err(too_large());
    }
    let mut bytes = bytes::BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(url, &e))? {
        if bytes.len() + chunk.len() > max {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes.freeze())
}

/// Decodes a JSON answer (an empty body reads as `null`).
fn decode_json<T: DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<T, Error> {
    let value: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(bytes).map_err(|e| Error::Protocol {
            message: format!("non-JSON answer from {url}: {e}"),
        })?
    };
    serde_json::from_value(value).map_err(|e| Error::Protocol {
        message: format!("unexpected answer from {url}: {e}"),
    })
}

/// A transport error: a failed TLS handshake is final (it fails the same way until the
/// configuration changes, and the node refused before reading a request); a failed connect
/// cannot have delivered the request; anything later may have.
pub(crate) fn transport(url: &str, e: &reqwest::Error) -> Failure {
    if let Some(tls) = crate::error::tls_cause(e) {
        let endpoint = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)))
            .unwrap_or_else(|| url.to_string());
        return Failure {
            error: Error::Tls {
                endpoint,
                message: tls.to_string(),
            },
            retry: Retry::No,
        };
    }
    let message = format!("{url}: {}", crate::error::chain(e));
    if e.is_connect() {
        Failure {
            error: Error::Unreachable { message },
            retry: Retry::Safe,
        }
    } else {
        Failure {
            error: Error::Indeterminate {
                request_id: None,
                message,
            },
            retry: Retry::Uncertain,
        }
    }
}

/// A non-2xx answer: the server's `{code, message}`, or (from something else on the path) the
/// status alone.
pub(crate) fn refusal(url: &str, status: u16, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => Error::from_body(status, body),
        Err(_) => {
            let text = String::from_utf8_lossy(bytes);
            Error::from_status(status, format!("{url}: HTTP {status}: {}", text.trim()))
        }
    }
}

/// The error reported when the deadline passes: a write that may have been applied is
/// indeterminate whatever the last attempt said.
fn out_of_time<T>(req: &Prepared<T>, last: Error, uncertain: bool) -> Error {
    if req.mutating && uncertain {
        return Error::Indeterminate {
            request_id: req.request_id.clone(),
            message: format!("deadline passed; last error: {last}"),
        };
    }
    match last {
        Error::Indeterminate { message, .. } => Error::Unreachable { message },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique_printable_and_in_the_body() {
        let a: Prepared<Value> =
            Prepared::write(Method::POST, "/x".into(), serde_json::json!({"k": 1}));
        let b: Prepared<Value> =
            Prepared::write(Method::POST, "/x".into(), serde_json::json!({"k": 1}));
        let id = a.request_id().unwrap_or_default();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|c| c.is_ascii_graphic()));
        assert_ne!(a.request_id(), b.request_id());
        assert_eq!(
            a.body.as_ref().and_then(|b| b["request_id"].as_str()),
            Some(id)
        );
    }

    #[test]
    fn backoff_grows_to_its_cap() {
        let mut b = Backoff::new();
        let pauses: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(pauses[0] <= Duration::from_millis(BACKOFF_MS_MIN));
        assert!(pauses
            .iter()
            .all(|p| *p <= Duration::from_millis(BACKOFF_MS_MAX)));
        assert!(pauses[9] >= Duration::from_millis(BACKOFF_MS_MAX / 2));
    }

    /// An endpoint that answers every request with `head` and then `body_chunks` chunks of
    /// 1 MiB (chunked encoding), for at most a few connections.
    async fn hostile_endpoint(head: &'static str, body_chunks: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let _ = sock.read(&mut buf).await;
                    let _ = sock.write_all(head.as_bytes()).await;
                    let chunk = vec![b'x'; 1 << 20];
                    for _ in 0..body_chunks {
                        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                        framed.extend_from_slice(&chunk);
                        framed.extend_from_slice(b"\r\n");
                        if sock.write_all(&framed).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr.to_string()
    }

    #[tokio::test]
    async fn answers_past_the_cap_are_refused_unread() {
        // Claims 1 TiB: refused on the header, nothing read.
        let huge = hostile_endpoint(
            "HTTP/1.1 200 OK\r\ncontent-length: 1099511627776\r\n\r\n",
            0,
        )
        .await;
        // 100 MiB, chunked: refused once past 64 MiB.
        let endless =
            hostile_endpoint("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", 100).await;
        for endpoint in [huge, endless] {
            let client = Client::new(vec![endpoint.clone()]).expect("client");
            let req: Prepared<Value> = Prepared::read("/v1/locks/x".into());
            let failure = client
                .send_once(&req, Duration::from_secs(30))
                .await
                .expect_err("refused");
            assert_eq!(failure.retry, Retry::No, "{endpoint}: {:?}", failure.error);
            assert!(
                failure.error.to_string().contains("answer over"),
                "{endpoint}: {}",
                failure.error
            );
        }
    }

    #[test]
    fn out_of_time_keeps_unknown_writes_unknown() {
        let w: Prepared<Value> = Prepared::write(Method::POST, "/x".into(), serde_json::json!({}));
        let r: Prepared<Value> = Prepared::read("/x".into());
        let nq = || Error::NoQuorum {
            message: "m".into(),
        };
        assert!(out_of_time(&w, nq(), true).is_indeterminate());
        assert_eq!(out_of_time(&w, nq(), false), nq());
        assert_eq!(out_of_time(&r, nq(), true), nq());
    }
}
