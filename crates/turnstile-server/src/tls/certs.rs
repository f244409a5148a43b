//! Making the cluster's certificates (`turnstile certs ...`, `turnstile dev --secure`, tests):
//! a CA, node certificates (CN `node-N`, SANs = the node's hosts, usable as server and as
//! client certificate, because a node is both), and client certificates (CN = the user).
//!
//! Files in the certs dir: `ca.crt`/`ca.key`, `node-N.crt`/`.key`, `client-NAME.crt`/`.key`.
//! The dir is made mode 0700 and keys are written mode 0600. A file that exists is an error
//! unless `overwrite` is set; then it is replaced atomically (written aside, then renamed),
//! so a node polling its files never reads half a certificate.
//!
//! Validity: the CA 10 years, node and client certificates 1 year (rotation is a reload, see
//! docs/operations.md), each starting one hour back so a peer whose clock is a little behind
//! accepts a certificate made a moment ago. Keys are ECDSA P-256; serials are 128 random bits.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use time::{Duration, OffsetDateTime};

use super::identity::is_reserved_node_name;

/// Validity of a CA made by [`create_ca`].
pub const CA_VALIDITY_DAYS: i64 = 3_650;
/// Validity of node and client certificates.
pub const LEAF_VALIDITY_DAYS: i64 = 365;
/// How far back `not_before` is set: tolerance for peers' clock skew.
pub const NOT_BEFORE_BACKDATE_S: i64 = 3_600;
/// Longest user name a client certificate may carry (it is also part of a file name).
pub const USER_NAME_BYTES_MAX: usize = 128;
/// Most hosts in one node certificate.
pub const NODE_HOSTS_MAX: usize = 64;

/// File names inside a certs dir.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} exists; pass --overwrite to replace it")]
    Exists { path: PathBuf },
    #[error("cannot load the CA from {dir} (run `turnstile certs create-ca` first): {message}")]
    LoadCa { dir: PathBuf, message: String },
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error(
        "invalid user name `{0}`: 1-128 characters of A-Z a-z 0-9 . _ - @, not starting with '.'"
    )]
    BadUser(String),
    #[error("`{0}` is reserved for node certificates (node-<digits>); use `create-node`")]
    ReservedName(String),
    #[error("a node certificate needs between 1 and {NODE_HOSTS_MAX} --host values")]
    Hosts,
    #[error("node id must be positive")]
    NodeId,
}

/// When a certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// From an hour ago until `days` from now.
    pub fn days_from_now(days: i64) -> Validity {
        let now = OffsetDateTime::now_utc();
        Validity {
            not_before: now - Duration::seconds(NOT_BEFORE_BACKDATE_S),
            not_after: now + Duration::days(days),
        }
    }

    /// From `from_days` to `to_days` relative to now (negative: in the past). Tests make an
    /// expired certificate with `between_days(-2, -1)`.
    pub fn between_days(from_days: i64, to_days: i64) -> Validity {
        let now = OffsetDateTime::now_utc();
        Validity {
            not_before: now + Duration::days(from_days),
            not_after: now + Duration::days(to_days),
        }
    }
}

/// Options shared by the `create_*` functions.
#[derive(Debug, Clone, Copy, Default)]
pub struct CertOptions {
    /// Replace existing files instead of refusing.
    pub overwrite: bool,
    /// `None`: the default validity of the kind of certificate. Tests set an expired one.
    pub validity: Option<Validity>,
}

/// The two files of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Paths of node `id`'s files in `dir`.
pub fn node_paths(dir: &Path, id: u64) -> CertPaths {
    CertPaths {
        cert: dir.join(format!("node-{id}.crt")),
        key: dir.join(format!("node-{id}.key")),
    }
}

/// Paths of user `user`'s client files in `dir`.
pub fn client_paths(dir: &Path, user: &str) -> CertPaths {
    CertPaths {
        cert: dir.join(format!("client-{user}.crt")),
        key: dir.join(format!("client-{user}.key")),
    }
}

/// Paths of the CA's files in `dir`.
pub fn ca_paths(dir: &Path) -> CertPaths {
    CertPaths {
        cert: dir.join(CA_CERT_FILE),
        key: dir.join(CA_KEY_FILE),
    }
}

/// Makes a new CA in `dir` (`ca.crt`, `ca.key`).
pub fn create_ca(dir: &Path, opts: &CertOptions) -> Result<CertPaths, CertsError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = name("Turnstile CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    stamp(&mut params, opts, CA_VALIDITY_DAYS);
    let key = KeyPair::generate()?;
    let ca = CertifiedIssuer::self_signed(params, key)?;
    let paths = ca_paths(dir);
    write_pair(dir, &paths, &ca.pem(), &ca.key().serialize_pem(), opts)?;
    Ok(paths)
}

/// Makes node `id`'s certificate, signed by the CA in `dir`: CN `node-<id>`, SANs `hosts`
/// (IP literals become IP SANs, the rest DNS names), for both server and client auth.
pub fn create_node(
    dir: &Path,
    id: u64,
    hosts: &[String],
    opts: &CertOptions,
) -> Result<CertPaths, CertsError> {
    if id == 0 {
        return Err(CertsError::NodeId);
    }
    if hosts.is_empty() || hosts.len() > NODE_HOSTS_MAX {
        return Err(CertsError::Hosts);
    }
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params.distinguished_name = name(&format!("node-{id}"));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    leaf(dir, params, &node_paths(dir, id), opts)
}

/// Makes a client certificate for `user` (CN = `user`, client auth only), signed by the CA in
/// `dir`. `node-<digits>` names are refused: they are node identities.
pub fn create_client(dir: &Path, user: &str, opts: &CertOptions) -> Result<CertPaths, CertsError> {
    if is_reserved_node_name(user) {
        return Err(CertsError::ReservedName(user.into()));
    }
    let fine = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@');
    if user.is_empty()
        || user.len() > USER_NAME_BYTES_MAX
        || user.starts_with('.')
        || !user.bytes().all(fine)
    {
        return Err(CertsError::BadUser(user.into()));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = name(user);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    leaf(dir, params, &client_paths(dir, user), opts)
}

/// What one cluster needs: node `id` reachable at its hosts, and client users.
#[derive(Debug, Clone, Default)]
pub struct ClusterCerts {
    pub nodes: Vec<(u64, Vec<String>)>,
    pub clients: Vec<String>,
}

/// Makes, in `dir`, whatever of the CA, the nodes' and the clients' certificates is missing,
/// and keeps every file that exists (a second run changes nothing; rotation is `overwrite` on
/// the single commands). Returns what it wrote.
pub fn ensure_cluster(dir: &Path, want: &ClusterCerts) -> Result<Vec<CertPaths>, CertsError> {
    let opts = CertOptions::default();
    let mut written = Vec::new();
    if !ca_paths(dir).cert.exists() {
        written.push(create_ca(dir, &opts)?);
    }
    for (id, hosts) in &want.nodes {
        if !node_paths(dir, *id).cert.exists() {
            written.push(create_node(dir, *id, hosts, &opts)?);
        }
    }
    for user in &want.clients {
        if !client_paths(dir, user).cert.exists() {
            written.push(create_client(dir, user, &opts)?);
        }
    }
    Ok(written)
}

/// Signs a leaf with the CA in `dir` and writes it.
fn leaf(
    dir: &Path,
    mut params: CertificateParams,
    paths: &CertPaths,
    opts: &CertOptions,
) -> Result<CertPaths, CertsError> {
    let ca = load_ca(dir)?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    stamp(&mut params, opts, LEAF_VALIDITY_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    write_pair(dir, paths, &cert.pem(), &key.serialize_pem(), opts)?;
    Ok(paths.clone())
}

fn load_ca(dir: &Path) -> Result<Issuer<'static, KeyPair>, CertsError> {
    let paths = ca_paths(dir);
    let failed = |message: String| CertsError::LoadCa {
        dir: dir.into(),
        message,
    };
    let cert = std::fs::read_to_string(&paths.cert)
        .map_err(|e| failed(format!("{}: {e}", paths.cert.display())))?;
    let key = std::fs::read_to_string(&paths.key)
        .map_err(|e| failed(format!("{}: {e}", paths.key.display())))?;
    let key = KeyPair::from_pem(&key).map_err(|e| failed(format!("CA key: {e}")))?;
    Issuer::from_ca_cert_pem(&cert, key).map_err(|e| failed(format!("CA certificate: {e}")))
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Turnstile");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Sets validity and a random serial.
fn stamp(params: &mut CertificateParams, opts: &CertOptions, default_days: i64) {
    let validity = opts
        .validity
        .unwrap_or_else(|| Validity::days_from_now(default_days));
    params.not_before = validity.not_before;
    params.not_after = validity.not_after;
    let mut serial: [u8; 16] = rand::random();
    // Positive and of full length in DER: top bit clear, some bit set in the first byte.
    serial[0] = (serial[0] & 0x7f) | 0x40;
    params.serial_number = Some(SerialNumber::from(serial.to_vec()));
}

/// Writes a certificate (0644) and its key (0600), making `dir` (0700) if needed.
fn write_pair(
    dir: &Path,
    paths: &CertPaths,
    cert_pem: &str,
    key_pem: &str,
    opts: &CertOptions,
) -> Result<(), CertsError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CertsError::Io {
            path: dir.into(),
            source,
        })?;
    if !opts.overwrite {
        for p in [&paths.cert, &paths.key] {
            if p.exists() {
                return Err(CertsError::Exists { path: p.clone() });
            }
        }
    }
    // The key first: a node polling mid-way sees a new key with the old certificate, which
    // fails to load and is retried, never a certificate without its key.
    write_file(&paths.key, key_pem.as_bytes(), 0o600, opts.overwrite)?;
    write_file(&paths.cert, cert_pem.as_bytes(), 0o644, opts.overwrite)
}

/// `create_new` the file, or (overwrite) write a sibling and rename it over the file.
fn write_file(path: &Path, bytes: &[u8], mode: u32, overwrite: bool) -> Result<(), CertsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| CertsError::Io {
        path: path.into(),
        source,
    };
    let target = if overwrite {
        let mut aside = path.as_os_str().to_owned();
        aside.push(".tmp");
        PathBuf::from(aside)
    } else {
        path.to_path_buf()
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(!overwrite)
        .create(overwrite)
        .truncate(overwrite)
        .mode(mode)
        .open(&target)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => CertsError::Exists { path: path.into() },
            _ => io(e),
        })?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    if overwrite {
        // `mode` applies only to a new file; an old `.tmp` keeps its own.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).map_err(io)?;
        std::fs::rename(&target, path).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_a_ca_a_node_and_a_client_with_private_keys() {
        use rustls::pki_types::pem::PemObject;
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("certs");
        let opts = CertOptions::default();
        create_ca(&dir, &opts).expect("ca");
        let node =
            create_node(&dir, 3, &["127.0.0.1".into(), "localhost".into()], &opts).expect("node");
        let client = create_client(&dir, "alice", &opts).expect("client");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&node.key), 0o600);
        assert_eq!(mode(&client.key), 0o600);
        let pem = std::fs::read(&node.cert).expect("read");
        let der = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
            .next()
            .expect("one cert")
            .expect("pem");
        let cn = crate::tls::ClientCert::from_der(&der).expect("cn");
        assert_eq!(cn.node_id(), Some(3));
        assert!(matches!(
            create_node(&dir, 3, &["127.0.0.1".into()], &opts),
            Err(CertsError::Exists { .. })
        ));
        let again = CertOptions {
            overwrite: true,
            ..opts
        };
        create_node(&dir, 3, &["127.0.0.1".into()], &again).expect("overwrite");
        assert!(matches!(
            create_client(&dir, "node-7", &opts),
            Err(CertsError::ReservedName(_))
        ));
        for bad in ["", "../x", ".hidden", "a/b"] {
            assert!(create_client(&dir, bad, &opts).is_err(), "{bad}");
        }
    }
}
