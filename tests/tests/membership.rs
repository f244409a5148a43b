//! Growing 3 -> 5 and shrinking 5 -> 3 voters while clients keep acquiring locks: no
//! acknowledged grant is lost (each grant's fenced write goes through), tokens increase in
//! real-time order, every acknowledged write survives, and all members end with the same
//! `state_digest` at the same `applied_index`. Also: a removal that would leave the voters
//! without a reachable quorum is refused with a clear error, and nothing changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};
use turnstile_tests::{wait_for, Cluster};

/// Lock-cycling clients during the membership changes.
const WORKERS: u64 = 4;
/// Upper bound on one worker's cycles, so the load stops by itself even if the test stalls.
const CYCLES_MAX: u64 = 2_000;
/// How long one request (with its retries over every endpoint) may take.
const REQUEST_MS_MAX: u64 = 15_000;

/// The nodes the workers may talk to; changed as members come and go.
type Endpoints = Arc<RwLock<Vec<SocketAddr>>>;

/// What the workers saw.
#[derive(Default)]
struct Tally {
    grants: AtomicU64,
    /// Highest token of a grant that has returned (for the real-time order check).
    max_returned_token: AtomicU64,
}

/// Sends one request, moving over endpoints on transport errors and `503`s until it gets a
/// definite answer. Returns `None` when the outcome stays unknown (`504`, or a failure after
/// the request may have been sent).
async fn send(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    path: &str,
    body: &Value,
) -> anyhow::Result<Option<(u16, Value)>> {
    let deadline = Instant::now() + Duration::from_millis(REQUEST_MS_MAX);
    let mut unknown = false;
    for attempt in 0usize.. {
        if Instant::now() > deadline {
            if unknown {
                return Ok(None);
            }
            bail!("{path}: no answer within {REQUEST_MS_MAX} ms");
        }
        let addrs = endpoints.read().map_err(|_| anyhow!("poisoned"))?.clone();
        let addr = addrs[attempt % addrs.len()];
        match http
            .post(format!("http://{addr}{path}"))
            .json(body)
            .send()
            .await
        {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                match (code, v["code"].as_str()) {
                    (503, Some("no_quorum" | "not_member")) => {}
                    (503, Some("unavailable")) | (504, _) => unknown = true,
                    (c, _) if c >= 500 => bail!("{path}: unexpected {c}: {v}"),
                    _ => return Ok(Some((code, v))),
                }
            }
            Err(e) if e.is_connect() => {}
            Err(_) => unknown = true,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!("the loop only ends by returning")
}

/// One client: acquire a fresh lock, write its key through the fence, release. Returns the
/// sequence number of the last write it knows was acknowledged.
async fn worker(
    w: u64,
    endpoints: Endpoints,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> anyhow::Result<u64> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(8))
        .build()?;
    let lease = match send(&http, &endpoints, "/v1/leases", &json!({"ttl_ms": 120_000})).await? {
        Some((200, v)) => v["lease_id"].as_u64().ok_or_else(|| anyhow!("{v}"))?,
        other => bail!("lease: {other:?}"),
    };
    let mut acked = 0;
    for seq in 1..=CYCLES_MAX {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let lock = format!("m-{w}-{seq}");
        let before = tally.max_returned_token.load(Ordering::SeqCst);
        let body = json!({"lease_id": lease, "wait_ms": 0, "request_id": format!("acq-{w}-{seq}")});
        let token = match send(
            &http,
            &endpoints,
            &format!("/v1/locks/{lock}/acquire"),
            &body,
        )
        .await?
        {
            Some((200, v)) => v["token"].as_u64().ok_or_else(|| anyhow!("{v}"))?,
            None => continue,
            other => bail!("worker {w} acquire {lock}: {other:?}"),
        };
        if token <= before {
            bail!("token {token} of {lock} is not above {before}, a grant that returned before it was asked for");
        }
        tally.max_returned_token.fetch_max(token, Ordering::SeqCst);
        tally.grants.fetch_add(1, Ordering::Relaxed);
        // A grant lost in a membership change would make this fenced write fail.
        let put = json!({"value": seq.to_string(), "fence": {"lock": lock, "token": token},
                         "request_id": format!("put-{w}-{seq}")});
        match send_put(&http, &endpoints, &format!("/v1/kv/k-{w}"), &put).await? {
            Some(200) => acked = seq,
            None => {}
            Some(code) => bail!("worker {w}: fenced write under {lock} token {token} answered {code}: the grant was lost"),
        }
        let rel =
            json!({"lease_id": lease, "token": token, "request_id": format!("rel-{w}-{seq}")});
        match send(
            &http,
            &endpoints,
            &format!("/v1/locks/{lock}/release"),
            &rel,
        )
        .await?
        {
            Some((200, _)) | None => {}
            other => bail!("worker {w} release {lock}: {other:?}"),
        }
    }
    Ok(acked)
}

/// A PUT with the same endpoint rotation as [`send`].
async fn send_put(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    path: &str,
    body: &Value,
) -> anyhow::Result<Option<u16>> {
    for attempt in 0usize..(REQUEST_MS_MAX / 50) as usize {
        let addrs = endpoints.read().map_err(|_| anyhow!("poisoned"))?.clone();
        let addr = addrs[attempt % addrs.len()];
        match http
            .put(format!("http://{addr}{path}"))
            .json(body)
            .send()
            .await
        {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                match (code, v["code"].as_str()) {
                    (503, Some("no_quorum" | "not_member")) => {}
                    (503, Some("unavailable")) | (504, _) => return Ok(None),
                    _ => return Ok(Some(code)),
                }
            }
            Err(e) if e.is_connect() => {}
            Err(_) => return Ok(None),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

fn member_ids(v: &Value, voter: bool) -> Vec<u64> {
    v["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|n| n["voter"] == voter)
                .filter_map(|n| n["id"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// Adds a fresh node as a learner, then promotes it. Returns (id, catch-up ms).
async fn grow(c: &mut Cluster, endpoints: &Endpoints) -> anyhow::Result<(u64, u128)> {
    let id = c.add_node().await?;
    let leader = c.leader().await?;
    let addr = c.addrs[&id].to_string();
    let started = Instant::now();
    let (code, v) = c
        .post(leader, "/v1/members", json!({"id": id, "addr": addr}))
        .await?;
    let catch_up_ms = started.elapsed().as_millis();
    if code != 200 {
        bail!("add {id}: {code} {v}");
    }
    let (code, v) = c
        .post(leader, &format!("/v1/members/{id}/promote"), json!({}))
        .await?;
    if code != 200 || !member_ids(&v, true).contains(&id) {
        bail!("promote {id}: {code} {v}");
    }
    endpoints
        .write()
        .map_err(|_| anyhow!("poisoned"))?
        .push(c.addrs[&id]);
    Ok((id, catch_up_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_to_five_and_shrink_to_three_under_load() -> anyhow::Result<()> {
    // No log kept behind a snapshot: the new nodes must catch up from a snapshot.
    let mut c = Cluster::start_with(3, |a| a.snapshot_keep_logs = Some(0)).await?;
    let endpoints: Endpoints = Arc::new(RwLock::new(c.addrs.values().copied().collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let workers: Vec<_> = (1..=WORKERS)
        .map(|w| tokio::spawn(worker(w, endpoints.clone(), stop.clone(), tally.clone())))
        .collect();
    let grants_at = |t: &Tally| t.grants.load(Ordering::Relaxed);
    wait_for("the load to start", || async {
        (grants_at(&tally) >= 20).then_some(())
    })
    .await?;

    // Compact every log behind a fresh snapshot (the manual trigger).
    for id in c.running() {
        let (code, v) = c.post(id, "/v1/admin/snapshot", json!({})).await?;
        assert_eq!(code, 200, "{v}");
        // Purging runs after the snapshot, once no follower needs the entries.
        wait_for("the log to be purged behind the snapshot", || async {
            let s = c.status(id).await.ok()?;
            (s["log"]["first_index"].as_u64()? > 1).then_some(())
        })
        .await?;
    }

    // 3 -> 5.
    let (four, catch_up_4) = grow(&mut c, &endpoints).await?;
    let (five, catch_up_5) = grow(&mut c, &endpoints).await?;
    eprintln!("learner catch-up: node {four} {catch_up_4} ms, node {five} {catch_up_5} ms");
    for id in [four, five] {
        let s = c.status(id).await?;
        assert!(
            s["last_snapshot_index"].as_u64().is_some_and(|i| i > 0),
            "node {id} did not start from a snapshot: {s}"
        );
    }
    let leader = c.leader().await?;
    let (_, v) = c.get(leader, "/v1/members").await?;
    assert_eq!(member_ids(&v, true).len(), 5, "{v}");
    let after_grow = grants_at(&tally);
    wait_for("grants with five voters", || async {
        (grants_at(&tally) >= after_grow + 20).then_some(())
    })
    .await?;

    // 5 -> 3: remove two of the original nodes (never the leader: it is refused).
    let originals: Vec<u64> = (1..=3).filter(|&n| n != leader).collect();
    for &gone in &originals {
        endpoints
            .write()
            .map_err(|_| anyhow!("poisoned"))?
            .retain(|a| *a != c.addrs[&gone]);
        let leader = c.leader().await?;
        let (code, v) = c
            .call(
                leader,
                reqwest::Method::DELETE,
                &format!("/v1/members/{gone}"),
                None,
            )
            .await?;
        assert_eq!(code, 200, "remove {gone}: {v}");
        c.stop(gone).await;
    }
    let leader = c.leader().await?;
    let (_, v) = c.get(leader, "/v1/members").await?;
    let mut voters = member_ids(&v, true);
    voters.sort_unstable();
    let mut expected = vec![leader, four, five];
    expected.sort_unstable();
    expected.dedup();
    assert_eq!(voters, expected, "{v}");
    let after_shrink = grants_at(&tally);
    wait_for("grants with three voters again", || async {
        (grants_at(&tally) >= after_shrink + 20).then_some(())
    })
    .await?;

    stop.store(true, Ordering::Relaxed);
    let mut acked = BTreeMap::new();
    for (i, w) in workers.into_iter().enumerate() {
        acked.insert(i as u64 + 1, w.await??);
    }
    // Every acknowledged write is there (or a later one whose answer was lost).
    let leader = c.leader().await?;
    for (w, last) in &acked {
        let (code, v) = c.get(leader, &format!("/v1/kv/k-{w}")).await?;
        assert_eq!(code, 200, "{v}");
        let value: u64 = v["value"].as_str().unwrap_or("0").parse()?;
        assert!(
            value >= *last,
            "worker {w}: acknowledged write {last} lost; key holds {value}"
        );
    }
    let (index, digest) = c.converged().await?;
    eprintln!(
        "{} grants; members converged at index {index} ({digest})",
        grants_at(&tally)
    );
    c.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_that_leaves_no_reachable_quorum_is_refused() -> anyhow::Result<()> {
    let mut c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let others: Vec<u64> = (1..=3).filter(|&n| n != leader).collect();
    let (down, keep) = (others[0], others[1]);
    c.stop(down).await;
    wait_for(
        "the leader to see the stopped node as unreachable",
        || async {
            let (_, v) = c.get(leader, "/v1/members").await.ok()?;
            let m = v["members"].as_array()?.iter().find(|m| m["id"] == down)?;
            (m["reachable"] == false).then_some(())
        },
    )
    .await?;
    // Removing `keep` would leave voters {leader, down}: one of two answers, two needed.
    let (code, v) = c
        .call(
            leader,
            reqwest::Method::DELETE,
            &format!("/v1/members/{keep}"),
            None,
        )
        .await?;
    assert_eq!(
        (code, v["code"].as_str()),
        (409, Some("membership_refused")),
        "{v}"
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(message.contains("quorum needs 2"), "{message}");
    let (_, v) = c.get(leader, "/v1/members").await?;
    assert_eq!(member_ids(&v, true).len(), 3, "nothing changed: {v}");
    // Removing the node that is down leaves {leader, keep}, both answering: allowed.
    let (code, v) = c
        .call(
            leader,
            reqwest::Method::DELETE,
            &format!("/v1/members/{down}"),
            None,
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(member_ids(&v, true).len(), 2, "{v}");
    // And the two remaining voters still grant.
    let lease = c.lease(leader, 30_000).await?;
    assert_eq!(c.acquire(leader, "after-shrink", lease).await?.0, 200);
    c.shutdown().await;
    Ok(())
}
