//! Transactions on [`Client`] (`POST /v1/txn`): compares judged together at apply, then the
//! `success` or the `failure` branch applied whole, in one entry. Sent with a `request_id`,
//! so a resend after an unknown outcome applies at most once.

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{Fence, KeyValue};
use crate::{Client, Error, Prepared};

/// A compare: `{key, absent: true} | {key, mod_revision} | {key, version} | {key, value} |
/// {fence: {lock, token}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Compare {
    /// The key does not exist (`absent` must be true).
    Absent { key: String, absent: bool },
    /// The key exists with this `mod_revision`.
    ModRevision { key: String, mod_revision: u64 },
    /// The key exists with this `version`.
    Version { key: String, version: u64 },
    /// The key exists with this value.
    Value { key: String, value: String },
    /// `fence.token` is the lock's current exclusive grant.
    Fence { fence: Fence },
}

impl Compare {
    pub fn absent(key: &str) -> Compare {
        Compare::Absent {
            key: key.into(),
            absent: true,
        }
    }
}

/// An operation of a branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOp {
    Put {
        key: String,
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_id: Option<u64>,
    },
    Delete {
        key: String,
    },
    Get {
        key: String,
    },
    Incr {
        counter: String,
        by: i64,
    },
}

/// The body of `POST /v1/txn` (the client adds the `request_id`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    #[serde(default)]
    pub compare: Vec<Compare>,
    #[serde(default)]
    pub success: Vec<TxnOp>,
    #[serde(default)]
    pub failure: Vec<TxnOp>,
}

/// The result of one op, in the order of the branch that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnResult {
    /// `existed`: the key existed before the put.
    Put {
        revision: u64,
        existed: bool,
    },
    Delete {
        revision: u64,
        existed: bool,
    },
    /// The key as the op saw it; `None` if absent.
    Get(Option<KeyValue>),
    Incr {
        counter: String,
        value: i64,
    },
}

/// The answer to `POST /v1/txn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    /// True when every compare held and `success` ran; false when `failure` ran.
    pub succeeded: bool,
    pub results: Vec<TxnResult>,
    pub revision: u64,
}

impl Client {
    /// Encoding these types cannot fail (string keys, no maps), so this is only a guard.
    pub fn prepare_txn(&self, txn: &TxnRequest) -> Result<Prepared<TxnResponse>, Error> {
        let body = serde_json::to_value(txn).map_err(|e| Error::Config {
            message: format!("cannot encode the transaction: {e}"),
        })?;
        Ok(self.prepare_txn_json(body))
    }

    /// A transaction whose body is given as JSON (the CLI's file or stdin); the server
    /// checks it. A `request_id` is added unless the body names one.
    pub fn prepare_txn_json(&self, body: Value) -> Prepared<TxnResponse> {
        let named = body
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut p = Prepared::write(Method::POST, "/v1/txn".into(), body.clone());
        if let (Some(id), Value::Object(mut map)) = (named, body) {
            map.insert("request_id".into(), Value::String(id.clone()));
            p.body = Some(Value::Object(map));
            p.request_id = Some(id);
        }
        p
    }

    /// Runs a transaction.
    pub async fn txn(&self, txn: &TxnRequest) -> Result<TxnResponse, Error> {
        self.send(&self.prepare_txn(txn)?).await
    }

    /// Runs a transaction given as a JSON body.
    pub async fn txn_json(&self, body: Value) -> Result<TxnResponse, Error> {
        self.send(&self.prepare_txn_json(body)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_have_the_contract_shape() -> Result<(), serde_json::Error> {
        let t = TxnRequest {
            compare: vec![
                Compare::absent("a"),
                Compare::ModRevision {
                    key: "b".into(),
                    mod_revision: 3,
                },
                Compare::Fence {
                    fence: Fence {
                        lock: "L".into(),
                        token: 7,
                    },
                },
            ],
            success: vec![
                TxnOp::Put {
                    key: "a".into(),
                    value: "v".into(),
                    lease_id: None,
                },
                TxnOp::Incr {
                    counter: "c".into(),
                    by: 1,
                },
            ],
            failure: vec![TxnOp::Get { key: "a".into() }],
        };
        assert_eq!(
            serde_json::to_value(&t)?,
            json!({
                "compare": [{"key": "a", "absent": true}, {"key": "b", "mod_revision": 3},
                            {"fence": {"lock": "L", "token": 7}}],
                "success": [{"put": {"key": "a", "value": "v"}}, {"incr": {"counter": "c", "by": 1}}],
                "failure": [{"get": {"key": "a"}}],
            })
        );
        let r: TxnResponse = serde_json::from_value(json!({
            "succeeded": false,
            "results": [{"get": null}, {"put": {"revision": 9, "existed": true}}],
            "revision": 9,
        }))?;
        assert_eq!(r.results[0], TxnResult::Get(None));
        Ok(())
    }
}
