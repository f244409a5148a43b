//! The node addresses a client knows, and which one it prefers. Any node answers any request
//! (followers hand writes and reads to the leader), so "leader discovery" is only this: keep
//! using the node that last answered, and move to the next one when a node cannot be reached
//! or cannot serve (`not_member`, `no_quorum`, ...).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Base URLs (`http://ip:port` or `https://ip:port`) and the index of the preferred one.
#[derive(Debug)]
pub(crate) struct Endpoints {
    urls: Vec<String>,
    preferred: AtomicUsize,
}

impl Endpoints {
    /// Accepts `ip:port`, `host:port`, `http://host:port` or `https://host:port` (a trailing
    /// `/` is dropped). With `tls` (a CA bundle is configured) a bare `ip:port` means https
    /// and `http://` is refused; without it `https://` is refused, since the client trusts no
    /// built-in roots and every handshake would fail.
    pub(crate) fn new(endpoints: Vec<String>, tls: bool) -> Result<Endpoints, Error> {
        let mut urls = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let e = e.trim().trim_end_matches('/');
            if e.is_empty() {
                continue;
            }
            let url = if e.starts_with("https://") || e.starts_with("http://") {
                e.to_string()
            } else if tls {
                format!("https://{e}")
            } else {
                format!("http://{e}")
            };
            if tls && url.starts_with("http://") {
                return Err(config(format!(
                    "endpoint {e} is plain HTTP but a CA bundle is given; use https:// or ip:port"
                )));
            }
            if !tls && url.starts_with("https://") {
                return Err(config(format!(
                    "endpoint {e} is https but no CA bundle is given (--cacert): the client \
                     trusts only the cluster's CA"
                )));
            }
            reqwest::Url::parse(&url).map_err(|err| config(format!("endpoint {e:?}: {err}")))?;
            urls.push(url);
        }
        if urls.is_empty() {
            return Err(config("no endpoints given".into()));
        }
        Ok(Endpoints {
            urls,
            preferred: AtomicUsize::new(0),
        })
    }

    /// The first endpoint a credential must not be sent to: plain `http://` to a host that is
    /// not loopback, where anyone on the path reads it.
    pub(crate) fn plain_non_loopback(&self) -> Option<&str> {
        self.urls
            .iter()
            .find(|u| u.starts_with("http://") && !is_loopback(u))
            .map(String::as_str)
    }

    /// The preferred endpoint: its index (for [`Endpoints::failed`]) and base URL.
    pub(crate) fn current(&self) -> (usize, &str) {
        let i = self.preferred.load(Ordering::Relaxed) % self.urls.len();
        (i, &self.urls[i])
    }

    /// Endpoint `i` answered: keep preferring it.
    pub(crate) fn answered(&self, i: usize) {
        self.preferred.store(i, Ordering::Relaxed);
    }

    /// Endpoint `i` failed: move on to the next one, unless a concurrent call already moved.
    pub(crate) fn failed(&self, i: usize) {
        let next = (i + 1) % self.urls.len();
        let _ = self
            .preferred
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn urls(&self) -> &[String] {
        &self.urls
    }
}

fn config(message: String) -> Error {
    Error::Config { message }
}

/// True for `localhost` and loopback IPs (127.0.0.0/8, ::1); false for anything unparsable.
fn is_loopback(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_rotates() -> Result<(), Error> {
        let e = Endpoints::new(
            vec![
                "127.0.0.1:7001".into(),
                " http://127.0.0.1:7002/ ".into(),
                "".into(),
            ],
            false,
        )?;
        assert_eq!(e.urls(), ["http://127.0.0.1:7001", "http://127.0.0.1:7002"]);
        assert_eq!(e.current().0, 0);
        e.failed(0);
        assert_eq!(e.current().0, 1);
        // A stale failure report of endpoint 0 does not move past 1.
        e.failed(0);
        assert_eq!(e.current().0, 1);
        e.failed(1);
        assert_eq!(e.current().0, 0);
        e.answered(1);
        assert_eq!(e.current(), (1, "http://127.0.0.1:7002"));
        Ok(())
    }

    #[test]
    fn refuses_empty_and_mixed_schemes() {
        assert!(Endpoints::new(vec![], false).is_err());
        // https without a CA to trust, http with one.
        assert!(Endpoints::new(vec!["https://a:1".into()], false).is_err());
        assert!(Endpoints::new(vec!["http://a:1".into()], true).is_err());
    }

    #[test]
    fn bare_endpoints_mean_https_with_a_ca() -> Result<(), Error> {
        let e = Endpoints::new(vec!["10.0.0.1:7001".into(), "https://n2:7002".into()], true)?;
        assert_eq!(e.urls(), ["https://10.0.0.1:7001", "https://n2:7002"]);
        assert_eq!(e.plain_non_loopback(), None);
        Ok(())
    }

    #[test]
    fn plain_non_loopback_is_found() -> Result<(), Error> {
        let table = [
            ("127.0.0.1:7001", None),
            ("127.1.2.3:7001", None),
            ("http://localhost:7001", None),
            ("http://[::1]:7001", None),
            ("10.0.0.1:7001", Some("http://10.0.0.1:7001")),
            ("http://node1:7001", Some("http://node1:7001")),
            ("http://[fe80::1]:7001", Some("http://[fe80::1]:7001")),
        ];
        for (endpoint, want) in table {
            let e = Endpoints::new(vec![endpoint.into()], false)?;
            assert_eq!(e.plain_non_loopback(), want, "{endpoint}");
        }
        Ok(())
    }
}
