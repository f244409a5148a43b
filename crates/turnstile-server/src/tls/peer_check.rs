//! With TLS on, which node certificates may call `/raft/*`, on top of the HMAC check (which
//! stays in both modes): the caller must present a certificate from the cluster CA whose CN is
//! `node-N`, N must be the sender id the request's MAC covers, and N must be a member (voter
//! or learner) of the membership this node knows. A `node-N` certificate outlives N's
//! membership, so membership is checked on every call.
//!
//! Two calls are made before the rule can hold, and are judged on the certificate alone:
//! - `/raft/identity`: every forming node probes its peers before any membership exists,
//!   and a node restarting checks its peers belong to its cluster. It answers only who the
//!   node is (id, cluster id, phase) and changes nothing.
//! - Any call to a node that knows no membership yet (an empty node forming the cluster, or
//!   one waiting to be added): the leader's `/raft/prepare-join`, then its votes and appends,
//!   reach a node that cannot yet know the leader is a member. Such a node holds no state to
//!   protect, and the caller still had to show a CA-signed node certificate and the secret.

use std::collections::BTreeSet;

use super::identity::ClientCert;

/// Why a peer call was refused at the certificate check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeerCertDenial {
    #[error("peer call without a client certificate")]
    NoCertificate,
    #[error("client certificate is not a node identity (CN node-N)")]
    NotANode,
    #[error("node certificate names another node than the sender")]
    SenderMismatch,
    #[error("node certificate of a node that is not a member")]
    NotAMember,
}

impl PeerCertDenial {
    /// 401 when no identity was shown, 403 when the identity shown may not do this.
    pub fn status(&self) -> u16 {
        match self {
            PeerCertDenial::NoCertificate => 401,
            _ => 403,
        }
    }
}

/// The membership a node knows, as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnownMembers {
    /// No membership yet: the node has not formed or joined a cluster.
    None,
    /// Voters and learners.
    Members(BTreeSet<u64>),
}

/// Judges one peer call. `join_exempt`: the path is answered before membership exists
/// (see the module header).
pub fn judge(
    cert: Option<&ClientCert>,
    sender: u64,
    join_exempt: bool,
    known: &KnownMembers,
) -> Result<(), PeerCertDenial> {
    let cert = cert.ok_or(PeerCertDenial::NoCertificate)?;
    let node = cert.node_id().ok_or(PeerCertDenial::NotANode)?;
    if node != sender {
        return Err(PeerCertDenial::SenderMismatch);
    }
    match known {
        _ if join_exempt => Ok(()),
        KnownMembers::None => Ok(()),
        KnownMembers::Members(m) if m.contains(&node) => Ok(()),
        KnownMembers::Members(_) => Err(PeerCertDenial::NotAMember),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str) -> ClientCert {
        ClientCert {
            common_name: cn.into(),
        }
    }

    #[test]
    fn only_member_nodes_matching_the_sender_pass() {
        let members = KnownMembers::Members(BTreeSet::from([1, 2, 3]));
        let none = KnownMembers::None;
        let (n2, n4, alice) = (cert("node-2"), cert("node-4"), cert("alice"));
        use PeerCertDenial::*;
        for (cert, sender, exempt, known, want) in [
            (Some(&n2), 2, false, &members, Ok(())),
            (None, 2, false, &members, Err(NoCertificate)),
            (None, 2, true, &none, Err(NoCertificate)),
            (Some(&alice), 2, false, &members, Err(NotANode)),
            (Some(&n2), 3, false, &members, Err(SenderMismatch)),
            (Some(&n2), 3, true, &members, Err(SenderMismatch)),
            (Some(&n4), 4, false, &members, Err(NotAMember)),
            (Some(&n4), 4, true, &members, Ok(())),
            (Some(&n4), 4, false, &none, Ok(())),
        ] {
            assert_eq!(
                judge(cert, sender, exempt, known),
                want,
                "{cert:?} {sender} {exempt}"
            );
        }
    }
}
