//! Range reads on [`Client`]: pages of keys, locks and the caller's leases (`GET /v1/kv`,
//! `GET /v1/locks`, `GET /v1/leases`), and walkers that follow `more` from page to page.
//!
//! Each page is linearizable and consistent at its own `revision`; a walk across pages is not
//! one snapshot (a key written between two pages shows as it is when its page is read).

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::client::encode_path;
use crate::types::{KeyValue, LockInfo};
use crate::{Client, Error, Prepared};

/// One page of a range read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// True when the range has items past this page: ask again with `after` = the last
    /// item's name.
    pub more: bool,
    /// The applied index the page was read at.
    pub revision: u64,
}

/// One of the caller's leases (`GET /v1/leases`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseItem {
    pub lease_id: u64,
    pub ttl_ms: u64,
    pub remaining_ms: u64,
}

/// What one page asks for. `limit: None` takes the server's default (100; at most 1000).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    pub prefix: String,
    /// Start strictly after this name (the previous page's last item).
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// The items of a walk over several pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    pub items: Vec<T>,
    /// True when the walk stopped at its `items_max` with more items left.
    pub truncated: bool,
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode_path(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn names_query(opts: &ListOptions) -> String {
    query(&[
        (
            "prefix",
            Some(opts.prefix.clone()).filter(|p| !p.is_empty()),
        ),
        ("after", opts.after.clone()),
        ("limit", opts.limit.map(|l| l.to_string())),
    ])
}

/// Follows pages from the start of the range until it ends or `items_max` items are gathered.
async fn walk<T, F, Fut>(
    items_max: usize,
    cursor: fn(&T) -> String,
    mut page: F,
) -> Result<Listing<T>, Error>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>, Error>>,
{
    let mut items = Vec::new();
    let mut after = None;
    loop {
        let p = page(after.clone()).await?;
        let last = p.items.last().map(cursor);
        items.extend(p.items);
        if items.len() >= items_max {
            let truncated = p.more || items.len() > items_max;
            items.truncate(items_max);
            return Ok(Listing { items, truncated });
        }
        match last {
            // A page that ends with `more` names where the next starts.
            Some(last) if p.more => after = Some(last),
            _ => {
                return Ok(Listing {
                    items,
                    truncated: false,
                })
            }
        }
    }
}

impl Client {
    /// One page of keys under `opts.prefix`.
    pub async fn list_keys(&self, opts: &ListOptions) -> Result<Page<KeyValue>, Error> {
        let req = Prepared::read(format!("/v1/kv{}", names_query(opts)));
        self.send(&req).await
    }

    /// One page of held or waited-for locks under `opts.prefix` (idle locks are not stored).
    pub async fn list_locks(&self, opts: &ListOptions) -> Result<Page<LockInfo>, Error> {
        let req = Prepared::read(format!("/v1/locks{}", names_query(opts)));
        self.send(&req).await
    }

    /// One page of the caller's leases (root: every lease), by id, after `after`.
    pub async fn list_leases(
        &self,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Page<LeaseItem>, Error> {
        let q = query(&[
            ("after", after.map(|a| a.to_string())),
            ("limit", limit.map(|l| l.to_string())),
        ]);
        self.send(&Prepared::read(format!("/v1/leases{q}"))).await
    }

    /// Every key under `prefix`, page by page, up to `items_max`.
    pub async fn all_keys(
        &self,
        prefix: &str,
        items_max: usize,
    ) -> Result<Listing<KeyValue>, Error> {
        walk(
            items_max,
            |k: &KeyValue| k.key.clone(),
            |after| {
                let opts = ListOptions {
                    prefix: prefix.to_string(),
                    after,
                    limit: None,
                };
                async move { self.list_keys(&opts).await }
            },
        )
        .await
    }

    /// Every held or waited-for lock under `prefix`, page by page, up to `items_max`.
    pub async fn all_locks(
        &self,
        prefix: &str,
        items_max: usize,
    ) -> Result<Listing<LockInfo>, Error> {
        walk(
            items_max,
            |l: &LockInfo| l.name.clone(),
            |after| {
                let opts = ListOptions {
                    prefix: prefix.to_string(),
                    after,
                    limit: None,
                };
                async move { self.list_locks(&opts).await }
            },
        )
        .await
    }

    /// Every lease of the caller, page by page, up to `items_max`.
    pub async fn all_leases(&self, items_max: usize) -> Result<Listing<LeaseItem>, Error> {
        walk(
            items_max,
            |l: &LeaseItem| l.lease_id.to_string(),
            |after| {
                let after = after.and_then(|a| a.parse().ok());
                async move { self.list_leases(after, None).await }
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_encoded() {
        let opts = ListOptions {
            prefix: "a b&c+/d".into(),
            after: Some("a b&c+/e".into()),
            limit: Some(5),
        };
        assert_eq!(
            names_query(&opts),
            "?prefix=a%20b%26c%2B/d&after=a%20b%26c%2B/e&limit=5"
        );
        assert_eq!(names_query(&ListOptions::default()), "");
    }

    #[tokio::test]
    async fn a_walk_follows_more_and_stops_at_its_max() {
        let pages = |after: Option<String>| {
            let start = after.map_or(0, |a| a.parse::<u32>().expect("number") + 1);
            let items: Vec<u32> = (start..10).take(3).collect();
            async move {
                Ok(Page {
                    more: items.last().is_some_and(|l| *l < 9),
                    items,
                    revision: 1,
                })
            }
        };
        let all = walk(100, |n: &u32| n.to_string(), pages).await;
        assert_eq!(
            all.ok(),
            Some(Listing {
                items: (0..10).collect(),
                truncated: false
            })
        );
        let some = walk(4, |n: &u32| n.to_string(), pages).await;
        assert_eq!(
            some.ok(),
            Some(Listing {
                items: (0..4).collect(),
                truncated: true
            })
        );
        let exact = walk(10, |n: &u32| n.to_string(), pages).await;
        assert_eq!(
            exact.ok(),
            Some(Listing {
                items: (0..10).collect(),
                truncated: false
            })
        );
    }
}
