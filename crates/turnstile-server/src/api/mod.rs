//! The client HTTP API (`/v1/...`, `/healthz`, `/readyz`). Handlers are thin: parse and
//! validate ([`extract`], [`validate`]), route to the leader (`App::write` / `App::read`), and
//! answer a typed value ([`answers`]). Errors go through `crate::error::ApiError` only. The
//! route tables ([`member_routes`], [`node_routes`], [`open_routes`]) are data, so the tests
//! can check them against the OpenAPI document ([`openapi`]).
//!
//! The test hooks ([`debug`], `/debug/*`) are compiled only with the `test-hooks` feature and
//! mounted only on a node whose test hooks are on; otherwise such a path is an unknown route,
//! answered by the same fallback (and the same 404 body) as any other.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::handler::Handler;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
#[cfg(feature = "test-hooks")]
use axum::routing::post;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;

use crate::app::App;
use crate::error::ApiError;

pub mod acquire;
pub mod admin;
pub mod answers;
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
pub mod openapi;
pub mod ops;
pub mod ranges;
pub mod txn;
pub mod ui;
pub mod validate;
pub mod watch;

/// Largest request body accepted, in bytes. Above the largest valid request (a 64 KiB value,
/// JSON-escaped) and far below sled's blob threshold for the resulting log entry.
pub const BODY_BYTES_MAX: usize = 256 * 1024;

/// An HTTP method a route answers, with its name in the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Put,
    Post,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Put => MethodFilter::PUT,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    /// The method as the OpenAPI document names it.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Put => "put",
            Verb::Post => "post",
            Verb::Delete => "delete",
        }
    }
}

/// One route: a method on a path (in axum's syntax), and its handler.
pub struct Route {
    pub verb: Verb,
    pub path: &'static str,
    handler: MethodRouter<Arc<App>>,
}

fn route<H, T>(verb: Verb, path: &'static str, handler: H) -> Route
where
    H: Handler<T, Arc<App>>,
    T: 'static,
{
    Route {
        verb,
        path,
        handler: on(verb.filter(), handler),
    }
}

fn mount(router: Router<Arc<App>>, routes: Vec<Route>) -> Router<Arc<App>> {
    routes
        .into_iter()
        .fold(router, |r, route| r.route(route.path, route.handler))
}

/// The data routes (`/v1/...` less the node's own): served only by a member of the cluster,
/// with a credential when authentication is on.
pub fn member_routes() -> Vec<Route> {
    use Verb::*;
    vec![
        route(Post, "/v1/leases", leases::grant),
        route(Get, "/v1/leases", ranges::leases),
        route(Get, "/v1/leases/{id}", leases::get),
        route(Delete, "/v1/leases/{id}", leases::revoke),
        route(Post, "/v1/leases/{id}/keepalive", leases::keepalive),
        route(Get, "/v1/locks", ranges::locks),
        route(Post, "/v1/locks/acquire-many", locks::acquire_many),
        route(Get, "/v1/locks/{name}", locks::get),
        route(Post, "/v1/locks/{name}/acquire", locks::acquire),
        route(Post, "/v1/locks/{name}/release", locks::release),
        route(Post, "/v1/fence/check", locks::fence_check),
        route(Get, "/v1/kv", ranges::keys),
        route(Get, "/v1/kv/{*key}", kv::get),
        route(Put, "/v1/kv/{*key}", kv::put),
        route(Delete, "/v1/kv/{*key}", kv::delete),
        route(Post, "/v1/txn", txn::txn),
        route(Get, "/v1/counters/{name}", counters::get),
        route(Post, "/v1/counters/{name}/incr", counters::incr),
        route(Get, "/v1/elections", ranges::elections),
        route(Get, "/v1/elections/{name}", elections::get),
        route(Post, "/v1/elections/{name}/campaign", elections::campaign),
        route(Post, "/v1/elections/{name}/proclaim", elections::proclaim),
        route(Post, "/v1/elections/{name}/resign", elections::resign),
        route(Get, "/v1/watch", watch::watch),
        route(Get, "/v1/auth/roles", auth::list_roles),
        route(Put, "/v1/auth/roles/{role}", auth::put_role),
        route(Delete, "/v1/auth/roles/{role}", auth::delete_role),
        route(Get, "/v1/auth/users", auth::list_users),
        route(Put, "/v1/auth/users/{user}", auth::put_user),
        route(Delete, "/v1/auth/users/{user}", auth::delete_user),
        route(Post, "/v1/auth/tokens", auth::create_token),
        route(Delete, "/v1/auth/tokens/{token_id}", auth::delete_token),
        route(Get, "/v1/auth/whoami", auth::whoami),
    ]
}

/// The node's own routes: its view, membership and operator calls. Served in any phase
/// (an awaiting node must still be re-added), with a credential when authentication is on.
pub fn node_routes() -> Vec<Route> {
    use Verb::*;
    vec![
        route(Get, "/v1/cluster", cluster::cluster),
        route(Get, "/v1/members", members::list),
        route(Post, "/v1/members", members::add),
        route(Delete, "/v1/members/{id}", members::remove),
        route(Post, "/v1/members/{id}/promote", members::promote),
        route(Post, "/v1/admin/snapshot", admin::snapshot),
        route(Get, "/v1/admin/backup", admin::backup),
    ]
}

/// Routes anyone may call, without a credential: health, readiness, the API document and the
/// dashboard's files (which hold no data).
pub fn open_routes() -> Vec<Route> {
    use Verb::*;
    vec![
        route(Get, "/healthz", cluster::healthz),
        route(Get, "/readyz", cluster::readyz),
        route(Get, "/v1/openapi.json", openapi::openapi_json),
        route(Get, "/ui", ui::index),
        route(Get, "/ui/app.js", ui::script),
        route(Get, "/ui/app.css", ui::stylesheet),
    ]
}

/// The client API router.
///
/// Each group of routes has one middleware that runs its checks in order, not a layer per
/// check: every layer costs each request a boxed service clone and a boxed future. With a
/// layer per check, axum and tower were 11.7% of a busy leader's CPU; with these, 8.0%
/// (docs/benchmarks.md, "Work per request on the leader").
pub fn router(app: Arc<App>) -> Router {
    // Every route of these two groups needs a credential when authentication is on
    // (`crate::auth`); the open routes and unknown paths do not.
    let members = mount(Router::new(), member_routes())
        .layer(middleware::from_fn_with_state(app.clone(), member_checks));
    let node = mount(Router::new(), node_routes())
        .layer(middleware::from_fn_with_state(app.clone(), node_checks));
    mount(
        Router::new()
            .merge(members)
            .merge(node)
            .merge(test_hooks(&app)),
        open_routes(),
    )
    .fallback(not_found)
    .method_not_allowed_fallback(method_not_allowed)
    .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
    .with_state(app)
}

/// The checks of a node route.
async fn node_checks(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    match caller_and_query(&app, &mut req).await {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// The checks of a data route: a node route's, then the node's phase, then the
/// acknowledgments the request carries.
async fn member_checks(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let checked = async {
        caller_and_query(&app, &mut req).await?;
        serving(&app)?;
        crate::acks::gather(&app, &req)
    };
    match checked.await {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// Who is calling is settled before anything about the request is judged, then its query.
async fn caller_and_query(app: &App, req: &mut Request) -> Result<(), ApiError> {
    crate::auth::admit(app, req).await?;
    query_allowed(req)
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
fn serving(app: &App) -> Result<(), ApiError> {
    let phase = app.phase();
    if phase.may_serve() {
        return Ok(());
    }
    let msg = format!(
        "node {} is {phase:?}: not (re)admitted to the cluster",
        app.node_id()
    );
    Err(ApiError::NotMember(msg))
}

/// The routes that take query parameters, by method and path; each checks its own
/// (`watch::WatchQuery`, `ranges::NamesQuery`, `ranges::LeasesQuery`, `cluster::ClusterQuery`).
pub(crate) const QUERY_ROUTES: [(&str, &str); 6] = [
    ("GET", "/v1/cluster"),
    ("GET", "/v1/watch"),
    ("GET", "/v1/kv"),
    ("GET", "/v1/locks"),
    ("GET", "/v1/elections"),
    ("GET", "/v1/leases"),
];
/// Parameter names quoted in the refusal, and the bytes of each.
const QUERY_NAMES_QUOTED_MAX: usize = 4;
const QUERY_NAME_BYTES_QUOTED_MAX: usize = 64;

/// Every other route refuses query parameters with `400 bad_request` instead of ignoring
/// them, as docs/api.md promises: a misplaced field (`?wait_ms=`) or something this version
/// does not do (`/v1/kv/a?prefix=`) must not be answered as if it were not there.
fn query_allowed(req: &Request) -> Result<(), ApiError> {
    let uri = req.uri();
    let Some(query) = uri.query().filter(|q| !q.is_empty()) else {
        return Ok(());
    };
    let route = (req.method().as_str(), uri.path());
    if QUERY_ROUTES.contains(&route) {
        return Ok(());
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
    Err(ApiError::BadRequest(format!(
        "{} takes no query parameters (got: {})",
        uri.path()
            .chars()
            .take(QUERY_NAME_BYTES_QUOTED_MAX)
            .collect::<String>(),
        names.join(", ")
    )))
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
