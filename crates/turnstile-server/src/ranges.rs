//! Range reads (`GET /v1/kv`, `GET /v1/locks`, `GET /v1/elections`, `GET /v1/leases`): one page, cut from one state
//! at one applied index (the page's `revision`), after the leader's ReadIndex round like every
//! other read (`leader_ops.rs`).
//!
//! Every page is bounded three ways: at most `limit` items (`LIST_LIMIT_MAX`), at most about
//! `LIST_RESPONSE_BYTES_MAX` bytes (at least one item, so a page always makes progress), and at
//! most `LIST_SCANNED_MAX` entries looked at. `more` is true when the range has items past the
//! page; the next page starts strictly `after` the last item's name.
//!
//! Authorization is decided before the scan, for the whole range (`leader_ops::judge_read`): a
//! principal lists a prefix only if one permission covers every name under it, so no item is
//! filtered out of a page, a page never scans entries it cannot return, and `more` says
//! nothing about names the caller may not read. Leases are the caller's own (root: all).

use std::ops::Bound;

use serde::{Deserialize, Serialize};
use turnstile_core::State;

use crate::election_views::ElectionView;
use crate::views::{KeyView, LockView};

/// Items per page when the request names no `limit`.
pub const LIST_LIMIT_DEFAULT: usize = 100;
/// Largest `limit` a request may name.
pub const LIST_LIMIT_MAX: usize = 1_000;
/// Bytes of items per page, estimated from their names and values before JSON escaping. A
/// page stops early (with `more`) rather than pass it; values are up to 64 KiB, so 1000 of
/// them would be 64 MiB.
pub const LIST_RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// Entries one page may look at. Nothing is filtered (see the module docs), so a page scans
/// at most `limit + 1`; this bound holds even if that ever changes.
pub const LIST_SCANNED_MAX: usize = LIST_LIMIT_MAX + 1;
/// Estimated bytes of one item's fixed fields (names of fields, numbers, punctuation).
const ITEM_OVERHEAD_BYTES: usize = 128;
/// Estimated bytes of one holder or waiter in a lock item.
const LOCK_ENTRY_BYTES: usize = 96;

/// What a range read asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range<A> {
    pub prefix: String,
    /// Start strictly after this name (the previous page's last item).
    pub after: Option<A>,
    /// 1..=`LIST_LIMIT_MAX`.
    pub limit: usize,
}

/// One page of a range read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// True when the range has items past this page.
    pub more: bool,
    /// The applied index of the state this page was read from.
    pub revision: u64,
}

impl<T> Page<T> {
    /// The same page with each item passed through `f` (a redaction, say).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            more: self.more,
            revision: self.revision,
        }
    }
}

/// One item of `GET /v1/leases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseItem {
    pub lease_id: u64,
    pub ttl_ms: u64,
    /// Time left by the leader's clock when the read was served.
    pub remaining_ms: u64,
}

/// Takes items from `iter` (already positioned and restricted to the range) until the limit
/// or the byte budget is reached; `more` if an item was left.
fn fill<T>(
    iter: impl Iterator<Item = T>,
    limit: usize,
    bytes_of: impl Fn(&T) -> usize,
    revision: u64,
) -> Page<T> {
    let limit = limit.clamp(1, LIST_LIMIT_MAX);
    let mut page = Page {
        items: Vec::new(),
        more: false,
        revision,
    };
    let mut bytes = 0usize;
    for item in iter.take(LIST_SCANNED_MAX) {
        let size = bytes_of(&item);
        let full = page.items.len() >= limit
            || (!page.items.is_empty() && bytes.saturating_add(size) > LIST_RESPONSE_BYTES_MAX);
        if full {
            page.more = true;
            break;
        }
        bytes = bytes.saturating_add(size);
        page.items.push(item);
    }
    page
}

/// Where a string range starts: at the prefix, or strictly after `after` when that is later.
fn start<'a>(prefix: &'a str, after: Option<&'a str>) -> Bound<&'a str> {
    match after {
        Some(a) if a >= prefix => Bound::Excluded(a),
        _ => Bound::Included(prefix),
    }
}

/// A page of keys under `r.prefix`.
pub fn keys(state: &State, r: &Range<String>) -> Page<KeyView> {
    let from = start(&r.prefix, r.after.as_deref());
    let iter = state
        .keys
        .range::<_, str>((from, Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(r.prefix.as_str()))
        .map(|(k, rec)| KeyView {
            key: k.clone(),
            value: rec.value.clone(),
            create_revision: rec.create_revision,
            mod_revision: rec.mod_revision,
            version: rec.version,
            lease_id: rec.lease_id,
        });
    let size = |v: &KeyView| v.key.len() + v.value.len() + ITEM_OVERHEAD_BYTES;
    fill(iter, r.limit, size, state.applied_index)
}

/// A page of locks (held or waited for: idle locks are not stored) under `r.prefix`.
pub fn locks(state: &State, r: &Range<String>) -> Page<LockView> {
    let from = start(&r.prefix, r.after.as_deref());
    let iter = state
        .locks
        .range::<_, str>((from, Bound::Unbounded))
        .take_while(|(n, _)| n.starts_with(r.prefix.as_str()))
        .map(|(name, _)| LockView::of(state, name));
    let size = |v: &LockView| {
        v.name.len() + ITEM_OVERHEAD_BYTES + (v.holders.len() + v.waiters.len()) * LOCK_ENTRY_BYTES
    };
    fill(iter, r.limit, size, state.applied_index)
}

/// A page of elections under `r.prefix`: the names with at least one candidate (leading or
/// queued), each with its leader. One ordered lookup per name, however many candidates it has.
pub fn elections(state: &State, r: &Range<String>) -> Page<ElectionView> {
    let prefix = r.prefix.as_str();
    // The campaign map is keyed by (name, lease id): the next name starts after (name, MAX).
    let mut lower = match start(prefix, r.after.as_deref()) {
        Bound::Excluded(after) => Bound::Excluded((after.to_string(), u64::MAX)),
        _ => Bound::Included((prefix.to_string(), 0)),
    };
    let iter = std::iter::from_fn(move || {
        let ((name, _), _) = state
            .campaigns
            .range((lower.clone(), Bound::Unbounded))
            .next()?;
        if !name.starts_with(prefix) {
            return None;
        }
        lower = Bound::Excluded((name.clone(), u64::MAX));
        Some(ElectionView::of(state, name))
    });
    let size = |v: &ElectionView| {
        v.name.len() + ITEM_OVERHEAD_BYTES + v.leader.as_ref().map_or(0, |l| l.value.len())
    };
    fill(iter, r.limit, size, state.applied_index)
}

/// A page of leases: every lease (`owner: None`), or those `owner` granted.
pub fn leases(state: &State, owner: Option<&str>, r: &Range<u64>, now_ms: u64) -> Page<LeaseItem> {
    let from = r.after.map_or(Bound::Unbounded, Bound::Excluded);
    let ids: Box<dyn Iterator<Item = u64> + '_> = match owner {
        None => Box::new(
            state
                .leases
                .range((from, Bound::Unbounded))
                .map(|(id, _)| *id),
        ),
        Some(p) => match state.auth.leases_by_owner.get(p) {
            Some(set) => Box::new(set.range((from, Bound::Unbounded)).copied()),
            None => Box::new(std::iter::empty()),
        },
    };
    let now_ms = now_ms.max(state.sm_time_ms);
    let iter = ids.filter_map(|id| {
        let lease = state.leases.get(&id)?;
        Some(LeaseItem {
            lease_id: id,
            ttl_ms: lease.ttl_ms,
            remaining_ms: lease.deadline_ms.saturating_sub(now_ms),
        })
    });
    fill(iter, r.limit, |_| ITEM_OVERHEAD_BYTES, state.applied_index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_core::{Command, Envelope};

    fn state_with_keys(keys: &[(&str, usize)]) -> State {
        let mut state = State::default();
        for (i, (key, value_bytes)) in keys.iter().enumerate() {
            let env = Envelope {
                now_ms: 1,
                request_id: None,
                command: Command::KvPut {
                    key: key.to_string(),
                    value: "v".repeat(*value_bytes),
                    lease_id: None,
                    condition: None,
                    fence: None,
                },
            };
            let r = state.apply(i as u64 + 1, 1, &env);
            assert!(r.outcome.is_ok(), "{r:?}");
        }
        state
    }

    fn range(prefix: &str, after: Option<&str>, limit: usize) -> Range<String> {
        Range {
            prefix: prefix.into(),
            after: after.map(str::to_string),
            limit,
        }
    }

    #[test]
    fn pages_of_keys() {
        let state = state_with_keys(&[("a", 1), ("b/1", 1), ("b/2", 1), ("b/3", 1), ("c", 1)]);
        // (what, range, keys on the page, more)
        let cases: Vec<(&str, Range<String>, Vec<&str>, bool)> = vec![
            (
                "all",
                range("", None, 10),
                vec!["a", "b/1", "b/2", "b/3", "c"],
                false,
            ),
            (
                "prefix",
                range("b/", None, 10),
                vec!["b/1", "b/2", "b/3"],
                false,
            ),
            ("limit cuts", range("b/", None, 2), vec!["b/1", "b/2"], true),
            (
                "limit exactly",
                range("b/", None, 3),
                vec!["b/1", "b/2", "b/3"],
                false,
            ),
            ("after", range("b/", Some("b/2"), 2), vec!["b/3"], false),
            (
                "after before the prefix",
                range("b/", Some("a"), 10),
                vec!["b/1", "b/2", "b/3"],
                false,
            ),
            (
                "after past the prefix",
                range("b/", Some("b/9"), 10),
                vec![],
                false,
            ),
            ("no match", range("z", None, 10), vec![], false),
        ];
        for (what, r, want, more) in cases {
            let page = keys(&state, &r);
            let got: Vec<&str> = page.items.iter().map(|k| k.key.as_str()).collect();
            assert_eq!((got, page.more), (want, more), "{what}");
            assert_eq!(page.revision, 5, "{what}");
        }
    }

    #[test]
    fn pages_of_elections_one_item_per_name() {
        let mut state = State::default();
        // Three candidates of "b/1", one each of the others; names in campaign-map order.
        for (name, lease) in [
            ("a", 1),
            ("b/1", 9),
            ("b/1", 2),
            ("b/1", 5),
            ("b/2", 3),
            ("c", 4),
        ] {
            let value = turnstile_core::elections::Campaign {
                value: format!("{name}@{lease}"),
            };
            state.campaigns.insert((name.to_string(), lease), value);
        }
        let cases: Vec<(&str, Range<String>, Vec<&str>, bool)> = vec![
            (
                "all",
                range("", None, 10),
                vec!["a", "b/1", "b/2", "c"],
                false,
            ),
            ("prefix", range("b/", None, 10), vec!["b/1", "b/2"], false),
            ("limit cuts", range("b/", None, 1), vec!["b/1"], true),
            (
                "after skips every candidate of it",
                range("b/", Some("b/1"), 10),
                vec!["b/2"],
                false,
            ),
            (
                "after before the prefix",
                range("b/", Some("a"), 10),
                vec!["b/1", "b/2"],
                false,
            ),
            ("no match", range("z", None, 10), vec![], false),
        ];
        for (what, r, want, more) in cases {
            let page = elections(&state, &r);
            let got: Vec<&str> = page.items.iter().map(|e| e.name.as_str()).collect();
            assert_eq!((got, page.more), (want, more), "{what}");
        }
    }

    #[test]
    fn a_page_stops_at_its_byte_budget_but_never_empty() {
        let big = turnstile_core::limits::VALUE_BYTES_MAX;
        let names: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
        let keys_: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), big)).collect();
        let state = state_with_keys(&keys_);
        let page = keys(&state, &range("", None, LIST_LIMIT_MAX));
        let per_item = big + 3 + ITEM_OVERHEAD_BYTES;
        assert_eq!(page.items.len(), LIST_RESPONSE_BYTES_MAX / per_item);
        assert!(page.more);
        // A single item over the budget still makes a page.
        let one = fill(std::iter::once(1), 10, |_| usize::MAX, 0);
        assert_eq!((one.items, one.more), (vec![1], false));
    }
}
