//! One chaos run: start a cluster in network namespaces, run the workloads and the nemesis on
//! their seeded schedules for the configured time, heal everything, wait for convergence, take
//! the final reads, then write the run folder (history, nemesis windows, leaders, watch
//! deliveries, verdicts, report) and check it. Runs are secure by default (`tls`); the mode is
//! printed at the start, in the summary, in `results.json` and in the report's title.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use turnstile_checker::history::{FinalNodeState, Recorded};
use turnstile_checker::{CheckResult, Validity};

use crate::cluster::{Backend, ClusterOptions, ProcCluster};
use crate::http::Http;
use crate::nemesis::{self, Fault, NemesisPlan};
use crate::recorder::Recorder;
use crate::tls::Mode;
use crate::watcher::{self, WatcherPlan};
use crate::workload::{self, WorkerCtx};

/// Longest the linearizability search may take per model before it answers "unknown".
const SEARCH_BUDGET_MS: u64 = 30_000;
/// How long after the fault phase the watchers may take to deliver the end marker: the heal,
/// convergence and final reads come first.
const DRAIN_MS: u64 = 45_000;
/// How often the monitor polls every node, and how long one poll may take.
const MONITOR_INTERVAL_MS: u64 = 100;
const MONITOR_TIMEOUT_MS: u64 = 300;
/// Process ids of the final reads start here (workers' ids stay far below).
const FINAL_PROCESS_BASE: u64 = 1 << 40;

/// The client workloads a run mixes.
#[derive(Debug, Clone, Copy)]
enum WorkerKind {
    Register,
    EtcdRegister,
    Counter,
    Lock,
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub seed: u64,
    pub duration: Duration,
    pub nodes: u64,
    /// `TURNSTILE_BUGS` for the nodes (empty: a correct server).
    pub bugs: String,
    pub faults: Vec<Fault>,
    pub register_workers: u64,
    /// Register workers through the etcd port (`crate::etcd_workload`), on the same keys.
    pub etcd_register_workers: u64,
    pub counter_workers: u64,
    pub lock_workers: u64,
    pub watchers: u64,
    /// The run fails unless at least this many faults were applied ...
    pub min_faults: usize,
    /// ... and at least this many distinct leader terms were observed.
    pub min_leader_terms: usize,
    /// The run folder is created under here.
    pub out_root: PathBuf,
    /// The node binary (`turnstile-jepsen`).
    pub binary: PathBuf,
    pub quiet_ms: (u64, u64),
    pub hold_ms: (u64, u64),
    /// Where the nodes run.
    pub backend: Backend,
    /// TLS with client certificates (the default), or plain HTTP for debugging.
    pub mode: Mode,
}

impl RunConfig {
    /// Defaults for a run of `duration` with `seed`: 5 nodes, every fault, every workload.
    pub fn new(seed: u64, duration: Duration, binary: PathBuf, out_root: PathBuf) -> RunConfig {
        RunConfig {
            seed,
            duration,
            nodes: 5,
            bugs: String::new(),
            faults: Fault::ALL.to_vec(),
            register_workers: 3,
            etcd_register_workers: 2,
            counter_workers: 2,
            lock_workers: 6,
            watchers: 2,
            min_faults: 3,
            min_leader_terms: 2,
            out_root,
            binary,
            quiet_ms: (1_000, 2_500),
            hold_ms: (1_500, 3_500),
            backend: Backend::Netns,
            mode: Mode::Secure,
        }
    }
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub seed: u64,
    pub bugs: String,
    /// Whether the run spoke TLS with client certificates or plain HTTP.
    pub mode: Mode,
    pub dir: PathBuf,
    pub duration_s: f64,
    pub ops: usize,
    pub ok: usize,
    pub fail: usize,
    pub info: usize,
    /// `ok` completions of the etcd port's register workers (`crate::etcd_workload`).
    pub etcd_ok: usize,
    pub faults: usize,
    /// Nemesis windows per fault name (a wipe-replace opens three).
    pub fault_kinds: std::collections::BTreeMap<String, usize>,
    pub leader_terms: usize,
    pub results: Vec<CheckResult>,
    /// Set when the run did not get the faults or leader changes it demanded.
    pub too_gentle: Option<String>,
}

impl RunSummary {
    /// Every checker valid and the run as rough as demanded.
    pub fn passed(&self) -> bool {
        self.too_gentle.is_none() && self.results.iter().all(|r| r.validity == Validity::Valid)
    }

    /// Names of the checkers that found a violation.
    pub fn invalid(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|r| r.validity == Validity::Invalid)
            .map(|r| r.name.clone())
            .collect()
    }

    /// A few lines for a terminal.
    pub fn render(&self) -> String {
        let mut out = format!(
            "seed {} bugs [{}]: {:.0} s, {} ops ({} ok, {} of them through the etcd port, {} fail, {} info), {} faults, {} leader terms\n  mode: {}\n",
            self.seed, self.bugs, self.duration_s, self.ops, self.ok, self.etcd_ok, self.fail,
            self.info, self.faults, self.leader_terms, self.mode.describe()
        );
        let kinds: Vec<String> = self
            .fault_kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        out.push_str(&format!("  faults: {}\n", kinds.join(", ")));
        for r in &self.results {
            out.push_str(&format!("  {:?} {}: {}\n", r.validity, r.name, r.checked));
            for p in r.problems.iter().take(3) {
                out.push_str(&format!("      {p}\n"));
            }
        }
        if let Some(g) = &self.too_gentle {
            out.push_str(&format!("  TOO GENTLE: {g}\n"));
        }
        out.push_str(&format!("  folder: {}\n", self.dir.display()));
        out
    }
}

/// Runs one seeded chaos run and checks it.
pub async fn run(cfg: RunConfig) -> anyhow::Result<RunSummary> {
    let dir = run_dir(&cfg)?;
    let data = tempfile::tempdir().context("cannot create the data dir")?;
    println!(
        "turnstile-jepsen: seed {} for {} s, bugs [{}], {}, folder {}",
        cfg.seed,
        cfg.duration.as_secs(),
        cfg.bugs,
        cfg.mode.describe(),
        dir.display()
    );
    let mut cfg = cfg;
    let disk_faults = cfg.faults.contains(&Fault::DiskSyncFail);
    if disk_faults && cfg.backend == Backend::Docker {
        // libfiu reaches a process through LD_PRELOAD, which a static binary ignores.
        cfg.faults.retain(|&f| f != Fault::DiskSyncFail);
        println!("  disk-sync-fail left out: it needs the netns backend");
    } else if disk_faults {
        crate::cluster::require_fiu()?;
    }
    let cluster = ProcCluster::start(ClusterOptions {
        nodes: cfg.nodes,
        binary: cfg.binary.clone(),
        dir: data.path().to_path_buf(),
        bugs: cfg.bugs.clone(),
        extra_args: vec![],
        etcd_port: cfg.etcd_register_workers > 0,
        backend: cfg.backend,
        mode: cfg.mode,
        disk_faults: cfg.faults.contains(&Fault::DiskSyncFail),
    })
    .await?;
    if let Some(certs) = cluster.certs() {
        // Lets a person reach the nodes by hand while the run lasts (docs/chaos.md).
        println!("  certificates: {}", certs.dir().display());
    }
    let rec = Recorder::new();
    let http = Http::new(cluster.certs())?;
    let endpoints = cluster.endpoints();
    let started = Instant::now();
    let deadline = started + cfg.duration;

    let (monitor_stop, monitor_stopped) = tokio::sync::watch::channel(false);
    let monitor = tokio::spawn(monitor(
        rec.clone(),
        http.clone(),
        endpoints.clone(),
        monitor_stopped,
    ));
    let (drain_tx, drain_rx) = tokio::sync::watch::channel(None);
    let mut watchers = Vec::new();
    for watcher in 0..cfg.watchers {
        let plan = WatcherPlan {
            watcher,
            endpoints: endpoints.clone(),
            deadline,
            drain_to: drain_rx.clone(),
            drain_deadline: deadline + Duration::from_millis(DRAIN_MS),
        };
        watchers.push(tokio::spawn(watcher::watcher(
            rec.clone(),
            http.inner().clone(),
            plan,
        )));
    }
    let workers_total =
        cfg.register_workers + cfg.etcd_register_workers + cfg.counter_workers + cfg.lock_workers;
    let etcd_tls = match cluster.certs() {
        Some(certs) => Some(certs.etcd_tls()?),
        None => None,
    };
    let ctx = WorkerCtx {
        rec: rec.clone(),
        http: http.clone(),
        endpoints: endpoints.clone(),
        etcd_endpoints: cluster.etcd_endpoints(),
        etcd_tls,
        deadline,
        workers_total,
    };
    // Worker indexes run on across the kinds, so process ids and node bindings never repeat.
    let kinds = [
        (WorkerKind::Register, cfg.register_workers),
        (WorkerKind::EtcdRegister, cfg.etcd_register_workers),
        (WorkerKind::Counter, cfg.counter_workers),
        (WorkerKind::Lock, cfg.lock_workers),
    ];
    let mut workers = Vec::new();
    let mut index = 0;
    for (kind, count) in kinds {
        for _ in 0..count {
            let (ctx, seed) = (ctx.clone(), cfg.seed);
            workers.push(tokio::spawn(async move {
                match kind {
                    WorkerKind::Register => workload::register_worker(ctx, index, seed).await,
                    WorkerKind::EtcdRegister => {
                        crate::etcd_workload::etcd_register_worker(ctx, index, seed).await
                    }
                    WorkerKind::Counter => workload::counter_worker(ctx, index, seed).await,
                    WorkerKind::Lock => workload::lock_worker(ctx, index, seed).await,
                }
            }));
            index += 1;
        }
    }
    let plan = NemesisPlan {
        seed: cfg.seed,
        faults: cfg.faults.clone(),
        quiet_ms: cfg.quiet_ms,
        hold_ms: cfg.hold_ms,
        deadline,
    };
    let mut cluster = nemesis::run(cluster, rec.clone(), plan).await;
    phase(started, "nemesis done");
    for w in workers {
        let _ = w.await;
    }
    phase(started, "workers done");
    // Grants go on past the deadline (requests in flight, a fault's hold): the monitor polls
    // until every worker is done, and each node once more after that.
    let _ = monitor_stop.send(true);
    nemesis::heal_all(&mut cluster).await?;
    let converged = cluster.converged().await;
    phase(started, "converged");
    let finals = final_reads(&cluster, &rec, &http).await;
    phase(started, "final reads done");
    // The watchers drain up to a marker write made after everything else: its revision is an
    // event every watcher must deliver (an applied index need not carry an event).
    let _ = drain_tx.send(Some(end_marker(&cluster, &http).await.unwrap_or(u64::MAX)));
    for w in watchers {
        let _ = w.await;
    }
    phase(started, "watchers drained");
    let _ = monitor.await;
    rec.set_final(finals);
    let recorded = rec.snapshot();
    for id in cluster.ids() {
        let _ = std::fs::copy(cluster.log_path(id), dir.join(format!("node-{id}.log")));
    }
    drop(cluster);
    let (faults, leader_terms) = rec.counts();
    let mut results = check(&recorded);
    if let Err(e) = converged {
        results.push(CheckResult {
            name: "converged".into(),
            validity: Validity::Invalid,
            checked: "final heal".into(),
            problems: vec![e.to_string()],
        });
    }
    let too_gentle = (faults < cfg.min_faults || leader_terms < cfg.min_leader_terms).then(|| {
        format!(
            "{faults} faults (demanded {}), {leader_terms} leader terms (demanded {})",
            cfg.min_faults, cfg.min_leader_terms
        )
    });
    let summary = summarize(
        &cfg,
        &dir,
        started,
        &recorded,
        faults,
        leader_terms,
        results,
        too_gentle,
    );
    write_outputs(&dir, &recorded, &summary)?;
    Ok(summary)
}

/// Prints a phase of the run with the time since it started.
fn phase(started: Instant, what: &str) {
    println!("  [{:>6.1} s] {what}", started.elapsed().as_secs_f64());
}

fn run_dir(cfg: &RunConfig) -> anyhow::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let bugs = if cfg.bugs.is_empty() {
        "correct".to_string()
    } else {
        cfg.bugs.replace(',', "+")
    };
    let dir = cfg
        .out_root
        .join(format!("{stamp}-seed{}-{bugs}", cfg.seed));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Polls every node's `/v1/cluster` until `stop` turns true, and each node once after, and
/// records who leads which term (the minority check attributes each grant's term to its
/// leader; grants go on past the fault phase's deadline): the node's own role,
/// and its `recent_leaders`, the leaders of the last terms it knew. Each node has its own
/// loop: polled in turn, a cut-off node's timeout delayed the others. A term that began and
/// ended between two polls went unobserved from roles alone (an `Unknown` in
/// lock-minority-grants, CI 2026-12-02); a term that committed a grant was known to a majority,
/// and their `recent_leaders` keep it.
async fn monitor(
    rec: Recorder,
    http: Http,
    endpoints: Vec<String>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let client = http.inner().clone();
    let loops = endpoints.into_iter().enumerate().map(|(i, e)| {
        let (rec, client, stop) = (rec.clone(), client.clone(), stop.clone());
        async move {
            loop {
                let last = *stop.borrow();
                let req = client
                    .get(format!("{e}/v1/cluster?digest=false"))
                    .timeout(Duration::from_millis(MONITOR_TIMEOUT_MS));
                if let Ok(resp) = req.send().await {
                    if let Ok(v) = resp.json::<serde_json::Value>().await {
                        if let (true, Some(term)) = (v["state"] == "Leader", v["term"].as_u64()) {
                            rec.leader(i as u64 + 1, term);
                        }
                        for known in v["recent_leaders"].as_array().into_iter().flatten() {
                            if let (Some(term), Some(node)) =
                                (known["term"].as_u64(), known["leader_id"].as_u64())
                            {
                                rec.leader(node, term);
                            }
                        }
                    }
                }
                if last {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(MONITOR_INTERVAL_MS)).await;
            }
        }
    });
    futures::future::join_all(loops).await;
}

/// After the heal: read every set, the counter and every register through the leader, and
/// every node's applied index and digest.
async fn final_reads(cluster: &ProcCluster, rec: &Recorder, http: &Http) -> Vec<FinalNodeState> {
    let leader = cluster.leader().await.map(|(id, _)| id).unwrap_or(1);
    let endpoint = cluster.endpoint(leader);
    let mut process = FINAL_PROCESS_BASE;
    for l in 0..workload::LOCKS {
        // Retry a failed final read a few times: the set check needs one.
        for _ in 0..10 {
            process += 1;
            let lock = workload::lock_name(l);
            if !workload::read_set_at(rec, http, &endpoint, process, leader, &lock).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    process += 1;
    workload::read_counter_at(rec, http, &endpoint, process, leader).await;
    for k in 0..workload::REGISTER_KEYS {
        process += 1;
        let key = workload::register_key(k);
        workload::read_register_at(rec, http, &endpoint, process, leader, &key).await;
    }
    let mut finals = Vec::new();
    if let Ok(nodes) = cluster.converged().await {
        for (node, applied_index, state_digest) in nodes {
            finals.push(FinalNodeState {
                node,
                applied_index,
                state_digest,
            });
        }
    }
    finals
}

/// Writes the end marker key through the leader and returns its revision.
async fn end_marker(cluster: &ProcCluster, http: &Http) -> Option<u64> {
    let (leader, _) = cluster.leader().await.ok()?;
    let url = format!("{}/v1/kv/jepsen-end", cluster.endpoint(leader));
    let body = serde_json::json!({"value": "end"});
    let a = http
        .send(
            reqwest::Method::PUT,
            &url,
            Some(&body),
            crate::http::Effect::Write,
            None,
        )
        .await;
    a.body["revision"].as_u64().filter(|_| a.is_ok())
}

/// Runs every checker over a recorded run.
pub fn check(recorded: &Recorded) -> Vec<CheckResult> {
    use turnstile_checker::{locks, models, watch, wgl};
    let ops = match turnstile_checker::history::pair(&recorded.events) {
        Ok(ops) => ops,
        Err(e) => {
            return vec![CheckResult {
                name: "history".into(),
                validity: Validity::Invalid,
                checked: format!("{} events", recorded.events.len()),
                problems: vec![e.to_string()],
            }]
        }
    };
    let budget = Duration::from_millis(SEARCH_BUDGET_MS);
    vec![
        wgl::check("linearizable-register", &models::Register, &ops, budget),
        wgl::check("linearizable-counter", &models::Counter, &ops, budget),
        locks::counter_bounds(&ops),
        locks::token_uniqueness(&ops),
        locks::token_real_time_order(&ops),
        locks::grant_provenance(&ops, &recorded.watch, &recorded.watch_ends),
        locks::no_grant_to_expired_lease(&ops, &recorded.watch),
        locks::fence_never_accepts_superseded(&ops),
        locks::set_no_lost_adds(&ops),
        locks::minority_grants(&ops, &recorded.nemesis, &recorded.leaders),
        locks::digests_converged(&recorded.final_nodes),
        watch::watch_check(&recorded.watch, &recorded.watch_ends),
    ]
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    cfg: &RunConfig,
    dir: &Path,
    started: Instant,
    recorded: &Recorded,
    faults: usize,
    leader_terms: usize,
    results: Vec<CheckResult>,
    too_gentle: Option<String>,
) -> RunSummary {
    use turnstile_checker::history::EventType;
    let count = |k: EventType| recorded.events.iter().filter(|e| e.kind == k).count();
    // Worker indexes run on across the kinds (register, etcd register, ...), and a worker's
    // process ids are its index plus multiples of the worker count (`WorkerCtx`).
    let workers_total =
        cfg.register_workers + cfg.etcd_register_workers + cfg.counter_workers + cfg.lock_workers;
    let etcd_workers = cfg.register_workers..cfg.register_workers + cfg.etcd_register_workers;
    let etcd_ok = recorded
        .events
        .iter()
        .filter(|e| e.kind == EventType::Ok)
        .filter(|e| e.process < FINAL_PROCESS_BASE && workers_total > 0)
        .filter(|e| etcd_workers.contains(&(e.process % workers_total)))
        .count();
    let mut fault_kinds = std::collections::BTreeMap::new();
    for w in &recorded.nemesis {
        *fault_kinds.entry(w.kind.clone()).or_insert(0) += 1;
    }
    RunSummary {
        seed: cfg.seed,
        bugs: cfg.bugs.clone(),
        mode: cfg.mode,
        dir: dir.to_path_buf(),
        duration_s: started.elapsed().as_secs_f64(),
        ops: count(EventType::Invoke),
        ok: count(EventType::Ok),
        fail: count(EventType::Fail),
        info: count(EventType::Info),
        etcd_ok,
        faults,
        fault_kinds,
        leader_terms,
        results,
        too_gentle,
    }
}

/// Writes the run folder: JSON lines of events and deliveries, JSON of the rest, the report.
pub fn write_outputs(dir: &Path, recorded: &Recorded, summary: &RunSummary) -> anyhow::Result<()> {
    use std::io::Write;
    let mut history = std::io::BufWriter::new(std::fs::File::create(dir.join("history.jsonl"))?);
    for e in &recorded.events {
        serde_json::to_writer(&mut history, e)?;
        history.write_all(b"\n")?;
    }
    history.flush()?;
    let mut watch = std::io::BufWriter::new(std::fs::File::create(dir.join("watch.jsonl"))?);
    for d in &recorded.watch {
        serde_json::to_writer(&mut watch, d)?;
        watch.write_all(b"\n")?;
    }
    watch.flush()?;
    let rest = serde_json::json!({
        "nemesis": recorded.nemesis,
        "leaders": recorded.leaders,
        "watch_ends": recorded.watch_ends,
        "final_nodes": recorded.final_nodes,
    });
    std::fs::write(dir.join("run.json"), serde_json::to_vec_pretty(&rest)?)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_vec_pretty(summary)?,
    )?;
    let title = format!(
        "turnstile-jepsen seed {} [{}] {}",
        summary.seed,
        summary.bugs,
        summary.mode.describe()
    );
    let html = turnstile_checker::report::render_html(recorded, &summary.results, &title);
    std::fs::write(dir.join("report.html"), html)?;
    Ok(())
}

/// Reads a run folder back (for `turnstile-jepsen check`).
pub fn load(dir: &Path) -> anyhow::Result<Recorded> {
    let mut recorded = Recorded::default();
    let history = std::fs::read_to_string(dir.join("history.jsonl"))?;
    for line in history.lines().filter(|l| !l.trim().is_empty()) {
        recorded.events.push(serde_json::from_str(line)?);
    }
    let watch = std::fs::read_to_string(dir.join("watch.jsonl"))?;
    for line in watch.lines().filter(|l| !l.trim().is_empty()) {
        recorded.watch.push(serde_json::from_str(line)?);
    }
    let rest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("run.json"))?)?;
    recorded.nemesis = serde_json::from_value(rest["nemesis"].clone())?;
    recorded.leaders = serde_json::from_value(rest["leaders"].clone())?;
    recorded.watch_ends = serde_json::from_value(rest["watch_ends"].clone())?;
    recorded.final_nodes = serde_json::from_value(rest["final_nodes"].clone())?;
    Ok(recorded)
}
