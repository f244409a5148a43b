//! The etcd port (`--etcd-listen`) driven by Debian's real `etcdctl` (3.4) against 3-node
//! clusters: keys, transactions, leases, members and status answer as etcd's do, revisions are
//! Turnstile's log indexes (the same numbers `/v1/kv` shows), what is not served fails with
//! `Unimplemented` and a message naming it, a past revision answers etcd's "compacted", and a
//! secure cluster's port wants a client certificate (the principal is its CN).
//!
//! Skipped, and saying so, where `etcdctl` is not installed (`.ci/run` installs it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;
use turnstile_server::tls::certs;
use turnstile_tests::Cluster;

/// How long one `etcdctl` run may take before the test fails.
const ETCDCTL_TIMEOUT_S: u64 = 30;

pub(crate) fn etcd_port(args: &mut turnstile_server::config::ServeArgs) {
    args.etcd_listen = Some("127.0.0.1:0".parse().expect("addr"));
}

/// Debian's `etcdctl`; `None` (the test skips, and this says so) where it is not installed,
/// except in CI, which installs it: there a missing one fails the test.
pub(crate) fn etcdctl_binary() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin/etcdctl");
    assert!(
        path.exists() || std::env::var_os("CI").is_none(),
        "CI must install etcdctl (.ci/run: etcd-client)"
    );
    if !path.exists() {
        eprintln!("SKIPPED: /usr/bin/etcdctl is not installed (apt-get install etcd-client)");
        return None;
    }
    Some(path)
}

/// `etcdctl` and a 3-node cluster serving the etcd port, with the nodes' etcd addresses;
/// `None` where `etcdctl` is not installed (`etcdctl_binary`).
pub(crate) async fn etcdctl_cluster() -> anyhow::Result<Option<(PathBuf, Cluster, Vec<SocketAddr>)>>
{
    let Some(binary) = etcdctl_binary() else {
        return Ok(None);
    };
    let c = Cluster::start_tuned(3, etcd_port).await?;
    let addrs = etcd_addrs(&c)?;
    Ok(Some((binary, c, addrs)))
}

/// Runs `etcdctl` with `args` against `endpoints`, feeding it `stdin`.
pub(crate) struct Etcdctl {
    pub(crate) binary: PathBuf,
    pub(crate) endpoints: String,
    /// `--cacert`, `--cert`, `--key` for a secure cluster.
    tls: Vec<String>,
}

impl Etcdctl {
    pub(crate) fn new(binary: PathBuf, endpoints: &[SocketAddr]) -> Etcdctl {
        let endpoints = endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Etcdctl {
            binary,
            endpoints,
            tls: Vec::new(),
        }
    }

    /// On a TLS cluster whose certificates are in `dir`: root, by its client certificate.
    pub(crate) fn signed_in_as_root(mut self, dir: &Path) -> Etcdctl {
        let root = certs::client_paths(dir, turnstile_tests::ROOT_USER);
        self.tls = vec![
            format!("--cacert={}", certs::ca_paths(dir).cert.display()),
            format!("--cert={}", root.cert.display()),
            format!("--key={}", root.key.display()),
        ];
        self
    }

    /// On a TLS cluster whose certificates are in `dir`: `user`, with a Turnstile token as
    /// its password (etcdctl's `--user`).
    pub(crate) fn signed_in_as(mut self, dir: &Path, user: &str, token: &str) -> Etcdctl {
        self.tls = vec![
            format!("--cacert={}", certs::ca_paths(dir).cert.display()),
            format!("--user={user}:{token}"),
        ];
        self
    }

    async fn run_with(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints))
            .arg("--dial-timeout=5s")
            .arg("--command-timeout=15s")
            .args(&self.tls)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("spawn etcdctl")?;
        let mut input = child.stdin.take().context("stdin")?;
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).await?;
        }
        drop(input);
        tokio::time::timeout(
            Duration::from_secs(ETCDCTL_TIMEOUT_S),
            child.wait_with_output(),
        )
        .await
        .with_context(|| format!("etcdctl {args:?} did not finish"))?
        .context("etcdctl output")
    }

    /// Runs `args`, demands success, returns stdout.
    pub(crate) async fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        self.ok_with(args, None).await
    }

    async fn ok_with(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let out = self.run_with(args, stdin).await?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        ensure!(
            out.status.success(),
            "etcdctl {args:?} failed: {}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stdout)
    }

    /// Runs `args`, demands failure, returns stderr.
    async fn fails(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run_with(args, None).await?;
        ensure!(
            !out.status.success(),
            "etcdctl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(String::from_utf8_lossy(&out.stderr).to_string())
    }

    pub(crate) async fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-w", "json"]);
        let out = self.ok(&all).await?;
        serde_json::from_str(&out).with_context(|| format!("etcdctl json: {out}"))
    }
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

pub(crate) fn etcd_addrs(c: &Cluster) -> anyhow::Result<Vec<SocketAddr>> {
    (1..=3)
        .map(|id| c.etcd_addr(id).context("node serves no etcd port"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_keys_transactions_and_revisions() -> anyhow::Result<()> {
    let Some((binary, c, addrs)) = etcdctl_cluster().await? else {
        return Ok(());
    };
    let ctl = Etcdctl::new(binary.clone(), &addrs);

    assert_eq!(ctl.ok(&["put", "app/a", "1"]).await?.trim(), "OK");
    let put = ctl.json(&["put", "app/b", "2"]).await?;
    let put_rev = put["header"]["revision"].as_u64().context("revision")?;
    // The etcd revision is the log index: the same number Turnstile's own API shows.
    let (status, v) = c.get(1, "/v1/kv/app/b").await?;
    ensure!(status == 200, "{v}");
    assert_eq!(v["mod_revision"].as_u64(), Some(put_rev), "{v}");
    assert_eq!(
        put["header"]["member_id"].as_u64().map(|m| m >= 1),
        Some(true)
    );

    assert_eq!(ctl.ok(&["get", "app/a"]).await?, "app/a\n1\n");
    ctl.ok(&["put", "other", "x"]).await?;
    assert_eq!(
        ctl.ok(&["get", "--prefix", "app/"]).await?,
        "app/a\n1\napp/b\n2\n"
    );
    assert_eq!(
        ctl.ok(&["get", "--prefix", "app/", "--keys-only"]).await?,
        "app/a\n\napp/b\n\n"
    );
    let got = ctl.json(&["get", "--prefix", "app/", "--limit=1"]).await?;
    assert_eq!(got["count"].as_u64(), Some(2), "{got}");
    assert_eq!(got["more"].as_bool(), Some(true), "{got}");
    assert_eq!(got["kvs"][0]["key"].as_str(), Some(b64("app/a").as_str()));
    let got = ctl
        .json(&[
            "get",
            "--prefix",
            "app/",
            "--order=DESCEND",
            "--sort-by=MODIFY",
        ])
        .await?;
    let keys: Vec<&str> = got["kvs"]
        .as_array()
        .context("kvs")?
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert_eq!(keys, vec![b64("app/b"), b64("app/a")], "{got}");
    assert_eq!(
        ctl.ok(&["get", "--from-key", "app/b"]).await?,
        "app/b\n2\nother\nx\n"
    );

    // A put with --prev-kv sees exactly the value it replaced.
    assert_eq!(
        ctl.ok(&["put", "app/a", "1b", "--prev-kv"]).await?,
        "OK\napp/a\n1\n"
    );
    // Transactions: equality compares, both branches.
    let txn = "value(\"app/a\") = \"1b\"\n\nput app/c 3\nget app/b\n\nput app/c never\n\n";
    assert_eq!(
        ctl.ok_with(&["txn"], Some(txn)).await?,
        "SUCCESS\n\nOK\n\napp/b\n2\n"
    );
    let txn = "create(\"app/c\") = \"0\"\n\nput app/c twice\n\nget app/c\n\n";
    assert_eq!(
        ctl.ok_with(&["txn"], Some(txn)).await?,
        "FAILURE\n\napp/c\n3\n"
    );
    assert_eq!(ctl.ok(&["del", "app/c"]).await?.trim(), "1");
    assert_eq!(ctl.ok(&["del", "app/c"]).await?.trim(), "0");
    assert_eq!(ctl.ok(&["get", "app/c"]).await?, "");

    // Turnstile keeps no history: a past revision is etcd's "compacted", a future one too new.
    let err = ctl.fails(&["get", "app/a", "--rev=2"]).await?;
    ensure!(
        err.contains("required revision has been compacted"),
        "{err}"
    );
    let err = ctl.fails(&["get", "app/a", "--rev=999999"]).await?;
    ensure!(err.contains("future revision"), "{err}");

    // What is not served fails with Unimplemented and says what it was.
    let err = ctl.fails(&["auth", "enable"]).await?;
    ensure!(
        err.contains("Unimplemented") && err.contains("AuthEnable"),
        "{err}"
    );
    // User and role calls need authentication, which a cluster without TLS does not have.
    let err = ctl.fails(&["user", "list"]).await?;
    ensure!(err.contains("authentication is not enabled"), "{err}");

    // `--ignore-value` and `--ignore-lease` keep what the key has; a missing key is refused.
    assert_eq!(
        ctl.ok(&["put", "app/a", "--ignore-value"]).await?.trim(),
        "OK"
    );
    assert_eq!(ctl.ok(&["get", "app/a"]).await?, "app/a\n1b\n");
    assert_eq!(
        ctl.ok(&["put", "app/a", "1c", "--ignore-lease"])
            .await?
            .trim(),
        "OK"
    );
    assert_eq!(ctl.ok(&["get", "app/a"]).await?, "app/a\n1c\n");
    let err = ctl.fails(&["put", "app/none", "--ignore-value"]).await?;
    ensure!(err.contains("key not found"), "{err}");

    // A range delete answers how many keys it removed, and removes exactly those.
    ctl.ok(&["put", "app0", "after"]).await?;
    assert_eq!(ctl.ok(&["del", "--prefix", "app/"]).await?.trim(), "2");
    assert_eq!(ctl.ok(&["get", "--prefix", "app"]).await?, "app0\nafter\n");

    // Every member, and each node's status.
    let members = ctl.ok(&["member", "list"]).await?;
    assert_eq!(members.lines().count(), 3, "{members}");
    let one = Etcdctl::new(binary, &[c.etcd_addr(2).context("node 2")?]);
    let status = one.json(&["endpoint", "status"]).await?;
    let s = &status[0]["Status"];
    assert_eq!(s["version"].as_str(), Some("3.5.0"), "{status}");
    ensure!(
        s["leader"].as_u64().is_some_and(|l| (1..=3).contains(&l)),
        "{status}"
    );
    ensure!(
        s["raftIndex"].as_u64().is_some_and(|i| i >= put_rev),
        "{status}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_leases_grant_keep_alive_attach_and_revoke() -> anyhow::Result<()> {
    let Some((binary, c, addrs)) = etcdctl_cluster().await? else {
        return Ok(());
    };
    let ctl = Etcdctl::new(binary, &addrs);

    let granted = ctl.ok(&["lease", "grant", "60"]).await?;
    // "lease 12 granted with TTL(60s)", the id in hex.
    let hex = granted
        .split_whitespace()
        .nth(1)
        .context("a lease id")?
        .to_string();
    ensure!(granted.contains("granted with TTL(60s)"), "{granted}");
    let id = u64::from_str_radix(&hex, 16)?;
    let (status, v) = c.get(1, &format!("/v1/leases/{id}")).await?;
    ensure!(status == 200, "the lease is Turnstile's own: {v}");

    ctl.ok(&["put", "--lease", &hex, "svc/one", "up"]).await?;
    let ttl = ctl.ok(&["lease", "timetolive", &hex, "--keys"]).await?;
    ensure!(
        ttl.contains("granted with TTL(60s)") && ttl.contains("attached keys([svc/one])"),
        "{ttl}"
    );
    let kept = ctl.ok(&["lease", "keep-alive", "--once", &hex]).await?;
    ensure!(kept.contains("keepalived with TTL(60)"), "{kept}");
    let list = ctl.ok(&["lease", "list"]).await?;
    ensure!(list.contains(&hex), "{list}");

    assert_eq!(
        ctl.ok(&["lease", "revoke", &hex]).await?.trim(),
        format!("lease {hex} revoked")
    );
    assert_eq!(
        ctl.ok(&["get", "svc/one"]).await?,
        "",
        "its key went with it"
    );
    let gone = ctl.ok(&["lease", "timetolive", &hex]).await?;
    ensure!(gone.contains("already expired"), "{gone}");
    let err = ctl.fails(&["lease", "revoke", &hex]).await?;
    ensure!(err.contains("requested lease not found"), "{err}");
    let err = ctl.fails(&["put", "--lease", &hex, "svc/two", "x"]).await?;
    ensure!(err.contains("requested lease not found"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_clusters_etcd_port_wants_a_client_certificate() -> anyhow::Result<()> {
    let Some(binary) = etcdctl_binary() else {
        return Ok(());
    };
    let c = Cluster::start_secure_tuned(3, etcd_port).await?;
    let dir: &Path = &c.certs_dir().context("certs")?;
    let ca = certs::ca_paths(dir).cert;
    let addrs = etcd_addrs(&c)?;
    let ctl = Etcdctl::new(binary.clone(), &addrs).signed_in_as_root(dir);
    assert_eq!(ctl.ok(&["put", "k", "v"]).await?.trim(), "OK");
    assert_eq!(ctl.ok(&["get", "k"]).await?, "k\nv\n");
    assert_eq!(ctl.ok(&["member", "list"]).await?.lines().count(), 3);

    // A user with a Turnstile token: etcdctl's `--user name:password` authenticates with the
    // token as the password, then its permissions are Turnstile's.
    crate::auth::put_user(
        &c,
        "alice",
        crate::auth::on("a-", "write"),
        serde_json::json!({}),
    )
    .await?;
    let (_, token) = crate::auth::make_token(&c, "alice").await?;
    let alice = Etcdctl::new(binary.clone(), &addrs).signed_in_as(dir, "alice", &token);
    assert_eq!(alice.ok(&["put", "a-k", "v"]).await?.trim(), "OK");
    assert_eq!(alice.ok(&["get", "a-k"]).await?, "a-k\nv\n");
    let err = alice.fails(&["put", "b-k", "v"]).await?;
    ensure!(err.contains("PermissionDenied"), "{err}");
    let wrong = Etcdctl::new(binary.clone(), &addrs).signed_in_as(dir, "root", &token);
    let err = wrong.fails(&["get", "a-k"]).await?;
    ensure!(err.contains("authentication failed"), "{err}");

    // TLS without a client certificate: the connection is made, every call is refused.
    let mut anonymous = Etcdctl::new(binary.clone(), &addrs);
    anonymous.tls = vec![format!("--cacert={}", ca.display())];
    let err = anonymous.fails(&["get", "k"]).await?;
    ensure!(err.contains("no credential"), "{err}");
    // Plain gRPC to the TLS port never gets an answer.
    let plain = Etcdctl::new(binary, &addrs);
    plain.fails(&["get", "k"]).await?;
    Ok(())
}

/// etcd's user and role calls through `etcdctl` on a secure cluster, as root: roles with prefix
/// permissions, a user without a password that signs in with a Turnstile token and is held to
/// its role, grants and revokes (two concurrent grants through different nodes both land),
/// and what has no Turnstile equivalent refused with `Unimplemented`, never widened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_manages_users_and_roles_on_turnstiles_principals() -> anyhow::Result<()> {
    let Some(binary) = etcdctl_binary() else {
        return Ok(());
    };
    let c = Cluster::start_secure_tuned(3, etcd_port).await?;
    let dir: &Path = &c.certs_dir().context("certs")?;
    let addrs = etcd_addrs(&c)?;
    let as_root =
        |node: usize| Etcdctl::new(binary.clone(), &addrs[node..=node]).signed_in_as_root(dir);
    let (ctl, other) = (as_root(0), as_root(1));

    ensure!(ctl
        .ok(&["role", "add", "app"])
        .await?
        .contains("Role app created"));
    let err = ctl.fails(&["role", "add", "app"]).await?;
    ensure!(err.contains("role name already exists"), "{err}");
    ctl.ok(&[
        "role",
        "grant-permission",
        "app",
        "--prefix=true",
        "readwrite",
        "app/",
    ])
    .await?;
    // Two grants at once through two nodes: both land (each writes only if the auth state is
    // still the one it read, and tries again otherwise).
    let (a, b) = tokio::join!(
        ctl.ok(&[
            "role",
            "grant-permission",
            "app",
            "--prefix=true",
            "read",
            "cfg/"
        ]),
        other.ok(&[
            "role",
            "grant-permission",
            "app",
            "--prefix=true",
            "read",
            "docs/"
        ]),
    );
    a?;
    b?;
    let role = ctl.ok(&["role", "get", "app"]).await?;
    for prefix in ["prefix app/", "prefix cfg/", "prefix docs/"] {
        ensure!(role.contains(prefix), "{prefix} missing: {role}");
    }
    // No Turnstile equivalent: one key, write without read. Refused, not widened.
    let err = ctl
        .fails(&["role", "grant-permission", "app", "readwrite", "one-key"])
        .await?;
    ensure!(
        err.contains("Unimplemented") && err.contains("one key"),
        "{err}"
    );
    let err = ctl
        .fails(&[
            "role",
            "grant-permission",
            "app",
            "--prefix=true",
            "write",
            "w/",
        ])
        .await?;
    ensure!(err.contains("WRITE permission without READ"), "{err}");

    // A user without a password, signed in with a Turnstile token.
    let err = ctl.fails(&["user", "add", "bob:secret"]).await?;
    ensure!(err.contains("password"), "{err}");
    ensure!(ctl
        .ok(&["user", "add", "alice", "--no-password"])
        .await?
        .contains("User alice created"));
    ctl.ok(&["user", "grant-role", "alice", "app"]).await?;
    assert_eq!(
        ctl.ok(&["user", "get", "alice"]).await?,
        "User: alice\nRoles: app\n"
    );
    ensure!(ctl.ok(&["user", "list"]).await?.contains("alice"));
    ensure!(ctl.ok(&["role", "list"]).await?.contains("app"));
    let (_, token) = crate::auth::make_token(&c, "alice").await?;
    let alice = Etcdctl::new(binary.clone(), &addrs).signed_in_as(dir, "alice", &token);
    assert_eq!(alice.ok(&["put", "app/x", "v"]).await?.trim(), "OK");
    let err = alice.fails(&["put", "cfg/x", "v"]).await?;
    ensure!(err.contains("PermissionDenied"), "read only: {err}");
    ensure!(alice.ok(&["get", "cfg/x"]).await?.is_empty());
    // Alice is not root: she manages nobody.
    let err = alice.fails(&["user", "list"]).await?;
    ensure!(err.contains("PermissionDenied"), "{err}");

    // Revokes take effect at once.
    ctl.ok(&["role", "revoke-permission", "app", "--prefix=true", "app/"])
        .await?;
    let err = alice.fails(&["put", "app/y", "v"]).await?;
    ensure!(err.contains("PermissionDenied"), "{err}");
    let err = ctl
        .fails(&["role", "revoke-permission", "app", "--prefix=true", "app/"])
        .await?;
    ensure!(err.contains("permission is not granted"), "{err}");
    ctl.ok(&["user", "revoke-role", "alice", "app"]).await?;
    assert_eq!(
        ctl.ok(&["user", "get", "alice"]).await?,
        "User: alice\nRoles:\n"
    );
    let err = alice.fails(&["get", "cfg/x"]).await?;
    ensure!(err.contains("PermissionDenied"), "{err}");
    ctl.ok(&["user", "delete", "alice"]).await?;
    ctl.ok(&["role", "delete", "app"]).await?;
    let err = ctl.fails(&["user", "get", "alice"]).await?;
    ensure!(err.contains("user name not found"), "{err}");
    let err = ctl.fails(&["auth", "disable"]).await?;
    ensure!(err.contains("Unimplemented"), "{err}");
    Ok(())
}

/// The `etcd-client` crate: values that are not text round-trip, keys that are not are refused;
/// etcd's Lock service is
/// Turnstile's lock (its revision is the fencing token that Turnstile's fenced writes check,
/// and a second locker waits its turn in the queue); a keep-alive stream renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_client_crate_locks_fence_and_keep_alive() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(3, etcd_port).await?;
    let endpoints: Vec<String> = etcd_addrs(&c)?
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let mut client = etcd_client::Client::connect(&endpoints, None).await?;

    // Bytes that are not text round-trip; Turnstile's own API shows them marked, in base64.
    client.put("bin", vec![0x80, 0xff], None).await?;
    let got = client.get("bin", None).await?;
    assert_eq!(
        got.kvs().first().map(|kv| kv.value()),
        Some([0x80, 0xff].as_slice())
    );
    let (_, v) = c.get(1, "/v1/kv/bin").await?;
    assert_eq!(v["value"].as_str(), Some("\u{0}gP8="), "{v}");
    let err = client
        .put(vec![0xff], "v", None)
        .await
        .expect_err("a key that is not UTF-8");
    ensure!(err.to_string().contains("not UTF-8"), "{err}");
    client.put("text", "ok", None).await?;

    let first = client.lease_grant(30, None).await?.id();
    let second = client.lease_grant(30, None).await?.id();
    let opts = |lease| etcd_client::LockOptions::new().with_lease(lease);
    let held = client.lock("res", Some(opts(first))).await?;
    let token = held.header().context("header")?.revision();
    assert_eq!(held.key(), format!("res/{first:x}").as_bytes());
    let (status, v) = c.get(1, "/v1/locks/res").await?;
    ensure!(status == 200, "{v}");
    assert_eq!(v["holders"][0]["token"].as_i64(), Some(token), "{v}");

    // The second locker queues behind the first (Turnstile shows it waiting) ...
    let mut other = etcd_client::Client::connect(&endpoints, None).await?;
    let waiting = tokio::spawn(async move { other.lock("res", Some(opts(second))).await });
    turnstile_tests::wait_for("the second locker queued", || async {
        let (_, v) = c.get(1, "/v1/locks/res").await.ok()?;
        v["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
            .then_some(())
    })
    .await?;
    ensure!(
        !waiting.is_finished(),
        "granted while the first still held it"
    );
    // ... and is granted on unlock, with a larger token; the first token is now fenced off.
    client.unlock(held.key()).await?;
    // Unlocking what is no longer held succeeds and changes nothing, as in etcd.
    client.unlock(held.key()).await?;
    let next = waiting.await??;
    let next_token = next.header().context("header")?.revision();
    ensure!(next_token > token, "{next_token} after {token}");
    let fenced = |t: i64| serde_json::json!({"value": "w", "fence": {"lock": "res", "token": t}});
    let (status, v) = c
        .call(
            1,
            reqwest::Method::PUT,
            "/v1/kv/guarded",
            Some(fenced(token)),
        )
        .await?;
    ensure!(
        status == 409 && v["code"] == "fenced",
        "the old token must be refused: {status} {v}"
    );
    let (status, v) = c
        .call(
            1,
            reqwest::Method::PUT,
            "/v1/kv/guarded",
            Some(fenced(next_token)),
        )
        .await?;
    ensure!(status == 200, "the new token must pass: {status} {v}");

    let (mut keeper, mut stream) = client.lease_keep_alive(second).await?;
    keeper.keep_alive().await?;
    let kept = stream.message().await?.context("a keep-alive answer")?;
    assert_eq!((kept.id(), kept.ttl()), (second, 30));
    Ok(())
}

/// The next leader an `Observe` stream answers: its value and token (`create_revision`).
async fn observed(observer: &mut etcd_client::ObserveStream) -> anyhow::Result<(String, i64)> {
    let r = tokio::time::timeout(Duration::from_secs(15), observer.message())
        .await
        .context("no Observe answer in time")??
        .context("the Observe stream ended")?;
    let kv = r.kv().context("leader kv")?;
    Ok((kv.value_str()?.to_string(), kv.create_revision()))
}

/// etcd's Election service through the `etcd-client` crate: the first campaign leads with the
/// fencing token as its leader key's `rev`, the second queues, proclaim publishes, resign
/// hands leadership on with a larger token, and a stale leader key can neither proclaim nor
/// be mistaken for the leader; an `Observe` stream hears each leader and proclaimed value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_client_crate_elections_hand_over_in_order() -> anyhow::Result<()> {
    use etcd_client::{ProclaimOptions, ResignOptions};
    let c = Cluster::start_tuned(3, etcd_port).await?;
    let endpoints: Vec<String> = etcd_addrs(&c)?
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let mut client = etcd_client::Client::connect(&endpoints, None).await?;
    let first = client.lease_grant(30, None).await?.id();
    let second = client.lease_grant(30, None).await?.id();

    let won = client.campaign("svc", "alpha", first).await?;
    let leader = won.leader().context("leader key")?.clone();
    assert_eq!(leader.lease(), first);
    let (_, v) = c.get(1, "/v1/elections/svc").await?;
    assert_eq!(v["leader"]["token"].as_i64(), Some(leader.rev()), "{v}");
    let now = client.leader("svc").await?;
    let kv = now.kv().context("leader kv")?;
    assert_eq!(
        (kv.value(), kv.create_revision()),
        (b"alpha".as_slice(), leader.rev())
    );
    // An observer hears the leader now, then every proclaimed value and every new leader.
    let mut observer = client.observe("svc").await?;
    assert_eq!(
        observed(&mut observer).await?,
        ("alpha".into(), leader.rev())
    );

    let mut other = etcd_client::Client::connect(&endpoints, None).await?;
    let queued = tokio::spawn(async move { other.campaign("svc", "beta", second).await });
    turnstile_tests::wait_for("the second campaign queued", || async {
        let (_, v) = c.get(1, "/v1/locks/svc").await.ok()?;
        v["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
            .then_some(())
    })
    .await?;
    ensure!(
        !queued.is_finished(),
        "the second campaign led while the first did"
    );

    client
        .proclaim(
            "alpha-2",
            Some(ProclaimOptions::new().with_leader(leader.clone())),
        )
        .await?;
    assert_eq!(
        client.leader("svc").await?.kv().map(|k| k.value()),
        Some(b"alpha-2".as_slice())
    );
    assert_eq!(
        observed(&mut observer).await?,
        ("alpha-2".into(), leader.rev())
    );
    client
        .resign(Some(ResignOptions::new().with_leader(leader.clone())))
        .await?;
    let next = queued.await??;
    let next_key = next.leader().context("leader key")?;
    ensure!(
        next_key.rev() > leader.rev(),
        "{} after {}",
        next_key.rev(),
        leader.rev()
    );
    assert_eq!(
        observed(&mut observer).await?,
        ("beta".into(), next_key.rev())
    );
    let err = client
        .proclaim(
            "stale",
            Some(ProclaimOptions::new().with_leader(leader.clone())),
        )
        .await
        .expect_err("the old leader key no longer leads");
    ensure!(err.to_string().contains("election: not leader"), "{err}");
    // Resigning again what no longer leads is a no-op, as in etcd.
    client
        .resign(Some(ResignOptions::new().with_leader(leader)))
        .await?;
    assert_eq!(
        client.leader("svc").await?.kv().map(|k| k.value()),
        Some(b"beta".as_slice())
    );
    Ok(())
}

/// A keep-alive stream is a long-lived stream like a watch: it takes one of its principal's
/// `watches` quota on the node, so one tenant cannot hold the node's streams. Alice (quota 1,
/// authenticated by etcd's user and password, the password being her Turnstile token) gets
/// one stream and is refused a second while the first is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_streams_count_against_the_watches_quota() -> anyhow::Result<()> {
    let c = Cluster::start_secure_tuned(3, etcd_port).await?;
    crate::auth::put_user(
        &c,
        "alice",
        crate::auth::on("a-", "write"),
        serde_json::json!({"watches": 1}),
    )
    .await?;
    let (_, token) = crate::auth::make_token(&c, "alice").await?;
    let dir: &Path = &c.certs_dir().context("certs")?;
    let ca = std::fs::read(certs::ca_paths(dir).cert)?;
    let tls = etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca));
    let node = c.etcd_addr(1).context("node 1")?;
    let options = etcd_client::ConnectOptions::new()
        .with_tls(tls)
        .with_user("alice", token);
    let mut alice =
        etcd_client::Client::connect([format!("https://{node}")], Some(options)).await?;
    let lease = alice.lease_grant(30, None).await?.id();
    let (mut keeper, mut stream) = alice.lease_keep_alive(lease).await?;
    keeper.keep_alive().await?;
    ensure!(
        stream.message().await?.is_some_and(|k| k.ttl() == 30),
        "first stream renews"
    );
    let second = async {
        let (mut k, mut s) = alice.lease_keep_alive(lease).await?;
        k.keep_alive().await?;
        s.message().await
    };
    let err = second.await.expect_err("a second stream is over the quota");
    ensure!(err.to_string().contains("quota"), "{err}");
    drop((keeper, stream));
    Ok(())
}

/// `etcd-client`'s range deletes and ordered compares: a prefix delete answers and removes
/// exactly its keys with their previous values, a watcher hears one delete per key at one
/// revision, STM-style `mod_revision <` compares pick the branch, a branch that writes inside
/// a range it deletes is refused whole; compares on a key's lease, and puts that keep the
/// value or the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_client_crate_range_deletes_ordered_compares_and_kept_puts() -> anyhow::Result<()> {
    use etcd_client::{
        Compare, CompareOp, DeleteOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
        WatchOptions,
    };
    let c = Cluster::start_tuned(3, etcd_port).await?;
    let endpoints: Vec<String> = etcd_addrs(&c)?
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let mut client = etcd_client::Client::connect(&endpoints, None).await?;
    for (k, v) in [
        ("cfg/a", "1"),
        ("cfg/b", "2"),
        ("cfg/c", "3"),
        ("cfg0", "next"),
    ] {
        client.put(k, v, None).await?;
    }
    let mut events = client
        .watch("cfg/", Some(WatchOptions::new().with_prefix()))
        .await?;

    let gone = client
        .delete(
            "cfg/",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await?;
    let revision = gone.header().context("header")?.revision();
    assert_eq!(gone.deleted(), 3);
    let prev: Vec<(&[u8], &[u8])> = gone
        .prev_kvs()
        .iter()
        .map(|kv| (kv.key(), kv.value()))
        .collect();
    assert_eq!(
        prev,
        vec![
            (b"cfg/a".as_slice(), b"1".as_slice()),
            (b"cfg/b".as_slice(), b"2".as_slice()),
            (b"cfg/c".as_slice(), b"3".as_slice())
        ]
    );
    let left = client
        .get("cfg", Some(GetOptions::new().with_prefix()))
        .await?;
    let left: Vec<&[u8]> = left.kvs().iter().map(|kv| kv.key()).collect();
    assert_eq!(left, vec![b"cfg0".as_slice()]);
    let mut heard = Vec::new();
    while heard.len() < 3 {
        let r = tokio::time::timeout(Duration::from_secs(15), events.message())
            .await
            .context("no watch answer in time")??
            .context("the watch ended")?;
        for e in r.events() {
            let kv = e.kv().context("kv")?;
            ensure!(e.event_type() == EventType::Delete, "{e:?}");
            heard.push((kv.key().to_vec(), kv.mod_revision()));
        }
    }
    assert_eq!(
        heard,
        vec![
            (b"cfg/a".to_vec(), revision),
            (b"cfg/b".to_vec(), revision),
            (b"cfg/c".to_vec(), revision)
        ]
    );

    // STM's read check: the key is unchanged since revision `seen`.
    let seen = client
        .put("x", "1", None)
        .await?
        .header()
        .context("header")?
        .revision();
    let unchanged = |rev: i64| {
        Txn::new()
            .when([Compare::mod_revision("x", CompareOp::Less, rev + 1)])
            .and_then([TxnOp::put("x", "2", None)])
            .or_else([TxnOp::get("x", None)])
    };
    assert!(client.txn(unchanged(seen)).await?.succeeded());
    assert!(
        !client.txn(unchanged(seen)).await?.succeeded(),
        "x moved on"
    );
    let bigger = Txn::new().when([
        Compare::version("x", CompareOp::Greater, 1),
        Compare::value("x", CompareOp::NotEqual, "1"),
        Compare::create_revision("missing", CompareOp::Less, 1),
    ]);
    assert!(client.txn(bigger).await?.succeeded());

    // One branch may not write inside a range it deletes; nothing of it runs.
    let both = Txn::new().and_then([
        TxnOp::put("cfg0/x", "y", None),
        TxnOp::delete("cfg0", Some(DeleteOptions::new().with_prefix())),
    ]);
    let err = client
        .txn(both)
        .await
        .expect_err("a put inside a deleted range");
    ensure!(
        err.to_string().contains("inside a range it deletes"),
        "{err}"
    );
    assert_eq!(client.get("cfg0", None).await?.kvs().len(), 1);

    // Compares on a key's lease (0: none), and a put that keeps the lease while changing
    // the value (`ignore_lease`) or keeps the value while changing the lease (`ignore_value`).
    let lease = client.lease_grant(60, None).await?.id();
    let other = client.lease_grant(60, None).await?.id();
    client
        .put("x", "leased", Some(PutOptions::new().with_lease(lease)))
        .await?;
    let on_lease = |op: CompareOp, id: i64| Txn::new().when([Compare::lease("x", op, id)]);
    assert!(client
        .txn(on_lease(CompareOp::Equal, lease))
        .await?
        .succeeded());
    assert!(client
        .txn(on_lease(CompareOp::Greater, 0))
        .await?
        .succeeded());
    assert!(!client
        .txn(on_lease(CompareOp::NotEqual, lease))
        .await?
        .succeeded());
    client
        .put(
            "x",
            "new value",
            Some(PutOptions::new().with_ignore_lease()),
        )
        .await?;
    let got = client.get("x", None).await?;
    let kv = got.kvs().first().context("x")?;
    assert_eq!((kv.value(), kv.lease()), (b"new value".as_slice(), lease));
    client
        .put(
            "x",
            "",
            Some(PutOptions::new().with_ignore_value().with_lease(other)),
        )
        .await?;
    let got = client.get("x", None).await?;
    let kv = got.kvs().first().context("x")?;
    assert_eq!((kv.value(), kv.lease()), (b"new value".as_slice(), other));
    Ok(())
}
