//! The service one connection calls for each request: the node's router (with its request body
//! timed by tower-http's `RequestBodyTimeout`), reporting to the connection's [`ConnClock`]
//! when a request starts and when its response ends. A response ends when hyper drops its
//! body, after the last byte is written or because the connection went away; until then the
//! connection has no deadline, so a watch stream or a long acquire is never cut. On a TLS
//! connection whose client sent a verified certificate, every request gets a copy of its
//! [`ClientCert`] in its extensions (nothing a client sends can put one there).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tower::ServiceExt;

use super::conn_clock::ConnClock;
use crate::tls::ClientCert;

/// `inner`, called once per request of one connection.
#[derive(Debug, Clone)]
pub struct ConnService<S> {
    inner: S,
    clock: Arc<ConnClock>,
    cert: Option<ClientCert>,
}

impl<S> ConnService<S> {
    pub fn new(inner: S, clock: Arc<ConnClock>, cert: Option<ClientCert>) -> ConnService<S> {
        ConnService { inner, clock, cert }
    }
}

impl<S> hyper::service::Service<Request<Incoming>> for ConnService<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        self.clock.request_started();
        if let Some(cert) = &self.cert {
            req.extensions_mut().insert(cert.clone());
        }
        let request = InFlight(self.clock.clone());
        let response = self.inner.clone().oneshot(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| TrackedBody {
                body,
                _request: request,
            }))
        })
    }
}

/// Held while a request is in flight; dropping it ends the request on the clock.
#[derive(Debug)]
struct InFlight(Arc<ConnClock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that ends its request on the connection's clock when dropped.
#[derive(Debug)]
pub struct TrackedBody {
    body: Body,
    _request: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
