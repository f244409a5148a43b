//! Peer authentication without sending the secret: every peer request carries an HMAC-SHA256,
//! keyed by the cluster secret, over what it asks (method, path, sender, cluster id, body), and
//! every reply to an authenticated request carries an HMAC over the request's MAC, the status
//! and the reply body.
//!
//! So the secret never crosses the wire, a node that does not hold it cannot make a member act,
//! and a member acts on (decodes, or quotes in an error) only replies from a peer that proved it
//! holds the secret. Comparison is constant-time (`hmac`'s `verify_slice`).
//!
//! What this does not give: secrecy of the traffic, or protection against replaying a recorded
//! request. Without TLS anyone who can watch the network can read every client value anyway;
//! with TLS (`docs/security.md`) the node certificates do this job.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the request's MAC (hex).
pub const AUTH_HEADER: &str = "x-turnstile-auth";
/// Header carrying the reply's MAC (hex).
pub const REPLY_AUTH_HEADER: &str = "x-turnstile-reply-auth";

/// Domain separation: a request MAC can never pass for a reply MAC or the other way round.
const REQUEST_DOMAIN: &[u8] = b"turnstile-peer-request-v1";
const REPLY_DOMAIN: &[u8] = b"turnstile-peer-reply-v1";

type HmacSha256 = Hmac<Sha256>;

/// What a request MAC covers, besides the body.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub from: u64,
    /// The sender's cluster id, or "" before it knows one.
    pub cluster_id: &'a str,
}

/// The cluster secret as an HMAC key.
#[derive(Clone)]
pub struct PeerKey {
    secret: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

impl PeerKey {
    pub fn new(secret: &str) -> PeerKey {
        PeerKey {
            secret: secret.as_bytes().into(),
        }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length; this cannot fail.
        match HmacSha256::new_from_slice(&self.secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        }
    }

    fn request_mac(&self, head: &RequestHead<'_>, body: &[u8]) -> HmacSha256 {
        let mut mac = self.mac();
        field(&mut mac, REQUEST_DOMAIN);
        field(&mut mac, head.method.as_bytes());
        field(&mut mac, head.path.as_bytes());
        field(&mut mac, &head.from.to_be_bytes());
        field(&mut mac, head.cluster_id.as_bytes());
        field(&mut mac, body);
        mac
    }

    /// The MAC a request with this head and body carries, hex.
    pub fn sign_request(&self, head: &RequestHead<'_>, body: &[u8]) -> String {
        hex::encode(self.request_mac(head, body).finalize().into_bytes())
    }

    /// True when `mac_hex` is this request's MAC (constant-time).
    pub fn verify_request(&self, head: &RequestHead<'_>, body: &[u8], mac_hex: &str) -> bool {
        let Ok(given) = hex::decode(mac_hex) else {
            return false;
        };
        self.request_mac(head, body).verify_slice(&given).is_ok()
    }

    fn reply_mac(&self, request_mac_hex: &str, status: u16, body: &[u8]) -> HmacSha256 {
        let mut mac = self.mac();
        field(&mut mac, REPLY_DOMAIN);
        field(&mut mac, request_mac_hex.as_bytes());
        field(&mut mac, &status.to_be_bytes());
        field(&mut mac, body);
        mac
    }

    /// The MAC of a reply to the request whose MAC was `request_mac_hex`, hex.
    pub fn sign_reply(&self, request_mac_hex: &str, status: u16, body: &[u8]) -> String {
        hex::encode(
            self.reply_mac(request_mac_hex, status, body)
                .finalize()
                .into_bytes(),
        )
    }

    /// True when `mac_hex` is the MAC of this reply (constant-time).
    pub fn verify_reply(
        &self,
        request_mac_hex: &str,
        status: u16,
        body: &[u8],
        mac_hex: &str,
    ) -> bool {
        let Ok(given) = hex::decode(mac_hex) else {
            return false;
        };
        self.reply_mac(request_mac_hex, status, body)
            .verify_slice(&given)
            .is_ok()
    }
}

/// Length-prefixed, so no two different field lists feed the MAC the same bytes.
fn field(mac: &mut HmacSha256, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(path: &str) -> RequestHead<'_> {
        RequestHead {
            method: "POST",
            path,
            from: 2,
            cluster_id: "c1",
        }
    }

    #[test]
    fn a_request_verifies_only_with_the_same_key_head_and_body() {
        let key = PeerKey::new("s3cret");
        let mac = key.sign_request(&head("/raft/append"), b"body");
        assert!(key.verify_request(&head("/raft/append"), b"body", &mac));
        assert!(!key.verify_request(&head("/raft/append"), b"bodx", &mac));
        assert!(!key.verify_request(&head("/raft/vote"), b"body", &mac));
        let other_sender = RequestHead {
            from: 3,
            ..head("/raft/append")
        };
        assert!(!key.verify_request(&other_sender, b"body", &mac));
        let no_cluster = RequestHead {
            cluster_id: "",
            ..head("/raft/append")
        };
        assert!(!key.verify_request(&no_cluster, b"body", &mac));
        assert!(!PeerKey::new("other").verify_request(&head("/raft/append"), b"body", &mac));
        assert!(!key.verify_request(&head("/raft/append"), b"body", "not hex"));
        assert!(!key.verify_request(&head("/raft/append"), b"body", ""));
    }

    #[test]
    fn a_reply_is_bound_to_its_request_and_status() {
        let key = PeerKey::new("s3cret");
        let req = key.sign_request(&head("/raft/vote"), b"");
        let mac = key.sign_reply(&req, 200, b"ok");
        assert!(key.verify_reply(&req, 200, b"ok", &mac));
        assert!(!key.verify_reply(&req, 503, b"ok", &mac));
        assert!(!key.verify_reply(&req, 200, b"no", &mac));
        let other = key.sign_request(&head("/raft/append"), b"");
        assert!(!key.verify_reply(&other, 200, b"ok", &mac));
        // A request MAC is never a valid reply MAC for the same bytes.
        assert!(!key.verify_reply(&req, 200, b"", &req));
    }
}
