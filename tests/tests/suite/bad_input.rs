//! Bad input over every endpoint: each gets a 4xx with `{code, message}`, never a 5xx or a
//! dropped connection, and nothing is written (the applied index does not move). Bad
//! connections too: slow or half-sent heads, idle keep-alives and stalled bodies are closed
//! within their timeouts, h2c is refused, and connections past the cap are closed at once,
//! while well-behaved clients, watches and waiting acquires carry on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use turnstile_server::config::ServeArgs;
use turnstile_tests::raw_http::{self, Closed};
use turnstile_tests::{read_sse, token, wait_for, Cluster};

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
        // Query parameters on routes that take none are refused, not ignored.
        (
            M::GET,
            "/v1/locks/a?holders=1".into(),
            None,
            400,
            "bad_request",
        ),
        (M::GET, "/v1/kv/a?prefix=".into(), None, 400, "bad_request"),
        (
            M::POST,
            "/v1/leases?ttl_ms=10000".into(),
            Some(r#"{"ttl_ms": 10000}"#.to_string()),
            400,
            "bad_request",
        ),
        (
            M::GET,
            "/v1/cluster?verbose=1".into(),
            None,
            400,
            "bad_request",
        ),
        (
            M::GET,
            "/v1/cluster?digest=maybe".into(),
            None,
            400,
            "bad_request",
        ),
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

    // The one parameter `/v1/cluster` takes: the digest is left out, the rest is there.
    let (code, v) = c.get(2, "/v1/cluster?digest=false").await?;
    assert!(
        code == 200 && v.get("state_digest").is_none() && v["applied_index"].is_u64(),
        "{v}"
    );
    let (code, v) = c.get(2, "/v1/cluster?digest=true").await?;
    assert!(
        code == 200 && v["state_digest"].as_str().is_some_and(|d| d.len() == 64),
        "{v}"
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
/// (413), and its reply is signed; a call without a MAC, or with a MAC made with another
/// secret, is refused (401) with an unsigned reply.
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
    // Without a MAC the call is refused before its body is read, so that body is small (a
    // large one would race the closing connection); with a wrong MAC the body is read first.
    for (mac, body) in [(None, vec![0xffu8; 16]), (Some(wrong), big.clone())] {
        let mut rb = http
            .post(c.url(1, "/raft/append"))
            .header(turnstile_raft::network::FROM_HEADER, "2")
            .header(turnstile_raft::network::CLUSTER_ID_HEADER, &cluster_id)
            .body(body);
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

// ---- Connection limits: slow heads, idle keep-alives, stalled bodies, h2c, the cap. ----

/// Short limits for the connection tests: idle differs from header so a test can tell which
/// clock closed a connection. The idle timeout is at least ten heartbeats (enforced).
const HEADER_MS: u64 = 1_000;
const IDLE_MS: u64 = 2_000;
const BODY_MS: u64 = 1_000;
/// How late past its timeout a close may come on a loaded two-core machine.
const CLOSE_SLACK_MS: u64 = 1_500;
/// How early: none, beyond the millisecond rounding of the two clocks.
const CLOSE_EARLY_MS: u64 = 20;

fn short_http_limits(a: &mut ServeArgs) {
    a.http_header_read_timeout_ms = Some(HEADER_MS);
    a.http_idle_timeout_ms = Some(IDLE_MS);
    a.http_body_timeout_ms = Some(BODY_MS);
}

/// The negative control: limits far beyond anything the tests wait for.
fn long_http_limits(a: &mut ServeArgs) {
    a.http_header_read_timeout_ms = Some(600_000);
    a.http_idle_timeout_ms = Some(600_000);
    a.http_body_timeout_ms = Some(600_000);
}

fn capped_http_limits(a: &mut ServeArgs) {
    short_http_limits(a);
    // Long enough that the connection which scrapes /metrics stays open through the flood.
    a.http_idle_timeout_ms = Some(10_000);
    a.http_connections_max = Some(CAP);
}

/// `--http-connections-max` of the cap test.
const CAP: u32 = 20;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Fails unless `closed` came `timeout_ms` after its start, give or take the slack.
fn closed_in_time(case: &str, closed: &Closed, timeout_ms: u64) -> anyhow::Result<()> {
    let (early, late) = (
        ms(timeout_ms - CLOSE_EARLY_MS),
        ms(timeout_ms + CLOSE_SLACK_MS),
    );
    anyhow::ensure!(
        closed.after >= early && closed.after <= late,
        "{case}: closed after {:?}, want {timeout_ms} ms (+{CLOSE_SLACK_MS})",
        closed.after
    );
    println!(
        "{case}: closed after {:?} (timeout {timeout_ms} ms)",
        closed.after
    );
    Ok(())
}

/// One sample of a Prometheus text scrape, e.g. `turnstile_http_connections_open` or
/// `turnstile_http_connections_timed_out_total{phase="idle"}`.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// A client that asks `/healthz` every 100 ms until `stop`; returns the answers that were not
/// 200 (or not answers at all) and how many were.
async fn poll_healthz(url: String, stop: Arc<AtomicBool>) -> (Vec<String>, u32) {
    let Ok(http) = reqwest::Client::builder()
        .no_proxy()
        .timeout(ms(5_000))
        .build()
    else {
        return (vec!["no client".into()], 0);
    };
    let (mut bad, mut ok) = (Vec::new(), 0);
    while !stop.load(Ordering::Relaxed) {
        match http.get(&url).send().await {
            Ok(r) if r.status() == 200 => ok += 1,
            Ok(r) => bad.push(format!("status {}", r.status())),
            Err(e) => bad.push(format!("{e:#}")),
        }
        tokio::time::sleep(ms(100)).await;
    }
    (bad, ok)
}

/// A head sent whole, for the cases that trickle, cut or stall it.
const HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: turnstile\r\n\r\n";

/// Each slow or idle client is cut within its timeout (measured), by the clock meant for it,
/// while a well-behaved client on the same node gets 200s throughout; h2c gets no HTTP/2.
/// With the limits off the same clients stay connected: see
/// `with_long_limits_the_same_clients_stay_connected`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_idle_and_stalled_connections_are_closed_in_time() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(1, short_http_limits).await?;
    let addr = c.addrs[&1];
    let stop = Arc::new(AtomicBool::new(false));
    let normal = tokio::spawn(poll_healthz(c.url(1, "/healthz"), stop.clone()));
    let limit = ms(IDLE_MS + 2 * CLOSE_SLACK_MS);

    // (a) Connects and says nothing: the head clock runs from the accept.
    let idle_new = async {
        let mut s = raw_http::connect(addr).await?;
        let closed = raw_http::until_closed(&mut s, Instant::now(), limit).await?;
        anyhow::ensure!(closed.bytes.is_empty(), "answered {:?}", closed.text());
        closed_in_time("(a) silent after connect", &closed, HEADER_MS)
    };
    // (b) Half a head, then nothing.
    let half_head = async {
        let mut s = raw_http::connect(addr).await?;
        let since = Instant::now();
        s.write_all(&HEAD[..HEAD.len() / 2]).await?;
        let closed = raw_http::until_closed(&mut s, since, limit).await?;
        anyhow::ensure!(closed.bytes.is_empty(), "answered {:?}", closed.text());
        closed_in_time("(b) half a head", &closed, HEADER_MS)
    };
    // (c) A whole head, one byte every 150 ms (6 s in all): every gap is far below the header
    // timeout, so only a clock on the whole head (not on silence) cuts it.
    let trickle = async {
        let s = raw_http::connect(addr).await?;
        let since = Instant::now();
        let (mut rd, mut wr) = s.into_split();
        let writer = tokio::spawn(async move {
            for b in HEAD {
                if wr.write_all(&[*b]).await.is_err() {
                    return false;
                }
                tokio::time::sleep(ms(150)).await;
            }
            true
        });
        let closed = raw_http::until_closed(&mut rd, since, limit).await?;
        writer.abort();
        anyhow::ensure!(closed.bytes.is_empty(), "answered {:?}", closed.text());
        closed_in_time("(c) head trickled", &closed, HEADER_MS)
    };
    // (d) A head announcing 1000 body bytes, then 10 of them: the body clock cuts the request
    // (`408 body_timeout`) and the connection closes, since its body was never finished.
    let stalled_body = async {
        let mut s = raw_http::connect(addr).await?;
        s.write_all(
            b"POST /v1/leases HTTP/1.1\r\nHost: turnstile\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n{\"ttl_ms\":",
        )
        .await?;
        let since = Instant::now();
        let closed = raw_http::until_closed(&mut s, since, limit).await?;
        let text = closed.text();
        anyhow::ensure!(
            text.starts_with("HTTP/1.1 408") && text.contains("body_timeout"),
            "answered {text:?}"
        );
        closed_in_time("(d) stalled body", &closed, BODY_MS)
    };
    // (e) One whole request, then silence: the idle clock (2 s), not the head clock (1 s).
    let idle_kept_alive = async {
        let mut s = raw_http::connect(addr).await?;
        let answer = raw_http::get(&mut s, "/healthz", &[], limit).await?;
        anyhow::ensure!(answer.status == 200, "{answer:?}");
        let closed = raw_http::until_closed(&mut s, Instant::now(), limit).await?;
        anyhow::ensure!(closed.bytes.is_empty(), "answered {:?}", closed.text());
        closed_in_time("(e) idle keep-alive", &closed, IDLE_MS)
    };
    // (f) h2c by prior knowledge: the HTTP/2 preface gets no HTTP/2 (no SETTINGS frame), only
    // a close or an HTTP/1 refusal; and `Upgrade: h2c` is ignored (200, not 101).
    let h2c = async {
        let mut s = raw_http::connect(addr).await?;
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        let closed = raw_http::until_closed(&mut s, Instant::now(), limit).await?;
        let text = closed.text();
        anyhow::ensure!(
            closed.bytes.is_empty()
                || text.starts_with("HTTP/1.1 4")
                || text.starts_with("HTTP/1.1 505"),
            "h2c preface answered {text:?}"
        );
        println!(
            "(f) h2c preface: {} bytes, closed after {:?}",
            closed.bytes.len(),
            closed.after
        );
        let mut s = raw_http::connect(addr).await?;
        let upgrade = [
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
        ];
        let answer = raw_http::get(&mut s, "/healthz", &upgrade, limit).await?;
        anyhow::ensure!(
            answer.status == 200 && answer.head.starts_with("HTTP/1.1 200"),
            "Upgrade: h2c answered {answer:?}"
        );
        Ok(())
    };
    let (a, b, cc, d, e, f) = tokio::join!(
        idle_new,
        half_head,
        trickle,
        stalled_body,
        idle_kept_alive,
        h2c
    );
    stop.store(true, Ordering::Relaxed);
    let (bad, ok) = normal.await?;
    for (case, r) in [("a", a), ("b", b), ("c", cc), ("d", d), ("e", e), ("f", f)] {
        r.with_context(|| format!("case ({case})"))?;
    }
    assert!(bad.is_empty(), "the normal client was refused: {bad:?}");
    assert!(ok >= 10, "the normal client got only {ok} answers");

    let (_, scrape) = c.get_bytes(1, "/metrics").await?;
    let scrape = String::from_utf8_lossy(&scrape);
    let timed_out = |phase| {
        sample(
            &scrape,
            &format!("turnstile_http_connections_timed_out_total{{phase=\"{phase}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(timed_out("header") >= 3.0, "{scrape}");
    assert!(timed_out("idle") >= 1.0, "{scrape}");
    c.shutdown().await;
    Ok(())
}

/// The negative control of the test above: with the limits set far out, the same silent,
/// half-sent, stalled and idle clients are all still connected well past the short timeouts,
/// and without a tight cap 40 idle connections are all served. So the closes measured above
/// come from the limits, and nothing else closes such connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_long_limits_the_same_clients_stay_connected() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(1, long_http_limits).await?;
    let addr = c.addrs[&1];
    let limit = ms(5_000);
    let silent = raw_http::connect(addr).await?;
    let mut half_head = raw_http::connect(addr).await?;
    half_head.write_all(&HEAD[..HEAD.len() / 2]).await?;
    let mut stalled_body = raw_http::connect(addr).await?;
    stalled_body
        .write_all(b"POST /v1/leases HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{\"a\"")
        .await?;
    let mut kept_alive = raw_http::connect(addr).await?;
    let answer = raw_http::get(&mut kept_alive, "/healthz", &[], limit).await?;
    assert_eq!(answer.status, 200);
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(raw_http::connect(addr).await?);
    }
    // Measuring that nothing happens: the longest short-limit close plus its slack.
    let quiet = ms(IDLE_MS + CLOSE_SLACK_MS);
    let mut conns = vec![silent, half_head, stalled_body, kept_alive];
    conns.extend(idle);
    let open =
        futures::future::join_all(conns.iter_mut().map(|s| raw_http::still_open(s, quiet))).await;
    let closed = open.iter().filter(|o| !**o).count();
    assert_eq!(
        closed,
        0,
        "{closed} of {} connections were closed: {open:?}",
        open.len()
    );
    // Closed first: a graceful shutdown waits for the stalled request (up to its bound).
    drop(conns);
    c.shutdown().await;
    Ok(())
}

/// Long responses are not connection timeouts: a watch stream with no traffic and an acquire
/// waiting on a held lock both outlive every limit, then deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_and_waiting_acquires_outlive_the_connection_timeouts() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(1, short_http_limits).await?;
    let outlive = ms(HEADER_MS.max(IDLE_MS).max(BODY_MS) + CLOSE_SLACK_MS);
    let holder = c.lease(1, 60_000).await?;
    let waiter = c.lease(1, 60_000).await?;
    let (code, v) = c.acquire(1, "slow", holder).await?;
    assert_eq!(code, 200, "{v}");
    let held = token(&v)?;

    let started = Instant::now();
    let watch_url = c.url(1, "/v1/watch?prefix=x&from_revision=0");
    let watch = read_sse(&watch_url, None, 1);
    let put_later = async {
        tokio::time::sleep(outlive).await;
        c.call(
            1,
            reqwest::Method::PUT,
            "/v1/kv/x1",
            Some(json!({"value": "v"})),
        )
        .await
    };
    let wait = async {
        let r = c
            .post(
                1,
                "/v1/locks/slow/acquire",
                json!({"lease_id": waiter, "wait_ms": 20_000}),
            )
            .await;
        (r, started.elapsed())
    };
    let release_later = async {
        tokio::time::sleep(outlive).await;
        c.release(1, "slow", holder, held).await
    };
    let (events, put, (granted, waited), released) =
        tokio::join!(watch, put_later, wait, release_later);
    assert_eq!(put?.0, 200);
    assert_eq!(released?.0, 200);
    let events = events?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].event == "put" && events[0].data.to_string().contains("x1"),
        "{events:?}"
    );
    let (code, v) = granted?;
    assert_eq!(code, 200, "{v}");
    assert!(waited >= outlive, "granted after {waited:?}");
    println!("watch and acquire held {waited:?} open (limits {HEADER_MS}/{IDLE_MS}/{BODY_MS} ms)");
    c.shutdown().await;
    Ok(())
}

/// With a cap of 20, 40 silent connections: at most 20 are served (the rest are closed at
/// once, counted), a connection opened before the flood is still served during it, and once
/// the head clock has closed the silent ones the node takes new connections again. Without
/// the cap all 40 are served (see `with_long_limits_the_same_clients_stay_connected`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_at_once() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(1, capped_http_limits).await?;
    let addr = c.addrs[&1];
    let limit = ms(HEADER_MS + 2 * CLOSE_SLACK_MS);
    let mut keeper = raw_http::connect(addr).await?;
    assert_eq!(
        raw_http::get(&mut keeper, "/healthz", &[], limit)
            .await?
            .status,
        200
    );

    let flood_started = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..40 {
        conns.push(raw_http::connect(addr).await?);
    }
    let closes = futures::future::join_all(
        conns
            .iter_mut()
            .map(|s| raw_http::until_closed(s, flood_started, limit)),
    );
    let scrape = async {
        // Refusals come at once; scrape once the server has seen the whole flood.
        tokio::time::sleep(ms(HEADER_MS / 2)).await;
        raw_http::get(&mut keeper, "/metrics", &[], limit).await
    };
    let (closes, scrape) = tokio::join!(closes, scrape);
    let scrape = scrape?;
    assert_eq!(scrape.status, 200);
    let open = sample(&scrape.body, "turnstile_http_connections_open");
    let refused_total = sample(&scrape.body, "turnstile_http_connections_refused_total");
    let closes = closes.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let at_once = ms(HEADER_MS / 2);
    let refused = closes.iter().filter(|c| c.after < at_once).count();
    let served = closes.len() - refused;
    println!("cap {CAP}: {served} served, {refused} refused; scrape: open {open:?}, refused {refused_total:?}");
    assert_eq!(open, Some(f64::from(CAP)), "the cap is full, never more");
    assert!(served <= CAP as usize, "{served} served at once");
    // The keeper (and maybe the fixture's pooled connection) hold the other slots.
    assert!(served + 2 >= CAP as usize, "only {served} served");
    assert_eq!(refused_total, Some(refused as f64));
    for closed in closes.iter().filter(|c| c.after >= at_once) {
        closed_in_time("served silent connection", closed, HEADER_MS)?;
    }

    let status = wait_for("a new connection to be served", || async {
        c.get(1, "/healthz").await.ok().filter(|(s, _)| *s == 200)
    })
    .await?;
    assert_eq!(status.0, 200);
    c.shutdown().await;
    Ok(())
}
