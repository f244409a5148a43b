//! The deployment files end to end on Docker. `deploy/build-image.sh` builds the FROM-scratch
//! image (a static binary, nothing pulled), and `deploy/docker-compose.yml` starts a 3-node
//! cluster from it on a private network, secure by default: its `certs` service made the
//! certificates, which the test copies out of a node. Through the ports published on 127.0.0.1
//! only, plain HTTP and a request without credentials are refused, every node's health check
//! (a client certificate inside the container) turns healthy, and as root over HTTPS a lease
//! and a lock are granted (token and cluster id checked). The leader's container is
//! SIGKILLed; the survivors elect a leader, still hold the first lock and grant a new one. The
//! killed node starts again on its named volume (written as uid 65534) and catches up. SIGTERM
//! (`stop`) ends every node with status 0. A guard removes the project's containers, network
//! and volumes and the test's image tag, also on panic.
//!
//! Skips (and passes) when no Docker engine answers; fails, saying what to install, when one
//! answers but neither `docker-compose` nor `docker compose` is there. The image holds
//! `TURNSTILE_README_BINARY` when it is set (CI builds that static binary first), otherwise a
//! static build, which shares its dependencies with the release build
//! (`deploy/lib/static-build.sh`). The project's subnet and host ports are chosen so that runs never collide.

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use turnstile_tests::{token, wait_for};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The image this test builds and runs; removed at the end (an operator's `turnstile:latest`
/// is left alone).
const IMAGE: &str = "turnstile:compose-test";
/// Compose services by node id, as in `deploy/docker-compose.yml`.
const SERVICES: [(u64, &str); 3] = [(1, "n1"), (2, "n2"), (3, "n3")];
/// The port every node listens on inside its container.
const NODE_PORT: &str = "7001";
/// Subnets tried are `10.216.<k>.0/24` (apart from the chaos harness's 10.213/10.214).
const SUBNET_TRIES_MAX: u32 = 20;
/// The compose file's default open-file limit; lowered to what this host allows.
const NOFILE_DEFAULT: u64 = 65_536;
/// Deadline of one HTTP request to a node.
const REQUEST_TIMEOUT_MS: u64 = 3_000;
/// Where the nodes mount the `certs` volume.
const CERTS_IN_CONTAINER: &str = "/certs";

/// Runs a command; its stdout, or an error with its stderr.
fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Compose command line (`docker-compose` or the `docker compose` plugin), `None` (after
/// saying so) without a Docker engine, an error without a Compose tool.
fn compose_tool() -> anyhow::Result<Option<Vec<&'static str>>> {
    if !succeeds("docker", &["info"]) {
        eprintln!("skipping: no Docker engine (`docker info` failed)");
        return Ok(None);
    }
    if succeeds("docker-compose", &["version"]) {
        return Ok(Some(vec!["docker-compose"]));
    }
    if succeeds("docker", &["compose", "version"]) {
        return Ok(Some(vec!["docker", "compose"]));
    }
    bail!(
        "Docker runs but there is no Compose tool: install docker-compose (Debian: docker-compose)"
    )
}

/// The test's image; its tag is removed on drop.
struct Image;

impl Image {
    fn build() -> anyhow::Result<Image> {
        let started = Instant::now();
        let mut build = Command::new("bash");
        build
            .arg(format!("{REPO}/deploy/build-image.sh"))
            .env("IMAGE", IMAGE)
            .stdin(Stdio::null());
        // CI built the README binary (static) before the tests: no cargo inside cargo test.
        if let Some(binary) = std::env::var_os("TURNSTILE_README_BINARY") {
            build.env("BINARY", binary);
        }
        let status = build.status().context("cannot run deploy/build-image.sh")?;
        if !status.success() {
            bail!("deploy/build-image.sh failed: {status}");
        }
        eprintln!(
            "image {IMAGE} built in {} ms",
            started.elapsed().as_millis()
        );
        Ok(Image)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = run(Command::new("docker").args(["rmi", IMAGE]));
    }
}

/// A Compose project of `deploy/docker-compose.yml`; `down -v` on drop.
struct Project {
    tool: Vec<&'static str>,
    name: String,
    env: Vec<(&'static str, String)>,
}

impl Project {
    /// Brings the cluster up on the first free subnet, with host ports chosen by Docker.
    fn up(tool: Vec<&'static str>) -> anyhow::Result<Project> {
        let pid = std::process::id();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        let mut last_error = anyhow!("no subnet tried");
        for attempt in 0..SUBNET_TRIES_MAX {
            let k = (pid + attempt) % 250 + 1;
            let mut env = vec![
                ("TURNSTILE_IMAGE", IMAGE.to_string()),
                ("TURNSTILE_SUBNET_PREFIX", format!("10.216.{k}")),
                (
                    "TURNSTILE_CLUSTER_SECRET",
                    format!("compose-test-{nanos:x}"),
                ),
                ("TURNSTILE_NOFILE", nofile_limit().to_string()),
            ];
            for var in [
                "TURNSTILE_HOST_PORT_1",
                "TURNSTILE_HOST_PORT_2",
                "TURNSTILE_HOST_PORT_3",
            ] {
                env.push((var, String::new()));
            }
            let project = Project {
                tool: tool.clone(),
                name: format!("tsdeploy{pid}x{attempt}"),
                env,
            };
            match project.run(&["up", "-d"]) {
                Ok(_) => return Ok(project),
                // Someone else's network on this subnet: drop this try, take the next one.
                Err(e) if e.to_string().contains("overlaps") => last_error = e,
                Err(e) => return Err(e),
            }
        }
        Err(last_error.context("no free subnet"))
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.tool[0]);
        cmd.args(&self.tool[1..])
            .args(["-p", &self.name, "-f"])
            .arg(format!("{REPO}/deploy/docker-compose.yml"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        cmd
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        run(&mut self.command(args))
    }

    /// `host:port` on 127.0.0.1 where node `id`'s port is published (it changes on restart).
    fn endpoint(&self, id: u64) -> anyhow::Result<String> {
        let published = self.run(&["port", service(id), NODE_PORT])?;
        if !published.starts_with("127.0.0.1:") {
            bail!("node {id} is published on {published:?}, not on 127.0.0.1 only");
        }
        Ok(published)
    }

    fn endpoints(&self) -> anyhow::Result<BTreeMap<u64, String>> {
        SERVICES
            .iter()
            .map(|&(id, _)| Ok((id, self.endpoint(id)?)))
            .collect()
    }

    /// The container id of node `id`.
    fn container(&self, id: u64) -> anyhow::Result<String> {
        self.run(&["ps", "-q", service(id)])
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if let Err(e) = self.run(&["down", "-v", "--remove-orphans", "-t", "5"]) {
            eprintln!("cleanup of project {}: {e:#}", self.name);
        }
    }
}

/// Docker objects (containers, networks, volumes) still labelled with Compose project `name`.
fn leftovers(name: &str) -> Vec<String> {
    let label = format!("label=com.docker.compose.project={name}");
    let mut found = Vec::new();
    for kind in [
        &["ps", "-aq"][..],
        &["network", "ls", "-q"],
        &["volume", "ls", "-q"],
    ] {
        let mut cmd = Command::new("docker");
        cmd.args(kind).args(["--filter", &label]);
        if let Ok(out) = run(&mut cmd) {
            found.extend(out.lines().map(str::to_string));
        }
    }
    found
}

fn service(id: u64) -> &'static str {
    SERVICES
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, s)| *s)
        .expect("node ids are 1 to 3")
}

/// This process's hard open-file limit, capped at the compose file's default: the Docker
/// daemon refuses a container limit above its own (often the same as ours).
fn nofile_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse::<u64>().ok());
    hard.map_or(NOFILE_DEFAULT, |h| h.min(NOFILE_DEFAULT))
}

/// Sends a JSON request to `endpoint`; the status and the JSON body.
async fn call(
    http: &reqwest::Client,
    endpoint: &str,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let url = format!("https://{endpoint}{path}");
    let rb = match body {
        Some(b) => http.post(&url).json(&b),
        None => http.get(&url),
    };
    let resp = rb.send().await.with_context(|| url.clone())?;
    let code = resp.status().as_u16();
    let v = resp.json().await.with_context(|| url.clone())?;
    Ok((code, v))
}

/// Waits until a node of `ids` leads in a term above `after_term`, with a cluster id, and
/// the others of `ids` follow it. Returns the leader, its term and the cluster id.
async fn leader(
    http: &reqwest::Client,
    eps: &BTreeMap<u64, String>,
    ids: &[u64],
    after_term: u64,
) -> anyhow::Result<(u64, u64, String)> {
    wait_for("a leader every live node follows", || async {
        let mut views = Vec::new();
        for id in ids {
            let (_, v) = call(http, &eps[id], "/v1/cluster", None).await.ok()?;
            views.push(v);
        }
        let lead = views.iter().find(|v| v["state"] == "Leader")?;
        let (leader_id, term) = (lead["node_id"].as_u64()?, lead["term"].as_u64()?);
        let cluster_id = lead["cluster_id"].as_str()?.to_string();
        let agreed = views
            .iter()
            .all(|v| v["leader_id"] == leader_id && v["term"] == term && v["phase"] == "member");
        (agreed && term > after_term).then_some((leader_id, term, cluster_id))
    })
    .await
}

/// A fresh lease and a granted try-acquire of `lock` through `endpoint`.
async fn grant(http: &reqwest::Client, endpoint: &str, lock: &str) -> anyhow::Result<Value> {
    let (code, v) = call(
        http,
        endpoint,
        "/v1/leases",
        Some(json!({"ttl_ms": 60_000})),
    )
    .await?;
    if code != 200 {
        bail!("lease grant through {endpoint}: {code} {v}");
    }
    let body = json!({"lease_id": v["lease_id"], "wait_ms": 0});
    let (code, v) = call(
        http,
        endpoint,
        &format!("/v1/locks/{lock}/acquire"),
        Some(body),
    )
    .await?;
    if code != 200 {
        bail!("acquire {lock} through {endpoint}: {code} {v}");
    }
    Ok(v)
}

/// Starts node `id`'s stopped container again (on its volume) and waits until it is a member
/// of cluster `cluster_id` that has applied `index`.
async fn restart_and_catch_up(
    project: &Project,
    http: &reqwest::Client,
    id: u64,
    index: u64,
    cluster_id: &str,
) -> anyhow::Result<()> {
    let t = Instant::now();
    project.run(&["start", service(id)])?;
    // Docker chose a new host port for the new start.
    let endpoint = project.endpoint(id)?;
    wait_for("the restarted node to catch up", || async {
        let (_, v) = call(http, &endpoint, "/v1/cluster", None).await.ok()?;
        let caught_up = v["applied_index"].as_u64()? >= index;
        (caught_up && v["cluster_id"] == cluster_id && v["phase"] == "member").then_some(())
    })
    .await?;
    eprintln!(
        "restarted node {id} caught up after {} ms",
        t.elapsed().as_millis()
    );
    Ok(())
}

/// Stops every node with SIGTERM (`stop`) and checks each exited with status 0.
fn stop_with_sigterm(project: &Project, ids: &[u64]) -> anyhow::Result<()> {
    let t = Instant::now();
    let containers: Vec<String> = ids
        .iter()
        .map(|&id| project.container(id))
        .collect::<anyhow::Result<_>>()?;
    project.run(&["stop"])?;
    for c in &containers {
        let code = run(Command::new("docker").args(["inspect", "-f", "{{.State.ExitCode}}", c]))?;
        assert_eq!(code, "0", "container {c} exited with {code} after SIGTERM");
    }
    eprintln!("stopped with SIGTERM in {} ms", t.elapsed().as_millis());
    Ok(())
}

/// Copies the certificates the `certs` service made out of node 1's container into `dir`.
fn copy_certs(project: &Project, dir: &std::path::Path) -> anyhow::Result<()> {
    let container = project.container(1)?;
    run(Command::new("docker")
        .arg("cp")
        .arg(format!("{container}:{CERTS_IN_CONTAINER}/."))
        .arg(dir))?;
    Ok(())
}

/// An HTTPS client that trusts only the cluster's CA, as `user` (client certificate) or as
/// no one.
fn https_client(certs: &std::path::Path, user: Option<&str>) -> anyhow::Result<reqwest::Client> {
    let ca = std::fs::read(certs.join("ca.crt")).context("ca.crt from the certs volume")?;
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
        .https_only(true);
    if let Some(user) = user {
        let mut pem = std::fs::read(certs.join(format!("client-{user}.key")))?;
        pem.extend(std::fs::read(certs.join(format!("client-{user}.crt")))?);
        b = b.identity(reqwest::Identity::from_pem(&pem)?);
    }
    Ok(b.build()?)
}

/// Refusals a secure cluster owes: plain HTTP gets no answer a client could mistake for
/// service, and HTTPS without a credential gets `401`.
async fn check_refusals(certs: &std::path::Path, endpoint: &str) -> anyhow::Result<()> {
    let plain = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
        .build()?;
    if let Ok(resp) = plain
        .get(format!("http://{endpoint}/v1/cluster"))
        .send()
        .await
    {
        assert!(
            !resp.status().is_success(),
            "plain HTTP was served: {}",
            resp.status()
        );
    }
    let anonymous = https_client(certs, None)?;
    let (code, v) = call(&anonymous, endpoint, "/v1/cluster", None).await?;
    assert_eq!(code, 401, "no credential: {v}");
    Ok(())
}

/// Waits until Docker calls every node's health check healthy.
async fn healthy(project: &Project) -> anyhow::Result<()> {
    let t = Instant::now();
    let containers: Vec<String> = SERVICES
        .iter()
        .map(|&(id, _)| project.container(id))
        .collect::<anyhow::Result<_>>()?;
    wait_for("every node's health check to pass", || async {
        containers
            .iter()
            .all(|c| {
                run(Command::new("docker").args(["inspect", "-f", "{{.State.Health.Status}}", c]))
                    .is_ok_and(|s| s == "healthy")
            })
            .then_some(())
    })
    .await?;
    eprintln!("every node healthy after {} ms", t.elapsed().as_millis());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_cluster_from_the_image_grants_locks_and_survives_leader_loss() -> anyhow::Result<()>
{
    let Some(tool) = compose_tool()? else {
        return Ok(());
    };
    // Dropped in reverse order: the project (containers, network, volumes), then the image.
    let _image = Image::build()?;
    let t = Instant::now();
    let project = Project::up(tool)?;
    let certs = tempfile::tempdir()?;
    copy_certs(&project, certs.path())?;
    let http = https_client(certs.path(), Some("root"))?;
    let eps = project.endpoints()?;
    let all: Vec<u64> = eps.keys().copied().collect();
    let (old_leader, old_term, cluster_id) = leader(&http, &eps, &all, 0).await?;
    eprintln!(
        "project {}: 3 containers up, node {old_leader} leads term {old_term}, cluster {cluster_id}: {} ms",
        project.name,
        t.elapsed().as_millis()
    );
    check_refusals(certs.path(), &eps[&old_leader]).await?;
    healthy(&project).await?;

    // A lock through a follower, which forwards to the leader.
    let follower = *all
        .iter()
        .find(|&&id| id != old_leader)
        .context("a follower")?;
    let first = grant(&http, &eps[&follower], "deploy-lock").await?;
    let first_token = token(&first)?;
    assert!(first_token > 0, "{first}");
    assert_eq!(first["cluster_id"], cluster_id.as_str(), "{first}");
    assert_eq!(first["name"], "deploy-lock", "{first}");

    // Kill the leader's container: the survivors elect one, keep the lock, and grant.
    let t = Instant::now();
    project.run(&["kill", "-s", "SIGKILL", service(old_leader)])?;
    let survivors: Vec<u64> = all.iter().copied().filter(|&id| id != old_leader).collect();
    let (new_leader, _, same_cluster) = leader(&http, &eps, &survivors, old_term).await?;
    assert_eq!(same_cluster, cluster_id);
    let second = grant(&http, &eps[&survivors[0]], "after-kill").await?;
    let second_token = token(&second)?;
    eprintln!(
        "killed leader {old_leader}; node {new_leader} leads and granted token {second_token} after {} ms",
        t.elapsed().as_millis()
    );
    assert!(second_token > first_token, "{second} after {first}");
    assert_eq!(second["cluster_id"], cluster_id.as_str(), "{second}");
    let (code, held) = call(&http, &eps[&survivors[1]], "/v1/locks/deploy-lock", None).await?;
    assert_eq!(code, 200, "{held}");
    assert_eq!(held["holders"][0]["token"], first_token, "{held}");

    restart_and_catch_up(&project, &http, old_leader, second_token, &cluster_id).await?;
    stop_with_sigterm(&project, &all)?;

    let name = project.name.clone();
    drop(project);
    let leftovers = leftovers(&name);
    assert!(leftovers.is_empty(), "project {name} left {leftovers:?}");
    Ok(())
}
