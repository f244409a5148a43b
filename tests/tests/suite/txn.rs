//! Transactions (`POST /v1/txn`) against real 3-node clusters: a failed compare runs the
//! failure branch only, a stale fence fails its compare, a branch that cannot apply whole
//! applies nothing, retries with a `request_id` apply once, concurrent read-modify-write
//! through a `mod_revision` compare loses no update (and the same workload with plain get and
//! put does), bad bodies are `400`s that change nothing, and a principal needs access to every
//! name a transaction mentions.

use std::sync::Arc;

use anyhow::{ensure, Context};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::Barrier;
use turnstile_tests::{token, Cluster};

use crate::ranges::{perm, User};

async fn txn(c: &Cluster, node: u64, body: Value) -> anyhow::Result<Value> {
    let (s, v) = c.post(node, "/v1/txn", body).await?;
    ensure!(s == 200, "txn: {s} {v}");
    Ok(v)
}

async fn value(c: &Cluster, key: &str) -> anyhow::Result<Option<String>> {
    let (s, v) = c.get(1, &format!("/v1/kv/{key}")).await?;
    match s {
        200 => Ok(Some(v["value"].as_str().context("value")?.to_string())),
        404 => Ok(None),
        _ => anyhow::bail!("get {key}: {s} {v}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compare_applies_the_failure_branch_only() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let (s, v) = c
        .call(1, Method::PUT, "/v1/kv/a", Some(json!({"value": "1"})))
        .await?;
    ensure!(s == 200, "{v}");
    let body = |expect: &str| {
        json!({
            "compare": [{"key": "a", "value": expect}, {"key": "nope", "absent": true}],
            "success": [{"put": {"key": "a", "value": "s"}}, {"put": {"key": "b", "value": "s"}}],
            "failure": [{"put": {"key": "c", "value": "f"}}, {"get": {"key": "a"}},
                        {"incr": {"counter": "n", "by": 2}}, {"delete": {"key": "zz"}}],
        })
    };
    let v = txn(&c, 2, body("2")).await?;
    assert_eq!(v["succeeded"], false, "{v}");
    let rev = v["revision"].as_u64().context("revision")?;
    assert_eq!(
        v["results"][0],
        json!({"put": {"revision": rev, "existed": false}})
    );
    assert_eq!(v["results"][1]["get"]["value"], "1", "{v}");
    assert_eq!(
        v["results"][2],
        json!({"incr": {"counter": "n", "value": 2}})
    );
    assert_eq!(
        v["results"][3],
        json!({"delete": {"revision": rev, "existed": false}})
    );
    assert_eq!(value(&c, "a").await?.as_deref(), Some("1"));
    assert_eq!(value(&c, "b").await?, None);
    assert_eq!(value(&c, "c").await?.as_deref(), Some("f"));

    let v = txn(&c, 3, body("1")).await?;
    assert_eq!(v["succeeded"], true, "{v}");
    assert_eq!(v["results"].as_array().map(Vec::len), Some(2));
    assert_eq!(value(&c, "a").await?.as_deref(), Some("s"));
    assert_eq!(value(&c, "b").await?.as_deref(), Some("s"));
    let (_, n) = c.get(1, "/v1/counters/n").await?;
    assert_eq!(n["value"], 2, "the failure branch ran once");
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fence_fails_its_compare() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let (l1, l2) = (c.lease(1, 60_000).await?, c.lease(1, 60_000).await?);
    let (s, v) = c.acquire(1, "job", l1).await?;
    ensure!(s == 200, "{v}");
    let t1 = token(&v)?;
    let (s, v) = c.release(1, "job", l1, t1).await?;
    ensure!(s == 200, "{v}");
    let (s, v) = c.acquire(2, "job", l2).await?;
    ensure!(s == 200, "{v}");
    let t2 = token(&v)?;
    let fenced = |t: u64| {
        json!({
            "compare": [{"fence": {"lock": "job", "token": t}}],
            "success": [{"put": {"key": "out", "value": format!("by {t}")}}],
        })
    };
    let v = txn(&c, 1, fenced(t1)).await?;
    assert_eq!(
        (
            v["succeeded"].as_bool(),
            v["results"].as_array().map(Vec::len)
        ),
        (Some(false), Some(0)),
        "{v}"
    );
    assert_eq!(value(&c, "out").await?, None);
    let v = txn(&c, 2, fenced(t2)).await?;
    assert_eq!(v["succeeded"], true, "{v}");
    assert_eq!(value(&c, "out").await?, Some(format!("by {t2}")));
    c.shutdown().await;
    Ok(())
}

/// An op that fails (an unknown lease) refuses the whole branch: the put before it in the same
/// branch is not applied, and the error is the usual typed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_applies_whole_or_not_at_all() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let body = json!({
        "success": [{"put": {"key": "first", "value": "v"}}, {"incr": {"counter": "k", "by": 1}},
                    {"put": {"key": "second", "value": "v", "lease_id": 999_999}}],
    });
    let (s, v) = c.post(1, "/v1/txn", body).await?;
    assert_eq!(
        (s, v["code"].as_str()),
        (404, Some("lease_not_found")),
        "{v}"
    );
    assert_eq!(value(&c, "first").await?, None);
    let (_, k) = c.get(1, "/v1/counters/k").await?;
    assert_eq!(k["value"], 0);
    let (_, list) = c.get(2, "/v1/kv").await?;
    assert_eq!(list["items"], json!([]));
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_transaction_applies_once() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let body = json!({
        "success": [{"incr": {"counter": "once", "by": 1}}],
        "request_id": "txn-1",
    });
    let first = txn(&c, 1, body.clone()).await?;
    let again = txn(&c, 3, body).await?;
    assert_eq!(first, again);
    let (_, k) = c.get(1, "/v1/counters/once").await?;
    assert_eq!(k["value"], 1);
    let (s, v) = c
        .post(1, "/v1/txn", json!({"success": [], "request_id": "txn-1"}))
        .await?;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("request_id_reused")),
        "{v}"
    );
    c.shutdown().await;
    Ok(())
}

const WORKERS: usize = 4;
const ROUNDS: usize = 8;

/// `WORKERS` clients, `ROUNDS` rounds: every round all read the counter key, wait for each
/// other, then write it back plus one, then wait again. With `guarded`, the write is a txn
/// that compares `mod_revision`; without, a plain put. Returns (writes reported applied, final
/// value).
async fn read_modify_write(c: Arc<Cluster>, guarded: bool) -> anyhow::Result<(u64, u64)> {
    let key = if guarded { "rmw-txn" } else { "rmw-plain" };
    let (s, v) = c
        .call(
            1,
            Method::PUT,
            &format!("/v1/kv/{key}"),
            Some(json!({"value": "0"})),
        )
        .await?;
    ensure!(s == 200, "{v}");
    let barrier = Arc::new(Barrier::new(WORKERS));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (c, barrier) = (c.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let node = 1 + (w % 3) as u64;
            let mut applied = 0u64;
            for _ in 0..ROUNDS {
                let (s, v) = c.get(node, &format!("/v1/kv/{key}")).await?;
                ensure!(s == 200, "{v}");
                let n: u64 = v["value"].as_str().context("value")?.parse()?;
                let rev = v["mod_revision"].as_u64().context("mod_revision")?;
                barrier.wait().await;
                let next = (n + 1).to_string();
                let ok = if guarded {
                    let body = json!({
                        "compare": [{"key": key, "mod_revision": rev}],
                        "success": [{"put": {"key": key, "value": next}}],
                    });
                    txn(&c, node, body).await?["succeeded"] == true
                } else {
                    let path = format!("/v1/kv/{key}");
                    let (s, v) = c
                        .call(node, Method::PUT, &path, Some(json!({"value": next})))
                        .await?;
                    ensure!(s == 200, "{v}");
                    true
                };
                applied += u64::from(ok);
                barrier.wait().await;
            }
            anyhow::Ok(applied)
        }));
    }
    let mut applied = 0;
    for t in tasks {
        applied += t.await??;
    }
    let (_, v) = c.get(1, &format!("/v1/kv/{key}")).await?;
    let last: u64 = v["value"].as_str().context("value")?.parse()?;
    Ok((applied, last))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_through_mod_revision_lose_no_update() -> anyhow::Result<()> {
    let c = Arc::new(Cluster::start(3).await?);
    let (applied, last) = read_modify_write(c.clone(), true).await?;
    assert_eq!(last, applied, "every applied increment is in the value");
    // Each round all read the same revision, so exactly one compare holds per round.
    assert_eq!(applied, ROUNDS as u64);
    // The negative control: the same schedule with plain get + put reports every write
    // applied, but the value counts only one per round.
    let (applied, last) = read_modify_write(c.clone(), false).await?;
    assert_eq!(applied, (WORKERS * ROUNDS) as u64);
    assert!(
        last < applied,
        "plain get+put lost no update ({last} of {applied})"
    );
    if let Ok(c) = Arc::try_unwrap(c) {
        c.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_400_and_change_nothing() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let (s, v) = c
        .call(1, Method::PUT, "/v1/kv/k", Some(json!({"value": "v"})))
        .await?;
    ensure!(s == 200, "{v}");
    let many_ops: Vec<Value> = (0..=turnstile_core::limits::TXN_OPS_PER_BRANCH_MAX)
        .map(|i| json!({"get": {"key": format!("k{i}")}}))
        .collect();
    let many_compares: Vec<Value> = (0..=turnstile_core::limits::TXN_COMPARES_MAX)
        .map(|i| json!({"key": format!("k{i}"), "absent": true}))
        .collect();
    let put = |k: &str| json!({"put": {"key": k, "value": "x"}});
    let half = "v".repeat(turnstile_core::limits::TXN_PAYLOAD_BYTES_MAX / 2 + 1);
    let cases = vec![
        (
            "unknown top-level field",
            json!({"success": [put("k")], "bogus": 1}),
        ),
        (
            "unknown op field",
            json!({"success": [{"put": {"key": "k", "value": "x", "ttl": 1}}]}),
        ),
        (
            "unknown op",
            json!({"success": [{"upsert": {"key": "k", "value": "x"}}]}),
        ),
        (
            "two ops in one object",
            json!({"success": [{"put": {"key": "k", "value": "x"}, "get": {"key": "k"}}]}),
        ),
        (
            "unknown compare field",
            json!({"compare": [{"key": "k", "exists": true}], "success": [put("k")]}),
        ),
        (
            "two conditions",
            json!({"compare": [{"key": "k", "absent": true, "version": 1}], "success": [put("k")]}),
        ),
        (
            "absent false",
            json!({"compare": [{"key": "k", "absent": false}], "success": [put("k")]}),
        ),
        (
            "fence with a key",
            json!({"compare": [{"key": "k", "fence": {"lock": "l", "token": 3}}]}),
        ),
        (
            "fence token 0",
            json!({"compare": [{"fence": {"lock": "l", "token": 0}}]}),
        ),
        ("too many ops", json!({"success": many_ops})),
        (
            "too many compares",
            json!({"compare": many_compares, "success": [put("k")]}),
        ),
        (
            "key written twice",
            json!({"success": [put("k"), {"delete": {"key": "k"}}]}),
        ),
        (
            "key written twice in failure",
            json!({"failure": [put("z"), put("z")]}),
        ),
        (
            "counter twice",
            json!({"success": [{"incr": {"counter": "c", "by": 1}}, {"incr": {"counter": "c", "by": 1}}]}),
        ),
        ("empty key", json!({"success": [put("")]})),
        ("control character key", json!({"success": [put("a\u{1}")]})),
        (
            "bad counter name",
            json!({"success": [{"incr": {"counter": "c d", "by": 1}}]}),
        ),
        (
            "step too large",
            json!({"success": [{"incr": {"counter": "c", "by": 1i64 << 60}}]}),
        ),
        (
            "lease 0",
            json!({"success": [{"put": {"key": "k", "value": "x", "lease_id": 0}}]}),
        ),
        (
            "payload over the limit",
            json!({"success": [{"put": {"key": "k", "value": half}}], "failure": [{"put": {"key": "k", "value": half}}]}),
        ),
        (
            "bad request_id",
            json!({"success": [put("k")], "request_id": "has space"}),
        ),
        ("not an object", json!([1, 2])),
    ];
    for (what, body) in cases {
        let (s, v) = c.post(1, "/v1/txn", body).await?;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("bad_request")),
            "{what}: {v}"
        );
    }
    let (s, v) = c
        .post(1, "/v1/txn?x=1", json!({"success": [put("k")]}))
        .await?;
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("bad_request")),
        "query: {v}"
    );
    let (_, list) = c.get(1, "/v1/kv").await?;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["items"][0]["value"], "v");
    assert_eq!(list["items"][0]["version"], 1);
    let (_, counter) = c.get(1, "/v1/counters/c").await?;
    assert_eq!(counter["value"], 0);
    c.shutdown().await;
    Ok(())
}

/// Every name in a transaction needs access, in either branch and in compares; a permitted
/// transaction by the same user, on its own prefix, applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_needs_access_to_every_name() -> anyhow::Result<()> {
    let c = Cluster::start_secure(3).await?;
    let bob = User::make(
        &c,
        "bob",
        json!([
            perm("key", "b/", "write"),
            perm("key", "shared/", "read"),
            perm("counter", "b-", "write")
        ]),
    )
    .await?;
    let (s, v) = c
        .call(
            1,
            Method::PUT,
            "/v1/kv/shared/x",
            Some(json!({"value": "root"})),
        )
        .await?;
    ensure!(s == 200, "{v}");
    let ok = json!({
        "compare": [{"key": "shared/x", "value": "root"}],
        "success": [{"put": {"key": "b/1", "value": "v"}}, {"incr": {"counter": "b-n", "by": 1}},
                    {"get": {"key": "shared/x"}}],
        "failure": [{"get": {"key": "b/1"}}],
    });
    let (s, v) = bob.call(&c, Method::POST, "/v1/txn", Some(ok)).await?;
    assert_eq!((s, &v["succeeded"]), (200, &json!(true)), "{v}");
    let refused = [
        json!({"success": [{"put": {"key": "shared/x", "value": "bob"}}]}),
        json!({"compare": [{"key": "secret", "absent": true}], "success": [{"put": {"key": "b/2", "value": "v"}}]}),
        json!({"success": [{"put": {"key": "b/2", "value": "v"}}], "failure": [{"delete": {"key": "shared/x"}}]}),
        json!({"success": [{"put": {"key": "b/2", "value": "v"}}, {"get": {"key": "secret"}}]}),
        json!({"success": [{"put": {"key": "b/2", "value": "v"}}, {"incr": {"counter": "c", "by": 1}}]}),
        json!({"compare": [{"fence": {"lock": "a", "token": 3}}], "success": [{"put": {"key": "b/2", "value": "v"}}]}),
    ];
    for body in refused {
        let (s, v) = bob
            .call(&c, Method::POST, "/v1/txn", Some(body.clone()))
            .await?;
        assert_eq!(
            (s, v["code"].as_str()),
            (403, Some("permission_denied")),
            "{body}: {v}"
        );
    }
    assert_eq!(value(&c, "shared/x").await?.as_deref(), Some("root"));
    assert_eq!(value(&c, "b/2").await?, None);
    c.shutdown().await;
    Ok(())
}
