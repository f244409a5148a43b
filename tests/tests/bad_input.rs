//! Bad input over every endpoint: each gets a 4xx with `{code, message}`, never a 5xx or a
//! dropped connection, and nothing is written (the applied index does not move).

use serde_json::{json, Value};
use turnstile_tests::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_4xx_and_changes_nothing() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let lease = c.lease(1, 60_000).await?;
    c.converged().await?;
    let applied_before = c.status(1).await?["applied_index"]
        .as_u64()
        .expect("applied");
    let long = "x".repeat(10_000);
    let huge = "v".repeat(300 * 1024);
    use reqwest::Method as M;
    let cases: Vec<(M, String, Option<String>, u16, &str)> = vec![
        (
            M::POST,
            "/v1/leases".into(),
            Some("{not json".to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": 5}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": 99999999999}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": -1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": "10"}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": 5000, "extra": 1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases".into(),
            Some(r#"{"ttl_ms": 5000, "request_id": ""}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases/abc/keepalive".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases/0/keepalive".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/leases/999999/keepalive".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            M::GET,
            "/v1/leases/999999".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            M::DELETE,
            "/v1/leases/999999".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some("[]".to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(r#"{"wait_ms": 0}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(r#"{"lease_id": 999999}"#.to_string()),
            404,
            "lease_not_found",
        ),
        (
            M::POST,
            format!("/v1/locks/{long}/acquire"),
            Some(r#"{"lease_id": 1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/bad%20name/acquire".into(),
            Some(r#"{"lease_id": 1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(format!(r#"{{"lease_id": {lease}, "mode": "weird"}}"#)),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(format!(r#"{{"lease_id": {lease}, "permits": 0}}"#)),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/release".into(),
            Some(r#"{"token": 1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/release".into(),
            Some(format!(r#"{{"token": 999, "lease_id": {lease}}}"#)),
            409,
            "not_holder",
        ),
        (
            M::GET,
            "/v1/locks/bad$name".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/fence/check".into(),
            Some(r#"{"name": "ok"}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": 5}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            format!("/v1/kv/{long}"),
            Some(r#"{"value": "v"}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(format!(r#"{{"value": "{}"}}"#, "v".repeat(70_000))),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(format!(r#"{{"value": "{huge}"}}"#)),
            413,
            "body_too_large",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "if": {}}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "if": {"absent": true, "mod_revision": 3}}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "fence": {"lock": "ok"}}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "lease_id": 999999}"#.to_string()),
            404,
            "lease_not_found",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "fence": {"lock": "ok", "token": 3}}"#.to_string()),
            409,
            "fenced",
        ),
        (
            M::PUT,
            "/v1/kv/k".into(),
            Some(r#"{"value": "v", "if": {"mod_revision": 123456}}"#.to_string()),
            412,
            "compare_failed",
        ),
        (
            M::DELETE,
            "/v1/kv/k".into(),
            Some(r#"{"if": {"value": "nope"}}"#.to_string()),
            412,
            "compare_failed",
        ),
        (M::GET, "/v1/kv/missing".into(), None, 404, "key_not_found"),
        (
            M::POST,
            "/v1/counters/c/incr".into(),
            Some(r#"{"by": 1.5}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/counters/c/incr".into(),
            Some(r#"{"by": 99999999999999999}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/counters/c!/incr".into(),
            Some(r#"{"by": 1}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/members".into(),
            Some(r#"{"id": 9, "addr": "nowhere"}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/members/abc/promote".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::DELETE,
            "/v1/members/42".into(),
            None,
            409,
            "membership_refused",
        ),
        (
            M::POST,
            "/v1/locks/acquire-many".into(),
            Some("{}".to_string()),
            400,
            "bad_request",
        ),
        (M::GET, "/v1/nope".into(), None, 404, "not_found"),
        (
            M::DELETE,
            "/v1/cluster".into(),
            None,
            405,
            "method_not_allowed",
        ),
    ];
    let extra: Vec<(M, String, Option<String>, u16, &str)> = vec![
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(format!(r#"{{"lease_id": {lease}, "wait_ms": 99999999}}"#)),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/ok/acquire".into(),
            Some(format!(r#"{{"lease_id": {lease}, "permits": 999999}}"#)),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/acquire-many".into(),
            Some(format!(r#"{{"names": [], "lease_id": {lease}}}"#)),
            400,
            "bad_request",
        ),
        (
            M::POST,
            "/v1/locks/acquire-many".into(),
            Some(format!(
                r#"{{"names": ["ok", "b@d"], "lease_id": {lease}}}"#
            )),
            400,
            "bad_request",
        ),
        (
            M::GET,
            "/v1/watch?key=a&prefix=b".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::GET,
            "/v1/watch?from_revision=abc".into(),
            None,
            400,
            "bad_request",
        ),
        (M::GET, "/v1/watch?bogus=1".into(), None, 400, "bad_request"),
    ];
    let cases: Vec<_> = cases.into_iter().chain(extra).collect();
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    for (method, path, body, want_status, want_code) in &cases {
        let mut rb = http.request(method.clone(), c.url(2, path));
        if let Some(b) = body {
            rb = rb.body(b.to_string());
        }
        let resp = rb.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let v: Value = serde_json::from_str(&text).unwrap_or(json!({"raw": text}));
        let ok = status == *want_status && v["code"] == *want_code && v["message"].is_string();
        if !ok {
            failures.push(format!(
                "{method} {} -> {status} {v} (want {want_status} {want_code})",
                &path[..path.len().min(60)]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} bad-input cases misanswered:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Refused requests that failed validation appended nothing; the definite refusals from the
    // state machine (404/409/412) did commit entries that changed nothing, so compare state
    // content rather than the index: no lock, no key, counter untouched.
    let (_, v) = c.get(1, "/v1/locks/ok").await?;
    assert!(v["holders"].as_array().is_some_and(|h| h.is_empty()), "{v}");
    assert_eq!(c.get(1, "/v1/kv/k").await?.0, 404);
    assert_eq!(c.get(1, "/v1/counters/c").await?.1["value"], 0);
    assert!(
        c.status(1).await?["applied_index"]
            .as_u64()
            .expect("applied")
            >= applied_before
    );
    c.shutdown().await;
    Ok(())
}

/// Peer bodies far above the client limit (replication batches, snapshots) reach the handler:
/// a 3 MiB undecodable body with a valid MAC is refused as undecodable (400), not as too large
/// (413), and its reply is signed; the same body without a MAC, or with a MAC made with
/// another secret, is refused (401) with an unsigned reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_routes_take_large_bodies_and_demand_a_mac() -> anyhow::Result<()> {
    use turnstile_raft::peer_auth::{PeerKey, RequestHead, AUTH_HEADER, REPLY_AUTH_HEADER};
    let c = Cluster::start(1).await?;
    let http = reqwest::Client::new();
    let big = vec![0xffu8; 3 * 1024 * 1024];
    let head = RequestHead {
        method: "POST",
        path: "/raft/append",
        from: 2,
        cluster_id: "",
    };
    let cluster_id = c.status(1).await?["cluster_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let head = RequestHead {
        cluster_id: &cluster_id,
        ..head
    };
    let mac = PeerKey::new("test-cluster-secret").sign_request(&head, &big);
    let resp = http
        .post(c.url(1, "/raft/append"))
        .header(turnstile_raft::network::FROM_HEADER, "2")
        .header(turnstile_raft::network::CLUSTER_ID_HEADER, &cluster_id)
        .header(AUTH_HEADER, &mac)
        .body(big.clone())
        .send()
        .await?;
    assert!(resp.headers().contains_key(REPLY_AUTH_HEADER));
    assert_eq!(resp.status().as_u16(), 400, "{}", resp.text().await?);
    let wrong = PeerKey::new("guessed-secret").sign_request(&head, &big);
    for mac in [None, Some(wrong)] {
        let mut rb = http
            .post(c.url(1, "/raft/append"))
            .header(turnstile_raft::network::FROM_HEADER, "2")
            .header(turnstile_raft::network::CLUSTER_ID_HEADER, &cluster_id)
            .body(big.clone());
        if let Some(mac) = &mac {
            rb = rb.header(AUTH_HEADER, mac);
        }
        let resp = rb.send().await?;
        assert_eq!(resp.status().as_u16(), 401, "mac {mac:?}");
        assert!(!resp.headers().contains_key(REPLY_AUTH_HEADER));
    }
    c.shutdown().await;
    Ok(())
}
