//! `turnstile dev`: a 1-, 3- or 5-node cluster on loopback in one process, each node with its
//! own data dir under `--data-dir`, for trying Turnstile out. Restarting it with the same data
//! dir brings the same cluster back (the dev secret is kept in the data dir).
//!
//! `--secure`: a CA, node certificates for 127.0.0.1 and localhost, and a `root` client
//! certificate are made under `<data-dir>/certs` (kept across restarts), and the nodes serve
//! HTTPS with mutual TLS between them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use rand::RngCore;
use turnstile_server::config::{format_initial_cluster, ServeArgs};

use crate::{dev_addr, dev_data_dir, wait_for_signal};

#[derive(Args)]
pub struct DevArgs {
    /// Number of nodes: 1, 3 or 5.
    #[arg(long, env = "TURNSTILE_NODES", default_value_t = 3)]
    nodes: u16,
    /// Port of node 1; node i listens on base-port + i - 1.
    #[arg(long, env = "TURNSTILE_BASE_PORT", default_value_t = 7001)]
    base_port: u16,
    /// Parent of the nodes' data dirs.
    #[arg(long, env = "TURNSTILE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// TLS with certificates made under <data-dir>/certs, and a `root` client certificate.
    #[arg(long, env = "TURNSTILE_DEV_SECURE")]
    secure: bool,
}

/// The user of the client certificate `--secure` makes.
const DEV_USER: &str = "root";

/// Makes the dev certificates under `dir` unless they are there from an earlier run.
fn dev_certs(dir: &Path, nodes: u16) -> anyhow::Result<()> {
    use turnstile_server::tls::certs::{self, ClusterCerts};
    let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let want = ClusterCerts {
        nodes: (1..=u64::from(nodes))
            .map(|id| (id, hosts.clone()))
            .collect(),
        clients: vec![DEV_USER.to_string()],
    };
    certs::ensure_cluster(dir, &want)?;
    Ok(())
}

fn dev_secret(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("dev-secret");
    if let Ok(s) = std::fs::read_to_string(&path) {
        return Ok(s.trim().to_string());
    }
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, &secret).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(secret)
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if ![1, 3, 5].contains(&args.nodes) {
        bail!("--nodes must be 1, 3 or 5");
    }
    if args.base_port.checked_add(args.nodes).is_none() {
        bail!("--base-port too high");
    }
    let root = args.data_dir.unwrap_or_else(dev_data_dir);
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let secret = dev_secret(&root)?;
    let members: BTreeMap<u64, _> = (1..=args.nodes)
        .map(|i| (u64::from(i), dev_addr(args.base_port, i)))
        .collect();
    let initial = format_initial_cluster(&members);
    let certs_dir = root.join("certs");
    if args.secure {
        dev_certs(&certs_dir, args.nodes)?;
    }
    let mut nodes = Vec::new();
    for (&id, &addr) in &members {
        let mut serve = ServeArgs {
            id: Some(id),
            listen: Some(addr),
            data_dir: Some(root.join(format!("node-{id}"))),
            initial_cluster: Some(initial.clone()),
            cluster_secret: Some(secret.clone()),
            ..ServeArgs::default()
        };
        if args.secure {
            use turnstile_server::tls::certs;
            serve.tls_ca = Some(certs::ca_paths(&certs_dir).cert);
            serve.tls_cert = Some(certs::node_paths(&certs_dir, id).cert);
            serve.tls_key = Some(certs::node_paths(&certs_dir, id).key);
        }
        let cfg = serve.resolve()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        nodes.push(turnstile_server::node::start(cfg, listener, Default::default()).await?);
    }
    let first = dev_addr(args.base_port, 1);
    println!(
        "turnstile dev: {} node(s), data in {}",
        args.nodes,
        root.display()
    );
    let (scheme, curl) = if args.secure {
        use turnstile_server::tls::certs;
        let client = certs::client_paths(&certs_dir, DEV_USER);
        let ca = certs::ca_paths(&certs_dir).cert;
        let flags = format!(
            "--cacert {} --cert {} --key {}",
            ca.display(),
            client.cert.display(),
            client.key.display()
        );
        ("https", format!("curl -s {flags}"))
    } else {
        ("http", "curl -s".to_string())
    };
    for (id, addr) in &members {
        println!("  node {id}: {scheme}://{addr}");
    }
    println!();
    println!("Try it:");
    println!("  {curl} -XPOST {scheme}://{first}/v1/leases -d '{{\"ttl_ms\": 10000}}'");
    println!("  {curl} -XPOST {scheme}://{first}/v1/locks/demo/acquire -d '{{\"lease_id\": <lease_id>, \"wait_ms\": 0}}'");
    println!("  {curl} -XPOST {scheme}://{first}/v1/locks/demo/release -d '{{\"lease_id\": <lease_id>, \"token\": <token>}}'");
    println!("  {curl} {scheme}://{first}/v1/cluster");
    // The CLI has no default cluster: this is the line that points it at this one.
    let endpoints: Vec<String> = members
        .values()
        .map(|a| format!("{scheme}://{a}"))
        .collect();
    println!("  export TURNSTILE_ENDPOINTS={}", endpoints.join(","));
    if args.secure {
        use turnstile_server::tls::certs;
        let client = certs::client_paths(&certs_dir, DEV_USER);
        println!(
            "  turnstile --cacert {} --cert {} --key {} status",
            certs::ca_paths(&certs_dir).cert.display(),
            client.cert.display(),
            client.key.display()
        );
    } else {
        println!("  turnstile status");
    }
    println!("Ctrl-C stops the cluster.");
    wait_for_signal().await;
    println!("stopping");
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
