//! The example ledger over real HTTP on 127.0.0.1:0: a paused holder's read-modify-write is
//! refused by the fenced ledger and silently loses an update on the unfenced control.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use turnstile_fence::ledger::{self, Ledger};
use turnstile_fence::FenceToken;

const CLUSTER: &str = "0d6059aa93a2cc6666012c9e9b367b87";
const LOCK: &str = "ledger.alice";

/// A ledger served on an ephemeral loopback port for the life of the test's runtime.
struct Served {
    base: String,
    http: reqwest::Client,
}

async fn serve(ledger: Ledger) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr: SocketAddr = listener.local_addr().expect("bound address");
    let app = ledger::router(Arc::new(ledger));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Served {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    }
}

fn grant(token: u64) -> FenceToken {
    FenceToken::new(CLUSTER, LOCK, token)
}

impl Served {
    /// A fenced read: records `token` at the ledger.
    async fn read(&self, account: &str, g: &FenceToken) -> (StatusCode, Value) {
        let url = format!("{}/accounts/{account}", self.base);
        let token = g.token.to_string();
        let query = [
            ("cluster_id", g.cluster_id.as_str()),
            ("lock", g.lock.as_str()),
            ("token", token.as_str()),
        ];
        let resp = self.http.get(url).query(&query).send().await.expect("GET");
        (resp.status(), resp.json().await.expect("JSON body"))
    }

    async fn plain_balance(&self, account: &str) -> i64 {
        let url = format!("{}/accounts/{account}", self.base);
        let resp = self.http.get(url).send().await.expect("GET");
        assert_eq!(resp.status(), StatusCode::OK);
        let body: Value = resp.json().await.expect("JSON body");
        body["balance"].as_i64().expect("balance")
    }

    async fn set(&self, account: &str, balance: i64, g: &FenceToken) -> (StatusCode, Value) {
        let url = format!("{}/accounts/{account}", self.base);
        let body = json!({"balance": balance, "fence": g});
        self.send(self.http.put(url).json(&body)).await
    }

    async fn add(&self, account: &str, amount: i64, g: Option<&FenceToken>) -> (StatusCode, Value) {
        let url = format!("{}/accounts/{account}/add", self.base);
        let body = json!({"amount": amount, "fence": g});
        self.send(self.http.post(url).json(&body)).await
    }

    async fn stats(&self) -> Value {
        let url = format!("{}/stats", self.base);
        self.http
            .get(url)
            .send()
            .await
            .expect("GET /stats")
            .json()
            .await
            .expect("JSON")
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let resp = req.send().await.expect("request");
        (resp.status(), resp.json().await.expect("JSON body"))
    }
}

/// Holder A (token 10) reads and pauses; its lease expires; holder B (token 11) reads, adds 1
/// and writes; A wakes up and writes its stale read + 1. Returns A's write and the final
/// balance. Both holders meant to add 1 to 100.
async fn paused_holder_workload(s: &Served) -> ((StatusCode, Value), i64) {
    let (status, _) = s.set("alice", 100, &grant(9)).await;
    assert_eq!(status, StatusCode::OK, "seed write");
    let (status, a_view) = s.read("alice", &grant(10)).await;
    assert_eq!(status, StatusCode::OK);
    let a_read = a_view["balance"].as_i64().expect("balance");
    let (status, b_view) = s.read("alice", &grant(11)).await;
    assert_eq!(status, StatusCode::OK);
    let b_read = b_view["balance"].as_i64().expect("balance");
    assert_eq!((a_read, b_read), (100, 100));
    let (status, _) = s.set("alice", b_read + 1, &grant(11)).await;
    assert_eq!(status, StatusCode::OK, "B's write");
    let a_write = s.set("alice", a_read + 1, &grant(10)).await;
    (a_write, s.plain_balance("alice").await)
}

#[tokio::test]
async fn fenced_ledger_refuses_the_paused_holders_stale_write() {
    let s = serve(Ledger::fenced()).await;
    let ((status, body), balance) = paused_holder_workload(&s).await;
    assert_eq!(status, StatusCode::CONFLICT, "A's stale write: {body}");
    assert_eq!(body["code"], "fenced");
    assert_eq!(body["highest"], 11);
    assert_eq!(
        balance, 101,
        "B's increment kept, A's refused (and A knows)"
    );

    // A's stale read and stale add are refused too.
    let (status, body) = s.read("alice", &grant(10)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("fenced"))
    );
    let (status, _) = s.add("alice", 1, Some(&grant(10))).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A re-acquires (a new grant, token 12) and retries its increment: nothing lost.
    let (_, view) = s.read("alice", &grant(12)).await;
    let seen = view["balance"].as_i64().expect("balance");
    let (status, _) = s.set("alice", seen + 1, &grant(12)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.plain_balance("alice").await, 102);

    let stats = s.stats().await;
    assert_eq!(stats["mode"], "fenced");
    assert_eq!(stats["fence"]["rejected_stale"], 3, "{stats}");
    assert_eq!(stats["writes_applied"], 3, "{stats}");
}

#[tokio::test]
async fn unfenced_control_loses_an_update_in_the_same_workload() {
    let s = serve(Ledger::unfenced()).await;
    let ((status, body), balance) = paused_holder_workload(&s).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the control accepts A's stale write"
    );
    assert_eq!(body["balance"], 101);
    // Two increments of 100 were acknowledged, yet the balance shows one: a lost update.
    assert_eq!(balance, 101);
    assert_ne!(balance, 102);
    assert_eq!(s.stats().await["mode"], "unfenced");
}

#[tokio::test]
async fn fenced_ledger_refuses_foreign_and_missing_tokens_with_json_errors() {
    let s = serve(Ledger::fenced()).await;
    assert_eq!(s.add("bob", 5, Some(&grant(3))).await.0, StatusCode::OK);

    let foreign = FenceToken::new("another-cluster", LOCK, 1_000);
    let (status, body) = s.add("bob", 5, Some(&foreign)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("foreign_cluster"))
    );

    let other_lock = FenceToken::new(CLUSTER, "some-other-lock", 1_000);
    let (status, body) = s.add("bob", 5, Some(&other_lock)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("wrong_lock"))
    );

    let (status, body) = s.add("bob", 5, None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("fence_required"))
    );

    let url = format!("{}/accounts/bob/add", s.base);
    let bad = s.http.post(&url).header("content-type", "application/json");
    let (status, body) = s.send(bad.body("{\"amount\": \"ten\"}")).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );

    // JSON is read whatever the Content-Type, as Turnstile does; unknown fields are refused.
    let (status, _) = s.send(s.http.post(&url).body("{\"amount\": 1}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no fence, no content type");
    let typo = json!({"amount": 1, "fense": grant(4)}).to_string();
    let (status, body) = s.send(s.http.post(&url).body(typo)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    let plain = json!({"amount": 1, "fence": grant(4)}).to_string();
    let (status, body) = s.send(s.http.post(&url).body(plain)).await;
    assert_eq!((status, &body["balance"]), (StatusCode::OK, &json!(6)));

    let (status, body) = s.send(s.http.delete(&url)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::METHOD_NOT_ALLOWED, &json!("method_not_allowed"))
    );

    let partial = format!("{}/accounts/bob?token=4", s.base);
    let (status, body) = s.send(s.http.get(partial)).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );

    let (status, body) = s.send(s.http.get(format!("{}/nope", s.base))).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );

    assert_eq!(s.plain_balance("bob").await, 6);
    let stats = s.stats().await;
    assert_eq!(stats["fence"]["rejected_foreign_cluster"], 1, "{stats}");
}
