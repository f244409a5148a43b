//! One HTTP/1.1 connection to one peer for its log replication, driven by the task that calls
//! it.
//!
//! Appends and heartbeats are most of a leader's peer traffic, one at a time per follower from
//! that follower's replication task. Through `reqwest` each one went to a pooled connection's own
//! task and its answer came back through a channel: two hand-offs per round trip, and the
//! pool's bookkeeping. Here the replication task owns the connection and polls it while it waits,
//! so the reply wakes the task that asked (measured in docs/benchmarks.md, "A commit's cost in
//! CPU": one client's acquire p50 about a tenth lower).
//!
//! What it keeps from the `reqwest` path: the same signed request and verified reply
//! (`PeerClient` does both), the same TLS client config (a reload opens a new connection for the
//! next call), a bounded reply, the RPC deadline over connect and exchange, the connect timeout,
//! and dropping an idle connection before the peer's idle timeout closes it. A connection that
//! fails or times out mid-call is dropped, never reused: its state is unknown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{self, Either, FutureExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::network::{PeerError, Transport, CONNECT_TIMEOUT_MS, PEER_REPLY_BYTES_MAX};
use crate::types::NodeId;

/// The connection's own future (it resolves when the connection ends), plain or TLS. Concrete
/// types rather than a boxed `dyn Future`: openraft wants its network `Sync`.
enum Driver {
    Plain(Pin<Box<PlainConnection>>),
    Tls(Pin<Box<TlsConnection>>),
}

type PlainConnection = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;
type TlsConnection = http1::Connection<TokioIo<TlsStream<TcpStream>>, Full<Bytes>>;

impl Future for Driver {
    type Output = hyper::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Driver::Plain(conn) => conn.as_mut().poll(cx),
            Driver::Tls(conn) => conn.as_mut().poll(cx),
        }
    }
}

/// An open connection and what it was opened with.
struct Open {
    sender: SendRequest<Full<Bytes>>,
    /// Must be polled for anything to move on the connection; only `exchange` polls it.
    driver: Driver,
    /// The transport it was opened with: after a TLS reload the next call opens a new one.
    transport: Arc<Transport>,
    last_used: Instant,
}

/// The connection to one peer, opened on first use and again after any failure.
#[derive(Default)]
pub struct PeerConn {
    open: Option<Open>,
}

/// A reply as read off the wire: status, reply MAC header, body. Nothing in it is trusted yet.
pub struct RawReply {
    pub status: u16,
    pub reply_mac: Option<String>,
    pub body: Bytes,
}

impl PeerConn {
    /// Sends `request` and reads its reply within `timeout`, opening a connection first if
    /// there is none usable. A request that the connection never took (the peer had closed it
    /// while idle) is sent once more on a new connection.
    pub async fn exchange(
        &mut self,
        transport: &Arc<Transport>,
        peer: NodeId,
        addr: &str,
        request: hyper::Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<RawReply, PeerError> {
        let result =
            tokio::time::timeout(timeout, self.exchange_inner(transport, peer, addr, request))
                .await
                .unwrap_or(Err(PeerError::Timeout { peer }));
        if result.is_err() {
            self.open = None;
        }
        result
    }

    async fn exchange_inner(
        &mut self,
        transport: &Arc<Transport>,
        peer: NodeId,
        addr: &str,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<RawReply, PeerError> {
        self.drop_if_stale(transport);
        let mut request = request;
        for _attempt in 0..2 {
            let open = match &mut self.open {
                Some(open) => open,
                None => self.open.insert(connect(transport, peer, addr).await?),
            };
            match send(open, peer, request).await {
                Ok(reply) => {
                    open.last_used = Instant::now();
                    return Ok(reply);
                }
                Err(Failure::NotSent(unsent)) => {
                    self.open = None;
                    request = *unsent;
                }
                Err(Failure::Failed(e)) => return Err(e),
            }
        }
        Err(PeerError::Transport {
            peer,
            reason: "two fresh connections closed before taking the request".to_owned(),
        })
    }

    /// Forgets a connection that must not carry the next call: opened with another TLS config,
    /// idle for longer than the pool's idle limit (the peer may be closing it), or already
    /// ended.
    fn drop_if_stale(&mut self, transport: &Arc<Transport>) {
        let Some(open) = &mut self.open else {
            return;
        };
        let stale = !Arc::ptr_eq(&open.transport, transport)
            || open.last_used.elapsed() >= transport.pool_idle
            || open.sender.is_closed()
            // Polled once: an ended connection resolves now. It is not polled between calls,
            // so a peer's close is noticed here.
            || (&mut open.driver).now_or_never().is_some();
        if stale {
            self.open = None;
        }
    }
}

/// Why a send did not produce a reply.
enum Failure {
    /// The connection refused the request before writing any of it.
    NotSent(Box<hyper::Request<Full<Bytes>>>),
    Failed(PeerError),
}

/// One request and its whole reply on `open`, polling the connection meanwhile.
async fn send(
    open: &mut Open,
    peer: NodeId,
    request: hyper::Request<Full<Bytes>>,
) -> Result<RawReply, Failure> {
    let Open { sender, driver, .. } = open;
    let transport_error = |e: hyper::Error| {
        Failure::Failed(PeerError::Transport {
            peer,
            reason: e.to_string(),
        })
    };
    let exchange = async {
        // HTTP/1 takes the next request only once the connection has finished the last one,
        // which it does while polled: here, beside this future.
        if sender.ready().await.is_err() {
            return Err(Failure::NotSent(Box::new(request)));
        }
        let response = match sender.try_send_request(request).await {
            Ok(response) => response,
            Err(mut e) => {
                return Err(match e.take_message() {
                    Some(unsent) => Failure::NotSent(Box::new(unsent)),
                    None => transport_error(e.into_error()),
                })
            }
        };
        if response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|len| len > PEER_REPLY_BYTES_MAX as u64)
        {
            return Err(Failure::Failed(PeerError::ReplyTooLarge {
                peer,
                max: PEER_REPLY_BYTES_MAX,
            }));
        }
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, PEER_REPLY_BYTES_MAX)
            .collect()
            .await
            .map_err(|e| {
                Failure::Failed(if e.is::<http_body_util::LengthLimitError>() {
                    PeerError::ReplyTooLarge {
                        peer,
                        max: PEER_REPLY_BYTES_MAX,
                    }
                } else {
                    PeerError::Transport {
                        peer,
                        reason: e.to_string(),
                    }
                })
            })?
            .to_bytes();
        let reply_mac = parts
            .headers
            .get(crate::peer_auth::REPLY_AUTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(RawReply {
            status: parts.status.as_u16(),
            reply_mac,
            body,
        })
    };
    let exchange = std::pin::pin!(exchange);
    match future::select(exchange, driver).await {
        Either::Left((reply, _)) => reply,
        // The connection ended first. Whatever it delivered before ending is in the exchange's
        // channels, and with the connection gone the exchange resolves at once either way.
        Either::Right((end, exchange)) => match exchange.await {
            Ok(reply) => Ok(reply),
            Err(Failure::NotSent(unsent)) => Err(Failure::NotSent(unsent)),
            Err(Failure::Failed(e)) => Err(Failure::Failed(match end {
                Err(end) => PeerError::Transport {
                    peer,
                    reason: end.to_string(),
                },
                Ok(()) => e,
            })),
        },
    }
}

/// Opens a connection to `addr`, over TLS when the transport has a client config.
async fn connect(transport: &Arc<Transport>, peer: NodeId, addr: &str) -> Result<Open, PeerError> {
    let dial_error = |reason: String| PeerError::Dial { peer, reason };
    let tcp = tokio::time::timeout(
        Duration::from_millis(CONNECT_TIMEOUT_MS),
        TcpStream::connect(addr),
    )
    .await
    .map_err(|_| dial_error(format!("no connection within {CONNECT_TIMEOUT_MS} ms")))?
    .map_err(|e| dial_error(e.to_string()))?;
    tcp.set_nodelay(true)
        .map_err(|e| dial_error(e.to_string()))?;
    let (sender, driver) = match &transport.tls {
        None => {
            let (sender, conn) = http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| dial_error(e.to_string()))?;
            (sender, Driver::Plain(Box::pin(conn)))
        }
        Some(tls) => {
            let name = server_name(addr).ok_or_else(|| dial_error(format!("no host in {addr}")))?;
            let stream = tokio_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| dial_error(e.to_string()))?;
            let (sender, conn) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| dial_error(e.to_string()))?;
            (sender, Driver::Tls(Box::pin(conn)))
        }
    };
    Ok(Open {
        sender,
        driver,
        transport: transport.clone(),
        last_used: Instant::now(),
    })
}

/// The name a peer's certificate must carry: the host of `host:port` (an IP address or a DNS
/// name; `[v6]:port` too), as `reqwest` checks it for the other peer calls.
fn server_name(addr: &str) -> Option<ServerName<'static>> {
    let (host, _port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).ok()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::service::service_fn;
    use tokio::net::TcpListener;

    use super::*;

    /// How the test peer answers.
    #[derive(Clone, Copy)]
    enum Peer {
        /// "ok", keeping the connection open.
        KeepAlive,
        /// "ok", then closes the connection.
        CloseAfterEach,
        /// Claims a body over the reply limit.
        HugeLength,
    }

    /// A peer on a port of its own; returns its address and its count of accepted connections.
    async fn peer(behaviour: Peer) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let answer = service_fn(move |_req| async move {
                        let mut reply = hyper::Response::builder();
                        match behaviour {
                            Peer::KeepAlive => {}
                            Peer::CloseAfterEach => {
                                reply = reply.header(hyper::header::CONNECTION, "close")
                            }
                            Peer::HugeLength => {
                                reply = reply.header(
                                    hyper::header::CONTENT_LENGTH,
                                    (PEER_REPLY_BYTES_MAX + 1).to_string(),
                                )
                            }
                        }
                        Ok::<_, Infallible>(
                            reply
                                .body(Full::new(Bytes::from_static(b"ok")))
                                .expect("reply"),
                        )
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), answer)
                        .await;
                });
            }
        });
        (addr, accepted)
    }

    fn request() -> hyper::Request<Full<Bytes>> {
        hyper::Request::post("/raft/append")
            .body(Full::new(Bytes::from_static(b"body")))
            .expect("request")
    }

    fn plain() -> Arc<Transport> {
        Arc::new(Transport::new(Duration::from_secs(30), None).expect("transport"))
    }

    const DEADLINE: Duration = Duration::from_secs(5);

    /// `calls` calls on one `PeerConn` over one transport, each answered "ok"; returns how many
    /// connections the peer accepted.
    async fn calls_answered(behaviour: Peer, calls: usize) -> usize {
        let (addr, accepted) = peer(behaviour).await;
        let transport = plain();
        let mut conn = PeerConn::default();
        for _ in 0..calls {
            let reply = conn
                .exchange(&transport, 2, &addr, request(), DEADLINE)
                .await
                .expect("a reply");
            assert_eq!((reply.status, &reply.body[..]), (200, &b"ok"[..]));
        }
        accepted.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn one_connection_carries_every_call() {
        assert_eq!(calls_answered(Peer::KeepAlive, 20).await, 1);
    }

    #[tokio::test]
    async fn a_connection_the_peer_closed_is_replaced_and_no_call_fails() {
        assert_eq!(calls_answered(Peer::CloseAfterEach, 5).await, 5);
    }

    #[tokio::test]
    async fn a_new_transport_opens_a_new_connection() {
        let (addr, accepted) = peer(Peer::KeepAlive).await;
        let mut conn = PeerConn::default();
        for _ in 0..2 {
            // As after a TLS reload: the next call must not ride the old connection.
            let transport = plain();
            conn.exchange(&transport, 2, &addr, request(), DEADLINE)
                .await
                .expect("a reply");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_reply_claiming_more_than_the_limit_is_not_read() {
        let (addr, _) = peer(Peer::HugeLength).await;
        let mut conn = PeerConn::default();
        let err = conn
            .exchange(&plain(), 2, &addr, request(), DEADLINE)
            .await
            .err()
            .expect("an error");
        assert!(matches!(err, PeerError::ReplyTooLarge { .. }), "{err}");
    }

    #[tokio::test]
    async fn nobody_listening_is_a_dial_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        drop(listener);
        let mut conn = PeerConn::default();
        let err = conn
            .exchange(&plain(), 2, &addr, request(), DEADLINE)
            .await
            .err()
            .expect("an error");
        assert!(err.not_sent(), "{err}");
    }

    #[test]
    fn server_names_of_peer_addresses() {
        assert!(matches!(
            server_name("127.0.0.1:7000"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]:7000"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("node-1.example:7000"),
            Some(ServerName::DnsName(_))
        ));
        assert!(server_name("no-port").is_none());
    }
}
