//! A log torn by a crash, with a real `turnstile serve`: cut at seeded random byte offsets, the
//! node restarts to a clean prefix of what it wrote, or refuses to start when the cut took
//! writes it had synced; it never starts with a hole, a damaged value or synced writes missing.
//!
//! A crash tears only what was not synced yet. To have a known synced part, the test notes the
//! sync mark `M` and the size `S` of sled's `db` file at one moment, writes more, and SIGKILLs
//! the node. Each trial restores that moment's mark beside a copy of the log cut at an offset:
//! - a **tail** cut, at or after `S`, is what a crash at that moment could leave (bytes written
//!   later were not synced yet): the node must start with every key up to `M` and a prefix of
//!   the later ones, each value intact, and take new writes;
//! - a **deep** cut, inside the entries up to `M`, is synced data lost (a disk that lied): the
//!   node must refuse, naming the loss.
//! - Negative control: a deep cut without the mark (a data dir from before the mark) starts,
//!   serving fewer keys than were synced: what the tail trials' check would catch.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use rand::{Rng, SeedableRng};
use turnstile_raft::log_store::mark;

use crate::common::*;

/// Keys written before the moment the test notes, and in all.
const KEYS_BEFORE: u64 = 150;
const KEYS: u64 = 300;
/// Trials of each kind.
const TAIL_CUTS: usize = 4;
const DEEP_CUTS: usize = 2;
/// The seed of the cut offsets, unless `TURNSTILE_TORN_SEED` names one.
const SEED: u64 = 20_261_202;

fn value_of(i: u64) -> String {
    format!("torn-probe-value-{i}-XYZ")
}

async fn put(http: &reqwest::Client, base: &str, i: u64) -> anyhow::Result<u64> {
    let v = put_value(http, base, &format!("torn-{i}"), &value_of(i)).await?;
    v["revision"].as_u64().context("revision")
}

/// Waits until the sync mark reaches `index`; returns it.
async fn mark_reaching(log_dir: &Path, index: u64) -> anyhow::Result<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(WAIT_MS_MAX);
    loop {
        let marked = mark::read(log_dir)?.unwrap_or(0);
        if marked >= index {
            return Ok(marked);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the sync mark did not reach {index}: {marked}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(POLL_MS)).await;
    }
}

/// What a node started on a cut log did.
enum Outcome {
    /// It refused to start; its log's line saying so.
    Refused(String),
    /// It started and served `torn-1` to `torn-{keys}`, and nothing after them.
    Started { keys: u64 },
}

/// Starts a node on the trial dir `dir`'s data dir and reads which keys it serves: a clean
/// prefix, or an error.
async fn start_on(dir: &Path) -> anyhow::Result<Outcome> {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    let mut server = start_server(dir, &listen)?;
    if let Err(e) = wait_for_leader(&mut server, &http, &base, dir).await {
        let status = server.wait_exit()?;
        let log = std::fs::read_to_string(dir.join("server.log"))?;
        ensure!(!status.success(), "neither served nor exited: {e:#}\n{log}");
        let line = log
            .lines()
            .find(|l| l.contains("lost writes it had synced"))
            .with_context(|| format!("exited ({status}) without naming the loss:\n{log}"))?;
        ensure!(
            log.contains("re-add"),
            "the refusal does not say how to re-add the node:\n{log}"
        );
        return Ok(Outcome::Refused(line.to_string()));
    }
    let mut keys = 0;
    for i in 1..=KEYS {
        let v = get_json(&http, &format!("{base}/v1/kv/torn-{i}")).await?;
        if v["code"] == "key_not_found" {
            break;
        }
        ensure!(v["value"] == value_of(i), "torn-{i} reads back as {v}");
        keys = i;
    }
    for i in keys + 1..=KEYS {
        let v = get_json(&http, &format!("{base}/v1/kv/torn-{i}")).await?;
        ensure!(
            v["code"] == "key_not_found",
            "a hole: torn-{} is gone but torn-{i} is there ({v})",
            keys + 1
        );
    }
    // The node goes on: a new write commits after the prefix.
    put_value(&http, &base, "after-the-tear", "new").await?;
    Ok(Outcome::Started { keys })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_log_restarts_to_a_clean_prefix_or_refuses_a_synced_loss() -> anyhow::Result<()> {
    let seed = std::env::var("TURNSTILE_TORN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    println!("seed {seed} (set TURNSTILE_TORN_SEED to rerun another)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let log_dir = data.join("raft-log");
    let listen = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();

    let mut server = start_server(dir.path(), &listen)?;
    wait_for_leader(&mut server, &http, &base, dir.path()).await?;
    let mut revisions = Vec::new();
    for i in 1..=KEYS_BEFORE {
        revisions.push(put(&http, &base, i).await?);
    }
    let marked = mark_reaching(&log_dir, revisions[revisions.len() - 1]).await?;
    let synced_bytes = std::fs::metadata(log_dir.join("db"))?.len();
    for i in KEYS_BEFORE + 1..=KEYS {
        revisions.push(put(&http, &base, i).await?);
    }
    // Up to date on disk, so the tail cuts have bytes past the noted moment to cut into.
    mark_reaching(&log_dir, revisions[revisions.len() - 1]).await?;
    drop(server);

    let log = std::fs::read(log_dir.join("db"))?;
    let at: Vec<usize> = (1..=KEYS)
        .map(|i| {
            let v = value_of(i);
            log.windows(v.len())
                .position(|w| w == v.as_bytes())
                .with_context(|| format!("torn-{i} is not in the log as written"))
        })
        .collect::<anyhow::Result<_>>()?;
    if at.windows(2).any(|w| w[0] >= w[1]) || at[KEYS as usize - 1] < synced_bytes as usize {
        bail!(
            "sled did not lay the entries out one after another past the noted size \
             {synced_bytes}, so a cut offset says nothing: {at:?}"
        );
    }
    // Keys whose entries the mark covers: a cut before the last one's value loses it.
    let covered = revisions.iter().filter(|&&r| r <= marked).count();
    println!(
        "mark {marked} covers torn-1..torn-{covered}; db was {synced_bytes} bytes then, {} at \
         the kill",
        log.len()
    );

    let mut cuts: Vec<(bool, usize)> = (0..TAIL_CUTS)
        .map(|_| (true, rng.gen_range(synced_bytes as usize..log.len())))
        .collect();
    cuts.extend((0..DEEP_CUTS).map(|_| (false, rng.gen_range(at[0]..at[covered - 1]))));
    let control = cuts[cuts.len() - 1].1;
    for (n, (is_tail, offset)) in cuts.into_iter().enumerate() {
        let trial = cut_copy(dir.path(), n, &log, offset)?;
        mark::write(&trial.join("data").join("raft-log"), marked)?;
        let outcome = start_on(&trial).await?;
        let kind = if is_tail { "tail" } else { "deep" };
        match (is_tail, outcome) {
            (true, Outcome::Started { keys }) => {
                ensure!(
                    keys as usize >= covered,
                    "{kind} cut at {offset}: started without synced writes, serving only \
                     torn-1..torn-{keys} of the {covered} the mark covers"
                );
                println!("{kind} cut at byte {offset}: started, serving torn-1..torn-{keys}");
            }
            (false, Outcome::Refused(line)) => {
                println!("{kind} cut at byte {offset}: refused: {line}");
            }
            (true, Outcome::Refused(line)) => {
                bail!("{kind} cut at {offset}: what a crash leaves was refused: {line}")
            }
            (false, Outcome::Started { keys }) => bail!(
                "{kind} cut at {offset}: started serving torn-1..torn-{keys}, although the cut \
                 took synced writes (the mark covers torn-1..torn-{covered})"
            ),
        }
    }

    let trial = cut_copy(dir.path(), TAIL_CUTS + DEEP_CUTS, &log, control)?;
    std::fs::remove_file(trial.join("data").join("raft-log").join(mark::MARK_FILE))?;
    match start_on(&trial).await? {
        Outcome::Started { keys } if (keys as usize) < covered => println!(
            "control: the deep cut at byte {control} without the mark started, serving only \
             torn-1..torn-{keys} of {covered} synced"
        ),
        Outcome::Started { keys } => {
            bail!("control: the deep cut lost nothing (torn-1..torn-{keys}), so it shows nothing")
        }
        Outcome::Refused(line) => bail!("control: refused without a mark: {line}"),
    }
    Ok(())
}

/// A trial dir `dir/trial-{n}` holding a copy of the data dir `dir/data` whose log is cut to
/// `log[..offset]`.
fn cut_copy(dir: &Path, n: usize, log: &[u8], offset: usize) -> anyhow::Result<PathBuf> {
    let trial = dir.join(format!("trial-{n}"));
    std::fs::create_dir_all(&trial)?;
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(dir.join("data"))
        .arg(&trial)
        .status()?;
    ensure!(status.success(), "cp -a of the data dir failed: {status}");
    std::fs::write(
        trial.join("data").join("raft-log").join("db"),
        &log[..offset],
    )?;
    Ok(trial)
}
