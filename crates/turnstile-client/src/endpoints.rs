//! The node addresses a client knows, and which one it prefers. Any node answers any request
//! (followers hand writes and reads to the leader), so "leader discovery" is only this: keep
//! using the node that last answered, and move to the next one when a node cannot be reached
//! or cannot serve (`not_member`, `no_quorum`, ...).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Base URLs (`http://ip:port`) and the index of the preferred one.
#[derive(Debug)]
pub(crate) struct Endpoints {
    urls: Vec<String>,
    preferred: AtomicUsize,
}

impl Endpoints {
    /// Accepts `ip:port`, `host:port` or `http://host:port` (a trailing `/` is dropped).
    pub(crate) fn new(endpoints: Vec<String>) -> Result<Endpoints, Error> {
        let mut urls = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let e = e.trim().trim_end_matches('/');
            if e.is_empty() {
                continue;
            }
            if e.starts_with("https://") {
                return Err(Error::Config {
                    message: format!("{e}: TLS is not supported; use http://"),
                });
            }
            let url = if e.starts_with("http://") {
                e.to_string()
            } else {
                format!("http://{e}")
            };
            reqwest::Url::parse(&url).map_err(|err| Error::Config {
                message: format!("endpoint {e:?}: {err}"),
            })?;
            urls.push(url);
        }
        if urls.is_empty() {
            return Err(Error::Config {
                message: "no endpoints given".into(),
            });
        }
        Ok(Endpoints {
            urls,
            preferred: AtomicUsize::new(0),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_rotates() -> Result<(), Error> {
        let e = Endpoints::new(vec![
            "127.0.0.1:7001".into(),
            " http://127.0.0.1:7002/ ".into(),
            "".into(),
        ])?;
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
    fn refuses_empty_and_tls() {
        assert!(Endpoints::new(vec![]).is_err());
        assert!(Endpoints::new(vec!["https://a:1".into()]).is_err());
    }
}
