//! Key spans: etcd's `Range` over `[start, end)` with its limit, sort, revision filters and
//! count, read from one state at one applied index: the etcd port's `Range` (a linearizable
//! read, `turnstile_server::etcd::kv`) and a range inside a `Txn` (`crate::txn`, at apply).
//!
//! etcd's order of work is kept, because its clients depend on it (the `concurrency` mutex
//! asks for "the key with the smallest create revision under a prefix" as a sorted range with
//! limit 1): every key of the span is counted; with a sort or a filter all of them are
//! fetched, filtered, sorted (stably, by key first as the store holds them) and cut to the
//! limit; otherwise the first `limit` in key order are taken. `more` says the cut left keys.
//!
//! Bounds: a span looks at most [`SPAN_SCAN_MAX`] keys (counting included) and answers at
//! most [`SPAN_ITEMS_MAX`] keys or about [`SPAN_RESPONSE_BYTES_MAX`] bytes. A span past the
//! scan bound is refused with [`SpanError::TooLarge`] rather than answered with a wrong count;
//! one past the item or byte bound is cut with `more` (etcd would send everything). The scan
//! runs on an O(1) copy of the key map, after the state lock is released
//! (`turnstile_server::leader_ops`), so a large span never stalls apply. A range inside a
//! transaction runs at apply, under tighter bounds ([`read_bounded`], `crate::txn`).

use std::cmp::Ordering;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::cow;
use crate::state::{KeyRecord, Keys};

/// Keys one span may look at, counting included.
pub const SPAN_SCAN_MAX: usize = 200_000;
/// Keys one answer may carry.
pub const SPAN_ITEMS_MAX: usize = 10_000;
/// Bytes of keys and values one answer may carry (at least one key).
pub const SPAN_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Where a span ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanEnd {
    /// Only the key `start`.
    One,
    /// Every key from `start` up to, not including, this one.
    Before(String),
    /// Every key from `start` on.
    All,
}

/// What a sort orders by (etcd's `SortTarget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortBy {
    Key,
    Version,
    CreateRevision,
    ModRevision,
    Value,
}

/// A range read in etcd's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySpan {
    pub start: String,
    pub end: SpanEnd,
    /// 0: no limit (still bounded by [`SPAN_ITEMS_MAX`]).
    pub limit: usize,
    /// `(by, descending)`; `None` is key order.
    pub sort: Option<(SortBy, bool)>,
    /// 0 for "no bound", as in etcd.
    pub min_mod_revision: u64,
    pub max_mod_revision: u64,
    pub min_create_revision: u64,
    pub max_create_revision: u64,
    /// Answer keys without values.
    pub keys_only: bool,
    /// Answer the count alone.
    pub count_only: bool,
}

/// One key of an answer (the fields of the HTTP API's key view).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanKey {
    pub key: String,
    pub value: String,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    pub lease_id: Option<u64>,
}

/// How much one read may look at and answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanBounds {
    /// Keys looked at, counting included: past it the read is refused.
    pub scan_max: usize,
    /// Keys answered: past it the answer is cut, with `more`.
    pub items_max: usize,
    /// Bytes of keys and values answered (at least one key): past it, cut with `more`.
    pub bytes_max: usize,
}

/// The bounds of a `Range` read.
pub const RANGE_BOUNDS: SpanBounds = SpanBounds {
    scan_max: SPAN_SCAN_MAX,
    items_max: SPAN_ITEMS_MAX,
    bytes_max: SPAN_RESPONSE_BYTES_MAX,
};

/// A span's keys and the state they were read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanAnswer {
    pub kvs: Vec<SpanKey>,
    /// Keys of the span left out by the limit or the bounds.
    pub more: bool,
    /// Every key in the span (before the filters, as etcd counts).
    pub count: u64,
    /// The applied index of the state read.
    pub revision: u64,
}

/// Why a span was not answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SpanError {
    #[error("the range holds more than {SPAN_SCAN_MAX} keys: narrow it (a prefix, a range end)")]
    TooLarge,
}

impl KeySpan {
    /// Every key from `start` to `end`, with no limit, sort, filter or shaping.
    pub fn bounds(start: String, end: SpanEnd) -> KeySpan {
        KeySpan {
            start,
            end,
            limit: 0,
            sort: None,
            min_mod_revision: 0,
            max_mod_revision: 0,
            min_create_revision: 0,
            max_create_revision: 0,
            keys_only: false,
            count_only: false,
        }
    }

    /// The narrowest key prefix that covers every key the span can return: a principal needs
    /// read on it (`leader_ops::judge_read`). The longest prefix `p` of `start` such that no
    /// key from `start` to the span's end can leave the keys starting with `p`.
    pub fn guard_prefix(&self) -> &str {
        match &self.end {
            SpanEnd::One => &self.start,
            SpanEnd::All => "",
            SpanEnd::Before(end) => {
                let mut cut = self.start.len();
                loop {
                    let p = &self.start[..cut];
                    if prefix_end(p.as_bytes()).is_some_and(|pe| end.as_bytes() <= pe.as_slice()) {
                        return p;
                    }
                    match self.start[..cut].char_indices().next_back() {
                        Some((i, _)) => cut = i,
                        None => return "",
                    }
                }
            }
        }
    }

    /// True if `key` lies in the span's bounds (its filters aside): what a watch on the span
    /// sees (`crate::etcd::watch`). Byte order, as etcd's.
    pub fn holds(&self, key: &str) -> bool {
        match &self.end {
            SpanEnd::One => key == self.start,
            SpanEnd::All => key >= self.start.as_str(),
            SpanEnd::Before(end) => key >= self.start.as_str() && key < end.as_str(),
        }
    }

    fn needs_all(&self) -> bool {
        self.sort
            .is_some_and(|(by, desc)| by != SortBy::Key || desc)
            || self.min_mod_revision != 0
            || self.max_mod_revision != 0
            || self.min_create_revision != 0
            || self.max_create_revision != 0
    }

    fn passes(&self, r: &KeyRecord) -> bool {
        let above = |v: u64, min: u64| min == 0 || v >= min;
        let below = |v: u64, max: u64| max == 0 || v <= max;
        above(r.mod_revision, self.min_mod_revision)
            && below(r.mod_revision, self.max_mod_revision)
            && above(r.create_revision, self.min_create_revision)
            && below(r.create_revision, self.max_create_revision)
    }
}

/// The first byte string after every string starting with `prefix` (etcd's "prefix end"):
/// `None` when there is none (an empty prefix, or all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Answers `span` from `keys`, the key map of the state at `revision`, within
/// [`RANGE_BOUNDS`].
pub fn read(keys: &Keys, span: &KeySpan, revision: u64) -> Result<SpanAnswer, SpanError> {
    read_bounded(keys, span, revision, RANGE_BOUNDS)
}

/// Answers `span` from `keys` within `bounds`; `TooLarge` when the span holds more than
/// `bounds.scan_max` keys.
pub fn read_bounded(
    keys: &Keys,
    span: &KeySpan,
    revision: u64,
    bounds: SpanBounds,
) -> Result<SpanAnswer, SpanError> {
    let mut picked: Vec<(&String, &KeyRecord)> = Vec::new();
    let mut count = 0usize;
    let take_first = if span.limit == 0 {
        bounds.items_max
    } else {
        span.limit.min(bounds.items_max)
    };
    let needs_all = span.needs_all();
    for (k, r) in in_span(keys, span) {
        count += 1;
        if count > bounds.scan_max {
            return Err(SpanError::TooLarge);
        }
        if span.count_only {
            continue;
        }
        if needs_all {
            if span.passes(r) {
                picked.push((k, r));
            }
        } else if picked.len() <= take_first {
            // One past the cut, so `more` is known without another look.
            picked.push((k, r));
        }
    }
    if let Some((by, desc)) = span.sort {
        picked.sort_by(|a, b| {
            let o = compare(by, a, b);
            if desc {
                o.reverse()
            } else {
                o
            }
        });
    }
    let mut more = picked.len() > take_first;
    let mut kvs = Vec::with_capacity(picked.len().min(take_first));
    let mut bytes = 0usize;
    for (k, r) in picked.into_iter().take(take_first) {
        let value_len = if span.keys_only { 0 } else { r.value.len() };
        if !kvs.is_empty() && bytes + k.len() + value_len > bounds.bytes_max {
            more = true;
            break;
        }
        bytes += k.len() + value_len;
        kvs.push(SpanKey {
            key: k.clone(),
            value: if span.keys_only {
                String::new()
            } else {
                r.value.clone()
            },
            create_revision: r.create_revision,
            mod_revision: r.mod_revision,
            version: r.version,
            lease_id: r.lease_id,
        });
    }
    Ok(SpanAnswer {
        kvs,
        more,
        count: count as u64,
        revision,
    })
}

/// The keys of `keys` in the span's bounds, in key order.
fn in_span<'a>(
    keys: &'a Keys,
    span: &'a KeySpan,
) -> Box<dyn Iterator<Item = (&'a String, &'a KeyRecord)> + 'a> {
    let lower = Bound::Included(span.start.as_str());
    match &span.end {
        SpanEnd::One => Box::new(
            keys.range::<_, str>((lower, Bound::Included(span.start.as_str())))
                .map(unshare),
        ),
        SpanEnd::All => Box::new(keys.range::<_, str>((lower, Bound::Unbounded)).map(unshare)),
        SpanEnd::Before(end) if end.as_str() <= span.start.as_str() => Box::new(std::iter::empty()),
        SpanEnd::Before(end) => Box::new(
            keys.range::<_, str>((lower, Bound::Excluded(end.as_str())))
                .map(unshare),
        ),
    }
}

/// A key as the span reads it: the record, not the pointer it is kept behind.
fn unshare<'a>(
    (key, record): (&'a String, &'a cow::Shared<KeyRecord>),
) -> (&'a String, &'a KeyRecord) {
    (key, record)
}

/// How many keys of `keys` lie in the span's bounds, counting no further than `max + 1`.
pub fn count_at_most(keys: &Keys, span: &KeySpan, max: usize) -> usize {
    in_span(keys, span).take(max.saturating_add(1)).count()
}

fn compare(by: SortBy, a: &(&String, &KeyRecord), b: &(&String, &KeyRecord)) -> Ordering {
    match by {
        SortBy::Key => a.0.cmp(b.0),
        SortBy::Version => a.1.version.cmp(&b.1.version),
        SortBy::CreateRevision => a.1.create_revision.cmp(&b.1.create_revision),
        SortBy::ModRevision => a.1.mod_revision.cmp(&b.1.mod_revision),
        SortBy::Value => a.1.value.cmp(&b.1.value),
    }
}

#[cfg(test)]
#[path = "key_span_test.rs"]
mod key_span_test;
