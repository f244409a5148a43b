//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the client API, derived from the code
//! so that it cannot drift. Paths, parameters and bodies come from the handlers'
//! `#[utoipa::path]` attributes and the types they parse and serialize (`api::answers`,
//! `crate::views`); [`errors`] adds the error schema (its `code` enum is
//! `ApiError::every_kind`) and the statuses every class of route can answer; [`limits`] writes
//! the named limits into the schemas. `tests.rs` checks that every route the router serves is
//! documented and every documented route is served.
//!
//! The document is built once per process and served to anyone, without a credential, like
//! `/healthz`: it describes the API, not the cluster or its data.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{json, Value};
use utoipa::OpenApi;

use crate::api::{
    admin, answers, auth, cluster, counters, elections, kv, leases, locks, members, ranges, txn,
    ui, watch,
};

pub mod errors;
pub mod limits;
#[cfg(test)]
mod tests;

pub use errors::ErrorAnswer;

/// The handlers and the schemas they name.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Turnstile",
        description = "A Raft-replicated lock, lease and key-value store. Every mutating answer \
            carries `revision`, the log index of the entry that applied it. Errors are \
            `{code, message}` (`Error`); limits on names, values and counts are in the schemas.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        leases::grant, leases::get, leases::keepalive, leases::revoke, ranges::leases,
        locks::acquire, locks::acquire_many, locks::release, locks::get, locks::fence_check,
        ranges::locks,
        kv::get, kv::put, kv::delete, ranges::keys, txn::txn,
        counters::get, counters::incr,
        elections::campaign, elections::proclaim, elections::resign, elections::get,
        ranges::elections,
        watch::watch,
        auth::list_roles, auth::put_role, auth::delete_role, auth::list_users, auth::put_user,
        auth::delete_user, auth::create_token, auth::delete_token, auth::whoami,
        cluster::cluster, cluster::healthz, cluster::readyz, openapi_json,
        ui::index, ui::script, ui::stylesheet,
        members::list, members::add, members::promote, members::remove,
        admin::snapshot, admin::backup,
    ),
    components(schemas(ErrorAnswer, watch::WatchEvent, watch::CompactedEvent, answers::RevisionAnswer)),
    tags(
        (name = "leases", description = "Leases: the liveness every lock, key and campaign can hang on"),
        (name = "locks", description = "Exclusive, shared and semaphore locks with fencing tokens"),
        (name = "kv", description = "Keys: conditional and fenced writes, ranges, transactions"),
        (name = "counters", description = "Replicated counters"),
        (name = "elections", description = "Leader election: a lock whose holder publishes a value"),
        (name = "watch", description = "Server-sent events from the replicated history"),
        (name = "auth", description = "Users, roles and tokens (root only; with TLS on)"),
        (name = "cluster", description = "This node, its health and this document"),
        (name = "members", description = "Membership changes (root only)"),
        (name = "admin", description = "Snapshots and backups (root only)"),
    ),
)]
struct ApiDoc;

/// The document as JSON, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| build().0)
}

/// The document as served, built once.
fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| document().to_string())
}

/// Builds the document; also returns the limits that found no schema to go in (the tests
/// require none: a renamed field must not silently lose its limit).
pub fn build() -> (Value, Vec<String>) {
    let mut doc = match serde_json::to_value(ApiDoc::openapi()) {
        Ok(doc) => doc,
        // utoipa's types are plain data: serializing them cannot fail.
        Err(e) => json!({"openapi": "3.1.0", "info": {"title": e.to_string(), "version": ""}}),
    };
    doc["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
    security(&mut doc);
    errors::document(&mut doc);
    let missed = limits::apply(&mut doc);
    (doc, missed)
}

/// Both ways in (docs/security.md): a client certificate, or a bearer token. Every route
/// needs one when TLS is on, except those that say `security: []`.
fn security(doc: &mut Value) {
    doc["components"]["securitySchemes"] = json!({
        "mutualTLS": {
            "type": "mutualTLS",
            "description": "A client certificate signed by the cluster's CA; the principal is its CN (`root`: the superuser)."
        },
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "`Authorization: Bearer <token_id>.<secret>`, from `POST /v1/auth/tokens`."
        }
    });
    doc["security"] = json!([{"mutualTLS": []}, {"bearerAuth": []}]);
}

/// This document (no credential needed).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "cluster", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of this API",
        content_type = "application/json", body = Value)))]
pub async fn openapi_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_text(),
    )
}
