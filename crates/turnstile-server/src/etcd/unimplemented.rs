//! Every `Unimplemented` answer of the etcd port names what was not served: tonic's own
//! (an unknown service or method, which carry no message) and the generated default of every
//! RPC this port does not implement ("Not yet implemented") get a message naming the RPC and
//! pointing at docs/etcd-compat.md. An `Unimplemented` with a message of our own (a field this
//! port does not serve, say) is left as it is.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, Request, Response};

/// The gRPC status code `Unimplemented`, as it appears in the `grpc-status` header.
const UNIMPLEMENTED: &str = "12";
/// The message tonic's generated default implementations answer with.
const GENERATED_DEFAULT: &str = "Not yet implemented";

/// The layer, for `tonic::transport::Server::layer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnimplementedMessageLayer;

impl<S> tower::Layer<S> for UnimplementedMessageLayer {
    type Service = UnimplementedMessage<S>;

    fn layer(&self, inner: S) -> UnimplementedMessage<S> {
        UnimplementedMessage { inner }
    }
}

/// The service: passes every request on and rewrites the message of a bare `Unimplemented`.
#[derive(Debug, Clone)]
pub struct UnimplementedMessage<S> {
    inner: S,
}

impl UnimplementedMessage<()> {
    /// The layer.
    pub fn layer() -> UnimplementedMessageLayer {
        UnimplementedMessageLayer
    }
}

impl<S, B, RB> tower::Service<Request<B>> for UnimplementedMessage<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let rpc = req.uri().path().to_string();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let mut res = answer.await?;
            name_the_rpc(&mut res, &rpc);
            Ok(res)
        })
    }
}

/// Gives a bare `Unimplemented` answer a message naming `rpc`.
fn name_the_rpc<RB>(res: &mut Response<RB>, rpc: &str) {
    let headers = res.headers_mut();
    if headers.get("grpc-status").and_then(|v| v.to_str().ok()) != Some(UNIMPLEMENTED) {
        return;
    }
    let bare = match headers.get("grpc-message").map(HeaderValue::to_str) {
        None => true,
        Some(Ok(m)) => m.is_empty() || m == GENERATED_DEFAULT || m == "Not%20yet%20implemented",
        Some(Err(_)) => false,
    };
    if !bare {
        return;
    }
    // Printable ASCII without `%` needs no percent-encoding in `grpc-message`.
    let rpc: String = rpc
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '%')
        .take(200)
        .collect();
    let message =
        format!("{rpc} is not supported by Turnstile's etcd port (see docs/etcd-compat.md)");
    if let Ok(v) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: &str, message: Option<&str>) -> Response<()> {
        let mut r = Response::new(());
        r.headers_mut()
            .insert("grpc-status", HeaderValue::from_str(status).expect("ascii"));
        if let Some(m) = message {
            r.headers_mut()
                .insert("grpc-message", HeaderValue::from_str(m).expect("ascii"));
        }
        r
    }

    fn message(r: &Response<()>) -> Option<&str> {
        r.headers()
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
    }

    #[test]
    fn bare_unimplemented_answers_name_the_rpc_and_others_are_left_alone() {
        let rpc = "/etcdserverpb.Watch/Watch";
        for bare in [None, Some(""), Some("Not yet implemented")] {
            let mut r = answer("12", bare);
            name_the_rpc(&mut r, rpc);
            let m = message(&r).expect("a message");
            assert!(m.starts_with(rpc) && m.contains("etcd-compat"), "{m}");
        }
        let mut own = answer("12", Some("Put with ignore_value is not supported"));
        name_the_rpc(&mut own, rpc);
        assert_eq!(
            message(&own),
            Some("Put with ignore_value is not supported")
        );
        let mut other = answer("5", None);
        name_the_rpc(&mut other, rpc);
        assert_eq!(message(&other), None);
    }
}
