//! Users, roles and tokens (`/v1/auth/...`, root only) and `whoami` (any principal), typed as
//! in DESIGN.md "Security and tenancy". The bodies carry no `request_id` (the server refuses
//! unknown fields): putting a role or user replaces it whole and deleting twice only reports
//! "not found", so a resend is harmless; creating a token is not resent once it may have been
//! delivered (a resend would mint a second token), and reports [`Error::Indeterminate`].

use std::collections::BTreeMap;
use std::fmt;

use reqwest::Method;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

use crate::types::Written;
use crate::{Client, Error, Prepared};

/// What a permission covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionKind {
    Lock,
    Key,
    Counter,
}

/// `write` implies `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// One grant of a role: `access` to every name of `kind` starting with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    pub kind: PermissionKind,
    pub prefix: String,
    pub access: Access,
}

/// The body of `PUT /v1/auth/roles/{role}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// May read `/metrics`.
    #[serde(default)]
    pub metrics: bool,
}

/// Per-principal limits; a missing one is the server's documented default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_records: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watches: Option<u64>,
}

impl Quotas {
    /// The quota names the API knows, in display order.
    pub const NAMES: [&'static str; 5] = ["leases", "locks", "keys", "request_records", "watches"];

    /// Sets quota `name` (one of [`Quotas::NAMES`]); false if there is no such quota.
    pub fn set(&mut self, name: &str, value: u64) -> bool {
        let slot = match name {
            "leases" => &mut self.leases,
            "locks" => &mut self.locks,
            "keys" => &mut self.keys,
            "request_records" => &mut self.request_records,
            "watches" => &mut self.watches,
            _ => return false,
        };
        *slot = Some(value);
        true
    }

    /// The quotas that are set, as `(name, value)`.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let values = [
            self.leases,
            self.locks,
            self.keys,
            self.request_records,
            self.watches,
        ];
        Quotas::NAMES
            .into_iter()
            .zip(values)
            .filter_map(|(n, v)| Some((n, v?)))
            .collect()
    }
}

/// The body of `PUT /v1/auth/users/{user}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Quotas>,
}

/// One item of `GET /v1/auth/roles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedRole {
    pub name: String,
    #[serde(flatten)]
    pub role: Role,
}

/// One item of `GET /v1/auth/users`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    #[serde(flatten)]
    pub user: User,
}

/// The answer of `POST /v1/auth/tokens`. The token is shown this once: the cluster keeps only
/// its hash. Debug redacts it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreated {
    #[serde(deserialize_with = "string_or_number")]
    pub token_id: String,
    pub token: String,
    pub revision: u64,
}

impl fmt::Debug for TokenCreated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCreated")
            .field("token_id", &self.token_id)
            .field("token", &"<redacted>")
            .field("revision", &self.revision)
            .finish()
    }
}

/// The answer of `GET /v1/auth/whoami`: the caller's principal, roles, quotas in force and
/// what it uses of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub user: String,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub quotas: Option<Quotas>,
    /// Usage per quota name (`leases`, `locks`, ...), as the server counts it.
    #[serde(default)]
    pub usage: BTreeMap<String, u64>,
}

/// `{"items": [...]}`.
#[derive(Deserialize)]
struct Items<T> {
    items: Vec<T>,
}

/// Token ids are opaque: accepted as a JSON string or number, kept as a string.
fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        S(String),
        N(u64),
    }
    Ok(match Id::deserialize(d)? {
        Id::S(s) => s,
        Id::N(n) => n.to_string(),
    })
}

/// Percent-encodes one path segment: unlike keys, a role or user name never spans segments,
/// so `/` is encoded too.
fn segment(s: &str) -> String {
    crate::client::encode_path(s).replace('/', "%2F")
}

impl Client {
    /// Creates or replaces role `name`.
    pub async fn put_role(&self, name: &str, role: &Role) -> Result<Written, Error> {
        let body = serde_json::to_value(role).map_err(encode_error)?;
        let path = format!("/v1/auth/roles/{}", segment(name));
        self.send(&Prepared::admin(Method::PUT, path, Some(body)))
            .await
    }

    pub async fn delete_role(&self, name: &str) -> Result<Written, Error> {
        let path = format!("/v1/auth/roles/{}", segment(name));
        self.send(&Prepared::admin(Method::DELETE, path, None))
            .await
    }

    pub async fn roles(&self) -> Result<Vec<NamedRole>, Error> {
        let items: Items<NamedRole> = self.send(&Prepared::read("/v1/auth/roles".into())).await?;
        Ok(items.items)
    }

    /// Creates or replaces user `name`.
    pub async fn put_user(&self, name: &str, user: &User) -> Result<Written, Error> {
        let body = serde_json::to_value(user).map_err(encode_error)?;
        let path = format!("/v1/auth/users/{}", segment(name));
        self.send(&Prepared::admin(Method::PUT, path, Some(body)))
            .await
    }

    /// Deletes user `name` (its tokens stop working).
    pub async fn delete_user(&self, name: &str) -> Result<Written, Error> {
        let path = format!("/v1/auth/users/{}", segment(name));
        self.send(&Prepared::admin(Method::DELETE, path, None))
            .await
    }

    pub async fn users(&self) -> Result<Vec<NamedUser>, Error> {
        let items: Items<NamedUser> = self.send(&Prepared::read("/v1/auth/users".into())).await?;
        Ok(items.items)
    }

    /// Mints a token for `user`, valid for `ttl_ms` (the server's default when `None`). The
    /// answer holds the only copy of the token.
    pub async fn create_token(
        &self,
        user: &str,
        ttl_ms: Option<u64>,
    ) -> Result<TokenCreated, Error> {
        let mut body = json!({"user": user});
        if let Some(ttl_ms) = ttl_ms {
            body["ttl_ms"] = json!(ttl_ms);
        }
        let req = Prepared::admin(Method::POST, "/v1/auth/tokens".into(), Some(body))
            .not_resent_when_uncertain();
        self.send(&req).await
    }

    /// Revokes a token at once.
    pub async fn delete_token(&self, token_id: &str) -> Result<Written, Error> {
        let path = format!("/v1/auth/tokens/{}", segment(token_id));
        self.send(&Prepared::admin(Method::DELETE, path, None))
            .await
    }

    /// Who the cluster takes this client for.
    pub async fn whoami(&self) -> Result<WhoAmI, Error> {
        self.send(&Prepared::read("/v1/auth/whoami".into())).await
    }
}

/// Our own types always serialize; an error here is a bug, reported rather than panicking.
fn encode_error(e: serde_json::Error) -> Error {
    Error::Protocol {
        message: format!("cannot encode the request body: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn bodies_match_the_contract() -> Result<(), serde_json::Error> {
        let role = Role {
            permissions: vec![Permission {
                kind: PermissionKind::Lock,
                prefix: "p/".into(),
                access: Access::Write,
            }],
            metrics: false,
        };
        assert_eq!(
            serde_json::to_value(&role)?,
            json!({"permissions": [{"kind": "lock", "prefix": "p/", "access": "write"}], "metrics": false})
        );
        let mut quotas = Quotas::default();
        assert!(quotas.set("leases", 5));
        assert!(!quotas.set("bananas", 1));
        let user = User {
            roles: vec!["r".into()],
            quotas: Some(quotas),
        };
        assert_eq!(
            serde_json::to_value(&user)?,
            json!({"roles": ["r"], "quotas": {"leases": 5}})
        );
        let bare = User {
            roles: vec![],
            quotas: None,
        };
        assert_eq!(serde_json::to_value(&bare)?, json!({"roles": []}));
        Ok(())
    }

    #[test]
    fn answers_decode() -> Result<(), serde_json::Error> {
        let t: TokenCreated =
            serde_json::from_value(json!({"token_id": 42, "token": "tk", "revision": 9}))?;
        assert_eq!(t.token_id, "42");
        assert!(!format!("{t:?}").contains("tk\""));
        let listed: Items<NamedUser> = serde_json::from_value(
            json!({"items": [{"name": "alice", "roles": ["r"], "quotas": {"keys": 3}}]}),
        )?;
        assert_eq!(
            listed.items[0].user.quotas.as_ref().and_then(|q| q.keys),
            Some(3)
        );
        let who: WhoAmI = serde_json::from_value(json!({"user": "root", "roles": []}))?;
        assert_eq!((who.user.as_str(), who.usage.len()), ("root", 0));
        let v: Value = serde_json::to_value(&listed.items[0])?;
        assert_eq!(v["name"], "alice");
        Ok(())
    }

    #[test]
    fn names_are_one_segment() {
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
