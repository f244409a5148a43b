//! Who may touch what, against a secure 3-node cluster of real in-process nodes (TLS, client
//! certificates and bearer tokens): the permission matrix of every route and role, a second
//! tenant's isolation from the first's leases and tokens (views, watches, 409 bodies
//! included), per-principal quotas that refuse one tenant and no other, and credentials that
//! stop working when root takes them away. Each refusal is checked beside the same request
//! made by someone allowed to make it, so a test cannot pass because the request was malformed.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Value};
use turnstile_server::tls::certs::{self, CertOptions};
use turnstile_tests::{read_sse_with, token, Cluster};

/// One caller: an HTTPS client trusting the cluster CA, with a client certificate or a
/// bearer token (or neither).
struct Who {
    name: &'static str,
    http: reqwest::Client,
    bearer: Option<String>,
}

impl Who {
    /// A caller presenting the client certificate of `user` (made here if missing).
    fn cert(c: &Cluster, user: &'static str) -> anyhow::Result<Who> {
        let dir = c.certs_dir().context("secure cluster")?;
        let paths = certs::client_paths(&dir, user);
        if !paths.cert.exists() {
            certs::create_client(&dir, user, &CertOptions::default())?;
        }
        Ok(Who {
            name: user,
            http: c.client_builder(Some(&paths))?.build()?,
            bearer: None,
        })
    }

    /// A caller with a bearer token and no certificate.
    fn bearer(c: &Cluster, name: &'static str, token: &str) -> anyhow::Result<Who> {
        Ok(Who {
            name,
            http: c.client_builder(None)?.build()?,
            bearer: Some(token.to_string()),
        })
    }

    /// A caller with no credential at all.
    fn anonymous(c: &Cluster) -> anyhow::Result<Who> {
        Ok(Who {
            name: "anonymous",
            http: c.client_builder(None)?.build()?,
            bearer: None,
        })
    }

    fn request(
        &self,
        c: &Cluster,
        node: u64,
        method: Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, c.url(node, path));
        match &self.bearer {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    async fn call(
        &self,
        c: &Cluster,
        node: u64,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut rb = self.request(c, node, method.clone(), path);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .with_context(|| format!("{} {method} {path}", self.name))?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }

    async fn post(&self, c: &Cluster, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(c, 1, Method::POST, path, Some(body)).await
    }

    async fn get(&self, c: &Cluster, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(c, 1, Method::GET, path, None).await
    }

    async fn lease(&self, c: &Cluster) -> anyhow::Result<u64> {
        let (s, v) = self
            .post(c, "/v1/leases", json!({"ttl_ms": 30_000}))
            .await?;
        if s != 200 {
            bail!("{} lease grant: {s} {v}", self.name);
        }
        v["lease_id"].as_u64().context("lease_id")
    }
}

/// Root (the fixture's client) makes a role and a user with it.
pub(crate) async fn put_user(
    c: &Cluster,
    user: &str,
    perms: Value,
    quotas: Value,
) -> anyhow::Result<()> {
    let role = format!("role-{user}");
    let body = json!({"permissions": perms, "metrics": false});
    let (s, v) = c
        .call(
            1,
            Method::PUT,
            &format!("/v1/auth/roles/{role}"),
            Some(body),
        )
        .await?;
    anyhow::ensure!(s == 200, "put role {role}: {s} {v}");
    let body = json!({"roles": [role], "quotas": quotas});
    let (s, v) = c
        .call(
            1,
            Method::PUT,
            &format!("/v1/auth/users/{user}"),
            Some(body),
        )
        .await?;
    anyhow::ensure!(s == 200, "put user {user}: {s} {v}");
    Ok(())
}

pub(crate) fn on(prefix: &str, access: &str) -> Value {
    json!(["lock", "key", "counter"]
        .iter()
        .map(|k| json!({"kind": k, "prefix": prefix, "access": access}))
        .collect::<Vec<_>>())
}

pub(crate) async fn make_token(c: &Cluster, user: &str) -> anyhow::Result<(String, String)> {
    let (s, v) = c.post(1, "/v1/auth/tokens", json!({"user": user})).await?;
    anyhow::ensure!(s == 200, "token for {user}: {s} {v}");
    let id = v["token_id"].as_str().context("token_id")?.to_string();
    let secret = v["token"].as_str().context("token")?.to_string();
    Ok((id, secret))
}

/// Every route for root, a writer on `a-` (by token), a reader on `a-` (by certificate), a
/// user with no permission (by token) and a caller with no credential.
#[tokio::test]
async fn the_permission_matrix_gives_the_contracts_answers() -> anyhow::Result<()> {
    let c = Cluster::start_secure(3).await?;
    put_user(&c, "writer", on("a-", "write"), json!({})).await?;
    put_user(&c, "reader", on("a-", "read"), json!({})).await?;
    put_user(&c, "nobody", json!([]), json!({})).await?;
    let (_, writer_token) = make_token(&c, "writer").await?;
    let (_, nobody_token) = make_token(&c, "nobody").await?;
    let who = [
        Who::cert(&c, "root")?,
        Who::bearer(&c, "writer", &writer_token)?,
        Who::cert(&c, "reader")?,
        Who::bearer(&c, "nobody", &nobody_token)?,
        Who::anonymous(&c)?,
    ];
    // Every caller but the anonymous one holds a lease of its own (reader and nobody may
    // grant leases: a lease names no resource), and the writer holds lock a-held.
    let mut leases = BTreeMap::new();
    for w in &who[..4] {
        leases.insert(w.name, w.lease(&c).await?);
    }
    let (s, held) = who[1]
        .post(
            &c,
            "/v1/locks/a-held/acquire",
            json!({"lease_id": leases["writer"], "wait_ms": 0}),
        )
        .await?;
    anyhow::ensure!(s == 200, "writer acquire: {s} {held}");
    let held_token = token(&held)?;

    // (method, path, body, expected for root, writer, reader, nobody, anonymous). `{L}` is
    // the caller's own lease.
    let rows: Vec<(Method, &str, Value, [u16; 5])> = vec![
        (
            Method::POST,
            "/v1/leases",
            json!({"ttl_ms": 5_000}),
            [200, 200, 200, 200, 401],
        ),
        (
            Method::GET,
            "/v1/leases/{L}",
            Value::Null,
            [200, 200, 200, 200, 401],
        ),
        (
            Method::POST,
            "/v1/leases/{L}/keepalive",
            Value::Null,
            [200, 200, 200, 200, 401],
        ),
        (
            Method::POST,
            "/v1/locks/a-{N}/acquire",
            json!({"lease_id": "{L}", "wait_ms": 0}),
            [200, 200, 403, 403, 401],
        ),
        (
            Method::POST,
            "/v1/locks/b-{N}/acquire",
            json!({"lease_id": "{L}", "wait_ms": 0}),
            [200, 403, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/locks/a-held",
            Value::Null,
            [200, 200, 200, 403, 401],
        ),
        (
            Method::POST,
            "/v1/fence/check",
            json!({"name": "a-held", "token": held_token, "cluster_id": ""}),
            [200, 200, 200, 403, 401],
        ),
        (
            Method::PUT,
            "/v1/kv/a-k",
            json!({"value": "v"}),
            [200, 200, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/kv/a-k",
            Value::Null,
            [200, 200, 200, 403, 401],
        ),
        (
            Method::PUT,
            "/v1/kv/b-k",
            json!({"value": "v"}),
            [200, 403, 403, 403, 401],
        ),
        (
            Method::POST,
            "/v1/counters/a-c/incr",
            json!({"by": 1}),
            [200, 200, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/counters/a-c",
            Value::Null,
            [200, 200, 200, 403, 401],
        ),
        (
            Method::DELETE,
            "/v1/kv/a-k",
            Value::Null,
            [200, 200, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/cluster",
            Value::Null,
            [200, 200, 200, 200, 401],
        ),
        (
            Method::GET,
            "/v1/members",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::POST,
            "/v1/admin/snapshot",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/admin/backup",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/auth/users",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/auth/roles",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::PUT,
            "/v1/auth/roles/extra",
            json!({"permissions": []}),
            [200, 403, 403, 403, 401],
        ),
        (
            Method::POST,
            "/v1/auth/tokens",
            json!({"user": "reader"}),
            [200, 403, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/auth/whoami",
            Value::Null,
            [200, 200, 200, 200, 401],
        ),
        (
            Method::GET,
            "/metrics",
            Value::Null,
            [200, 403, 403, 403, 401],
        ),
        (
            Method::DELETE,
            "/v1/leases/{L}",
            Value::Null,
            [200, 200, 200, 200, 401],
        ),
        (
            Method::GET,
            "/healthz",
            Value::Null,
            [200, 200, 200, 200, 200],
        ),
        (
            Method::GET,
            "/readyz",
            Value::Null,
            [200, 200, 200, 200, 200],
        ),
    ];
    let mut wrong = Vec::new();
    for (method, path, body, want) in &rows {
        for (w, want) in who.iter().zip(want) {
            let lease = leases.get(w.name).copied().unwrap_or(1).to_string();
            let path = path.replace("{L}", &lease).replace("{N}", w.name);
            let body = (!body.is_null()).then(|| {
                serde_json::from_str(&body.to_string().replace("\"{L}\"", &lease))
                    .unwrap_or(Value::Null)
            });
            let (got, v) = w.call(&c, 1, method.clone(), &path, body).await?;
            let code = v["code"].as_str().unwrap_or("");
            let code_ok = match got {
                401 => code == "unauthenticated",
                403 => code == "permission_denied",
                _ => true,
            };
            if got != *want || !code_ok {
                wrong.push(format!(
                    "{} {method} {path}: {got} {v}, want {want}",
                    w.name
                ));
            }
        }
    }
    anyhow::ensure!(
        wrong.is_empty(),
        "answers differ from the contract:\n{}",
        wrong.join("\n")
    );

    // A role with `"metrics": true` opens /metrics, and nothing else.
    let body = json!({"permissions": [], "metrics": true});
    c.call(1, Method::PUT, "/v1/auth/roles/scraper", Some(body))
        .await?;
    let body = json!({"roles": ["scraper"]});
    c.call(1, Method::PUT, "/v1/auth/users/nobody", Some(body))
        .await?;
    let (s, v) = who[3].get(&c, "/metrics").await?;
    anyhow::ensure!(s == 200, "metrics role: {s} {v}");
    let (s, _) = who[3].get(&c, "/v1/kv/a-k").await?;
    anyhow::ensure!(s == 403, "metrics role reads a key: {s}");
    c.shutdown().await;
    Ok(())
}

/// Alice and bob may both write under `a-`: only ownership stands between bob and alice's
/// lease and token.
#[tokio::test]
async fn a_second_tenant_cannot_use_or_see_the_first_tenants_lease_and_token() -> anyhow::Result<()>
{
    let c = Cluster::start_secure(3).await?;
    put_user(&c, "alice", on("a-", "write"), json!({})).await?;
    put_user(&c, "bob", on("a-", "write"), json!({})).await?;
    let alice = Who::cert(&c, "alice")?;
    let bob = Who::cert(&c, "bob")?;
    let bob_lease = bob.lease(&c).await?;
    let alice_lease = alice.lease(&c).await?;
    let (s, v) = alice
        .post(
            &c,
            "/v1/locks/a-1/acquire",
            json!({"lease_id": alice_lease, "wait_ms": 0}),
        )
        .await?;
    anyhow::ensure!(s == 200, "{v}");
    let alice_token = token(&v)?;

    // Using her lease: exactly as if it did not exist.
    let attempts: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/leases/{alice_lease}"), None),
        (
            Method::POST,
            format!("/v1/leases/{alice_lease}/keepalive"),
            None,
        ),
        (Method::DELETE, format!("/v1/leases/{alice_lease}"), None),
        (
            Method::POST,
            "/v1/locks/a-1/release".into(),
            Some(json!({"lease_id": alice_lease, "token": alice_token})),
        ),
        (
            Method::POST,
            "/v1/locks/a-2/acquire".into(),
            Some(json!({"lease_id": alice_lease, "wait_ms": 0})),
        ),
        (
            Method::PUT,
            "/v1/kv/a-bound".into(),
            Some(json!({"value": "v", "lease_id": alice_lease})),
        ),
    ];
    for (method, path, body) in &attempts {
        let (s, v) = bob.call(&c, 1, method.clone(), path, body.clone()).await?;
        anyhow::ensure!(
            s == 404 && v["code"] == "lease_not_found",
            "bob {method} {path}: {s} {v}"
        );
    }
    // Fencing with her token guards nothing for him.
    let fenced = json!({"value": "x", "fence": {"lock": "a-1", "token": alice_token}});
    let (s, v) = bob
        .call(&c, 1, Method::PUT, "/v1/kv/a-f", Some(fenced.clone()))
        .await?;
    anyhow::ensure!(
        s == 403 && v["code"] == "permission_denied",
        "bob fences: {s} {v}"
    );
    // He does not see her lease or token: in the lock view, the fence check, a 409 body.
    let (_, view) = bob.get(&c, "/v1/locks/a-1").await?;
    let holder = &view["holders"][0];
    anyhow::ensure!(
        holder["lease_id"].is_null() && holder["token"].is_null() && holder["mode"] == "exclusive",
        "bob's view {view}"
    );
    let (_, check) = bob
        .post(
            &c,
            "/v1/fence/check",
            json!({"name": "a-1", "token": alice_token, "cluster_id": ""}),
        )
        .await?;
    anyhow::ensure!(
        check["current_token"].is_null() && check["current"] == false,
        "bob's check {check}"
    );
    let (s, v) = bob
        .post(
            &c,
            "/v1/locks/a-1/acquire",
            json!({"lease_id": bob_lease, "wait_ms": 0}),
        )
        .await?;
    anyhow::ensure!(
        s == 409 && v["code"] == "lock_held" && v.get("current_token").is_none(),
        "bob's 409 {v}"
    );
    // Bob's watch of a- from his lease's revision on, on another node.
    let url = c.url(2, &format!("/v1/watch?prefix=a-&from_revision={bob_lease}"));
    let events = read_sse_with(&bob.http, &url, None, 1).await?;
    for e in &events {
        if e.event == "lock_granted" {
            anyhow::ensure!(
                e.data["token"].is_null() && e.data["lease_id"].is_null(),
                "bob's watch {e:?}"
            );
        }
    }
    anyhow::ensure!(
        events.iter().any(|e| e.event == "lock_granted"),
        "bob saw {events:?}"
    );
    // The same requests by alice work: they were well-formed.
    let (_, view) = alice.get(&c, "/v1/locks/a-1").await?;
    anyhow::ensure!(
        view["holders"][0]["token"] == alice_token,
        "alice's view {view}"
    );
    let (s, v) = alice
        .call(&c, 1, Method::PUT, "/v1/kv/a-f", Some(fenced))
        .await?;
    anyhow::ensure!(s == 200, "alice fences: {s} {v}");
    let (s, v) = alice.get(&c, &format!("/v1/leases/{alice_lease}")).await?;
    anyhow::ensure!(s == 200 && v["locks"][0] == "a-1", "alice's lease {v}");

    // The same request_id from two tenants names two requests, not one.
    let grant = json!({"ttl_ms": 5_000, "request_id": "same-id"});
    let (s1, v1) = alice.post(&c, "/v1/leases", grant.clone()).await?;
    let (s2, v2) = bob.post(&c, "/v1/leases", grant).await?;
    anyhow::ensure!(
        s1 == 200 && s2 == 200 && v1["lease_id"] != v2["lease_id"],
        "{v1} {v2}"
    );
    c.shutdown().await;
    Ok(())
}

/// Alice at each of her quotas is refused with `429 quota_exceeded` naming it; bob, on the
/// same cluster, is refused nothing.
#[tokio::test]
async fn one_tenant_at_its_quotas_leaves_another_unrefused() -> anyhow::Result<()> {
    let c = Cluster::start_secure(3).await?;
    let quotas = json!({"leases": 2, "locks": 2, "keys": 2, "request_records": 6, "watches": 1, "waiting": 1});
    put_user(&c, "alice", on("a-", "write"), quotas).await?;
    put_user(&c, "bob", on("b-", "write"), json!({})).await?;
    let alice = Who::cert(&c, "alice")?;
    let bob = Who::cert(&c, "bob")?;
    let over = |v: &Value, quota: &str| {
        v["code"] == "quota_exceeded" && v["message"].as_str().is_some_and(|m| m.contains(quota))
    };

    let l1 = alice.lease(&c).await?;
    let l2 = alice.lease(&c).await?;
    let (s, v) = alice
        .post(&c, "/v1/leases", json!({"ttl_ms": 5_000}))
        .await?;
    anyhow::ensure!(s == 429 && over(&v, "leases"), "third lease: {s} {v}");
    for (name, lease) in [("a-1", l1), ("a-2", l2)] {
        let (s, v) = alice
            .post(
                &c,
                &format!("/v1/locks/{name}/acquire"),
                json!({"lease_id": lease, "wait_ms": 0}),
            )
            .await?;
        anyhow::ensure!(s == 200, "{name}: {v}");
    }
    let (s, v) = alice
        .post(
            &c,
            "/v1/locks/a-3/acquire",
            json!({"lease_id": l1, "wait_ms": 0}),
        )
        .await?;
    anyhow::ensure!(s == 429 && over(&v, "locks"), "third lock: {s} {v}");
    for k in ["a-k1", "a-k2"] {
        let (s, v) = alice
            .call(
                &c,
                1,
                Method::PUT,
                &format!("/v1/kv/{k}"),
                Some(json!({"value": "v"})),
            )
            .await?;
        anyhow::ensure!(s == 200, "{k}: {v}");
    }
    let (s, v) = alice
        .call(
            &c,
            1,
            Method::PUT,
            "/v1/kv/a-k3",
            Some(json!({"value": "v"})),
        )
        .await?;
    anyhow::ensure!(s == 429 && over(&v, "keys"), "third key: {s} {v}");
    // Request records: ids of answered requests count until acknowledged or windowed out.
    let mut refused = None;
    for i in 0..8 {
        let body = json!({"by": 1, "request_id": format!("r{i}")});
        let (s, v) = alice.post(&c, "/v1/counters/a-c/incr", body).await?;
        if s == 429 {
            anyhow::ensure!(over(&v, "request_records"), "{v}");
            refused = Some(i);
            break;
        }
        anyhow::ensure!(s == 200, "incr {i}: {v}");
    }
    anyhow::ensure!(refused.is_some(), "request_records quota never reached");
    // Watches per node: one open stream, the second refused.
    let first = alice
        .request(&c, 1, Method::GET, "/v1/watch?prefix=a-")
        .send()
        .await?;
    anyhow::ensure!(first.status() == 200, "first watch {}", first.status());
    let (s, v) = alice.get(&c, "/v1/watch?prefix=a-").await?;
    anyhow::ensure!(s == 429 && over(&v, "watches"), "second watch: {s} {v}");
    drop(first);

    // Bob: leases, locks, keys, records, watches, all unrefused.
    let (_, whoami) = bob.get(&c, "/v1/auth/whoami").await?;
    anyhow::ensure!(whoami["user"] == "bob", "{whoami}");
    for i in 0..4 {
        let lease = bob.lease(&c).await?;
        let (s, v) = bob
            .post(
                &c,
                &format!("/v1/locks/b-{i}/acquire"),
                json!({"lease_id": lease, "wait_ms": 0, "request_id": format!("q{i}")}),
            )
            .await?;
        anyhow::ensure!(s == 200, "bob lock {i}: {s} {v}");
        let (s, v) = bob
            .call(
                &c,
                1,
                Method::PUT,
                &format!("/v1/kv/b-k{i}"),
                Some(json!({"value": "v"})),
            )
            .await?;
        anyhow::ensure!(s == 200, "bob key {i}: {s} {v}");
    }
    let w1 = bob
        .request(&c, 1, Method::GET, "/v1/watch?prefix=b-")
        .send()
        .await?;
    let w2 = bob
        .request(&c, 1, Method::GET, "/v1/watch?prefix=b-")
        .send()
        .await?;
    anyhow::ensure!(w1.status() == 200 && w2.status() == 200, "bob's watches");
    let (_, whoami) = alice.get(&c, "/v1/auth/whoami").await?;
    anyhow::ensure!(
        whoami["usage"]["leases"] == 2
            && whoami["usage"]["locks"] == 2
            && whoami["usage"]["keys"] == 2,
        "{whoami}"
    );
    c.shutdown().await;
    Ok(())
}

/// A token works at once on every node; deleting it (or its user) stops it, and a bad token
/// is refused even beside a good certificate.
#[tokio::test]
async fn tokens_work_everywhere_until_root_takes_them_away() -> anyhow::Result<()> {
    let c = Cluster::start_secure(3).await?;
    put_user(&c, "svc", on("a-", "write"), json!({})).await?;
    let (token_id, secret) = make_token(&c, "svc").await?;
    let svc = Who::bearer(&c, "svc", &secret)?;
    for node in 1..=3 {
        let (s, v) = svc
            .call(&c, node, Method::GET, "/v1/auth/whoami", None)
            .await?;
        anyhow::ensure!(s == 200 && v["user"] == "svc", "node {node}: {s} {v}");
    }
    // curl, as any client would, with the bearer token and the CA.
    let dir = c.certs_dir().context("certs")?;
    // (tokio's Command: a blocking wait would stall this runtime, which serves the nodes.)
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(certs::ca_paths(&dir).cert)
        .args(["-H", &format!("Authorization: Bearer {secret}")])
        .arg(c.url(2, "/v1/auth/whoami"))
        .output()
        .await?;
    let body: Value = serde_json::from_slice(&out.stdout).with_context(|| format!("{out:?}"))?;
    anyhow::ensure!(body["user"] == "svc", "curl: {body}");

    // A wrong secret for a real id, beside root's own certificate: refused.
    let root_with_bad_token = Who {
        name: "root+bad token",
        http: Who::cert(&c, "root")?.http,
        bearer: Some(format!("{token_id}.{}", "0".repeat(64))),
    };
    let (s, v) = root_with_bad_token.get(&c, "/v1/cluster").await?;
    anyhow::ensure!(
        s == 401 && v["code"] == "unauthenticated",
        "bad token: {s} {v}"
    );

    let (s, v) = c.delete(1, &format!("/v1/auth/tokens/{token_id}")).await?;
    anyhow::ensure!(s == 200, "{v}");
    for node in 1..=3 {
        let (s, v) = turnstile_tests::wait_for("the token refused", || async {
            let r = svc
                .call(&c, node, Method::GET, "/v1/auth/whoami", None)
                .await
                .ok()?;
            (r.0 == 401).then_some(r)
        })
        .await?;
        anyhow::ensure!(v["code"] == "unauthenticated", "node {node}: {s} {v}");
    }
    // A user deleted takes its tokens with it.
    let (_, secret2) = make_token(&c, "svc").await?;
    let svc2 = Who::bearer(&c, "svc", &secret2)?;
    let (s, _) = svc2.get(&c, "/v1/auth/whoami").await?;
    anyhow::ensure!(s == 200, "second token");
    let (s, v) = c.delete(1, "/v1/auth/users/svc").await?;
    anyhow::ensure!(s == 200, "{v}");
    turnstile_tests::wait_for("the deleted user's token refused", || async {
        let (s, _) = svc2.get(&c, "/v1/auth/whoami").await.ok()?;
        (s == 401).then_some(())
    })
    .await?;
    c.shutdown().await;
    Ok(())
}
