//! `/metrics`: a scrape parses (every sample line well formed, every family typed), a known
//! workload moves each figure by exactly what it did (grants, releases, a TTL expiry, a queued
//! wait, a fenced write refused, a request-id replay, HTTP requests by route and status), every
//! node reports the same apply-derived figures, and lock-name labels stay within their cap.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, ensure, Context};
use serde_json::json;
use turnstile_tests::{token, wait_for, Cluster};

/// Lock names that get their own series in this test (`--metrics-lock-names`).
const LOCK_NAMES_MAX: u32 = 2;

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition.
#[derive(Debug)]
struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    /// `name`'s samples whose labels include every pair of `filter`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        filter: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && filter
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// Sum of `name`'s samples whose labels include every pair of `filter`.
    fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.matching(name, filter).map(|s| s.value).sum()
    }

    /// The one sample of `name` with these labels.
    fn one(&self, name: &str, filter: &[(&str, &str)]) -> anyhow::Result<f64> {
        let hits: Vec<_> = self.matching(name, filter).collect();
        match hits.as_slice() {
            [s] => Ok(s.value),
            _ => bail!("{} samples of {name} {filter:?}", hits.len()),
        }
    }

    /// Every value label `key` takes across samples whose name starts with `prefix`.
    fn label_values(&self, prefix: &str, key: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .filter_map(|s| s.labels.get(key).cloned())
            .collect()
    }
}

/// Parses the text exposition, failing on any malformed line, any sample whose family has no
/// `# TYPE`, or (OpenMetrics) a missing `# EOF`.
fn parse(text: &str, openmetrics: bool) -> anyhow::Result<Scrape> {
    let mut typed = BTreeSet::new();
    let mut samples = Vec::new();
    let mut saw_eof = false;
    for line in text.lines() {
        ensure!(!saw_eof, "line after # EOF: {line:?}");
        if line == "# EOF" {
            saw_eof = true;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').context("TYPE line")?;
            ensure!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "type {kind}"
            );
            typed.insert(family.to_string());
        } else if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
        } else {
            let sample = parse_sample(line).with_context(|| format!("line {line:?}"))?;
            let family_typed = typed.iter().any(|f| {
                sample.name == *f
                    || sample
                        .name
                        .strip_prefix(f.as_str())
                        .is_some_and(|s| ["_total", "_bucket", "_sum", "_count"].contains(&s))
            });
            ensure!(family_typed, "sample {} has no # TYPE", sample.name);
            samples.push(sample);
        }
    }
    ensure!(saw_eof == openmetrics, "# EOF present: {saw_eof}");
    Ok(Scrape { samples })
}

fn parse_sample(line: &str) -> anyhow::Result<Sample> {
    let name_end = line.find(['{', ' ']).ok_or_else(|| anyhow!("no value"))?;
    let name = &line[..name_end];
    ensure!(
        !name.is_empty()
            && name.starts_with("turnstile_")
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "bad name {name:?}"
    );
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(body)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.strip_prefix(' ').ok_or_else(|| anyhow!("no space"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().map_err(|e| anyhow!("value {v:?}: {e}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> anyhow::Result<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (key, after) = s.split_once("=\"").ok_or_else(|| anyhow!("label {s:?}"))?;
        ensure!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad label name {key:?}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => bail!("bad escape {other:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => bail!("unterminated label value"),
            }
        };
        ensure!(
            labels.insert(key.to_string(), value).is_none(),
            "label {key} twice"
        );
        s = &after[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// Scrapes node `id`, as Prometheus does (OpenMetrics) or as curl does (0.0.4 text).
async fn scrape(c: &Cluster, id: u64, openmetrics: bool) -> anyhow::Result<Scrape> {
    let mut req = reqwest::Client::new().get(c.url(id, "/metrics"));
    if openmetrics {
        req = req.header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        );
    }
    let resp = req.send().await?;
    ensure!(resp.status() == 200, "/metrics: HTTP {}", resp.status());
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let want = if openmetrics {
        "application/openmetrics-text; version=1.0.0"
    } else {
        "text/plain; version=0.0.4"
    };
    ensure!(
        content_type.starts_with(want),
        "content type {content_type}"
    );
    parse(&resp.text().await?, openmetrics)
}

/// Apply-derived lock figures, summed over every label but `kind`.
fn lock_totals(s: &Scrape) -> [f64; 7] {
    let ex = [("kind", "exclusive")];
    [
        s.sum("turnstile_lock_grants_total", &ex),
        s.sum("turnstile_lock_releases_total", &ex),
        s.sum(
            "turnstile_lock_expiries_total",
            &[("kind", "exclusive"), ("cause", "ttl"), ("state", "held")],
        ),
        s.sum("turnstile_lock_waits_total", &ex),
        s.sum("turnstile_lock_wait_duration_seconds_count", &ex),
        s.sum("turnstile_lock_hold_duration_seconds_count", &ex),
        s.sum("turnstile_request_replays_total", &[("command", "acquire")]),
    ]
}

fn http_count(s: &Scrape, method: &str, route: &str, status: &str) -> f64 {
    s.sum(
        "turnstile_http_request_duration_seconds_count",
        &[("method", method), ("route", route), ("status", status)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_workload_moves_each_figure_by_what_it_did() -> anyhow::Result<()> {
    let c = Cluster::start_tuned(3, |a| a.metrics_lock_names = Some(LOCK_NAMES_MAX)).await?;
    let n = 2; // every request of the workload goes through this node
    let before = scrape(&c, n, true).await?;
    let a = c.lease(n, 30_000).await?;
    let b = c.lease(n, 30_000).await?;

    // Five distinct locks taken and released: 5 grants, 5 releases, 5 holds ended.
    let mut tokens = BTreeMap::new();
    for i in 1..=5 {
        let name = format!("n{i}");
        let (code, v) = c.acquire(n, &name, a).await?;
        ensure!(code == 200, "{v}");
        tokens.insert(name.clone(), token(&v)?);
        let (code, v) = c.release(n, &name, a, token(&v)?).await?;
        ensure!(code == 200, "{v}");
    }

    // A fenced write with n2's superseded token is refused.
    let put = json!({"value": "x", "fence": {"lock": "n2", "token": tokens["n2"]}});
    let (code, v) = c
        .call(n, reqwest::Method::PUT, "/v1/kv/guarded", Some(put))
        .await?;
    ensure!((code, v["code"].as_str()) == (409, Some("fenced")), "{v}");

    // A retried acquire is answered from its request-id record: one grant, one replay.
    let rid = json!({"lease_id": a, "wait_ms": 0, "request_id": "rid-1"});
    let (_, first) = c.post(n, "/v1/locks/n4/acquire", rid.clone()).await?;
    let (code, retry) = c.post(n, "/v1/locks/n4/acquire", rid).await?;
    ensure!(code == 200 && token(&retry)? == token(&first)?, "{retry}");
    c.release(n, "n4", a, token(&first)?).await?;

    // b queues behind a on n5, is handed the lock on a's release, and releases it.
    let (_, held) = c.acquire(n, "n5", a).await?;
    let waiting = c.post(
        n,
        "/v1/locks/n5/acquire",
        json!({"lease_id": b, "wait_ms": 15_000}),
    );
    let release_once_queued = async {
        wait_for("b's wait to show in lock_waiters", || async {
            let s = scrape(&c, n, false).await.ok()?;
            (s.one("turnstile_lock_waiters", &[("kind", "exclusive")])
                .ok()?
                == 1.0)
                .then_some(())
        })
        .await?;
        c.release(n, "n5", a, token(&held)?).await
    };
    let (granted, released) = tokio::join!(waiting, release_once_queued);
    let (code, granted) = granted?;
    ensure!(code == 200 && released?.0 == 200, "{granted}");
    c.release(n, "n5", b, token(&granted)?).await?;

    // A 1 s lease's hold is lost to its TTL.
    let short = c.lease(n, 1_000).await?;
    let (code, v) = c.acquire(n, "n3", short).await?;
    ensure!(code == 200, "{v}");
    let after = wait_for("the short lease's hold to expire", || async {
        let s = scrape(&c, n, true).await.ok()?;
        (lock_totals(&s)[2] - lock_totals(&before)[2] == 1.0).then_some(s)
    })
    .await?;

    // Exact deltas: grants 5 + 1 (rid) + 2 (n5: a, then b) + 1 (n3) = 9; releases 5 + 1 + 2;
    // one TTL expiry; one queued wait, granted; every hold ended; one replay.
    let delta: Vec<f64> = lock_totals(&after)
        .iter()
        .zip(lock_totals(&before))
        .map(|(x, y)| x - y)
        .collect();
    assert_eq!(delta, [9.0, 8.0, 1.0, 1.0, 1.0, 9.0, 1.0]);
    let fenced = "turnstile_fenced_rejections_total";
    assert_eq!(after.one(fenced, &[])? - before.one(fenced, &[])?, 1.0);
    let http = |s: &Scrape| {
        [
            http_count(s, "POST", "/v1/locks/{name}/acquire", "200"),
            http_count(s, "POST", "/v1/locks/{name}/release", "200"),
            http_count(s, "PUT", "/v1/kv/{*key}", "409"),
            http_count(s, "POST", "/v1/leases", "200"),
        ]
    };
    let http_delta: Vec<f64> = http(&after)
        .iter()
        .zip(http(&before))
        .map(|(x, y)| x - y)
        .collect();
    assert_eq!(http_delta, [10.0, 8.0, 1.0, 3.0]);
    assert!(http_count(&after, "GET", "/metrics", "200") >= 2.0);

    // Routes are templates only; lock names are capped at 2 plus "_other".
    for route in after.label_values("turnstile_http_", "route") {
        assert!(route.starts_with('/') || route == "unmatched", "{route}");
        assert!(
            !route.contains("n1") && !route.contains("guarded"),
            "{route}"
        );
    }
    let names = after.label_values("turnstile_lock_", "name");
    assert!(names.len() <= LOCK_NAMES_MAX as usize + 1, "{names:?}");
    assert_eq!(names, ["_other", "n1", "n2"].map(String::from).into());
    let n1 = [("kind", "exclusive"), ("name", "n1")];
    assert_eq!(after.sum("turnstile_lock_grants_total", &n1), 1.0);

    // The log store and Raft figures moved, and describe a healthy cluster.
    for name in [
        "turnstile_log_sync_duration_seconds_count",
        "turnstile_log_append_duration_seconds_count",
        "turnstile_log_sync_batch_entries_count",
        "turnstile_raft_apply_batch_entries_count",
    ] {
        assert!(after.one(name, &[])? > before.one(name, &[])?, "{name}");
    }
    c.converged().await?;
    let mut apply_derived = Vec::new();
    let mut leaders = 0.0;
    for id in 1..=3 {
        let s = scrape(&c, id, id % 2 == 0).await?;
        assert_eq!(s.one("turnstile_raft_has_leader", &[])?, 1.0);
        assert!(s.one("turnstile_raft_term", &[])? >= 1.0);
        assert!(s.one("turnstile_raft_leader_changes_total", &[])? >= 1.0);
        assert_eq!(s.one("turnstile_raft_voters", &[])?, 3.0);
        leaders += s.one("turnstile_raft_server_state", &[("state", "leader")])?;
        assert_eq!(s.one("turnstile_leases", &[])?, 2.0, "a and b live");
        assert_eq!(s.sum("turnstile_lock_holders", &[]), 0.0);
        assert_eq!(s.sum("turnstile_lock_waiters", &[]), 0.0);
        apply_derived.push(lock_totals(&s));
    }
    assert_eq!(leaders, 1.0);
    assert!(
        apply_derived.windows(2).all(|w| w[0] == w[1]),
        "nodes disagree: {apply_derived:?}"
    );
    c.shutdown().await;
    Ok(())
}

#[test]
fn the_parser_refuses_malformed_lines() {
    for bad in [
        "turnstile_x{a=\"1\" 1\n",
        "turnstile_x one\n",
        "turnstile-x 1\n",
        "turnstile_x{a=\"1\",a=\"2\"} 1\n",
        "# TYPE turnstile_y gauge\nturnstile_x 1\n",
    ] {
        assert!(parse(bad, false).is_err(), "{bad:?}");
    }
    let ok = "# TYPE turnstile_x counter\nturnstile_x_total{a=\"q\\\"\",b=\"\"} 3\n# EOF\n";
    let s = parse(ok, true).expect("parses");
    assert_eq!(s.one("turnstile_x_total", &[("a", "q\"")]).ok(), Some(3.0));
}
