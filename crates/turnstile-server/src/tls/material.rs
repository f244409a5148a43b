//! The TLS files of a node (`--tls-ca`, `--tls-cert`, `--tls-key`) read into the two rustls
//! configs the node needs: a server config for its port and a client config for its calls to
//! peers. Both trust the cluster CA alone and speak HTTP/1.1 only (ALPN `http/1.1`).
//!
//! The server asks for a client certificate but does not require one (bearer tokens and
//! `/healthz` come without): a certificate that does not chain to the CA, or has expired,
//! fails the handshake; none at all passes, and authorization decides later.
//!
//! Session resumption is off on the server: a resumed session carries the client certificate
//! of its first handshake without checking it again, so a certificate that has since expired,
//! or a CA rotated out, would live on. Connections are kept alive, so full handshakes are rare.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The only application protocol on the port: no h2, so no h2c either.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Largest TLS file read: a CA bundle of a few certificates is a few KiB.
pub const TLS_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Where a node's TLS files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is larger than {TLS_FILE_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: not a PEM certificate file: {message}")]
    BadCert { path: PathBuf, message: String },
    #[error("{path}: no PEM private key in it: {message}")]
    BadKey { path: PathBuf, message: String },
    #[error("{path}: CA certificate not usable as a trust anchor: {source}")]
    BadCa {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("client certificate verifier: {0}")]
    Verifier(String),
    #[error("certificate {cert} and key {key} do not go together: {source}")]
    CertKey {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

/// The raw bytes of the three files, as last read (compared to notice a change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContents {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl FileContents {
    /// Reads the three files, each up to [`TLS_FILE_BYTES_MAX`].
    pub fn read(files: &TlsFiles) -> Result<FileContents, TlsError> {
        Ok(FileContents {
            ca: read_bounded(&files.ca)?,
            cert: read_bounded(&files.cert)?,
            key: read_bounded(&files.key)?,
        })
    }
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read = |source| TlsError::Read {
        path: path.into(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read)?
        .take(TLS_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > TLS_FILE_BYTES_MAX {
        return Err(TlsError::TooLarge { path: path.into() });
    }
    Ok(bytes)
}

/// The configs built from one set of files.
#[derive(Debug, Clone)]
pub struct TlsConfigs {
    pub server: Arc<ServerConfig>,
    pub peer_client: ClientConfig,
}

/// Builds both configs; fails on bad PEM, a CA that is not a usable trust anchor, or a key
/// that does not match the certificate.
pub fn build(files: &TlsFiles, contents: &FileContents) -> Result<TlsConfigs, TlsError> {
    super::install_crypto_provider();
    let ca = certs(&files.ca, &contents.ca)?;
    let chain = certs(&files.cert, &contents.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|e| TlsError::BadKey {
        path: files.key.clone(),
        message: e.to_string(),
    })?;
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c).map_err(|source| TlsError::BadCa {
            path: files.ca.clone(),
            source,
        })?;
    }
    let roots = Arc::new(roots);
    let cert_key = |source| TlsError::CertKey {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let verifier = WebPkiClientVerifier::builder(roots.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    // `with_single_cert` checks that the key matches the certificate's public key.
    let mut server = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(cert_key)?;
    server.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    let mut peer_client = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(cert_key)?;
    peer_client.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(TlsConfigs {
        server: Arc::new(server),
        peer_client,
    })
}

/// Every certificate in a PEM file; at least one.
fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |message: String| TlsError::BadCert {
        path: path.into(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    Ok(certs)
}
