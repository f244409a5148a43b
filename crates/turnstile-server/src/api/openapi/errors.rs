//! The error side of the document: the `Error` schema, whose `code` enum is every code
//! `ApiError` can answer with (`ApiError::every_kind`), and the statuses each class of route
//! answers besides those its handler names (bad input, authentication, quorum, body limits).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{json, Value};
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::RefOr;

use crate::error::ApiError;

/// The body of every error answer: `{code, message}`, plus `current_token` (`lock_held`,
/// `fenced`) and `cycle` (`deadlock_victim`). Its schema is built from `ApiError` itself.
pub struct ErrorAnswer;

impl utoipa::PartialSchema for ErrorAnswer {
    fn schema() -> RefOr<Schema> {
        let codes: std::collections::BTreeSet<&str> =
            ApiError::every_kind().into_iter().map(|(_, c)| c).collect();
        let code = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(codes))
            .description(Some(
                "Stable and machine-readable; the status alone is not.",
            ));
        let token = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
            .minimum(Some(0));
        let cycle = ArrayBuilder::new().items(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0)),
        );
        ObjectBuilder::new()
            .property("code", code)
            .required("code")
            .property(
                "message",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("For people; may change between versions.")),
            )
            .required("message")
            .property(
                "current_token",
                token.description(Some(
                    "`lock_held`, `fenced`: the lock's current token, if the caller may see it.",
                )),
            )
            .property(
                "cycle",
                cycle.description(Some(
                    "`deadlock_victim`: the leases of the wait-for cycle the victim closed.",
                )),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .into()
    }
}

impl utoipa::ToSchema for ErrorAnswer {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Error")
    }
}

/// Routes that answer without a credential and never with an error body.
pub const OPEN_PATHS: [&str; 6] = [
    "/healthz",
    "/readyz",
    "/v1/openapi.json",
    "/ui",
    "/ui/app.js",
    "/ui/app.css",
];

/// Routes that do not go through the leader (no `no_quorum`, no `indeterminate`).
const LOCAL_PATHS: [(&str, &str); 4] = [
    ("get", "/v1/cluster"),
    ("get", "/v1/watch"),
    ("get", "/v1/members"),
    ("post", "/v1/admin/snapshot"),
];

/// The statuses an operation answers besides those its handler names.
fn common_statuses(method: &str, path: &str, has_body: bool) -> Vec<u16> {
    if OPEN_PATHS.contains(&path) {
        return Vec::new();
    }
    // Bad input (including query parameters a route does not take), no or a bad credential,
    // and a credential without the permission.
    let mut statuses = vec![400, 401, 403];
    if path != "/v1/cluster" {
        // Not (re)admitted to the cluster, no quorum, or stopping.
        statuses.push(503);
    }
    if !LOCAL_PATHS.contains(&(method, path)) {
        statuses.push(504);
    }
    let admin = path.starts_with("/v1/members") || path.starts_with("/v1/admin");
    if method != "get" && !admin {
        // A cluster-wide limit or the principal's quota.
        statuses.push(429);
    }
    if has_body {
        statuses.extend([408, 413]);
    }
    statuses
}

/// The codes answered with each status, for the responses' descriptions.
fn codes_by_status() -> BTreeMap<u16, Vec<&'static str>> {
    let mut by_status: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
    for (status, code) in ApiError::every_kind() {
        by_status.entry(status.as_u16()).or_default().push(code);
    }
    by_status
}

/// Adds every operation's common error responses, each with the `Error` body.
pub fn document(doc: &mut Value) {
    let codes = codes_by_status();
    let schemas = doc["components"]["schemas"].clone();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let has_body = op.get("requestBody").is_some();
            let request_id = takes_request_id(op, &schemas);
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            if request_id {
                // A retry under a used id with another request.
                responses.entry("409").or_insert_with(|| {
                    json!({
                        "description": "`request_id_reused`",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                    })
                });
            }
            for status in common_statuses(method, path, has_body) {
                let listed: Vec<String> = codes
                    .get(&status)
                    .map(|c| c.iter().map(|c| format!("`{c}`")).collect())
                    .unwrap_or_default();
                responses.entry(status.to_string()).or_insert_with(|| {
                    json!({
                        "description": listed.join(", "),
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                    })
                });
            }
        }
    }
}

/// True if the operation's JSON body has a `request_id` (it may then answer
/// `409 request_id_reused`).
fn takes_request_id(op: &Value, schemas: &Value) -> bool {
    let body = &op["requestBody"]["content"]["application/json"]["schema"];
    let name = body["$ref"]
        .as_str()
        .or_else(|| {
            // An optional body is `oneOf: [{$ref}, {type: null}]`.
            body["oneOf"]
                .as_array()
                .and_then(|v| v.iter().find_map(|s| s["$ref"].as_str()))
        })
        .and_then(|r| r.strip_prefix("#/components/schemas/"));
    name.is_some_and(|n| schemas[n]["properties"].get("request_id").is_some())
}
