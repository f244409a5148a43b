//! Hostile peers, in both directions, against a real in-process 3-node cluster:
//! - an address that is not a member (anyone can ask to add one) answers the leader's
//!   `/raft/prepare-join` with a 10-byte body claiming a 2^45-byte string, with a body that
//!   never ends, and with a forged reply MAC: the leader stays up, refuses the change without
//!   quoting the reply, and the listener never sees the cluster secret;
//! - a caller that holds the secret (a buggy or compromised member) sends every `/raft/*` route
//!   huge claimed lengths, truncated and random bytes: each is a 400, every node stays up and
//!   the cluster still grants locks.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turnstile_raft::network::{CLUSTER_ID_HEADER, FROM_HEADER};
use turnstile_raft::peer_auth::{PeerKey, RequestHead, AUTH_HEADER, REPLY_AUTH_HEADER};
use turnstile_tests::Cluster;

const SECRET: &str = "test-cluster-secret";

/// How the fake member answers.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// `200` with a body claiming a 2^45-byte string.
    HugeClaim,
    /// `200` with a chunked body that goes on for 100 MiB (past the reply limit).
    Endless,
    /// `409` with a text and a made-up reply MAC.
    ForgedMac,
}

const HOSTILE_TEXT: &str = "HOSTILE-LISTENER-TEXT";

/// A raw TCP listener that records every request it receives and answers each with `answer`.
async fn hostile_listener(answer: Answer) -> anyhow::Result<(String, Arc<Mutex<Vec<u8>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        // Bounded: a handful of connections, then it stops accepting.
        for _ in 0..16 {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let Ok(n) = sock.read(&mut buf).await else {
                    return;
                };
                if let Ok(mut seen) = record.lock() {
                    seen.extend_from_slice(&buf[..n]);
                }
                match answer {
                    Answer::HugeClaim => {
                        // Ok(String) whose length prefix claims 2^45 bytes.
                        let mut body = vec![0u8, 0xFD];
                        body.extend_from_slice(&(1u64 << 45).to_le_bytes());
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: application/x-turnstile-bincode\r\n\r\n",
                            body.len()
                        );
                        let _ = sock.write_all(head.as_bytes()).await;
                        let _ = sock.write_all(&body).await;
                    }
                    Answer::Endless => {
                        let _ = sock
                            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                            .await;
                        let chunk = vec![b'x'; 1 << 20];
                        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                        framed.extend_from_slice(&chunk);
                        framed.extend_from_slice(b"\r\n");
                        for _ in 0..100 {
                            if sock.write_all(&framed).await.is_err() {
                                return;
                            }
                        }
                    }
                    Answer::ForgedMac => {
                        let body = format!("{HOSTILE_TEXT}: trust me");
                        let head = format!(
                            "HTTP/1.1 409 Conflict\r\ncontent-length: {}\r\n{REPLY_AUTH_HEADER}: {}\r\n\r\n",
                            body.len(),
                            "ab".repeat(32)
                        );
                        let _ = sock.write_all(head.as_bytes()).await;
                        let _ = sock.write_all(body.as_bytes()).await;
                    }
                }
            });
        }
    });
    Ok((addr, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_address_cannot_crash_the_leader_or_learn_the_secret() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    // Sent to a follower, which hands it to the leader, as in the report.
    let follower = (1..=3).find(|&id| id != leader).unwrap_or(1);
    for (i, answer) in [Answer::HugeClaim, Answer::Endless, Answer::ForgedMac]
        .into_iter()
        .enumerate()
    {
        let (addr, seen) = hostile_listener(answer).await?;
        let (code, v) = c
            .post(
                follower,
                "/v1/members",
                json!({"id": 90 + i as u64, "addr": addr}),
            )
            .await?;
        let text = v.to_string();
        assert_eq!(code, 409, "{answer:?}: {text}");
        assert!(
            !text.contains(HOSTILE_TEXT),
            "{answer:?}: the refusal quotes the hostile reply: {text}"
        );
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let seen = String::from_utf8_lossy(&seen).to_string();
        assert!(
            seen.contains("/raft/prepare-join"),
            "{answer:?}: the listener was never called: {seen}"
        );
        assert!(
            !seen.contains(SECRET),
            "{answer:?}: the secret went to a non-member: {seen}"
        );
        // Every node is still up, and the cluster still grants.
        for id in 1..=3 {
            c.status(id).await?;
        }
        let lease = c.lease(leader, 60_000).await?;
        let (code, v) = c
            .post(
                leader,
                &format!("/v1/locks/after-hostile-{i}/acquire"),
                json!({"lease_id": lease, "wait_ms": 0}),
            )
            .await?;
        assert_eq!(code, 200, "{v}");
    }
    c.shutdown().await;
    Ok(())
}

/// Bodies a buggy or hostile member might send.
fn hostile_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let mut claim = vec![0xFDu8];
    claim.extend_from_slice(&(1u64 << 45).to_le_bytes());
    let mut claim_in_struct = vec![0u8; 6];
    claim_in_struct.extend_from_slice(&claim);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    vec![
        ("empty", Vec::new()),
        ("huge claimed length", claim.clone()),
        ("huge claimed length inside", claim_in_struct),
        ("truncated claim", claim[..4].to_vec()),
        ("random bytes", random),
        ("all 0xff", vec![0xff; 1024]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peer_requests_leave_every_node_up() -> anyhow::Result<()> {
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let cluster_id = c.status(leader).await?["cluster_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = PeerKey::new(SECRET);
    let http = reqwest::Client::new();
    let paths = [
        "/raft/append",
        "/raft/vote",
        "/raft/pre-vote",
        "/raft/snapshot",
        "/raft/transfer-leader",
        "/raft/propose",
        "/raft/read",
        "/raft/member",
        "/raft/identity",
        "/raft/membership",
    ];
    let mut answered = 0;
    for id in 1..=3 {
        for path in paths {
            for (what, body) in hostile_bodies() {
                let head = RequestHead {
                    method: "POST",
                    path,
                    from: 2,
                    cluster_id: &cluster_id,
                };
                let mac = key.sign_request(&head, &body);
                let resp = http
                    .post(c.url(id, path))
                    .header(FROM_HEADER, "2")
                    .header(CLUSTER_ID_HEADER, &cluster_id)
                    .header(AUTH_HEADER, mac)
                    .body(body)
                    .send()
                    .await?;
                let code = resp.status().as_u16();
                // `/raft/identity` and `/raft/membership` take no body; a body is ignored.
                let bodiless = path == "/raft/identity" || path == "/raft/membership";
                assert!(
                    code == 400 || (bodiless && code == 200),
                    "node {id} {path} {what}: HTTP {code}"
                );
                answered += 1;
            }
        }
        c.status(id).await?;
    }
    assert_eq!(answered, 3 * paths.len() * hostile_bodies().len());
    let lease = c.lease(leader, 60_000).await?;
    let (code, v) = c
        .post(
            leader,
            "/v1/locks/after-hostile-requests/acquire",
            json!({"lease_id": lease, "wait_ms": 0}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    c.shutdown().await;
    Ok(())
}
