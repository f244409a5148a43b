//! etcd's Watch on the etcd port, driven by Debian's `etcdctl` (3.4) and the `etcd-client`
//! crate against 3-node clusters: past events from a revision and live ones through another
//! node, prefixes, `prev_kv`, filters, several watches on one stream, cancel, progress, and
//! etcd's compacted answer from a node that restarted from a snapshot (it knows no key change
//! before it), after which a watch from the answered revision works.
//!
//! The `etcdctl` test is skipped, saying so, where `etcdctl` is not installed (`.ci/run`
//! installs it).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context};
use etcd_client::{EventType, PutOptions, WatchFilterType, WatchOptions, WatchStream};
use serde_json::json;
use turnstile_tests::Cluster;

use super::etcd_port::{etcd_port, etcdctl_cluster, Etcdctl};

/// How long a watch may take to show what the test waits for.
const WATCH_WAIT_S: u64 = 15;

/// A running `etcdctl` that does not end by itself (`watch`, `lock`, `elect`), its output
/// collected as it prints; killed on drop.
pub(crate) struct Watching {
    child: tokio::process::Child,
    printed: Arc<Mutex<String>>,
}

impl Watching {
    pub(crate) fn start(
        binary: &Path,
        endpoint: SocketAddr,
        args: &[&str],
    ) -> anyhow::Result<Watching> {
        use tokio::io::AsyncReadExt;
        let mut child = tokio::process::Command::new(binary)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .arg("--dial-timeout=5s")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawn etcdctl watch")?;
        let printed = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().context("stdout")?;
        let sink = printed.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&text);
            }
        });
        Ok(Watching { child, printed })
    }

    /// Sends the process `signal` (a `kill -s` name: `INT`, `KILL`).
    pub(crate) async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.child.id().context("the process has ended")?;
        let status = tokio::process::Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .await?;
        ensure!(status.success(), "kill -s {signal} {pid}: {status}");
        Ok(())
    }

    pub(crate) fn printed(&self) -> String {
        self.printed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until the process has printed `lines` whole lines, and returns them.
    pub(crate) async fn lines(&self, lines: usize) -> anyhow::Result<Vec<String>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(WATCH_WAIT_S);
        loop {
            let printed = self.printed();
            if printed.matches('\n').count() >= lines {
                return Ok(printed.lines().take(lines).map(str::to_string).collect());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "printed {printed:?}, not {lines} lines"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the process has printed exactly `expected`.
    pub(crate) async fn until(&self, expected: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(WATCH_WAIT_S);
        while self.printed() != expected {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the watch printed {:?}, not {expected:?}",
                self.printed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_watches_past_and_live_events() -> anyhow::Result<()> {
    let Some((binary, _cluster, addrs)) = etcdctl_cluster().await? else {
        return Ok(());
    };
    let ctl = Etcdctl::new(binary.clone(), &addrs[..1]);
    let put = ctl.json(&["put", "app/a", "1"]).await?;
    let first = put["header"]["revision"].as_u64().context("revision")?;
    ctl.ok(&["put", "app/a", "2"]).await?;
    ctl.ok(&["del", "app/a"]).await?;
    ctl.ok(&["put", "other", "x"]).await?;
    ctl.ok(&["put", "app/b", "3"]).await?;

    // From a past revision on node 2: the prefix's events in order, `other` left out ...
    let from = format!("--rev={first}");
    let prefix = Watching::start(&binary, addrs[1], &["watch", "--prefix", "app/", &from])?;
    let past = "PUT\napp/a\n1\nPUT\napp/a\n2\nDELETE\napp/a\n\nPUT\napp/b\n3\n";
    prefix.until(past).await?;
    // ... then live events, written through node 3.
    let third = Etcdctl::new(binary.clone(), &addrs[2..3]);
    third.ok(&["put", "app/c", "4"]).await?;
    third.ok(&["put", "other", "y"]).await?;
    prefix.until(&format!("{past}PUT\napp/c\n4\n")).await?;

    // One key with the value each event replaced.
    let one = Watching::start(&binary, addrs[2], &["watch", "app/a", "--prev-kv", &from])?;
    one.until("PUT\napp/a\n1\nPUT\napp/a\n1\napp/a\n2\nDELETE\napp/a\n2\napp/a\n\n")
        .await?;
    Ok(())
}

/// The next response of `stream` that is not a progress answer, within the wait.
async fn next(stream: &mut WatchStream) -> anyhow::Result<etcd_client::WatchResponse> {
    tokio::time::timeout(Duration::from_secs(WATCH_WAIT_S), stream.message())
        .await
        .context("no watch response in time")??
        .context("the watch stream ended")
}

/// `(type, key, value, create, mod, version, lease, prev value)` of a response's events.
type Shown = (
    EventType,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
);

fn shown(r: &etcd_client::WatchResponse) -> anyhow::Result<Vec<Shown>> {
    r.events()
        .iter()
        .map(|e| {
            let kv = e.kv().context("kv")?;
            Ok((
                e.event_type(),
                kv.key_str()?.to_string(),
                kv.value_str()?.to_string(),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                kv.lease(),
                e.prev_kv()
                    .map(|p| p.value_str().map(str::to_string))
                    .transpose()?,
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_client_watch_fields_streams_cancel_and_compaction() -> anyhow::Result<()> {
    let mut c = Cluster::start_tuned(3, etcd_port).await?;
    let url = |c: &Cluster, id: u64| c.etcd_addr(id).map(|a| format!("http://{a}"));
    let mut client = etcd_client::Client::connect([url(&c, 1).context("node 1")?], None).await?;
    let lease = client.lease_grant(30, None).await?.id();
    let with_lease = PutOptions::new().with_lease(lease);
    let revision = |h: Option<&etcd_client::ResponseHeader>| h.map(|h| h.revision());
    let r1 = revision(client.put("w/a", "1", Some(with_lease)).await?.header()).context("rev")?;
    let r2 = revision(client.put("w/a", "2", None).await?.header()).context("rev")?;
    let r3 = revision(client.delete("w/a", None).await?.header()).context("rev")?;

    let prefix = WatchOptions::new()
        .with_prefix()
        .with_start_revision(r1)
        .with_prev_key();
    let mut stream = client.watch("w/", Some(prefix)).await?;
    let created = next(&mut stream).await?;
    ensure!(created.created() && created.watch_id() == 0, "{created:?}");
    let mut got = Vec::new();
    while got.len() < 3 {
        let r = next(&mut stream).await?;
        ensure!(r.watch_id() == 0 && !r.canceled(), "{r:?}");
        got.extend(shown(&r)?);
    }
    let (put, del) = (EventType::Put, EventType::Delete);
    assert_eq!(
        got,
        vec![
            (put, "w/a".into(), "1".into(), r1, r1, 1, lease, None),
            (
                put,
                "w/a".into(),
                "2".into(),
                r1,
                r2,
                2,
                0,
                Some("1".into())
            ),
            (del, "w/a".into(), "".into(), 0, r3, 0, 0, Some("2".into())),
        ]
    );

    // A second watch on the same stream, deletes filtered out, with an id of its own.
    let puts_only = WatchOptions::new()
        .with_start_revision(r1)
        .with_filters([WatchFilterType::NoDelete])
        .with_watch_id(7);
    stream.watch("w/a", Some(puts_only)).await?;
    let created = next(&mut stream).await?;
    ensure!(created.created() && created.watch_id() == 7, "{created:?}");
    let mut puts = Vec::new();
    while puts.len() < 2 {
        let r = next(&mut stream).await?;
        ensure!(r.watch_id() == 7, "{r:?}");
        puts.extend(shown(&r)?.into_iter().map(|e| e.0));
    }
    assert_eq!(puts, vec![put, put]);
    // The same id again is refused; the stream goes on.
    let again = WatchOptions::new().with_watch_id(7);
    stream.watch("w/b", Some(again)).await?;
    let refused = next(&mut stream).await?;
    ensure!(
        refused.created() && refused.canceled() && refused.cancel_reason().contains("duplicate"),
        "{refused:?}"
    );

    // Cancel the first: only watch 7 sees the next put, which creates the key again.
    stream.cancel(0).await?;
    let cancelled = next(&mut stream).await?;
    ensure!(
        cancelled.canceled() && cancelled.watch_id() == 0,
        "{cancelled:?}"
    );
    let r4 = revision(client.put("w/a", "3", None).await?.header()).context("rev")?;
    let r = next(&mut stream).await?;
    ensure!(r.watch_id() == 7, "{r:?}");
    assert_eq!(
        shown(&r)?,
        vec![(put, "w/a".into(), "3".into(), r4, r4, 1, 0, None)]
    );
    stream.request_progress().await?;
    let progress = next(&mut stream).await?;
    ensure!(
        progress.watch_id() == -1 && revision(progress.header()) >= Some(r4),
        "{progress:?}"
    );

    // Node 2 restarts from a snapshot: it knows no key change before it, and says so with
    // etcd's compacted answer instead of guessing. (A read through it first: a linearizable
    // read waits until the node applied every write before it, so the snapshot holds them.)
    let mut before = etcd_client::Client::connect([url(&c, 2).context("node 2")?], None).await?;
    before.get("w/a", None).await?;
    let (status, v) = c.post(2, "/v1/admin/snapshot", json!({})).await?;
    ensure!(status == 200, "{v}");
    c.stop(2).await;
    c.restart(2).await?;
    let mut on_two = etcd_client::Client::connect([url(&c, 2).context("node 2")?], None).await?;
    let old = WatchOptions::new().with_prefix().with_start_revision(r1);
    let mut stream = on_two.watch("w/", Some(old)).await?;
    let created = next(&mut stream).await?;
    ensure!(created.created() && !created.canceled(), "{created:?}");
    let compacted = next(&mut stream).await?;
    let oldest = compacted.compact_revision();
    ensure!(
        compacted.canceled() && oldest > r4,
        "a compacted answer above {r4}: {compacted:?}"
    );
    // From the revision it answered, the watch works (live events through node 1).
    let fresh = WatchOptions::new()
        .with_prefix()
        .with_start_revision(oldest);
    let mut stream = on_two.watch("w/", Some(fresh)).await?;
    let created = next(&mut stream).await?;
    ensure!(created.created() && !created.canceled(), "{created:?}");
    let r5 = revision(client.put("w/b", "9", None).await?.header()).context("rev")?;
    let r = next(&mut stream).await?;
    assert_eq!(
        shown(&r)?,
        vec![(put, "w/b".into(), "9".into(), r5, r5, 1, 0, None)]
    );
    Ok(())
}
