//! Range reads (`GET /v1/kv`, `/v1/locks`, `/v1/leases`) against real 3-node clusters: paging
//! returns every item exactly once and in order with `more` right, every page is read at one
//! revision that covers every write acknowledged before it (also through a follower), a page
//! stops at its byte budget, bad parameters are `400`s, and a principal lists only prefixes it
//! may read, sees only its own leases, and never another tenant's lease ids.

use anyhow::{ensure, Context};
use reqwest::Method;
use serde_json::{json, Value};
use turnstile_tests::{token, Cluster};

/// Percent-encodes a query value (everything but unreserved bytes and `/`).
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Walks `route` (`/v1/kv`, `/v1/locks` or `/v1/elections`) under `prefix` in pages of `limit` on `node`;
/// returns the names in the order served and every page's `(revision, more)`.
async fn walk(
    c: &Cluster,
    node: u64,
    route: &str,
    prefix: &str,
    limit: usize,
) -> anyhow::Result<(Vec<Value>, Vec<(u64, bool)>)> {
    let name_field = if route == "/v1/kv" { "key" } else { "name" };
    let (mut items, mut pages) = (Vec::new(), Vec::new());
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("{route}?prefix={}&limit={limit}", enc(prefix));
        if let Some(a) = &after {
            path.push_str(&format!("&after={}", enc(a)));
        }
        let (s, v) = c.get(node, &path).await?;
        ensure!(s == 200, "{path}: {s} {v}");
        let page = v["items"].as_array().context("items")?.clone();
        ensure!(
            page.len() <= limit,
            "{path}: {} items over the limit",
            page.len()
        );
        let more = v["more"].as_bool().context("more")?;
        pages.push((v["revision"].as_u64().context("revision")?, more));
        after = page
            .last()
            .and_then(|i| i[name_field].as_str())
            .map(str::to_string);
        items.extend(page);
        if !more {
            return Ok((items, pages));
        }
        ensure!(after.is_some(), "{path}: more with an empty page");
        ensure!(pages.len() < 10_000, "the walk does not end");
    }
}

async fn put(c: &Cluster, node: u64, key: &str, value: &str) -> anyhow::Result<u64> {
    let (s, v) = c
        .call(
            node,
            Method::PUT,
            &format!("/v1/kv/{key}"),
            Some(json!({"value": value})),
        )
        .await?;
    ensure!(s == 200, "put {key}: {s} {v}");
    v["revision"].as_u64().context("revision")
}

async fn follower(c: &Cluster) -> anyhow::Result<u64> {
    let leader = c.leader().await?;
    Ok(if leader == 1 { 2 } else { 1 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_return_each_key_once_in_order_at_a_consistent_revision() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let f = follower(&c).await?;
    // Neighbours outside the prefix on both sides must not leak into the walk.
    put(&c, 1, "o/z", "x").await?;
    put(&c, 1, "q/a", "x").await?;
    put(&c, 1, "p", "x").await?;
    let mut want = Vec::new();
    let mut last_rev = 0;
    for i in (0..120).rev() {
        let key = format!("p/{i:03}");
        last_rev = put(&c, 1 + (i % 3) as u64, &key, &format!("v{i}")).await?;
        want.push(key);
    }
    want.sort();
    for (node, limit) in [(f, 7), (1, 1), (2, 120), (3, 1000)] {
        let (items, pages) = walk(&c, node, "/v1/kv", "p/", limit).await?;
        let keys: Vec<&str> = items.iter().filter_map(|i| i["key"].as_str()).collect();
        assert_eq!(keys, want, "node {node} limit {limit}");
        // `more` on every page but the last; a walk of exactly `limit` items ends in one page.
        let expected_pages = want.len().div_ceil(limit);
        assert_eq!(pages.len(), expected_pages, "node {node} limit {limit}");
        for (i, (revision, more)) in pages.iter().enumerate() {
            assert_eq!(
                *more,
                i + 1 < pages.len(),
                "node {node} limit {limit} page {i}"
            );
            // Read at or after every acknowledged write: linearizable, also on a follower.
            assert!(
                *revision >= last_rev,
                "page revision {revision} < {last_rev}"
            );
        }
        for item in &items {
            let i: usize = item["key"].as_str().context("key")?[2..].parse()?;
            assert_eq!(item["value"], format!("v{i}"));
            assert!(item["mod_revision"].as_u64() <= Some(pages[0].0), "{item}");
            assert_eq!(item["version"], 1);
        }
    }
    // A page is one state: a key written after it is either absent or fully there, and the
    // page's revision says which.
    let (s, v) = c.get(f, "/v1/kv?prefix=p/&limit=1000").await?;
    ensure!(s == 200, "{v}");
    let rev = v["revision"].as_u64().context("revision")?;
    assert!(v["items"]
        .as_array()
        .context("items")?
        .iter()
        .all(|i| i["mod_revision"].as_u64().is_some_and(|m| m <= rev)));
    c.shutdown().await;
    Ok(())
}

/// A write acknowledged by the leader is in the very next listing served by a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_lists_every_acknowledged_write() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let f = follower(&c).await?;
    for i in 0..20 {
        let key = format!("f/{i:02}");
        let rev = put(&c, leader, &key, "v").await?;
        let (s, v) = c
            .get(
                f,
                &format!("/v1/kv?prefix=f/&after={}", enc(&key[..key.len() - 1])),
            )
            .await?;
        ensure!(s == 200, "{v}");
        assert!(v["revision"].as_u64() >= Some(rev), "{v}");
        let seen = v["items"].as_array().context("items")?;
        assert!(
            seen.iter().any(|k| k["key"] == key.as_str()),
            "{key} missing from {v}"
        );
    }
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_stops_at_its_byte_budget() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let big = "v".repeat(turnstile_core::limits::VALUE_BYTES_MAX);
    for i in 0..20 {
        put(&c, 1, &format!("b/{i:02}"), &big).await?;
    }
    let (s, v) = c.get(1, "/v1/kv?prefix=b/&limit=1000").await?;
    ensure!(s == 200, "{v}");
    let n = v["items"].as_array().context("items")?.len();
    assert!(n > 0 && n < 20, "{n} items of 64 KiB in one page");
    assert_eq!(v["more"], true);
    let (items, _) = walk(&c, 2, "/v1/kv", "b/", 1000).await?;
    assert_eq!(items.len(), 20);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_leases_page_too() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let mut leases = Vec::new();
    for _ in 0..5 {
        leases.push(c.lease(1, 60_000).await?);
    }
    let mut tokens = Vec::new();
    for (i, lease) in leases.iter().enumerate() {
        let (s, v) = c.acquire(1, &format!("l-{i}"), *lease).await?;
        ensure!(s == 200, "{v}");
        tokens.push(token(&v)?);
    }
    // A waiter on l-0 (lease 2 waits behind lease 1's hold).
    let waiter = {
        let url = c.url(2, "/v1/locks/l-0/acquire");
        let http = c.client_builder(None)?.build()?;
        let body = json!({"lease_id": leases[1], "wait_ms": 20_000});
        tokio::spawn(async move { http.post(url).json(&body).send().await })
    };
    turnstile_tests::wait_for("the waiter to queue", || async {
        let (_, v) = c.get(1, "/v1/locks/l-0").await.ok()?;
        (v["waiters"].as_array()?.len() == 1).then_some(())
    })
    .await?;
    let (items, pages) = walk(&c, 3, "/v1/locks", "l-", 2).await?;
    assert_eq!(pages.len(), 3);
    let names: Vec<&str> = items.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["l-0", "l-1", "l-2", "l-3", "l-4"]);
    for (i, l) in items.iter().enumerate() {
        assert_eq!(l["holders"][0]["lease_id"], leases[i], "{l}");
        assert_eq!(l["holders"][0]["token"], tokens[i], "{l}");
        assert_eq!(l["holders"][0]["mode"], "exclusive", "{l}");
    }
    assert_eq!(items[0]["waiters"][0]["lease_id"], leases[1]);

    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let (s, v) = c.get(2, &format!("/v1/leases?limit=2{after}")).await?;
        ensure!(s == 200, "{v}");
        for l in v["items"].as_array().context("items")? {
            assert!(l["remaining_ms"].as_u64() <= Some(60_000), "{l}");
            assert_eq!(l["ttl_ms"], 60_000);
            seen.push(l["lease_id"].as_u64().context("lease_id")?);
        }
        if v["more"] != true {
            break;
        }
        after = format!("&after={}", seen.last().context("a page")?);
    }
    assert_eq!(seen, leases);
    let (s, v) = c
        .post(
            1,
            "/v1/locks/l-0/release",
            json!({"lease_id": leases[0], "token": tokens[0]}),
        )
        .await?;
    ensure!(s == 200, "{v}");
    waiter.await??;
    c.shutdown().await;
    Ok(())
}

/// Elections list once per name however many candidates queue, with the leader's lease, token
/// and value; a plain lock with nobody campaigning is not an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_page_once_per_name() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let mut leaders = Vec::new();
    for i in 0..3 {
        let name = format!("e-{i}");
        let mut campaigns = Vec::new();
        // Three candidates each: the first leads, the others queue behind it.
        for k in 0..3 {
            let lease = c.lease(1, 60_000).await?;
            let body =
                json!({"lease_id": lease, "value": format!("{name}/{k}"), "wait_ms": 20_000});
            let url = c.url(1 + k, &format!("/v1/elections/{name}/campaign"));
            let http = c.client_builder(None)?.build()?;
            campaigns.push((
                lease,
                tokio::spawn(async move { http.post(url).json(&body).send().await }),
            ));
            if k == 0 {
                let answer = campaigns.remove(0).1.await??;
                let v: Value = answer.json().await?;
                leaders.push((lease, token(&v)?));
            }
        }
        turnstile_tests::wait_for("the candidates to queue", || async {
            let (_, v) = c.get(1, &format!("/v1/locks/{name}")).await.ok()?;
            (v["waiters"].as_array()?.len() == 2).then_some(())
        })
        .await?;
    }
    let plain = c.lease(1, 60_000).await?;
    let (s, v) = c.acquire(1, "e-plain", plain).await?;
    ensure!(s == 200, "{v}");

    let (items, pages) = walk(&c, 2, "/v1/elections", "e-", 1).await?;
    assert_eq!(pages.len(), 3, "one page per name, however many candidates");
    let names: Vec<&str> = items.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names, ["e-0", "e-1", "e-2"]);
    for (i, e) in items.iter().enumerate() {
        let (lease, token) = leaders[i];
        assert_eq!(e["leader"]["lease_id"], lease, "{e}");
        assert_eq!(e["leader"]["token"], token, "{e}");
        assert_eq!(e["leader"]["value"], format!("e-{i}/0"), "{e}");
    }
    let (s, v) = c.get(3, "/v1/elections?prefix=e-plain").await?;
    assert_eq!(
        (s, v["items"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{v}"
    );
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_are_400() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    put(&c, 1, "a", "v").await?;
    let cases = [
        "/v1/kv?limit=0",
        "/v1/kv?limit=1001",
        "/v1/kv?limit=abc",
        "/v1/kv?limit=-1",
        "/v1/kv?bogus=1",
        "/v1/kv?prefix=a&prefix=b",
        "/v1/kv?prefix=%01",
        "/v1/kv?after=%01",
        "/v1/locks?prefix=b%40d",
        "/v1/locks?limit=0",
        "/v1/locks?key=a",
        "/v1/elections?prefix=b%40d",
        "/v1/elections?key=a",
        "/v1/leases?prefix=a",
        "/v1/leases?after=x",
        "/v1/leases?limit=5000",
        "/v1/kv/a?limit=1",
    ];
    for path in cases {
        let (s, v) = c.get(1, path).await?;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("bad_request")),
            "{path}: {v}"
        );
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{path}: {v}"
        );
    }
    // The same routes answer with their own parameters, and other methods still take none.
    for path in [
        "/v1/kv?limit=1000",
        "/v1/locks?prefix=a-",
        "/v1/elections?prefix=a-&limit=5",
        "/v1/leases?limit=1",
    ] {
        let (s, v) = c.get(1, path).await?;
        assert_eq!(s, 200, "{path}: {v}");
    }
    let (s, v) = c
        .post(1, "/v1/leases?limit=1", json!({"ttl_ms": 10_000}))
        .await?;
    assert_eq!((s, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    c.shutdown().await;
    Ok(())
}

/// A caller of a secure cluster, by bearer token.
pub(crate) struct User {
    http: reqwest::Client,
    token: String,
}

impl User {
    /// Makes role `role-<name>` with `perms`, user `name` with it, and a token for it (as
    /// root, the fixture's own client).
    pub(crate) async fn make(c: &Cluster, name: &str, perms: Value) -> anyhow::Result<User> {
        let role = format!("role-{name}");
        let body = json!({"permissions": perms, "metrics": false});
        let (s, v) = c
            .call(
                1,
                Method::PUT,
                &format!("/v1/auth/roles/{role}"),
                Some(body),
            )
            .await?;
        ensure!(s == 200, "role: {s} {v}");
        let body = json!({"roles": [role], "quotas": {}});
        let (s, v) = c
            .call(
                1,
                Method::PUT,
                &format!("/v1/auth/users/{name}"),
                Some(body),
            )
            .await?;
        ensure!(s == 200, "user: {s} {v}");
        let (s, v) = c.post(1, "/v1/auth/tokens", json!({"user": name})).await?;
        ensure!(s == 200, "token: {s} {v}");
        Ok(User {
            http: c.client_builder(None)?.build()?,
            token: v["token"].as_str().context("token")?.to_string(),
        })
    }

    pub(crate) async fn call(
        &self,
        c: &Cluster,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut rb = self
            .http
            .request(method, c.url(2, path))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().await?))
    }
}

pub(crate) fn perm(kind: &str, prefix: &str, access: &str) -> Value {
    json!({"kind": kind, "prefix": prefix, "access": access})
}

/// A listing needs read on its whole prefix (refused, never filtered: docs/security.md), shows
/// other tenants' lease ids as null, and lists only the caller's own leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_lists_what_it_may_read_and_its_own_leases() -> anyhow::Result<()> {
    let c = Cluster::start_secure(3).await?;
    let alice = User::make(
        &c,
        "alice",
        json!([perm("key", "a/", "write"), perm("lock", "a-", "write")]),
    )
    .await?;
    let root_lease = c.lease(1, 60_000).await?;
    put(&c, 1, "a/1", "root's").await?;
    put(&c, 1, "b/1", "secret").await?;
    let (s, v) = c
        .call(
            1,
            Method::PUT,
            "/v1/kv/a/bound",
            Some(json!({"value": "v", "lease_id": root_lease})),
        )
        .await?;
    ensure!(s == 200, "{v}");
    let (s, v) = c.acquire(1, "a-lock", root_lease).await?;
    ensure!(s == 200, "{v}");
    let (s, v) = alice
        .call(
            &c,
            Method::POST,
            "/v1/leases",
            Some(json!({"ttl_ms": 60_000})),
        )
        .await?;
    ensure!(s == 200, "{v}");
    let alice_lease = v["lease_id"].as_u64().context("lease_id")?;
    let (s, v) = alice
        .call(
            &c,
            Method::PUT,
            "/v1/kv/a/2",
            Some(json!({"value": "alice's", "lease_id": alice_lease})),
        )
        .await?;
    ensure!(s == 200, "{v}");

    // Permitted: the whole prefix is hers to read. Root's lease id is hidden, hers is not.
    let (s, v) = alice
        .call(&c, Method::GET, "/v1/kv?prefix=a/", None)
        .await?;
    ensure!(s == 200, "{v}");
    let keys: Vec<&str> = v["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert_eq!(keys, ["a/1", "a/2", "a/bound"]);
    assert_eq!(v["items"][1]["lease_id"], alice_lease);
    assert_eq!(v["items"][2]["lease_id"], Value::Null);
    let (s, v) = alice
        .call(&c, Method::GET, "/v1/locks?prefix=a-", None)
        .await?;
    ensure!(s == 200, "{v}");
    assert_eq!(v["items"][0]["name"], "a-lock");
    assert_eq!(v["items"][0]["holders"][0]["lease_id"], Value::Null);
    assert_eq!(v["items"][0]["holders"][0]["token"], Value::Null);

    // Refused: any prefix she may not read whole, even one holding readable keys.
    for path in [
        "/v1/kv",
        "/v1/kv?prefix=a",
        "/v1/kv?prefix=b/",
        "/v1/locks",
        "/v1/locks?prefix=a",
    ] {
        let (s, v) = alice.call(&c, Method::GET, path, None).await?;
        assert_eq!(
            (s, v["code"].as_str()),
            (403, Some("permission_denied")),
            "{path}: {v}"
        );
        assert!(!v.to_string().contains("secret"), "{v}");
    }
    // Root lists everything, with every lease id.
    let (s, v) = c.get(2, "/v1/kv").await?;
    ensure!(s == 200, "{v}");
    assert_eq!(v["items"].as_array().context("items")?.len(), 4);

    // Leases: hers only; root sees both.
    let (s, v) = alice.call(&c, Method::GET, "/v1/leases", None).await?;
    ensure!(s == 200, "{v}");
    let ids: Vec<u64> = v["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|l| l["lease_id"].as_u64())
        .collect();
    assert_eq!(ids, [alice_lease]);
    let (s, v) = c.get(1, "/v1/leases").await?;
    ensure!(s == 200, "{v}");
    let ids: Vec<u64> = v["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|l| l["lease_id"].as_u64())
        .collect();
    assert_eq!(ids, [root_lease, alice_lease]);
    c.shutdown().await;
    Ok(())
}
