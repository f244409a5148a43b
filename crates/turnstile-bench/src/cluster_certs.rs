//! `ClusterCerts`: the certificates of one TLS cluster (a CA, one node certificate per member,
//! a client certificate for `root`), made in the cluster's scratch dir by `turnstile certs` and
//! used by both systems: Turnstile nodes and etcd members serve and present the node
//! certificates, every bench client presents `root`'s.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The user of the clients' certificate: Turnstile's superuser, so auth is on and every
/// request passes it; etcd (no `--auth` roles set up) only checks that the CA signed it.
pub const CLIENT_USER: &str = "root";
/// The one address every node is reached at: the bench's clusters live on loopback. An IP
/// literal becomes an IP SAN, which both rustls and Go's crypto/tls check against the URL.
const NODE_HOST: &str = "127.0.0.1";

/// The certificate files of one cluster, in `dir`.
#[derive(Clone, Debug)]
pub struct ClusterCerts {
    dir: PathBuf,
}

/// One certificate and its private key (PEM files).
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClusterCerts {
    /// Makes a new CA in `dir`, certificates for nodes `1..=nodes` and the client certificate,
    /// with the `turnstile` binary's `certs` commands (the same rcgen code the server uses).
    pub fn create(turnstile_bin: &Path, dir: &Path, nodes: usize) -> anyhow::Result<ClusterCerts> {
        run(turnstile_bin, dir, "create-ca", &[])?;
        for id in 1..=nodes {
            let id = id.to_string();
            run(
                turnstile_bin,
                dir,
                "create-node",
                &["--id", &id, "--host", NODE_HOST],
            )?;
        }
        run(
            turnstile_bin,
            dir,
            "create-client",
            &["--user", CLIENT_USER],
        )?;
        Ok(ClusterCerts {
            dir: dir.to_path_buf(),
        })
    }

    /// The CA certificate every node and client trusts (and nothing else).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Node `id`'s certificate (serverAuth and clientAuth, CN `node-<id>`).
    pub fn node(&self, id: usize) -> CertFiles {
        CertFiles {
            cert: self.dir.join(format!("node-{id}.crt")),
            key: self.dir.join(format!("node-{id}.key")),
        }
    }

    /// The clients' certificate (CN [`CLIENT_USER`]).
    pub fn client(&self) -> CertFiles {
        CertFiles {
            cert: self.dir.join(format!("client-{CLIENT_USER}.crt")),
            key: self.dir.join(format!("client-{CLIENT_USER}.key")),
        }
    }

    /// The CA certificate's PEM.
    pub fn ca_pem(&self) -> anyhow::Result<Vec<u8>> {
        read(&self.ca())
    }

    /// The client certificate's PEM and its key's PEM.
    pub fn client_pem(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let files = self.client();
        Ok((read(&files.cert)?, read(&files.key)?))
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Runs `turnstile certs <verb> --certs-dir <dir> <args>`; a failure carries its stderr.
fn run(bin: &Path, dir: &Path, verb: &str, args: &[&str]) -> anyhow::Result<()> {
    if !bin.is_file() {
        bail!(
            "no turnstile binary at {} to make TLS certificates with (build it: cargo build \
             --release -p turnstile, or pass --turnstile-bin)",
            bin.display()
        );
    }
    let out = Command::new(bin)
        .args(["certs", verb, "--certs-dir"])
        .arg(dir)
        .args(args)
        .env_remove("TURNSTILE_CERTS_DIR")
        .output()
        .with_context(|| format!("cannot run {} certs {verb}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "turnstile certs {verb} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
