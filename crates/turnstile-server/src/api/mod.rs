//! The client HTTP API (`/v1/...`, `/healthz`, `/readyz`). Handlers are thin: parse and
//! validate ([`extract`], [`validate`]), route to the leader (`App::write` / `App::read`), and
//! shape the JSON answer. Errors go through `crate::error::ApiError` only.
//!
//! The test hooks ([`debug`], `/debug/*`) are compiled only with the `test-hooks` feature and
//! mounted only on a node whose test hooks are on; otherwise such a path is an unknown route,
//! answered by the same fallback (and the same 404 body) as any other.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::App;
use crate::error::ApiError;

pub mod acquire;
pub mod admin;
pub mod auth;
pub mod cluster;
pub mod counters;
#[cfg(feature = "test-hooks")]
pub mod debug;
pub mod elections;
pub mod extract;
pub mod kv;
pub mod leases;
pub mod locks;
pub mod members;
pub mod ops;
pub mod ranges;
pub mod txn;
pub mod validate;
pub mod watch;

/// Largest request body accepted, in bytes. Above the largest valid request (a 64 KiB value,
/// JSON-escaped) and far below sled's blob threshold for the resulting log entry.
pub const BODY_BYTES_MAX: usize = 256 * 1024;

/// The client API router.
pub fn router(app: Arc<App>) -> Router {
    let v1 = Router::new()
        .route("/v1/leases", post(leases::grant).get(ranges::leases))
        .route("/v1/locks", get(ranges::locks))
        .route("/v1/kv", get(ranges::keys))
        .route("/v1/txn", post(txn::txn))
        .route("/v1/leases/{id}", get(leases::get).delete(leases::revoke))
        .route("/v1/leases/{id}/keepalive", post(leases::keepalive))
        .route("/v1/locks/acquire-many", post(locks::acquire_many))
        .route("/v1/locks/{name}", get(locks::get))
        .route("/v1/locks/{name}/acquire", post(locks::acquire))
        .route("/v1/locks/{name}/release", post(locks::release))
        .route("/v1/fence/check", post(locks::fence_check))
        .route(
            "/v1/kv/{*key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .route("/v1/counters/{name}", get(counters::get))
        .route("/v1/counters/{name}/incr", post(counters::incr))
        .route("/v1/elections/{name}", get(elections::get))
        .route("/v1/elections/{name}/campaign", post(elections::campaign))
        .route("/v1/elections/{name}/proclaim", post(elections::proclaim))
        .route("/v1/elections/{name}/resign", post(elections::resign))
        .route("/v1/watch", get(watch::watch))
        .route("/v1/auth/roles", get(auth::list_roles))
        .route(
            "/v1/auth/roles/{role}",
            axum::routing::put(auth::put_role).delete(auth::delete_role),
        )
        .route("/v1/auth/users", get(auth::list_users))
        .route(
            "/v1/auth/users/{user}",
            axum::routing::put(auth::put_user).delete(auth::delete_user),
        )
        .route("/v1/auth/tokens", post(auth::create_token))
        .route(
            "/v1/auth/tokens/{token_id}",
            axum::routing::delete(auth::delete_token),
        )
        .route("/v1/auth/whoami", get(auth::whoami))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            crate::acks::gather,
        ))
        .layer(middleware::from_fn_with_state(app.clone(), serving_gate));
    // Every route here needs a credential when authentication is on (`crate::auth`); the
    // health checks and unknown paths do not.
    let authenticated = Router::new()
        .merge(v1)
        .route("/v1/cluster", get(cluster::cluster))
        .route("/v1/members", get(members::list).post(members::add))
        .route("/v1/members/{id}", axum::routing::delete(members::remove))
        .route("/v1/members/{id}/promote", post(members::promote))
        .route("/v1/admin/snapshot", post(admin::snapshot))
        .route("/v1/admin/backup", get(admin::backup))
        .layer(middleware::from_fn(refuse_query))
        // Outermost: who is calling is settled before anything about the request is judged.
        .layer(middleware::from_fn_with_state(
            app.clone(),
            crate::auth::layer,
        ));
    Router::new()
        .merge(authenticated)
        .merge(test_hooks(&app))
        .route("/healthz", get(cluster::healthz))
        .route("/readyz", get(cluster::readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(app)
}

/// The `/debug/*` routes, on a node whose test hooks are on; none otherwise.
#[cfg(feature = "test-hooks")]
fn test_hooks(app: &App) -> Router<Arc<App>> {
    if !app.cfg.enable_test_hooks {
        return Router::new();
    }
    Router::new().route("/debug/clock", post(debug::set_clock))
}

/// No test hooks in this build.
#[cfg(not(feature = "test-hooks"))]
fn test_hooks(_app: &App) -> Router<Arc<App>> {
    Router::new()
}

/// Only a node that formed or (re)joined the cluster serves clients. An empty node of an
/// existing cluster has nothing trustworthy to say.
async fn serving_gate(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let phase = app.phase();
    if phase.may_serve() {
        return next.run(req).await;
    }
    let msg = format!(
        "node {} is {phase:?}: not (re)admitted to the cluster",
        app.node_id()
    );
    ApiError::NotMember(msg).into_response()
}

/// The routes that take query parameters, by method and path; each checks its own
/// (`watch::WatchQuery`, `ranges::NamesQuery`, `ranges::LeasesQuery`).
const QUERY_ROUTES: [(&str, &str); 4] = [
    ("GET", "/v1/watch"),
    ("GET", "/v1/kv"),
    ("GET", "/v1/locks"),
    ("GET", "/v1/leases"),
];
/// Parameter names quoted in the refusal, and the bytes of each.
const QUERY_NAMES_QUOTED_MAX: usize = 4;
const QUERY_NAME_BYTES_QUOTED_MAX: usize = 64;

/// Every other route refuses query parameters with `400 bad_request` instead of ignoring
/// them, as docs/api.md promises: a misplaced field (`?wait_ms=`) or something this version
/// does not do (`/v1/kv/a?prefix=`) must not be answered as if it were not there.
async fn refuse_query(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let Some(query) = uri.query().filter(|q| !q.is_empty()) else {
        return next.run(req).await;
    };
    let route = (req.method().as_str(), uri.path());
    if QUERY_ROUTES.contains(&route) {
        return next.run(req).await;
    }
    let names: Vec<String> = query
        .split('&')
        .take(QUERY_NAMES_QUOTED_MAX)
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            let cut = (0..=name.len().min(QUERY_NAME_BYTES_QUOTED_MAX))
                .rev()
                .find(|&i| name.is_char_boundary(i))
                .unwrap_or(0);
            name[..cut].to_string()
        })
        .collect();
    ApiError::BadRequest(format!(
        "{} takes no query parameters (got: {})",
        uri.path()
            .chars()
            .take(QUERY_NAME_BYTES_QUOTED_MAX)
            .collect::<String>(),
        names.join(", ")
    ))
    .into_response()
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
