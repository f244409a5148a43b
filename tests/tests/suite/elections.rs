//! Elections end to end: FIFO hand-over with entry-index tokens (resign, revoke, expiry), a
//! stale leader refused with `not_leader` and changing nothing, a deposed leader's fenced
//! write refused while the new leader's applies (and the same write unfenced accepted: the
//! fence is what protects), watch events, a Raft leader failover, campaign timeouts and bad
//! input.

use std::time::Duration;

use serde_json::{json, Value};
use turnstile_tests::{read_sse, token, wait_for, Cluster};

fn campaign_body(lease: u64, value: &str, wait_ms: u64) -> Value {
    json!({"lease_id": lease, "value": value, "wait_ms": wait_ms})
}

async fn post_json(url: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    let code = resp.status().as_u16();
    Ok((code, resp.json().await.unwrap_or(Value::Null)))
}

/// A campaign that waits, sent from its own task through node `node`.
fn campaign_in_background(
    c: &Cluster,
    node: u64,
    name: &str,
    body: Value,
) -> tokio::task::JoinHandle<anyhow::Result<(u16, Value)>> {
    let url = c.url(node, &format!("/v1/elections/{name}/campaign"));
    tokio::spawn(async move { post_json(&url, body).await })
}

async fn waiters(c: &Cluster, name: &str) -> Option<usize> {
    let (_, v) = c.get(1, &format!("/v1/locks/{name}")).await.ok()?;
    v["waiters"].as_array().map(Vec::len)
}

async fn leader_of(c: &Cluster, node: u64, name: &str) -> anyhow::Result<Value> {
    let (code, v) = c.get(node, &format!("/v1/elections/{name}")).await?;
    anyhow::ensure!(code == 200, "get election {code}: {v}");
    Ok(v["leader"].clone())
}

fn revision(v: &Value) -> anyhow::Result<u64> {
    v["revision"]
        .as_u64()
        .ok_or_else(|| anyhow::anyhow!("no revision in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaigners_lead_in_fifo_order_with_entry_index_tokens() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let (a, b) = (c.lease(1, 60_000).await?, c.lease(1, 60_000).await?);
    let cc = c.lease(1, 60_000).await?;
    let (code, v) = c
        .post(1, "/v1/elections/e/campaign", campaign_body(a, "va", 0))
        .await?;
    assert_eq!(code, 200, "{v}");
    let ta = token(&v)?;
    assert_eq!(
        ta,
        revision(&v)?,
        "the token is the index of the entry: {v}"
    );
    assert_eq!(
        (v["value"].as_str(), v["lease_id"].as_u64()),
        (Some("va"), Some(a))
    );
    // b, c and d queue in this order, each through a different node. d's lease is short and
    // never renewed: it expires while d waits.
    let mut pending = Vec::new();
    for (i, (lease, value, node)) in [(Some(b), "vb", 2), (Some(cc), "vc", 3), (None, "vd", 1)]
        .into_iter()
        .enumerate()
    {
        let lease = match lease {
            Some(l) => l,
            None => c.lease(1, 3_000).await?,
        };
        pending.push(campaign_in_background(
            &c,
            node,
            "e",
            campaign_body(lease, value, 30_000),
        ));
        wait_for("the campaign to queue", || async {
            (waiters(&c, "e").await? == i + 1).then_some(())
        })
        .await?;
    }
    let mut pending = pending.into_iter();
    let mut next = || {
        pending
            .next()
            .ok_or_else(|| anyhow::anyhow!("no campaign left"))
    };

    // Resign hands over to b; b's token is the resign entry's index.
    let (code, r) = c
        .post(
            2,
            "/v1/elections/e/resign",
            json!({"lease_id": a, "token": ta}),
        )
        .await?;
    assert_eq!(code, 200, "{r}");
    let (code, vb) = next()?.await??;
    assert_eq!(code, 200, "{vb}");
    let tb = token(&vb)?;
    assert_eq!(
        (vb["lease_id"].as_u64(), tb),
        (Some(b), revision(&r)?),
        "{vb}"
    );
    assert_eq!(leader_of(&c, 3, "e").await?["value"], "vb");

    // Revoking b's lease hands over to c.
    let (code, r) = c.delete(1, &format!("/v1/leases/{b}")).await?;
    assert_eq!(code, 200, "{r}");
    let (code, vc) = next()?.await??;
    assert_eq!(code, 200, "{vc}");
    let tc = token(&vc)?;
    assert_eq!(
        (vc["lease_id"].as_u64(), tc),
        (Some(cc), revision(&r)?),
        "{vc}"
    );

    // d's 3 s lease expired while it waited: it fails and leaves the queue, never leads.
    let (code, vd) = next()?.await??;
    assert_eq!(
        (code, vd["code"].as_str()),
        (404, Some("lease_not_found")),
        "{vd}"
    );
    assert!(ta < tb && tb < tc);
    let leader = leader_of(&c, 1, "e").await?;
    assert_eq!(
        (leader["lease_id"].as_u64(), leader["token"].as_u64()),
        (Some(cc), Some(tc))
    );
    c.shutdown().await;
    Ok(())
}

/// A leader whose lease expires is deposed; the next campaigner leads, and the deposed
/// leader's fenced write is refused while the new leader's applies. The negative control:
/// the same stale write without the fence is accepted, so the fence is what protects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_fenced_write_is_rejected() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let old = c.lease(1, 3_000).await?;
    let new = c.lease(1, 60_000).await?;
    let (code, v) = c
        .post(
            1,
            "/v1/elections/primary/campaign",
            campaign_body(old, "old", 0),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let t_old = token(&v)?;
    let put = |value: &str, fence: Option<u64>| {
        let mut body = json!({"value": value});
        if let Some(t) = fence {
            body["fence"] = json!({"lock": "primary", "token": t});
        }
        body
    };
    let (code, v) = c
        .call(
            1,
            reqwest::Method::PUT,
            "/v1/kv/config",
            Some(put("by-old", Some(t_old))),
        )
        .await?;
    assert_eq!(code, 200, "the current leader's fenced write applies: {v}");
    // The new campaigner waits; the old leader's lease expires (nobody renews it).
    let (code, v) = post_json(
        &c.url(2, "/v1/elections/primary/campaign"),
        campaign_body(new, "new", 30_000),
    )
    .await?;
    assert_eq!(code, 200, "{v}");
    let t_new = token(&v)?;
    assert!(t_new > t_old);
    // The deposed leader, unaware, writes with its old token: fenced.
    let (code, v) = c
        .call(
            2,
            reqwest::Method::PUT,
            "/v1/kv/config",
            Some(put("stale", Some(t_old))),
        )
        .await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("fenced")), "{v}");
    assert_eq!(v["current_token"], t_new, "{v}");
    let (_, kv) = c.get(1, "/v1/kv/config").await?;
    assert_eq!(
        kv["value"], "by-old",
        "the fenced write changed nothing: {kv}"
    );
    // The new leader's fenced write applies.
    let (code, v) = c
        .call(
            3,
            reqwest::Method::PUT,
            "/v1/kv/config",
            Some(put("by-new", Some(t_new))),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    // Negative control: without the fence the stale write is accepted.
    let (code, v) = c
        .call(
            1,
            reqwest::Method::PUT,
            "/v1/kv/config",
            Some(put("stale", None)),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let (_, kv) = c.get(1, "/v1/kv/config").await?;
    assert_eq!(kv["value"], "stale", "{kv}");
    // Its proclaim is refused too: its lease is gone.
    let (code, v) = c
        .post(
            1,
            "/v1/elections/primary/proclaim",
            json!({"lease_id": old, "token": t_old, "value": "x"}),
        )
        .await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (404, Some("lease_not_found")),
        "{v}"
    );
    c.shutdown().await;
    Ok(())
}

/// Proclaim and resign with a token that is not the current leader's get `409 not_leader`
/// and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_tokens_get_not_leader_and_change_nothing() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let (a, b) = (c.lease(1, 60_000).await?, c.lease(1, 60_000).await?);
    let ta = token(
        &c.post(1, "/v1/elections/e/campaign", campaign_body(a, "va", 0))
            .await?
            .1,
    )?;
    let pending = campaign_in_background(&c, 1, "e", campaign_body(b, "vb", 30_000));
    wait_for("b to queue", || async {
        (waiters(&c, "e").await? == 1).then_some(())
    })
    .await?;
    let (code, v) = c
        .post(
            1,
            "/v1/elections/e/proclaim",
            json!({"lease_id": a, "token": ta, "value": "va2"}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(leader_of(&c, 1, "e").await?["value"], "va2");
    c.post(
        1,
        "/v1/elections/e/resign",
        json!({"lease_id": a, "token": ta}),
    )
    .await?;
    let tb = token(&pending.await??.1)?;
    let before = leader_of(&c, 1, "e").await?;
    let table = [
        (
            "proclaim",
            json!({"lease_id": a, "token": ta, "value": "stale"}),
        ),
        ("resign", json!({"lease_id": a, "token": ta})),
        (
            "proclaim",
            json!({"lease_id": a, "token": tb, "value": "stale"}),
        ),
        ("resign", json!({"lease_id": b, "token": ta})),
    ];
    for (op, body) in table {
        let (code, v) = c
            .post(1, &format!("/v1/elections/e/{op}"), body.clone())
            .await?;
        assert_eq!(
            (code, v["code"].as_str()),
            (409, Some("not_leader")),
            "{op} {body}: {v}"
        );
    }
    let after = leader_of(&c, 1, "e").await?;
    assert_eq!(after, before);
    assert_eq!(
        (after["token"].as_u64(), after["value"].as_str()),
        (Some(tb), Some("vb"))
    );
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_carry_election_events() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let (a, b) = (c.lease(1, 60_000).await?, c.lease(1, 60_000).await?);
    let from = c.status(1).await?["applied_index"].as_u64().unwrap_or(0) + 1;
    let ta = token(
        &c.post(1, "/v1/elections/w/campaign", campaign_body(a, "va", 0))
            .await?
            .1,
    )?;
    let pending = campaign_in_background(&c, 1, "w", campaign_body(b, "vb", 30_000));
    wait_for("b to queue", || async {
        (waiters(&c, "w").await? == 1).then_some(())
    })
    .await?;
    c.post(
        1,
        "/v1/elections/w/proclaim",
        json!({"lease_id": a, "token": ta, "value": "va2"}),
    )
    .await?;
    c.post(
        1,
        "/v1/elections/w/resign",
        json!({"lease_id": a, "token": ta}),
    )
    .await?;
    let tb = token(&pending.await??.1)?;
    let url = c.url(1, &format!("/v1/watch?key=w&from_revision={from}"));
    let events = read_sse(&url, None, 7).await?;
    let election: Vec<(String, Value, Value, Value)> = events
        .iter()
        .filter(|e| e.event.starts_with("election_"))
        .map(|e| {
            (
                e.event.clone(),
                e.data["token"].clone(),
                e.data["value"].clone(),
                e.data["election"].clone(),
            )
        })
        .collect();
    let want = vec![
        (
            "election_leader".to_string(),
            json!(ta),
            json!("va"),
            json!("w"),
        ),
        (
            "election_leader".to_string(),
            json!(ta),
            json!("va2"),
            json!("w"),
        ),
        (
            "election_resigned".to_string(),
            json!(ta),
            Value::Null,
            json!("w"),
        ),
        (
            "election_leader".to_string(),
            json!(tb),
            json!("vb"),
            json!("w"),
        ),
    ];
    assert_eq!(election, want, "{events:#?}");
    let resigned = events.iter().find(|e| e.event == "election_resigned");
    assert_eq!(
        resigned.map(|e| e.data["cause"].clone()),
        Some(json!("released"))
    );
    c.shutdown().await;
    Ok(())
}

/// The election's leader is replicated state: killing the Raft leader node changes nothing
/// about who leads the election, and the leader's token still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_election_leader_survives_a_raft_failover() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let raft_leader = c.leader().await?;
    let survivor = (1..=3).find(|&n| n != raft_leader).unwrap_or(1);
    let a = c.lease(survivor, 60_000).await?;
    let (code, v) = c
        .post(
            survivor,
            "/v1/elections/f/campaign",
            campaign_body(a, "va", 0),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let ta = token(&v)?;
    c.stop(raft_leader).await;
    let leader = wait_for("the election read after failover", || async {
        leader_of(&c, survivor, "f").await.ok()
    })
    .await?;
    assert_eq!(
        (
            leader["lease_id"].as_u64(),
            leader["token"].as_u64(),
            leader["value"].as_str()
        ),
        (Some(a), Some(ta), Some("va"))
    );
    let (code, v) = wait_for("a proclaim after failover", || async {
        let r = c
            .post(
                survivor,
                "/v1/elections/f/proclaim",
                json!({"lease_id": a, "token": ta, "value": "vb"}),
            )
            .await
            .ok()?;
        (r.0 != 503).then_some(r)
    })
    .await?;
    assert_eq!(code, 200, "{v}");
    let (code, v) = c
        .call(
            survivor,
            reqwest::Method::PUT,
            "/v1/kv/k",
            Some(json!({"value": "x", "fence": {"lock": "f", "token": ta}})),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    c.shutdown().await;
    Ok(())
}

/// A campaign that cannot lead within `wait_ms` is answered `409 wait_timeout` after its
/// queue entry was withdrawn, exactly like a lock acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_times_out_like_an_acquire() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let (a, b) = (c.lease(1, 60_000).await?, c.lease(1, 60_000).await?);
    let ta = token(
        &c.post(1, "/v1/elections/t/campaign", campaign_body(a, "va", 0))
            .await?
            .1,
    )?;
    let (code, v) = c
        .post(1, "/v1/elections/t/campaign", campaign_body(b, "vb", 300))
        .await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("wait_timeout")),
        "{v}"
    );
    assert_eq!(waiters(&c, "t").await, Some(0));
    // Try-campaign (wait_ms 0) of a held election: lock_held, with the leader's token.
    let (code, v) = c
        .post(1, "/v1/elections/t/campaign", campaign_body(b, "vb", 0))
        .await?;
    assert_eq!((code, v["code"].as_str()), (409, Some("lock_held")), "{v}");
    // The timed-out campaign left nothing: after a resign nobody leads.
    c.post(
        1,
        "/v1/elections/t/resign",
        json!({"lease_id": a, "token": ta}),
    )
    .await?;
    assert_eq!(leader_of(&c, 1, "t").await?, Value::Null);
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_election_input_gets_a_clear_4xx() -> anyhow::Result<()> {
    let c = Cluster::start(1).await?;
    let lease = c.lease(1, 60_000).await?;
    let sem = c
        .post(
            1,
            "/v1/locks/sem/acquire",
            json!({"lease_id": lease, "permits": 3}),
        )
        .await?;
    assert_eq!(sem.0, 200, "{}", sem.1);
    let big = "x".repeat(turnstile_core::limits::ELECTION_VALUE_BYTES_MAX + 1);
    let long_name = "n".repeat(turnstile_core::limits::ELECTION_NAME_BYTES_MAX + 1);
    let table: Vec<(String, Value, u16, &str)> = vec![
        (
            "e/campaign".into(),
            json!({"lease_id": lease, "value": "v", "extra": 1}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": lease}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": 0, "value": "v"}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": lease, "value": big}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": lease, "value": "v", "wait_ms": 300_001}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": lease, "value": "v", "request_id": ""}),
            400,
            "bad_request",
        ),
        (
            "e/campaign".into(),
            json!({"lease_id": 999_999, "value": "v"}),
            404,
            "lease_not_found",
        ),
        (
            format!("{long_name}/campaign"),
            json!({"lease_id": lease, "value": "v"}),
            400,
            "bad_request",
        ),
        (
            "a%20b/campaign".into(),
            json!({"lease_id": lease, "value": "v"}),
            400,
            "bad_request",
        ),
        (
            "sem/campaign".into(),
            json!({"lease_id": lease, "value": "v"}),
            409,
            "mode_mismatch",
        ),
        (
            "e/proclaim".into(),
            json!({"lease_id": lease, "token": 0, "value": "v"}),
            400,
            "bad_request",
        ),
        (
            "e/proclaim".into(),
            json!({"lease_id": lease, "token": 5}),
            400,
            "bad_request",
        ),
        (
            "e/proclaim".into(),
            json!({"lease_id": lease, "token": 5, "value": "v"}),
            409,
            "not_leader",
        ),
        (
            "e/resign".into(),
            json!({"lease_id": lease, "token": 5, "value": "v"}),
            400,
            "bad_request",
        ),
        (
            "e/resign".into(),
            json!({"lease_id": lease, "token": "5"}),
            400,
            "bad_request",
        ),
    ];
    for (path, body, want_code, want) in table {
        let (code, v) = c
            .post(1, &format!("/v1/elections/{path}"), body.clone())
            .await?;
        assert_eq!(
            (code, v["code"].as_str()),
            (want_code, Some(want)),
            "{path} {body}: {v}"
        );
    }
    let (code, v) = c.get(1, "/v1/elections/a%20b").await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (400, Some("bad_request")),
        "{v}"
    );
    let (code, v) = c.get(1, "/v1/elections/nobody").await?;
    assert_eq!((code, v), (200, json!({"name": "nobody", "leader": null})));
    c.shutdown().await;
    Ok(())
}
