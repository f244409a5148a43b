//! HTTP request metrics: an axum middleware recording each request's latency by method,
//! matched route template and status code. Routes come from axum's `MatchedPath` (the
//! template, `/v1/locks/{name}/acquire`), never the raw URI, so lock names, keys and lease ids
//! cannot mint series; a request no route matched is `route="unmatched"`. Methods outside the
//! standard set are `other`. Every label therefore has a small, fixed set of values.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `route` of a request that matched no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Latency buckets, in seconds: 0.5 ms to 300 s (a waiting acquire can hold its request for
/// its whole `wait_ms`, up to `WAIT_MS_MAX`, 5 min).
const HTTP_SECONDS_BUCKETS: [f64; 17] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: &'static str,
    pub route: String,
    pub status: u16,
}

/// The request latency histograms.
#[derive(Debug)]
pub struct HttpMetrics {
    requests: Family<HttpLabels, Histogram, fn() -> Histogram>,
}

fn http_seconds_histogram() -> Histogram {
    Histogram::new(HTTP_SECONDS_BUCKETS)
}

impl HttpMetrics {
    pub fn new() -> HttpMetrics {
        HttpMetrics {
            requests: Family::new_with_constructor(http_seconds_histogram),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "http_request_duration_seconds",
            "Time from a request's arrival to its response head, by method, route template and status; node-local (counts the requests this node answered, proxied ones included). A watch stream counts until its headers are sent",
            self.requests.clone(),
        );
    }

    fn observe(&self, labels: HttpLabels, seconds: f64) {
        self.requests.get_or_create(&labels).observe(seconds);
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The middleware: wraps every route (and the fallback) of the node's router.
pub async fn track(State(m): State<Arc<HttpMetrics>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str)
        .to_string();
    let response = next.run(req).await;
    let labels = HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    m.observe(labels, started.elapsed().as_secs_f64());
    response
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    /// Routes by template, unmatched paths, and odd methods all map to a fixed label set.
    #[tokio::test]
    async fn labels_are_route_templates_never_raw_paths() {
        let m = Arc::new(HttpMetrics::new());
        let app = Router::new()
            .route("/v1/locks/{name}", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(m.clone(), track));
        for (method, uri) in [
            ("GET", "/v1/locks/a"),
            ("GET", "/v1/locks/b"),
            ("GET", "/nope/secret-name"),
            ("BREW", "/v1/locks/c"),
        ] {
            let req = Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .expect("request");
            app.clone().oneshot(req).await.expect("infallible");
        }
        let count = |method, route: &str, status| {
            let labels = HttpLabels {
                method,
                route: route.to_string(),
                status,
            };
            m.requests.get(&labels).map_or(0, |h| h.count())
        };
        assert_eq!(count("GET", "/v1/locks/{name}", 200), 2);
        assert_eq!(count("GET", UNMATCHED_ROUTE, 404), 1);
        assert_eq!(count("other", "/v1/locks/{name}", 405), 1);
        assert_eq!(m.requests.len(), 3);
    }
}
