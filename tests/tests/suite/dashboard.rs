//! The dashboard (`/ui`) in a real browser: headless Chromium (Debian's `chromium`) loads it
//! from a live 3-node cluster, and the test changes the cluster underneath it and waits for the
//! page to show each change: a lock taken after the page loaded (holder, token, then a waiter),
//! an election and its leader's value, the leases, the live event tail, and on the leader the
//! members' reachability and replication lag. Markup planted in keys, values and election
//! values by a hostile client shows as text and never runs. With authentication on, the page
//! shows nothing without a credential and, with a tenant's token, only what that tenant may
//! read (another tenant's lease and token hidden).
//!
//! Screenshots: set `TURNSTILE_SCREENSHOT_DIR` to keep them (docs/images/ has the committed
//! ones). Chromium is required when `CI` is set; elsewhere the tests skip without it.

use std::path::PathBuf;
use std::time::Duration;

use crate::auth::{make_token, on, put_user};
use reqwest::Method;
use serde_json::{json, Value};
use turnstile_tests::cdp::{self, Browser};
use turnstile_tests::{token, Cluster};

/// Longest wait for the page to show one change (it refreshes every second).
const SHOWN_WITHIN: Duration = Duration::from_secs(20);

/// The browser, or `None` (the test skips) where there is none and this is not CI.
fn chromium() -> Option<PathBuf> {
    match cdp::chromium() {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => {
            panic!("chromium is required in CI (apt-get install chromium); .ci/run installs it")
        }
        None => {
            eprintln!("SKIPPED: no chromium on PATH (apt-get install chromium)");
            None
        }
    }
}

/// JavaScript: the row of `table` (a tbody id) whose `data-name` is `name`, as
/// `{holders, waiters, text}`, or null.
fn row(table: &str, name: &str) -> String {
    format!(
        "(() => {{ const r = [...document.querySelectorAll('#{table} tr')]
            .find(r => r.dataset.name === {name});
          return r ? {{holders: r.dataset.holders, waiters: r.dataset.waiters,
                       text: r.textContent}} : null; }})()",
        name = json!(name)
    )
}

/// Waits until `expr` is truthy in the page; on failure says what the page last reported.
async fn shown(b: &mut Browser, what: &str, expr: &str) -> anyhow::Result<Value> {
    match b.wait_until(what, expr, SHOWN_WITHIN).await {
        Ok(v) => Ok(v),
        Err(e) => {
            let state = b
                .eval(
                    "JSON.stringify({status: window.turnstileDashboard,
                        errors: [...document.querySelectorAll('.error, .notice')]
                            .map(e => e.textContent).filter(t => t)})",
                )
                .await
                .unwrap_or_else(|e| json!(e.to_string()));
            Err(e.context(format!("the page reported {state}")))
        }
    }
}

/// Writes `png` as `name` under `TURNSTILE_SCREENSHOT_DIR` if set; checks it is a real,
/// full-width page either way.
fn keep_screenshot(name: &str, png: &[u8]) -> anyhow::Result<()> {
    anyhow::ensure!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let width = u32::from_be_bytes(png[16..20].try_into()?);
    let height = u32::from_be_bytes(png[20..24].try_into()?);
    anyhow::ensure!(width >= 1000 && height >= 500, "{width}x{height}");
    if let Some(dir) = std::env::var_os("TURNSTILE_SCREENSHOT_DIR") {
        let path = PathBuf::from(dir).join(name);
        std::fs::write(&path, png)?;
        println!("screenshot: {} ({width}x{height})", path.display());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_cluster_and_follows_it_live() -> anyhow::Result<()> {
    let Some(chromium) = chromium() else {
        return Ok(());
    };
    let c = Cluster::start(3).await?;
    let leader = c.leader().await?;
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let mut b = Browser::launch(&chromium, &[]).await?;

    // On a follower: the cluster as that node sees it; reads are routed to the leader.
    b.navigate(&c.url(follower, "/ui")).await?;
    shown(
        &mut b,
        "the first refresh",
        "window.turnstileDashboard && window.turnstileDashboard.refreshes >= 1",
    )
    .await?;
    let nodes = b
        .eval("[...document.querySelectorAll('#members tr')].map(r => r.dataset.node)")
        .await?;
    assert_eq!(nodes, json!(["1", "2", "3"]));
    let summary = b
        .eval("document.getElementById('summary').textContent")
        .await?;
    assert!(
        summary
            .as_str()
            .unwrap_or("")
            .contains(&format!("node {leader}")),
        "leader {leader} shown: {summary}"
    );
    assert_eq!(b.eval(&row("locks-rows", "dash-held")).await?, Value::Null);

    // A lock taken after the page loaded appears, with its holder's lease and token.
    let holder = c.lease(leader, 60_000).await?;
    let held = token(&c.acquire(leader, "dash-held", holder).await?.1)?;
    let found = shown(&mut b, "the new lock", &row("locks-rows", "dash-held")).await?;
    let text = found["text"].as_str().unwrap_or("");
    assert!(
        text.contains(&format!("{holder} / {held} / exclusive")),
        "holder and token shown: {text}"
    );
    // A waiter queued behind it shows in the queue.
    let waiter = c.lease(leader, 60_000).await?;
    let url = c.url(leader, "/v1/locks/dash-held/acquire");
    let queued = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&json!({"lease_id": waiter, "wait_ms": 60_000}))
            .send()
            .await
    });
    let found = shown(
        &mut b,
        "the waiter",
        &format!(
            "(() => {{ const r = {}; return r && r.waiters === '1' ? r : null; }})()",
            row("locks-rows", "dash-held")
        ),
    )
    .await?;
    assert!(
        found["text"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("1: {waiter}")),
        "{found}"
    );

    // An election, and markup a hostile client planted in its value, a key and a value.
    const PLANTED: &str = "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>";
    let candidate = c.lease(leader, 60_000).await?;
    let (code, v) = c
        .post(
            leader,
            "/v1/elections/dash-primary/campaign",
            json!({"lease_id": candidate, "value": PLANTED}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let (code, v) = c
        .call(
            leader,
            Method::PUT,
            &format!(
                "/v1/kv/{}",
                "%3Cb%20onmouseover%3Dwindow.pwned%3D3%3Ekey%3C%2Fb%3E"
            ),
            Some(json!({"value": PLANTED})),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let election = shown(
        &mut b,
        "the election",
        &row("elections-rows", "dash-primary"),
    )
    .await?;
    let text = election["text"].as_str().unwrap_or("");
    assert!(
        text.contains(&candidate.to_string()) && text.contains(PLANTED),
        "{text}"
    );
    // The live tail: the grant, the election and the planted key, in order of revision.
    shown(
        &mut b,
        "the planted key in the event tail",
        "[...document.querySelectorAll('#events-rows tr')]
            .some(r => r.dataset.kind === 'put' && r.dataset.subject.startsWith('<b onmouseover'))",
    )
    .await?;
    let kinds = b
        .eval(
            "[...document.querySelectorAll('#events-rows tr')]
                .filter(r => r.dataset.subject.startsWith('dash-')).map(r => r.dataset.kind)",
        )
        .await?;
    for kind in ["lock_granted", "election_leader"] {
        assert!(
            kinds.as_array().is_some_and(|k| k.contains(&json!(kind))),
            "{kind} in the tail: {kinds}"
        );
    }
    // Text, not markup: no element was made from it and nothing ran.
    let planted = b
        .eval(
            "({pwned: window.pwned === undefined ? null : window.pwned,
               imgs: document.querySelectorAll('img').length,
               bold: document.querySelectorAll('main b').length,
               scripts: document.querySelectorAll('script').length})",
        )
        .await?;
    assert_eq!(
        planted,
        json!({"pwned": null, "imgs": 0, "bold": 0, "scripts": 1}),
        "the planted markup stayed text"
    );
    // The leases, from this node too.
    shown(&mut b, "the leases",
        &format!(
            "[...document.querySelectorAll('#leases-rows tr')].map(r => r.dataset.lease)
                .filter(l => [{holder}, {waiter}, {candidate}].map(String).includes(l)).length === 3"
        ))
    .await?;

    // On the leader: every member reachable, with its matched index and lag.
    b.navigate(&c.url(leader, "/ui")).await?;
    let members = shown(
        &mut b,
        "the leader's replication view",
        "(() => { const rows = [...document.querySelectorAll('#members tr')];
                const cells = rows.map(r => [...r.cells].map(c => c.textContent));
                return rows.length === 3 && cells.every(c => c[3] === 'yes' && /^\\d+$/.test(c[5]))
                  ? cells : null; })()",
    )
    .await?;
    println!("members as the leader's page shows them: {members}");
    shown(
        &mut b,
        "the lock on the leader's page",
        &row("locks-rows", "dash-held"),
    )
    .await?;
    keep_screenshot("dashboard.png", &b.screenshot().await?)?;

    queued.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_page_shows_only_what_the_token_may_read() -> anyhow::Result<()> {
    let Some(chromium) = chromium() else {
        return Ok(());
    };
    let c = Cluster::start_secure(3).await?;
    put_user(&c, "team-a", on("a-", "write"), json!({})).await?;
    let (_, secret) = make_token(&c, "team-a").await?;
    // Root holds one lock under the tenant's prefix: the tenant sees it held, not by whom.
    let root_lease = c.lease(1, 60_000).await?;
    let root_token = token(&c.acquire(1, "a-root", root_lease).await?.1)?;
    // The test's own CA signed the nodes' certificates; the browser does not know it.
    let mut b = Browser::launch(&chromium, &["--ignore-certificate-errors"]).await?;

    // No credential: the page asks for one and shows no data.
    b.navigate(&c.url(1, "/ui?prefix=a-")).await?;
    shown(
        &mut b,
        "the request for a credential",
        "window.turnstileDashboard && window.turnstileDashboard.unauthenticated
            && !document.getElementById('auth').hidden",
    )
    .await?;
    assert_eq!(
        b.eval("document.querySelectorAll('#locks-rows tr, #members tr').length")
            .await?,
        json!(0)
    );

    // The tenant's token, entered in the form: its own lock with lease and token, root's
    // lock with both hidden.
    let http = c.client_builder(None)?.build()?;
    let lease: Value = http
        .post(c.url(2, "/v1/leases"))
        .bearer_auth(&secret)
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await?
        .json()
        .await?;
    let lease = lease["lease_id"].as_u64().expect("lease_id");
    let acquired: Value = http
        .post(c.url(2, "/v1/locks/a-mine/acquire"))
        .bearer_auth(&secret)
        .json(&json!({"lease_id": lease}))
        .send()
        .await?
        .json()
        .await?;
    let mine = token(&acquired)?;
    b.eval(&format!(
        "document.getElementById('token').value = {};
         document.getElementById('auth').requestSubmit(); true",
        json!(secret)
    ))
    .await?;
    let own = shown(&mut b, "the tenant's lock", &row("locks-rows", "a-mine")).await?;
    assert!(
        own["text"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{lease} / {mine} / exclusive")),
        "{own}"
    );
    let roots = shown(&mut b, "root's lock", &row("locks-rows", "a-root")).await?;
    let text = roots["text"].as_str().unwrap_or("");
    assert!(text.contains("– / – / exclusive"), "{text}");
    assert!(
        !text.contains(&root_token.to_string()) && !text.contains(&root_lease.to_string()),
        "root's lease and token hidden: {text}"
    );
    // Only the tenant's own leases are listed.
    let leases = b
        .eval("[...document.querySelectorAll('#leases-rows tr')].map(r => r.dataset.lease)")
        .await?;
    assert_eq!(leases, json!([lease.to_string()]));

    // Without the prefix, the locks listing asks for more than the tenant may read: the
    // section says so instead of showing anything.
    b.navigate(&c.url(1, "/ui")).await?;
    let refused = shown(
        &mut b,
        "the refused listing",
        "(() => { const e = document.getElementById('locks-error');
                return e && !e.hidden ? e.textContent : null; })()",
    )
    .await?;
    assert!(refused.as_str().unwrap_or("").contains("403"), "{refused}");
    assert_eq!(
        b.eval("document.querySelectorAll('#locks-rows tr').length")
            .await?,
        json!(0)
    );
    keep_screenshot("dashboard-tenant.png", &{
        b.navigate(&c.url(1, "/ui?prefix=a-")).await?;
        shown(&mut b, "the tenant's lock", &row("locks-rows", "a-mine")).await?;
        b.screenshot().await?
    })?;
    Ok(())
}
