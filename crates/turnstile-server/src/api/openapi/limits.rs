//! The named limits, written into the document's schemas from the constants themselves
//! (`turnstile_core::limits`, `turnstile_core::auth`, this crate's own caps), never retyped:
//! name and value sizes as `maxLength`, TTL and step ranges as `minimum`/`maximum`, list and
//! transaction sizes as `maxItems`, name alphabets as `pattern`. Sizes the server counts in
//! bytes of UTF-8 are `maxLength` in characters here (JSON Schema has no byte length): exact
//! for the ASCII-only names, an upper bound for keys and values.

use serde_json::{json, Map, Value};
use turnstile_core::auth::{
    PERMISSIONS_PER_ROLE_MAX, PREFIX_BYTES_MAX, PRINCIPAL_BYTES_MAX, ROLES_PER_USER_MAX,
};
use turnstile_core::limits::{
    COUNTER_NAME_BYTES_MAX, COUNTER_STEP_ABS_MAX, ELECTION_NAME_BYTES_MAX,
    ELECTION_VALUE_BYTES_MAX, KEY_BYTES_MAX, LOCKS_PER_ACQUIRE_MAX, LOCK_NAME_BYTES_MAX,
    PERMITS_MAX, REQUEST_ID_BYTES_MAX, TTL_MS_MAX, TTL_MS_MIN, TXN_COMPARES_MAX,
    TXN_OPS_PER_BRANCH_MAX, VALUE_BYTES_MAX,
};

use crate::api::acquire::WAIT_MS_MAX;
use crate::ranges::LIST_LIMIT_MAX;

/// One JSON Schema keyword with its value.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    MinLength(usize),
    MaxLength(usize),
    Minimum(i64),
    Maximum(u64),
    MinItems(usize),
    MaxItems(usize),
    Pattern(&'static str),
    /// Limits on each item of an array.
    Items(&'static [Limit]),
}

use Limit::*;

/// Lock, counter and election names (`api::validate::name`).
const NAME_PATTERN: &str = "^[A-Za-z0-9._:-]+$";
/// User and role names (`turnstile_core::auth::check_name`).
const PRINCIPAL_PATTERN: &str = "^[A-Za-z0-9._@-]+$";
/// Keys and permission prefixes: no control characters (Rust's `char::is_control`).
const NO_CONTROL_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";
/// Request ids: printable ASCII.
const REQUEST_ID_PATTERN: &str = "^[!-~]+$";

const LOCK_NAME: &[Limit] = &[
    MinLength(1),
    MaxLength(LOCK_NAME_BYTES_MAX),
    Pattern(NAME_PATTERN),
];
/// A lock-name prefix or `after` of `GET /v1/locks`: may be empty.
const LOCK_NAME_PART: &[Limit] = &[
    MaxLength(LOCK_NAME_BYTES_MAX),
    Pattern("^[A-Za-z0-9._:-]*$"),
];
const COUNTER_NAME: &[Limit] = &[
    MinLength(1),
    MaxLength(COUNTER_NAME_BYTES_MAX),
    Pattern(NAME_PATTERN),
];
const ELECTION_NAME: &[Limit] = &[
    MinLength(1),
    MaxLength(ELECTION_NAME_BYTES_MAX),
    Pattern(NAME_PATTERN),
];
const KEY: &[Limit] = &[
    MinLength(1),
    MaxLength(KEY_BYTES_MAX),
    Pattern(NO_CONTROL_PATTERN),
];
/// A key prefix or `after`: may be empty.
const KEY_PART: &[Limit] = &[MaxLength(KEY_BYTES_MAX), Pattern(NO_CONTROL_PATTERN)];
const VALUE: &[Limit] = &[MaxLength(VALUE_BYTES_MAX)];
const ELECTION_VALUE: &[Limit] = &[MaxLength(ELECTION_VALUE_BYTES_MAX)];
const PRINCIPAL: &[Limit] = &[
    MinLength(1),
    MaxLength(PRINCIPAL_BYTES_MAX),
    Pattern(PRINCIPAL_PATTERN),
];
const REQUEST_ID: &[Limit] = &[
    MinLength(1),
    MaxLength(REQUEST_ID_BYTES_MAX),
    Pattern(REQUEST_ID_PATTERN),
];
/// Lease ids, tokens and node ids are log indexes or chosen ids: never 0.
const ID: &[Limit] = &[Minimum(1)];
const TTL: &[Limit] = &[Minimum(TTL_MS_MIN as i64), Maximum(TTL_MS_MAX)];
const WAIT: &[Limit] = &[Maximum(WAIT_MS_MAX)];
const LIST_LIMIT: &[Limit] = &[Minimum(1), Maximum(LIST_LIMIT_MAX as u64)];
const STEP: &[Limit] = &[
    Minimum(-COUNTER_STEP_ABS_MAX),
    Maximum(COUNTER_STEP_ABS_MAX as u64),
];

/// `(component schema, property, limits)`: every property of that name in the schema,
/// nested ones included (the variants of `OpBody`).
const PROPERTIES: &[(&str, &str, &[Limit])] = &[
    ("GrantBody", "ttl_ms", TTL),
    ("GrantBody", "request_id", REQUEST_ID),
    ("RevokeBody", "request_id", REQUEST_ID),
    ("AcquireBody", "lease_id", ID),
    ("AcquireBody", "wait_ms", WAIT),
    ("AcquireBody", "request_id", REQUEST_ID),
    (
        "AcquireBody",
        "permits",
        &[Minimum(1), Maximum(PERMITS_MAX as u64)],
    ),
    (
        "AcquireManyBody",
        "names",
        &[
            MinItems(1),
            MaxItems(LOCKS_PER_ACQUIRE_MAX),
            Items(LOCK_NAME),
        ],
    ),
    ("AcquireManyBody", "lease_id", ID),
    ("AcquireManyBody", "wait_ms", WAIT),
    ("AcquireManyBody", "request_id", REQUEST_ID),
    ("ReleaseBody", "token", ID),
    ("ReleaseBody", "lease_id", ID),
    ("ReleaseBody", "request_id", REQUEST_ID),
    ("FenceCheckBody", "name", LOCK_NAME),
    ("PutBody", "value", VALUE),
    ("PutBody", "lease_id", ID),
    ("PutBody", "request_id", REQUEST_ID),
    ("DeleteBody", "request_id", REQUEST_ID),
    ("IfBody", "value", VALUE),
    ("FenceBody", "lock", LOCK_NAME),
    ("FenceBody", "token", ID),
    ("IncrBody", "by", STEP),
    ("IncrBody", "request_id", REQUEST_ID),
    ("TxnBody", "compare", &[MaxItems(TXN_COMPARES_MAX)]),
    ("TxnBody", "success", &[MaxItems(TXN_OPS_PER_BRANCH_MAX)]),
    ("TxnBody", "failure", &[MaxItems(TXN_OPS_PER_BRANCH_MAX)]),
    ("TxnBody", "request_id", REQUEST_ID),
    ("CompareBody", "key", KEY),
    ("CompareBody", "value", VALUE),
    ("TxnFenceBody", "lock", LOCK_NAME),
    ("TxnFenceBody", "token", ID),
    ("OpBody", "key", KEY),
    ("OpBody", "value", VALUE),
    ("OpBody", "lease_id", ID),
    ("OpBody", "counter", COUNTER_NAME),
    ("OpBody", "by", STEP),
    ("CampaignBody", "lease_id", ID),
    ("CampaignBody", "value", ELECTION_VALUE),
    ("CampaignBody", "wait_ms", WAIT),
    ("CampaignBody", "request_id", REQUEST_ID),
    ("ProclaimBody", "lease_id", ID),
    ("ProclaimBody", "token", ID),
    ("ProclaimBody", "value", ELECTION_VALUE),
    ("ProclaimBody", "request_id", REQUEST_ID),
    ("ResignBody", "lease_id", ID),
    ("ResignBody", "token", ID),
    ("ResignBody", "request_id", REQUEST_ID),
    (
        "RoleBody",
        "permissions",
        &[MaxItems(PERMISSIONS_PER_ROLE_MAX)],
    ),
    (
        "PermissionBody",
        "prefix",
        &[MaxLength(PREFIX_BYTES_MAX), Pattern(NO_CONTROL_PATTERN)],
    ),
    (
        "UserBody",
        "roles",
        &[MaxItems(ROLES_PER_USER_MAX), Items(PRINCIPAL)],
    ),
    ("TokenBody", "user", PRINCIPAL),
    ("AddBody", "id", ID),
];

/// `(path, parameter, limits)`, for every operation of the path that has the parameter.
const PARAMETERS: &[(&str, &str, &[Limit])] = &[
    ("/v1/leases", "limit", LIST_LIMIT),
    ("/v1/leases/{id}", "id", ID),
    ("/v1/leases/{id}/keepalive", "id", ID),
    ("/v1/locks", "prefix", LOCK_NAME_PART),
    ("/v1/locks", "after", LOCK_NAME_PART),
    ("/v1/locks", "limit", LIST_LIMIT),
    ("/v1/locks/{name}", "name", LOCK_NAME),
    ("/v1/locks/{name}/acquire", "name", LOCK_NAME),
    ("/v1/locks/{name}/release", "name", LOCK_NAME),
    ("/v1/kv", "prefix", KEY_PART),
    ("/v1/kv", "after", KEY_PART),
    ("/v1/kv", "limit", LIST_LIMIT),
    ("/v1/kv/{key}", "key", KEY),
    ("/v1/counters/{name}", "name", COUNTER_NAME),
    ("/v1/counters/{name}/incr", "name", COUNTER_NAME),
    ("/v1/elections/{name}", "name", ELECTION_NAME),
    ("/v1/elections/{name}/campaign", "name", ELECTION_NAME),
    ("/v1/elections/{name}/proclaim", "name", ELECTION_NAME),
    ("/v1/elections/{name}/resign", "name", ELECTION_NAME),
    ("/v1/watch", "key", KEY),
    ("/v1/watch", "prefix", KEY_PART),
    ("/v1/auth/roles/{role}", "role", PRINCIPAL),
    ("/v1/auth/users/{user}", "user", PRINCIPAL),
    ("/v1/members/{id}", "id", ID),
    ("/v1/members/{id}/promote", "id", ID),
];

fn put(schema: &mut Value, limits: &[Limit]) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    for limit in limits {
        let (key, value) = match *limit {
            MinLength(n) => ("minLength", json!(n)),
            MaxLength(n) => ("maxLength", json!(n)),
            Minimum(n) => ("minimum", json!(n)),
            Maximum(n) => ("maximum", json!(n)),
            MinItems(n) => ("minItems", json!(n)),
            MaxItems(n) => ("maxItems", json!(n)),
            Pattern(p) => ("pattern", json!(p)),
            Items(each) => {
                let items = obj.entry("items").or_insert_with(|| json!({}));
                put(items, each);
                continue;
            }
        };
        obj.insert(key.into(), value);
    }
}

/// Applies `limits` to every property `name` under `schema` (not following `$ref`s); returns
/// how many it found.
fn put_property(schema: &mut Value, name: &str, limits: &[Limit]) -> usize {
    let mut found = 0;
    if let Some(p) = schema.pointer_mut(&format!("/properties/{name}")) {
        put(p, limits);
        found += 1;
    }
    let Some(obj) = schema.as_object_mut() else {
        return found;
    };
    for (key, child) in obj.iter_mut() {
        match (key.as_str(), child) {
            ("properties", Value::Object(props)) => {
                for prop in props.values_mut() {
                    found += put_property(prop, name, limits);
                }
            }
            ("oneOf" | "anyOf" | "allOf", Value::Array(subs)) => {
                for sub in subs {
                    found += put_property(sub, name, limits);
                }
            }
            _ => {}
        }
    }
    found
}

fn put_parameter(path_item: &mut Map<String, Value>, name: &str, limits: &[Limit]) -> usize {
    let mut found = 0;
    for op in path_item.values_mut() {
        let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
            continue;
        };
        for p in params {
            if p.get("name").and_then(Value::as_str) == Some(name) {
                if let Some(schema) = p.get_mut("schema") {
                    put(schema, limits);
                    found += 1;
                }
            }
        }
    }
    found
}

/// Gives every integer the range of its Rust type where no limit narrowed it: utoipa writes
/// `format` (`int32`, `int64`) and, for an unsigned type, `minimum: 0`.
fn integer_ranges(schema: &mut Value) {
    match schema {
        Value::Object(obj) => {
            let is_integer = match obj.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            let unsigned = obj
                .get("minimum")
                .and_then(Value::as_i64)
                .is_some_and(|m| m >= 0);
            let (min, max) = match (obj.get("format").and_then(Value::as_str), unsigned) {
                (Some("int64"), true) => (None, json!(u64::MAX)),
                (Some("int64"), false) => (Some(json!(i64::MIN)), json!(i64::MAX)),
                (Some("int32"), true) => (None, json!(u32::MAX)),
                (Some("int32"), false) => (Some(json!(i32::MIN)), json!(i32::MAX)),
                _ => (None, Value::Null),
            };
            if is_integer && !max.is_null() {
                obj.entry("maximum").or_insert(max);
                if let Some(min) = min {
                    obj.entry("minimum").or_insert(min);
                }
            }
            for child in obj.values_mut() {
                integer_ranges(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integer_ranges),
        _ => {}
    }
}

/// Writes every limit into `doc`; returns the targets that were not found.
pub fn apply(doc: &mut Value) -> Vec<String> {
    integer_ranges(doc);
    let mut missed = Vec::new();
    for (schema, property, limits) in PROPERTIES {
        let found = doc
            .pointer_mut(&format!("/components/schemas/{schema}"))
            .map_or(0, |s| put_property(s, property, limits));
        if found == 0 {
            missed.push(format!("{schema}.{property}"));
        }
    }
    for (path, param, limits) in PARAMETERS {
        let found = doc
            .get_mut("paths")
            .and_then(|p| p.get_mut(*path))
            .and_then(Value::as_object_mut)
            .map_or(0, |item| put_parameter(item, param, limits));
        if found == 0 {
            missed.push(format!("{path} {param}"));
        }
    }
    missed
}
