//! The etcd port's accept loop: the HTTP port's bounds (`crate::http_server`) before a
//! connection reaches tonic. Past `--http-connections-max` open connections a new one is
//! accepted and closed at once; each TLS handshake runs on its own task under the header read
//! timeout and hands the client's verified certificate on with the connection
//! ([`ConnInfo`]). A connection holds its slot until tonic drops it.
//!
//! There is no idle timeout here: gRPC clients keep one connection open for good, as with
//! etcd, and HTTP/2 keep-alive pings (`KEEPALIVE_*_MS` in `crate::etcd`) close one whose
//! client is gone.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use crate::etcd::common::ConnInfo;
use crate::http_server::{HttpLimits, TlsServer, ACCEPT_ERROR_BACKOFF_MS};

/// Connections accepted (and through their handshake) but not yet taken by tonic.
const HANDOFF_QUEUE: usize = 64;

/// One accepted connection, plain or TLS, with its slot under the cap.
pub struct EtcdIo {
    stream: Stream,
    info: ConnInfo,
    _slot: OwnedSemaphorePermit,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl tonic::transport::server::Connected for EtcdIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for EtcdIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for EtcdIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Accepts on `listener` until `stop` changes; connections come out of the stream once
/// through their handshake. The handle is the accept loop's task.
pub fn accept(
    listener: TcpListener,
    limits: HttpLimits,
    tls: Option<TlsServer>,
    mut stop: watch::Receiver<bool>,
) -> (ReceiverStream<io::Result<EtcdIo>>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(HANDOFF_QUEUE);
    let slots = Arc::new(Semaphore::new(limits.connections_max as usize));
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.changed() => break,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) if crate::http_server::is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "etcd port: accept failed; pausing");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_BACKOFF_MS)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::debug!(%peer, "etcd port: connection cap reached; closing");
                continue;
            };
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
            let tx = tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let io = match &tls {
                    None => EtcdIo {
                        stream: Stream::Plain(tcp),
                        info: ConnInfo::default(),
                        _slot: slot,
                    },
                    Some(tls) => {
                        let Some((stream, cert)) =
                            crate::http_server::handshake(tcp, peer, tls, &limits).await
                        else {
                            return;
                        };
                        EtcdIo {
                            stream: Stream::Tls(Box::new(stream)),
                            info: ConnInfo { cert },
                            _slot: slot,
                        }
                    }
                };
                let _ = tx.send(Ok(io)).await;
            });
        }
    });
    (ReceiverStream::new(rx), task)
}
