//! The run's certificates and the secure/insecure switch. A secure cluster (the default) gets
//! its own CA, a certificate per node (SANs: the node's address and its name `n<id>`) and the
//! `root` client certificate, all made with `turnstile_server::tls::certs` under the cluster's
//! directory; nodes serve HTTPS and talk mutual TLS to each other, and every harness client
//! (workers, watchers, the monitor, holders, the tests' own requests) trusts only that CA and
//! presents `root`, the superuser, so authorization never refuses the harness.
//!
//! `--insecure` exists to read traffic with tcpdump or poke a node with plain curl while
//! debugging; it is never the default, since a chaos run should exercise the code path
//! deployments use.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use turnstile_server::tls::certs::{self, CertOptions, CertsError};

/// The client principal every harness client authenticates as: the superuser, so the
/// workloads see every holder's lease and token and may use every route.
pub const CLIENT_USER: &str = "root";
/// Where a node's certificate files sit inside its container (a read-only bind mount).
pub const CERTS_DIR_IN_CONTAINER: &str = "/certs";

/// How a run's nodes and clients talk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// HTTPS with the run's CA, mutual TLS between peers, clients authenticated as `root`.
    #[default]
    Secure,
    /// Plain HTTP, authentication off (`serve --insecure`): for debugging only.
    Insecure,
}

impl Mode {
    /// `https` or `http`.
    pub fn scheme(self) -> &'static str {
        match self {
            Mode::Secure => "https",
            Mode::Insecure => "http",
        }
    }

    /// How the summary and report name the mode.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Secure => "secure (TLS, client certificate `root`)",
            Mode::Insecure => "INSECURE (plain HTTP, no authentication)",
        }
    }
}

/// Why the run's certificates could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot create the certificate dir {dir}: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make the run's certificates: {0}")]
    Certs(#[from] CertsError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot copy {path} for a container: {source}")]
    Copy {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reqwest refused the run's {what}: {source}")]
    Client {
        what: &'static str,
        source: reqwest::Error,
    },
}

/// The certificates of one cluster, in `dir`: `ca.crt`/`ca.key`, `node-<id>.crt/.key`,
/// `client-root.crt/.key` (the file names of `turnstile certs`).
#[derive(Debug, Clone)]
pub struct RunCerts {
    dir: PathBuf,
    ca_pem: Vec<u8>,
    client_cert_pem: Vec<u8>,
    client_key_pem: Vec<u8>,
}

impl RunCerts {
    /// Makes a new CA in `dir`, a certificate per `(id, hosts)` node and the `root` client
    /// certificate.
    pub fn create(dir: &Path, nodes: &[(u64, Vec<String>)]) -> Result<RunCerts, TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let opts = CertOptions::default();
        certs::create_ca(dir, &opts)?;
        for (id, hosts) in nodes {
            certs::create_node(dir, *id, hosts, &opts)?;
        }
        let client = certs::create_client(dir, CLIENT_USER, &opts)?;
        Ok(RunCerts {
            dir: dir.to_path_buf(),
            ca_pem: read(&certs::ca_paths(dir).cert)?,
            client_cert_pem: read(&client.cert)?,
            client_key_pem: read(&client.key)?,
        })
    }

    /// The subject names a node's certificate carries: its address and its name.
    pub fn node_hosts(id: u64, ip: Ipv4Addr) -> Vec<String> {
        vec![ip.to_string(), format!("n{id}")]
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate's path (what `--tls-ca` and a client's `--cacert` take).
    pub fn ca_cert(&self) -> PathBuf {
        certs::ca_paths(&self.dir).cert
    }

    /// The `root` client certificate's files.
    pub fn client(&self) -> certs::CertPaths {
        certs::client_paths(&self.dir, CLIENT_USER)
    }

    /// TLS of an etcd client of the cluster: only its CA trusted, `root`'s certificate shown.
    pub fn etcd_tls(&self) -> std::io::Result<etcd_client::TlsOptions> {
        let client = self.client();
        Ok(etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(std::fs::read(
                self.ca_cert(),
            )?))
            .identity(etcd_client::Identity::from_pem(
                std::fs::read(client.cert)?,
                std::fs::read(client.key)?,
            )))
    }

    /// `--tls-ca/--tls-cert/--tls-key` for node `id`, its files as seen from the host.
    pub fn node_args(&self, id: u64) -> Vec<OsString> {
        let node = certs::node_paths(&self.dir, id);
        tls_args(&self.ca_cert(), &node.cert, &node.key)
    }

    /// Copies what node `id` needs (CA certificate, its own certificate and key; never the
    /// CA's key or another node's) into `into`, for a container to mount at
    /// [`CERTS_DIR_IN_CONTAINER`]; returns the flags naming them as the container sees them.
    pub fn node_files_for_container(
        &self,
        id: u64,
        into: &Path,
    ) -> Result<Vec<OsString>, TlsError> {
        std::fs::create_dir_all(into).map_err(|source| TlsError::Dir {
            dir: into.to_path_buf(),
            source,
        })?;
        let node = certs::node_paths(&self.dir, id);
        let files = [
            (self.ca_cert(), "ca.crt"),
            (node.cert, "node.crt"),
            (node.key, "node.key"),
        ];
        for (from, name) in &files {
            std::fs::copy(from, into.join(name)).map_err(|source| TlsError::Copy {
                path: from.clone(),
                source,
            })?;
        }
        let inside = Path::new(CERTS_DIR_IN_CONTAINER);
        Ok(tls_args(
            &inside.join("ca.crt"),
            &inside.join("node.crt"),
            &inside.join("node.key"),
        ))
    }

    /// Makes `builder` trust only the run's CA, present `root`, and refuse plain HTTP.
    pub fn configure(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TlsError> {
        let ca =
            reqwest::Certificate::from_pem(&self.ca_pem).map_err(|source| TlsError::Client {
                what: "CA certificate",
                source,
            })?;
        // `Identity::from_pem` wants the key and the certificate in one PEM.
        let mut pem = self.client_key_pem.clone();
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        pem.extend_from_slice(&self.client_cert_pem);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|source| TlsError::Client {
            what: "root client certificate",
            source,
        })?;
        Ok(builder
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(identity)
            .https_only(true))
    }

    /// The same trust and identity for `turnstile-client` (the holder processes).
    pub fn client_security(&self) -> turnstile_client::Security {
        turnstile_client::Security::default()
            .with_ca_pem(self.ca_pem.clone())
            .with_identity_pem(&self.client_cert_pem, &self.client_key_pem)
    }
}

/// `--tls-ca CA --tls-cert CERT --tls-key KEY`.
fn tls_args(ca: &Path, cert: &Path, key: &Path) -> Vec<OsString> {
    vec![
        "--tls-ca".into(),
        ca.into(),
        "--tls-cert".into(),
        cert.into(),
        "--tls-key".into(),
        key.into(),
    ]
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// An HTTP client builder for the harness: no proxy (the nodes are on a private bridge), and
/// with `certs` the run's trust and identity.
pub fn client_builder(certs: Option<&RunCerts>) -> Result<reqwest::ClientBuilder, TlsError> {
    let builder = reqwest::Client::builder().no_proxy();
    match certs {
        Some(c) => c.configure(builder),
        None => Ok(builder),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_made_and_accepted_by_both_clients() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let ip = Ipv4Addr::new(10, 213, 1, 11);
        let certs = RunCerts::create(dir.path(), &[(1, RunCerts::node_hosts(1, ip))])
            .expect("certificates");
        assert!(certs.ca_cert().exists());
        assert!(certs.client().key.exists());
        client_builder(Some(&certs))
            .expect("trust and identity")
            .build()
            .expect("a reqwest client");
        let security = certs.client_security();
        assert!(security.tls() && security.has_identity());
        let config = turnstile_client::ClientConfig {
            security,
            ..Default::default()
        };
        turnstile_client::Client::with_config(vec![format!("https://{ip}:7000")], config)
            .expect("turnstile-client accepts the run's certificates");
        let args = certs.node_args(1);
        assert_eq!(args[0], "--tls-ca");
        assert_eq!(args.len(), 6);
    }
}
