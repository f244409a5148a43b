//! Group proposal (`turnstile_server::proposer`): writes sent together, through the leader and
//! through followers, each get their own answer, whether they had an entry of their own or
//! shared one (puts of different keys, `Command::KeyWrites`; acquires of different locks,
//! `Command::Many`). A batch that paired an answer with the wrong caller would show here as a
//! revision that is not the key's `mod_revision`, or a token that is not the lock's holder.
//! Puts through the etcd port never share: each keeps a revision of its own, as etcd's recipes
//! expect.

use futures::future::join_all;
use reqwest::Method;
use serde_json::json;
use turnstile_tests::{token, Cluster};

/// Writers sent at once, spread over every node.
const WRITERS: u64 = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_each_get_their_own_answer() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(3, crate::etcd_port::etcd_port).await?;
    let leader = c.leader().await?;
    let before = c.status(leader).await?["proposer"]["writes"]
        .as_u64()
        .unwrap_or(0);
    let lease = c.lease(leader, 60_000).await?;

    let puts = join_all((0..WRITERS).map(|i| {
        let (c, body) = (&c, json!({"value": format!("v{i}")}));
        async move {
            c.call(1 + i % 3, Method::PUT, &format!("/v1/kv/k{i}"), Some(body))
                .await
        }
    }))
    .await;
    let acquires = join_all((0..WRITERS).map(|i| {
        let (c, body) = (&c, json!({"lease_id": lease, "wait_ms": 0}));
        async move {
            c.post(1 + i % 3, &format!("/v1/locks/l{i}/acquire"), body)
                .await
        }
    }))
    .await;

    let mut revisions = Vec::new();
    let mut tokens = Vec::new();
    for (i, put) in (0..WRITERS).zip(puts) {
        let (code, v) = put?;
        assert_eq!(code, 200, "put k{i}: {v}");
        let revision = v["revision"].as_u64().expect("a put answers its revision");
        let (_, key) = c.get(leader, &format!("/v1/kv/k{i}")).await?;
        assert_eq!(key["value"], format!("v{i}"));
        assert_eq!(
            key["mod_revision"], revision,
            "k{i} got another put's answer"
        );
        revisions.push(revision);
    }
    for (i, acquire) in (0..WRITERS).zip(acquires) {
        let (code, v) = acquire?;
        assert_eq!(code, 200, "acquire l{i}: {v}");
        let granted = token(&v)?;
        assert_eq!(v["name"], format!("l{i}"));
        assert_eq!(
            v["revision"], granted,
            "a token is its granting entry's index"
        );
        let (_, lock) = c.get(leader, &format!("/v1/locks/l{i}")).await?;
        assert_eq!(
            lock["holders"][0]["token"], granted,
            "l{i} got another acquire's answer: {lock}"
        );
        tokens.push(granted);
    }
    // Puts of different keys may share an entry (`Command::KeyWrites`), acquires of different
    // locks too (`Command::Many`), but never with each other: an entry's index is the token of
    // each of its grants, and no put shows a token as its revision.
    revisions.sort_unstable();
    assert!(
        tokens.iter().all(|t| revisions.binary_search(t).is_err()),
        "an acquire shared an entry with a put"
    );

    // The etcd port's puts, sent at once through every node: each its own revision.
    let endpoints: Vec<String> = crate::etcd_port::etcd_addrs(&c)?
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let client = etcd_client::Client::connect(&endpoints, None).await?;
    let etcd_puts = join_all((0..WRITERS).map(|i| {
        let mut kv = client.kv_client();
        async move { kv.put(format!("e{i}"), format!("v{i}"), None).await }
    }))
    .await;
    let mut etcd_revisions = Vec::new();
    for (i, put) in (0..WRITERS).zip(etcd_puts) {
        let put = put?;
        let revision = put.header().map(|h| h.revision()).unwrap_or(0);
        let (_, key) = c.get(leader, &format!("/v1/kv/e{i}")).await?;
        assert_eq!(key["mod_revision"], revision, "e{i}: {key}");
        etcd_revisions.push(revision);
    }
    etcd_revisions.sort_unstable();
    etcd_revisions.dedup();
    assert_eq!(
        etcd_revisions.len() as u64,
        WRITERS,
        "two puts through the etcd port shared a revision"
    );

    let proposer = c.status(leader).await?["proposer"].clone();
    let after = proposer["writes"]
        .as_u64()
        .expect("/v1/cluster reports the proposer");
    let entries = proposer["entries"]
        .as_u64()
        .expect("/v1/cluster reports the proposer's entries");
    assert!(
        entries <= after,
        "{entries} entries for {after} writes: {proposer}"
    );
    assert!(
        after >= before + 3 * WRITERS,
        "the leader proposed {} writes, fewer than the {} sent",
        after - before,
        3 * WRITERS
    );
    // `/metrics` exports the same counter.
    let text = reqwest::get(c.url(leader, "/metrics"))
        .await?
        .text()
        .await?;
    let exported = text
        .lines()
        .find_map(|l| l.strip_prefix("turnstile_proposer_writes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("/metrics exports turnstile_proposer_writes_total");
    assert!(exported >= after as f64, "{exported} < {after}");
    c.converged().await?;
    c.shutdown().await;
    Ok(())
}
