//! [`Security`]: how a [`crate::Client`] proves who it is and whom it trusts. A CA bundle turns
//! TLS on (only that CA is trusted: no built-in or system roots, since a cluster's nodes carry
//! certificates of its own CA); a client certificate and key, or a bearer token, authenticate.
//! Everything is read and checked when the client is built, so a wrong path or a bad PEM is a
//! [`Error::Config`] at start, never a failure on the first request.

use std::fmt;
use std::path::Path;

use crate::Error;

/// Longest PEM file read (a CA bundle, a certificate chain, a key): far above any real one, so
/// pointing `--cacert` at a large file fails at once.
pub const PEM_BYTES_MAX: u64 = 1024 * 1024;

/// TLS trust, client certificate and bearer token of a client. The default is none of them:
/// plain `http://`, unauthenticated (a node without TLS has auth off).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// PEM of the CA certificates to trust; `Some` means every endpoint is `https://`.
    ca_pem: Option<Vec<u8>>,
    /// PEM of the client's key followed by its certificate chain (what reqwest's
    /// `Identity::from_pem` reads).
    identity_pem: Option<Vec<u8>>,
    /// Sent as `Authorization: Bearer <token>` on every request.
    token: Option<String>,
}

impl Security {
    /// Trusts only the CA certificates in this PEM bundle (and turns TLS on).
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Security {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Trusts only the CA certificates in the PEM file at `path` (and turns TLS on).
    pub fn with_ca_file(self, path: impl AsRef<Path>) -> Result<Security, Error> {
        let pem = read_pem(path.as_ref(), "CA bundle")?;
        Ok(self.with_ca_pem(pem))
    }

    /// Presents this client certificate (chain, PEM) with its private key (PEM, PKCS#8, SEC1
    /// or PKCS#1) in the TLS handshake; the node reads the principal from its CN.
    pub fn with_identity_pem(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Security {
        let mut pem = key_pem.to_vec();
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        pem.extend_from_slice(cert_pem);
        self.identity_pem = Some(pem);
        self
    }

    /// [`Security::with_identity_pem`] from two files.
    pub fn with_identity_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Security, Error> {
        let cert_pem = read_pem(cert.as_ref(), "client certificate")?;
        let key_pem = read_pem(key.as_ref(), "client key")?;
        Ok(self.with_identity_pem(&cert_pem, &key_pem))
    }

    /// Sends `Authorization: Bearer <token>` on every request. Refused when the client is
    /// built if any endpoint is plain `http://` to a host other than loopback.
    pub fn with_token(mut self, token: impl Into<String>) -> Security {
        self.token = Some(token.into());
        self
    }

    /// True when a CA bundle is set: endpoints are `https://` (bare `ip:port` included).
    pub fn tls(&self) -> bool {
        self.ca_pem.is_some()
    }

    pub fn has_identity(&self) -> bool {
        self.identity_pem.is_some()
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Applies trust and identity to an HTTP client under construction, and checks them.
    pub(crate) fn configure(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, Error> {
        // No built-in roots whatever the features say: only the cluster's CA vouches for a node.
        builder = builder.tls_built_in_root_certs(false);
        if let Some(pem) = &self.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| config(format!("cannot read the CA bundle: {e}")))?;
            if certs.is_empty() {
                return Err(config("the CA bundle holds no PEM certificate".into()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
            // A redirect or a typo can never downgrade a secure client to plain HTTP.
            builder = builder.https_only(true);
        }
        if let Some(pem) = &self.identity_pem {
            if self.ca_pem.is_none() {
                return Err(config(
                    "a client certificate needs TLS: give the cluster's CA bundle too".into(),
                ));
            }
            let identity = reqwest::Identity::from_pem(pem).map_err(|e| {
                config(format!(
                    "cannot use the client certificate and key: {e} (want PEM certificate and key)"
                ))
            })?;
            builder = builder.identity(identity);
        }
        if let Some(token) = &self.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| config("the token has characters a header cannot carry".into()))?;
            // Kept out of Debug output and HTTP/2 header compression tables.
            value.set_sensitive(true);
            if token.is_empty() {
                return Err(config("the token is empty".into()));
            }
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::AUTHORIZATION, value);
            builder = builder.default_headers(headers);
        }
        Ok(builder)
    }
}

/// The token and key never reach logs: Debug says only whether they are set.
impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls())
            .field("identity", &self.has_identity())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

fn config(message: String) -> Error {
    Error::Config { message }
}

/// Reads a PEM file under [`PEM_BYTES_MAX`], naming the file in every error.
fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    let meta = std::fs::metadata(path)
        .map_err(|e| config(format!("cannot read the {what} {}: {e}", path.display())))?;
    if meta.len() > PEM_BYTES_MAX {
        return Err(config(format!(
            "the {what} {} is over {PEM_BYTES_MAX} bytes; not a PEM file",
            path.display()
        )));
    }
    std::fs::read(path)
        .map_err(|e| config(format!("cannot read the {what} {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_token() {
        let s = Security::default().with_token("s3cret-value");
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn bad_material_is_a_config_error() {
        let build = |s: Security| s.configure(reqwest::Client::builder()).map(|_| ());
        let no_cert = Security::default().with_ca_pem(b"not a pem".to_vec());
        assert!(matches!(build(no_cert), Err(Error::Config { .. })));
        let id_without_ca = Security::default().with_identity_pem(b"c", b"k");
        assert!(matches!(build(id_without_ca), Err(Error::Config { .. })));
        let newline = Security::default().with_token("a\nb");
        assert!(matches!(build(newline), Err(Error::Config { .. })));
        let empty = Security::default().with_token("");
        assert!(matches!(build(empty), Err(Error::Config { .. })));
        let missing = Security::default().with_ca_file("/nonexistent/ca.crt");
        assert!(
            matches!(&missing, Err(Error::Config { message }) if message.contains("/nonexistent/ca.crt")),
            "{missing:?}"
        );
    }
}
