//! The verified client certificate of a connection, as handlers see it: the HTTP server
//! parses the leaf once per TLS connection and puts a [`ClientCert`] into every request's
//! extensions, only when the client presented a certificate that chains to the cluster CA.
//! A certificate whose CN is `node-<digits>` is a node identity, never a user.

/// The common name of a client certificate that rustls verified against the cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub common_name: String,
}

/// Prefix of node identities' common names: `node-<id>`.
pub const NODE_CN_PREFIX: &str = "node-";

impl ClientCert {
    /// Reads the subject's first common name from a DER certificate; `None` if it does not
    /// parse or has no (UTF-8) CN. Call only on a certificate rustls has verified.
    pub fn from_der(der: &[u8]) -> Option<ClientCert> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let cn = cert.subject().iter_common_name().next()?;
        let common_name = cn.as_str().ok()?.to_owned();
        Some(ClientCert { common_name })
    }

    /// The node id if this is a node identity (`node-N`, N written without leading zeros).
    pub fn node_id(&self) -> Option<u64> {
        node_id_of(&self.common_name)
    }
}

/// `Some(N)` for the canonical `node-N` (N positive, no leading zeros or sign).
pub fn node_id_of(common_name: &str) -> Option<u64> {
    let digits = common_name.strip_prefix(NODE_CN_PREFIX)?;
    let id: u64 = digits.parse().ok()?;
    (id > 0 && id.to_string() == digits).then_some(id)
}

/// True for every `node-<digits>` name, canonical or not: reserved for nodes, refused as a
/// user or client name so that no user can ever look like a node.
pub fn is_reserved_node_name(name: &str) -> bool {
    name.strip_prefix(NODE_CN_PREFIX)
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_recognised_and_reserved() {
        for (name, id, reserved) in [
            ("node-1", Some(1), true),
            ("node-42", Some(42), true),
            ("node-01", None, true),
            ("node-0", None, true),
            ("node-", None, false),
            ("node-+1", None, false),
            ("node-1a", None, false),
            ("root", None, false),
            ("Node-1", None, false),
        ] {
            assert_eq!(node_id_of(name), id, "{name}");
            assert_eq!(is_reserved_node_name(name), reserved, "{name}");
        }
    }
}
