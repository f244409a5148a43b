//! Raw HTTP/1.1 over TCP, for tests that misbehave below what an HTTP client allows: idle
//! connections, half-sent or trickled heads, stalled bodies, HTTP/2 prefaces. Every read has a
//! deadline; a close is measured from a given instant.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head or body these helpers read.
const RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// A response read off a raw connection.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// The status line and headers, as sent.
    pub head: String,
    pub body: String,
}

/// How a connection ended, seen from the client.
#[derive(Debug, Clone)]
pub struct Closed {
    /// From the instant given to [`until_closed`] to the end of the stream (EOF or reset).
    pub after: Duration,
    /// Everything the server sent before closing.
    pub bytes: Vec<u8>,
}

impl Closed {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

pub async fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await.context("connect")?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads until the server closes the connection (EOF, or a reset: both mean closed), failing
/// if it is still open `limit` after `since`.
pub async fn until_closed<R: AsyncRead + Unpin>(
    stream: &mut R,
    since: Instant,
    limit: Duration,
) -> anyhow::Result<Closed> {
    let deadline = tokio::time::Instant::from_std(since + limit);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => bail!(
                "still open {limit:?} after the start; received {:?}",
                String::from_utf8_lossy(&bytes)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Ok(Closed {
                    after: since.elapsed(),
                    bytes,
                })
            }
            Ok(Ok(n)) => {
                bytes.extend_from_slice(&buf[..n]);
                if bytes.len() > RESPONSE_BYTES_MAX {
                    bail!("more than {RESPONSE_BYTES_MAX} bytes before the close");
                }
            }
        }
    }
}

/// True if nothing arrives and the connection stays open for `quiet` (the server neither
/// answered nor closed).
pub async fn still_open<R: AsyncRead + Unpin>(stream: &mut R, quiet: Duration) -> bool {
    let mut buf = [0u8; 1];
    tokio::time::timeout(quiet, stream.read(&mut buf))
        .await
        .is_err()
}

/// Sends `GET path` with `extra_headers` (each `Name: value`) on a kept-alive connection and
/// reads one response with a `content-length` body.
pub async fn get(
    stream: &mut TcpStream,
    path: &str,
    extra_headers: &[&str],
    limit: Duration,
) -> anyhow::Result<RawResponse> {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: turnstile\r\n");
    for h in extra_headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    tokio::time::timeout(limit, read_response(stream))
        .await
        .with_context(|| format!("no whole response to GET {path} within {limit:?}"))?
}

/// Reads one response whose body has a `content-length` (what the node's JSON and text
/// answers have).
async fn read_response(stream: &mut TcpStream) -> anyhow::Result<RawResponse> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            bail!(
                "closed before a whole head: {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
        bytes.extend_from_slice(&buf[..n]);
        if bytes.len() > RESPONSE_BYTES_MAX {
            bail!("head longer than {RESPONSE_BYTES_MAX} bytes");
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    if length > RESPONSE_BYTES_MAX {
        bail!("body of {length} bytes");
    }
    let mut body = bytes[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            bail!("closed after {} of {length} body bytes", body.len());
        }
        body.extend_from_slice(&buf[..n]);
    }
    Ok(RawResponse {
        status,
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
