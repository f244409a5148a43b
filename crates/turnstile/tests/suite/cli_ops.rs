//! The operator commands as an operator runs them, against real `turnstile serve` processes:
//! `member list`, `snapshot`, `backup` from a live node, `restore` into a new data dir, `serve`
//! on it (the lock and key are there, the cluster id is new, the next token is above the
//! backup), and SIGTERM ending a node with exit status 0.
//!
//! And the binary an operator builds as the README says holds no test hooks: no flag, no
//! `TURNSTILE_BUGS`, no `/debug/*` route (the same 404 as any unknown path), none of their
//! strings in its bytes. A build with the hooks compiled in (feature unification) still offers
//! no way to switch them on.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};

/// Runs `turnstile --endpoints <endpoint> <args>` and returns its output.
fn cli(endpoint: &str, args: &[&str]) -> anyhow::Result<Output> {
    turnstile()
        .args(["--endpoints", endpoint])
        .args(args)
        .env_remove("TURNSTILE_ENDPOINTS")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run turnstile {args:?}"))
}

/// Runs a command that must succeed and parses its `--json` output.
fn cli_json(endpoint: &str, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = cli(endpoint, &all)?;
    if !out.status.success() {
        bail!(
            "turnstile {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> anyhow::Result<Value> {
    let resp = http.post(url).json(&body).send().await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    if !status.is_success() {
        bail!("{url}: {status} {v}");
    }
    Ok(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restore_and_member_commands() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?;

    // The source cluster: one node with a held lock and a key.
    let a_dir = dir.path().join("a");
    std::fs::create_dir_all(&a_dir)?;
    let a = format!("127.0.0.1:{}", free_port()?);
    let mut a_proc = start_server(&a_dir, &a)?;
    wait_for_leader(&mut a_proc, &http, &format!("http://{a}"), &a_dir).await?;
    // The TTL is positional or `--ttl`, as docs/api.md writes it; never both.
    for args in [
        &["lease", "grant", "10s"][..],
        &["lease", "grant", "--ttl", "10s"],
    ] {
        let granted = cli_json(&a, args)?;
        assert_eq!(granted["ttl_ms"], 10_000, "{args:?}: {granted}");
    }
    let both = cli(&a, &["lease", "grant", "5s", "--ttl", "10s"])?;
    assert_eq!(
        both.status.code(),
        Some(2),
        "a TTL given twice is a usage error"
    );
    let lease = post(
        &http,
        &format!("http://{a}/v1/leases"),
        json!({"ttl_ms": 60_000}),
    )
    .await?;
    let lease_id = lease["lease_id"].as_u64().context("lease_id")?;
    let grant = post(
        &http,
        &format!("http://{a}/v1/locks/report/acquire"),
        json!({"lease_id": lease_id, "wait_ms": 0}),
    )
    .await?;
    let old_cluster_id = grant["cluster_id"]
        .as_str()
        .context("cluster_id")?
        .to_string();
    let resp = http
        .put(format!("http://{a}/v1/kv/config"))
        .json(&json!({"value": "blue"}))
        .send()
        .await?;
    assert!(resp.status().is_success());

    let members = cli_json(&a, &["member", "list"])?;
    assert_eq!(members["members"][0]["voter"], true, "{members}");
    let snap = cli_json(&a, &["snapshot"])?;
    assert!(snap["last_snapshot_index"].as_u64() > Some(0), "{snap}");
    // A membership change the cluster cannot make is a refusal (exit 1), with the reason.
    let out = cli(&a, &["member", "remove", "1"])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("membership_refused"));

    let backup = dir.path().join("a.backup");
    let out = cli(&a, &["backup", "--out", backup.to_str().context("path")?])?;
    assert!(out.status.success(), "{out:?}");
    // An existing file is never overwritten.
    assert!(
        !cli(&a, &["backup", "--out", backup.to_str().context("path")?])?
            .status
            .success()
    );

    // SIGTERM: the node drains and exits 0.
    nix_term(&a_proc)?;
    let status = a_proc.wait_exit()?;
    assert!(status.success(), "serve exited with {status}");

    // Restore into a new node and serve it.
    let b_dir = dir.path().join("b");
    std::fs::create_dir_all(&b_dir)?;
    let b = format!("127.0.0.1:{}", free_port()?);
    let restored = cli_json(
        &b,
        &[
            "restore",
            "--from",
            backup.to_str().context("path")?,
            "--data-dir",
            b_dir.join("data").to_str().context("path")?,
            "--id",
            "1",
            "--initial-cluster",
            &format!("1={b}"),
        ],
    )?;
    let new_cluster_id = restored["cluster_id"]
        .as_str()
        .context("cluster_id")?
        .to_string();
    assert_ne!(new_cluster_id, old_cluster_id);
    assert_eq!(restored["source_cluster_id"], old_cluster_id.as_str());
    let backup_index = restored["last_index"].as_u64().context("last_index")?;

    let mut b_proc = start_server(&b_dir, &b)?;
    wait_for_leader(&mut b_proc, &http, &format!("http://{b}"), &b_dir).await?;
    let lock = cli_json(&b, &["locks", "report"])?;
    assert_eq!(lock["holders"][0]["lease_id"], lease_id, "{lock}");
    let out = cli(&b, &["kv", "get", "config"])?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "blue");
    let lease = post(
        &http,
        &format!("http://{b}/v1/leases"),
        json!({"ttl_ms": 60_000}),
    )
    .await?;
    let grant = post(
        &http,
        &format!("http://{b}/v1/locks/next/acquire"),
        json!({"lease_id": lease["lease_id"], "wait_ms": 0}),
    )
    .await?;
    assert_eq!(grant["cluster_id"], new_cluster_id.as_str());
    assert!(grant["token"].as_u64() > Some(backup_index), "{grant}");
    nix_term(&b_proc)?;
    assert!(b_proc.wait_exit()?.success());
    Ok(())
}

/// Sends SIGTERM to the process.
fn nix_term(p: &Proc) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -TERM failed");
    }
    Ok(())
}

/// Strings only test-hook code puts in a binary: the debug route, the bug switches' variable and
/// one switch's name.
const HOOK_MARKERS: [&str; 3] = ["/debug/clock", "TURNSTILE_BUGS", "skip-fence"];

/// Whether `needle` occurs anywhere in `haystack`.
fn contains_bytes(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The `turnstile` binary as the README builds it (`cargo build --release -p turnstile`: no
/// feature another workspace member asks for). `TURNSTILE_README_BINARY` names one (CI's static
/// build); otherwise this builds it, into a target dir of its own so that nothing this test run
/// compiled with other features can be mistaken for it.
fn readme_binary() -> anyhow::Result<PathBuf> {
    let ours = Path::new(env!("CARGO_BIN_EXE_turnstile"));
    if let Some(path) = std::env::var_os("TURNSTILE_README_BINARY") {
        let path = PathBuf::from(path);
        // `cargo test` rebuilds `<target>/release/turnstile` with the test features (see
        // Cargo.toml), so that path is never the README binary.
        ensure!(
            path.canonicalize().ok() != ours.canonicalize().ok(),
            "TURNSTILE_README_BINARY={} is the binary `cargo test` built with test hooks; \
             copy the README build elsewhere first",
            path.display()
        );
        return Ok(path);
    }
    // CARGO_BIN_EXE_turnstile is <target>/<profile>/turnstile.
    let target = ours
        .parent()
        .and_then(Path::parent)
        .context("no target dir above the test binary")?;
    let target_dir = target.join("readme-binary");
    println!(
        "TURNSTILE_README_BINARY is not set: building it with \
         `cargo build --release -p turnstile --target-dir {}`",
        target_dir.display()
    );
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&workspace)
        .args(["build", "--release", "-p", "turnstile", "--target-dir"])
        .arg(&target_dir)
        .status()
        .context("cannot run cargo")?;
    ensure!(
        status.success(),
        "building the README binary failed: {status}"
    );
    Ok(target_dir.join("release").join("turnstile"))
}

/// `serve` has no flag for test hooks: its help does not mention them and clap refuses
/// `--enable-test-hooks` (exit status 2) before anything starts.
fn assert_no_hook_flag(binary: &Path, dir: &Path) -> anyhow::Result<()> {
    let help = Command::new(binary).args(["serve", "--help"]).output()?;
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8_lossy(&help.stdout).to_lowercase();
    assert!(!help.contains("hook") && !help.contains("/debug"), "{help}");
    let out = serve_command(binary, &dir.join("refused"), "127.0.0.1:1")
        .arg("--enable-test-hooks")
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unexpected argument '--enable-test-hooks'"),
        "{stderr}"
    );
    Ok(())
}

/// `POST /debug/clock` on the node at `base` gets exactly the answer of a path that never
/// existed, so the route is not there at all.
async fn assert_debug_route_unknown(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let body = json!({"offset_ms": 3_600_000});
    let mut answers = Vec::new();
    for path in ["/debug/clock", "/no/such/route"] {
        let resp = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await?;
        answers.push((resp.status(), resp.text().await?));
    }
    assert_eq!(answers[0].0, reqwest::StatusCode::NOT_FOUND, "{answers:?}");
    assert_eq!(answers[0], answers[1]);
    Ok(())
}

/// A superseded holder's fenced write is refused (`409 fenced`): the write the issue saw land
/// with `TURNSTILE_BUGS=skip-fence`.
async fn assert_stale_token_refused(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let ttl = json!({"ttl_ms": 60_000});
    let old = post(http, &format!("{base}/v1/leases"), ttl.clone()).await?["lease_id"].clone();
    let new = post(http, &format!("{base}/v1/leases"), ttl).await?["lease_id"].clone();
    let acquire = format!("{base}/v1/locks/ledger/acquire");
    let stale =
        post(http, &acquire, json!({"lease_id": old, "wait_ms": 0})).await?["token"].clone();
    let release = format!("{base}/v1/locks/ledger/release");
    post(http, &release, json!({"lease_id": old, "token": stale})).await?;
    post(http, &acquire, json!({"lease_id": new, "wait_ms": 0})).await?;
    let fence = json!({"value": "stale", "fence": {"lock": "ledger", "token": stale}});
    let resp = http
        .put(format!("{base}/v1/kv/ledger-balance"))
        .json(&fence)
        .send()
        .await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{v}");
    assert_eq!(v["code"], "fenced", "{v}");
    Ok(())
}

fn test_http() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(WAIT_MS_MAX))
        .build()?)
}

/// The reproduction against the README-built binary: `TURNSTILE_BUGS=skip-fence` and
/// `TURNSTILE_ENABLE_TEST_HOOKS=true` in the node's environment change nothing, because nothing
/// in the binary reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_binary_holds_no_test_hooks() -> anyhow::Result<()> {
    let binary = readme_binary()?;
    let bytes = std::fs::read(&binary).with_context(|| format!("{}", binary.display()))?;
    for marker in HOOK_MARKERS.into_iter().chain(["enable-test-hooks"]) {
        assert!(
            !contains_bytes(&bytes, marker),
            "{} contains {marker:?}",
            binary.display()
        );
    }
    let dir = tempfile::tempdir()?;
    assert_no_hook_flag(&binary, dir.path())?;

    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut serve = serve_command(&binary, &dir.path().join("data"), &listen);
    serve
        .env("TURNSTILE_BUGS", "skip-fence")
        .env("TURNSTILE_ENABLE_TEST_HOOKS", "true");
    let mut node = spawn_server(serve, dir.path())?;
    let (http, base) = (test_http()?, format!("http://{listen}"));
    wait_for_leader(&mut node, &http, &base, dir.path()).await?;
    assert_debug_route_unknown(&http, &base).await?;
    assert_stale_token_refused(&http, &base).await?;
    Ok(())
}

/// The same binary built with the test hooks compiled in, as feature unification with the chaos
/// harness builds it in a workspace build: this package's own `turnstile` under `cargo test`,
/// which gets `turnstile-server/bug-injection` (and so `test-hooks`) from the dev-dependency in
/// Cargo.toml, whether this package is tested alone or with the workspace. It is the negative
/// control of the byte search (the markers are found), and it still has no switch: no flag,
/// `TURNSTILE_BUGS` stops it at start, and `/debug/clock` is an unknown route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unified_build_compiles_hooks_in_but_cannot_switch_them_on() -> anyhow::Result<()> {
    let binary = Path::new(env!("CARGO_BIN_EXE_turnstile"));
    let bytes = std::fs::read(binary)?;
    for marker in HOOK_MARKERS {
        assert!(
            contains_bytes(&bytes, marker),
            "{} lacks {marker:?}: the byte search proves nothing",
            binary.display()
        );
    }
    let dir = tempfile::tempdir()?;
    assert_no_hook_flag(binary, dir.path())?;

    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut serve = serve_command(binary, &dir.path().join("data"), &listen);
    serve
        .env("TURNSTILE_BUGS", "skip-fence")
        .env("TURNSTILE_ENABLE_TEST_HOOKS", "true");
    let status = spawn_server(serve, dir.path())?.wait_exit()?;
    let log = std::fs::read_to_string(dir.path().join("server.log"))?;
    assert!(!status.success(), "{log}");
    assert!(log.contains("TURNSTILE_BUGS needs test hooks"), "{log}");

    let mut serve = serve_command(binary, &dir.path().join("data"), &listen);
    serve.env_remove("TURNSTILE_BUGS");
    let mut node = spawn_server(serve, dir.path())?;
    let (http, base) = (test_http()?, format!("http://{listen}"));
    wait_for_leader(&mut node, &http, &base, dir.path()).await?;
    assert_debug_route_unknown(&http, &base).await?;
    Ok(())
}
