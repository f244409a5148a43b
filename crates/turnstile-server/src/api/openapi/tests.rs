//! The document against the router and the error codes: nothing served is undocumented,
//! nothing documented is unserved, every code is listed, every limit found its schema.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{build, document, errors::OPEN_PATHS};
use crate::api::{member_routes, node_routes, open_routes, QUERY_ROUTES};
use crate::error::ApiError;

/// Axum's `{*key}` (a wildcard) is OpenAPI's `{key}`.
fn openapi_path(axum_path: &str) -> String {
    axum_path.replace("{*", "{")
}

fn served() -> BTreeSet<(String, String)> {
    member_routes()
        .into_iter()
        .chain(node_routes())
        .chain(open_routes())
        .map(|r| (r.verb.name().to_string(), openapi_path(r.path)))
        .collect()
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    let paths = doc["paths"].as_object().expect("the document has paths");
    for (path, item) in paths {
        for method in item.as_object().expect("a path item is an object").keys() {
            if ["get", "put", "post", "delete", "patch", "head", "options"]
                .contains(&method.as_str())
            {
                ops.insert((method.clone(), path.clone()));
            }
        }
    }
    ops
}

#[test]
fn every_served_route_is_documented() {
    let served = served();
    let documented = documented(document());
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not documented: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
    assert!(served.len() >= 40, "{} routes", served.len());
}

/// The middleware that refuses query parameters lets through exactly the operations the
/// document gives query parameters (a new listing left out of it answers 400 to every call).
#[test]
fn exactly_the_routes_with_query_parameters_take_them() {
    let doc = document();
    let mut with_query = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            let params = op["parameters"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if params.iter().any(|p| p["in"] == "query") {
                with_query.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let allowed: BTreeSet<(String, String)> = QUERY_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(with_query, allowed);
}

#[test]
fn the_document_is_openapi_3_1() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string());
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    // Every `$ref` points at a schema that exists.
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let text = doc.to_string();
    for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = piece.split('"').next().unwrap_or_default();
        assert!(schemas.contains_key(name), "dangling $ref to {name}");
    }
    // Every operation has an id, a success answer and only numeric statuses.
    for (method, path) in documented(doc) {
        let op = &doc["paths"][&path][&method];
        assert!(
            op["operationId"].is_string(),
            "{method} {path}: no operationId"
        );
        let responses = op["responses"].as_object().expect("responses");
        assert!(responses.contains_key("200"), "{method} {path}: no 200");
        for status in responses.keys() {
            let n: u16 = status.parse().expect("a numeric status");
            assert!((200..600).contains(&n), "{method} {path}: {status}");
        }
        // Path parameters are declared.
        for name in path.split('{').skip(1).filter_map(|p| p.split('}').next()) {
            let declared = op["parameters"].as_array().is_some_and(|ps| {
                ps.iter()
                    .any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true)
            });
            assert!(
                declared,
                "{method} {path}: path parameter {name} undeclared"
            );
        }
    }
    // The text served parses back to the same document.
    let served: Value = serde_json::from_str(super::document_text()).expect("valid JSON");
    assert_eq!(&served, doc);
}

#[test]
fn every_error_code_is_in_the_error_schema() {
    let doc = document();
    let codes: BTreeSet<&str> = doc["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
        .as_array()
        .expect("the Error schema lists its codes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for (status, code) in ApiError::every_kind() {
        assert!(
            codes.contains(code),
            "{code} ({status}) is not in the Error schema"
        );
    }
    assert!(codes.contains("indeterminate") && codes.contains("no_quorum"));
}

#[test]
fn every_non_open_operation_lists_its_error_statuses() {
    let doc = document();
    for (method, path) in documented(doc) {
        let responses = doc["paths"][&path][&method]["responses"]
            .as_object()
            .expect("responses");
        if OPEN_PATHS.contains(&path.as_str()) {
            continue;
        }
        for status in ["400", "401", "403"] {
            let r = &responses
                .get(status)
                .unwrap_or_else(|| panic!("{method} {path}: no {status}"));
            assert_eq!(
                r["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                "{method} {path} {status}"
            );
        }
        let has_body = doc["paths"][&path][&method].get("requestBody").is_some();
        assert_eq!(
            has_body,
            responses.contains_key("413"),
            "{method} {path}: 413"
        );
    }
}

#[test]
fn every_limit_reaches_its_schema() {
    let (doc, missed) = build();
    assert!(
        missed.is_empty(),
        "limits with no schema to go in: {missed:?}"
    );
    let s = &doc["components"]["schemas"];
    assert_eq!(
        s["PutBody"]["properties"]["value"]["maxLength"],
        turnstile_core::limits::VALUE_BYTES_MAX
    );
    assert_eq!(
        s["GrantBody"]["properties"]["ttl_ms"]["maximum"],
        turnstile_core::limits::TTL_MS_MAX
    );
    assert_eq!(
        s["AcquireManyBody"]["properties"]["names"]["maxItems"],
        turnstile_core::limits::LOCKS_PER_ACQUIRE_MAX
    );
    assert_eq!(
        s["TxnBody"]["properties"]["compare"]["maxItems"],
        turnstile_core::limits::TXN_COMPARES_MAX
    );
    let limit = doc["paths"]["/v1/kv"]["get"]["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "limit"))
        .expect("GET /v1/kv takes limit");
    assert_eq!(limit["schema"]["maximum"], crate::ranges::LIST_LIMIT_MAX);
}

#[test]
fn the_open_routes_need_no_credential() {
    let doc = document();
    for path in OPEN_PATHS {
        assert_eq!(
            doc["paths"][path]["get"]["security"],
            serde_json::json!([{}]),
            "{path}"
        );
    }
    assert!(doc["components"]["securitySchemes"]["mutualTLS"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearerAuth"].is_object());
}
