//! TLS on the node's port and between peers, and the certificate tooling (`turnstile certs`).
//!
//! Module map:
//! - [`material`]: reading the CA, certificate and key files into a rustls server config (for
//!   the port) and client config (for peer calls).
//! - [`reload`]: the current configs, swapped on SIGHUP and when the files change.
//! - [`identity`]: [`ClientCert`], the verified client certificate a request came with.
//! - [`peer_check`]: which node certificates may make which `/raft/*` calls.
//! - [`member_vouch`]: a newer membership than its own log, vouched for by a member, so a node
//!   that is behind can follow a re-added leader.
//! - [`certs`]: making a CA, node and client certificates (rcgen).
//!
//! One crypto provider only: ring. [`install_crypto_provider`] runs before any config is
//! built, so rustls never has to guess (and never links aws-lc-rs).

pub mod certs;
pub mod identity;
pub mod material;
pub mod member_vouch;
pub mod peer_check;
pub mod reload;

pub use identity::ClientCert;
pub use material::{TlsError, TlsFiles};
pub use reload::TlsState;

/// Makes ring the process's rustls provider. Idempotent: a second call (another node in the
/// same test process, or the embedding program did it first) is ignored.
pub fn install_crypto_provider() {
    // Err only means a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
