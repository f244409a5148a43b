//! `turnstile certs`: making the cluster CA, node certificates and client certificates into a
//! certs dir. Thin wiring over `turnstile_server::tls::certs`, which documents the files,
//! their modes and validity.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use turnstile_server::tls::certs::{self, CertOptions, CertPaths};

#[derive(Subcommand)]
pub enum CertsCmd {
    /// Make a new cluster CA: D/ca.crt and D/ca.key (keep ca.key off the nodes if you can).
    #[command(name = "create-ca")]
    Ca(CommonArgs),
    /// Make node N's certificate, signed by D/ca.key: D/node-N.crt and .key (CN node-N,
    /// SANs = every --host, usable as server and client certificate).
    #[command(name = "create-node")]
    Node {
        #[command(flatten)]
        common: CommonArgs,
        /// The node's id, as given to `serve --id`.
        #[arg(long)]
        id: u64,
        /// An address or DNS name peers and clients use to reach the node (repeatable; IP
        /// literals become IP SANs).
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
    },
    /// Make a client certificate for a user: D/client-NAME.crt and .key (CN = NAME).
    #[command(name = "create-client")]
    Client {
        #[command(flatten)]
        common: CommonArgs,
        /// The user the certificate authenticates (`root` is the superuser; `node-<digits>`
        /// is reserved for nodes).
        #[arg(long)]
        user: String,
    },
    /// Make whatever a whole cluster lacks: the CA, each --node's and each --client's
    /// certificate. Files that exist are kept, so running it again changes nothing (the
    /// compose file runs it on every `up`).
    #[command(name = "create-cluster")]
    Cluster {
        /// Directory of the certificates (created mode 0700).
        #[arg(long, env = "TURNSTILE_CERTS_DIR")]
        certs_dir: PathBuf,
        /// `ID=HOST[,HOST...]`: node ID and the addresses or names it is reached at
        /// (repeatable).
        #[arg(long = "node", value_parser = parse_node, required = true)]
        nodes: Vec<(u64, Vec<String>)>,
        /// A user to make a client certificate for (repeatable).
        #[arg(long = "client")]
        clients: Vec<String>,
    },
}

/// Parses `ID=HOST[,HOST...]`.
fn parse_node(arg: &str) -> Result<(u64, Vec<String>), String> {
    let (id, hosts) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not ID=HOST[,HOST...]"))?;
    let id: u64 = id
        .parse()
        .map_err(|_| format!("{id:?} is not a node id (a positive integer)"))?;
    let hosts: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(format!("node {id} has no host"));
    }
    Ok((id, hosts))
}

#[derive(Args)]
pub struct CommonArgs {
    /// Directory of the certificates (created mode 0700).
    #[arg(long, env = "TURNSTILE_CERTS_DIR")]
    certs_dir: PathBuf,
    /// Replace files that exist instead of refusing (rotation).
    #[arg(long)]
    overwrite: bool,
}

impl CommonArgs {
    fn options(&self) -> CertOptions {
        CertOptions {
            overwrite: self.overwrite,
            validity: None,
        }
    }
}

pub fn run(cmd: CertsCmd) -> anyhow::Result<()> {
    let written = match &cmd {
        CertsCmd::Ca(c) => vec![certs::create_ca(&c.certs_dir, &c.options())?],
        CertsCmd::Node { common, id, hosts } => vec![certs::create_node(
            &common.certs_dir,
            *id,
            hosts,
            &common.options(),
        )?],
        CertsCmd::Client { common, user } => vec![certs::create_client(
            &common.certs_dir,
            user,
            &common.options(),
        )?],
        CertsCmd::Cluster {
            certs_dir,
            nodes,
            clients,
        } => {
            let want = certs::ClusterCerts {
                nodes: nodes.clone(),
                clients: clients.clone(),
            };
            let written = certs::ensure_cluster(certs_dir, &want)?;
            if written.is_empty() {
                println!(
                    "{}: every certificate is there already",
                    certs_dir.display()
                );
            }
            written
        }
    };
    written.iter().for_each(print_written);
    Ok(())
}

fn print_written(paths: &CertPaths) {
    println!("wrote {}", paths.cert.display());
    println!("wrote {} (mode 0600)", paths.key.display());
}
