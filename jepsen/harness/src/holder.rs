//! `turnstile-jepsen holder`: a lock-holding client as its own process, so a test can freeze it
//! (SIGSTOP), kill it, or cut its network, the way a real client pauses or dies. Against a
//! secure cluster it is given the run's CA and `root` client certificate (`--cacert`, `--cert`,
//! `--key`) and speaks HTTPS through `turnstile-client`'s `Security`.
//!
//! It opens a session (a lease kept alive every TTL/3 by `turnstile-client`) and prints
//! `session lease=L`, acquires one lock (waiting up to `--wait-ms`) and prints
//! `granted token=T lease=L cluster=C`, then obeys one command per stdin line, answering one
//! stdout line each:
//!
//! - `put KEY VALUE`: a key write fenced with the grant → `ok` | `fenced` | `error MSG`
//! - `ledger-add URL ACCOUNT AMOUNT`: an add to a `turnstile-fence` ledger with the grant's
//!   token → `ok BALANCE` | `fenced BODY` | `error MSG`
//! - `ledger-get URL ACCOUNT`: a fenced read of the account (the grant's token in the query)
//!   → `ok BALANCE` | `fenced BODY` | `error MSG`
//! - `ledger-set URL ACCOUNT BALANCE`: a fenced `PUT` of the balance (the write half of a
//!   read-modify-write) → `ok BALANCE` | `fenced BODY` | `error MSG`
//! - `keepalive`: one explicit renewal → `ok` | `lost MSG`
//! - `release` → `ok` | `error MSG`; `exit`
//!
//! `fenced BODY` is any `409` of the ledger (`fenced`, `foreign_cluster`, `wrong_lock`), with
//! the ledger's JSON body on the same line.
//!
//! Whenever the session's `lost` signal fires it prints `lost reason=R at_ms=UNIX_MS`, at once,
//! whatever else it is doing. No answer to a command starts with `lost reason=`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use turnstile_client::{Client, ClientConfig, Error, LockGuard, LockOptions, PutOptions, Security};

/// Arguments of the `holder` subcommand.
#[derive(Args, Debug)]
pub struct HolderArgs {
    /// Node endpoints, comma-separated (`http://10.213.1.11:7000,...`).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// The lock to hold.
    #[arg(long)]
    pub lock: String,
    /// The session lease's TTL.
    #[arg(long, default_value_t = 2_000)]
    pub ttl_ms: u64,
    /// How long to wait in the lock's queue.
    #[arg(long, default_value_t = 30_000)]
    pub wait_ms: u64,
    /// The cluster's CA certificate: speak HTTPS and trust only it (the harness's default).
    /// Without it the holder speaks plain HTTP, for an `--insecure` cluster.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// The client certificate to present (with `--key`); the harness gives `root`'s.
    #[arg(long = "cert", requires = "key", requires = "cacert")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
}

impl HolderArgs {
    /// The client's trust and identity, read and checked before anything is sent.
    fn security(&self) -> anyhow::Result<Security> {
        let mut security = Security::default();
        if let Some(ca) = &self.cacert {
            security = security.with_ca_file(ca).context("--cacert")?;
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            security = security
                .with_identity_files(cert, key)
                .context("--cert/--key")?;
        }
        Ok(security)
    }
}

/// Timeout of one ledger request.
const LEDGER_TIMEOUT_MS: u64 = 10_000;

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the test is gone; nothing useful is left to do with the error.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs the holder until `exit` or end of input.
pub async fn run(args: HolderArgs) -> anyhow::Result<()> {
    let config = ClientConfig {
        security: args.security()?,
        ..ClientConfig::default()
    };
    let client = Client::with_config(args.endpoints.clone(), config).context("bad endpoints")?;
    let session = client
        .session(Duration::from_millis(args.ttl_ms))
        .await
        .context("cannot open a session")?;
    say(&format!("session lease={}", session.lease_id()));
    let opts = LockOptions {
        wait: Duration::from_millis(args.wait_ms),
        ..LockOptions::default()
    };
    let guard = session.lock(&args.lock, opts).await.context("acquire")?;
    say(&format!(
        "granted token={} lease={} cluster={}",
        guard.token(),
        guard.lease_id(),
        guard.cluster_id().unwrap_or("-")
    ));
    let lost = guard.lost();
    tokio::spawn(async move {
        let reason = lost.wait().await;
        say(&format!("lost reason={reason} at_ms={}", unix_ms()));
    });
    // The ledger is the tests' in-process example resource on the bridge, served over plain
    // HTTP; it is not a node and holds no credential of the cluster.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(LEDGER_TIMEOUT_MS))
        .build()?;
    let mut holder = Holder {
        client,
        http,
        guard: Some(guard),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.as_slice() == ["exit"] {
            break;
        }
        let answer = holder.obey(&words).await;
        say(&answer);
    }
    Ok(())
}

/// What the command loop works with.
struct Holder {
    client: Client,
    http: reqwest::Client,
    /// `None` once released.
    guard: Option<LockGuard>,
}

impl Holder {
    /// Runs one command and returns its answer line.
    async fn obey(&mut self, words: &[&str]) -> String {
        if words == ["release"] {
            return match self.guard.take() {
                Some(g) => match g.release().await {
                    Ok(_) => "ok".into(),
                    Err(e) => format!("error {e}"),
                },
                None => "error released".into(),
            };
        }
        let Some(g) = self.guard.as_ref() else {
            return "error released".into();
        };
        match words {
            ["put", key, value] => {
                let opts = PutOptions {
                    fence: Some(g.fence()),
                    ..PutOptions::default()
                };
                match self.client.put(key, value, opts).await {
                    Ok(_) => "ok".into(),
                    Err(Error::Fenced { .. }) => "fenced".into(),
                    Err(e) => format!("error {e}"),
                }
            }
            ["keepalive"] => match self.client.keepalive(g.lease_id()).await {
                Ok(_) => "ok".into(),
                Err(e) => format!("lost {e}"),
            },
            ["ledger-add", url, account, amount] => match amount.parse::<i64>() {
                Ok(amount) => {
                    let body = json!({ "amount": amount, "fence": fence_json(g) });
                    let req = self.http.post(format!("{url}/accounts/{account}/add"));
                    ledger_answer(req.json(&body).send().await).await
                }
                Err(e) => format!("error amount: {e}"),
            },
            ["ledger-set", url, account, balance] => match balance.parse::<i64>() {
                Ok(balance) => {
                    let body = json!({ "balance": balance, "fence": fence_json(g) });
                    let req = self.http.put(format!("{url}/accounts/{account}"));
                    ledger_answer(req.json(&body).send().await).await
                }
                Err(e) => format!("error balance: {e}"),
            },
            ["ledger-get", url, account] => {
                let token = g.token().to_string();
                let query = [
                    ("cluster_id", g.cluster_id().unwrap_or_default()),
                    ("lock", g.name()),
                    ("token", token.as_str()),
                ];
                let req = self.http.get(format!("{url}/accounts/{account}"));
                ledger_answer(req.query(&query).send().await).await
            }
            _ => format!("error unknown command {:?}", words.join(" ")),
        }
    }
}

/// The grant as the ledger's `fence` field.
fn fence_json(g: &LockGuard) -> Value {
    json!({
        "cluster_id": g.cluster_id().unwrap_or_default(),
        "lock": g.name(),
        "token": g.token(),
    })
}

/// One answer line for a ledger response: `ok BALANCE`, `fenced BODY` (any 409), or `error`.
async fn ledger_answer(resp: reqwest::Result<reqwest::Response>) -> String {
    match resp {
        Ok(r) if r.status().is_success() => match r.json::<Value>().await {
            Ok(v) => format!("ok {}", v["balance"]),
            Err(e) => format!("error unreadable answer: {e}"),
        },
        Ok(r) if r.status().as_u16() == 409 => {
            let body = r.text().await.unwrap_or_default();
            format!("fenced {}", body.replace('\n', " "))
        }
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            format!("error {status} {}", body.replace('\n', " "))
        }
        Err(e) => format!("error {e}"),
    }
}
