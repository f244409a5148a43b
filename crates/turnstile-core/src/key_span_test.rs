//! Key spans against etcd's own semantics (limits, sorts, filters, count, `more`).

use super::*;
use crate::state::KeyRecord;

fn record(rev: u64, create: u64, version: u64, value: &str) -> KeyRecord {
    KeyRecord {
        value: value.to_string(),
        create_revision: create,
        mod_revision: rev,
        version,
        lease_id: None,
    }
}

/// a=1 (created 1), b/1 (created 5, modified 9), b/2 (created 3), b/3 (created 7), c (created 2).
fn keys() -> crate::state::Keys {
    let mut m = crate::cow::Map::new();
    m.insert("a".into(), record(1, 1, 1, "va").into());
    m.insert("b/1".into(), record(9, 5, 2, "z").into());
    m.insert("b/2".into(), record(3, 3, 1, "y").into());
    m.insert("b/3".into(), record(7, 7, 1, "x").into());
    m.insert("c".into(), record(2, 2, 1, "vc").into());
    m
}

fn span(start: &str, end: SpanEnd) -> KeySpan {
    KeySpan::bounds(start.into(), end)
}

fn names(a: &SpanAnswer) -> Vec<&str> {
    a.kvs.iter().map(|k| k.key.as_str()).collect()
}

fn prefix(p: &str) -> KeySpan {
    let end = String::from_utf8(prefix_end(p.as_bytes()).expect("an end")).expect("utf-8");
    span(p, SpanEnd::Before(end))
}

#[test]
fn one_key_prefix_and_open_end() {
    let m = keys();
    let a = read(&m, &span("b/2", SpanEnd::One), 10).expect("read");
    assert_eq!(
        (names(&a), a.count, a.more, a.revision),
        (vec!["b/2"], 1, false, 10)
    );
    let a = read(&m, &span("nope", SpanEnd::One), 10).expect("read");
    assert_eq!((a.kvs.len(), a.count), (0, 0));
    let a = read(&m, &prefix("b/"), 10).expect("read");
    assert_eq!(names(&a), vec!["b/1", "b/2", "b/3"]);
    let a = read(&m, &span("b/2", SpanEnd::All), 10).expect("read");
    assert_eq!(names(&a), vec!["b/2", "b/3", "c"]);
    let a = read(&m, &span("c", SpanEnd::Before("b".into())), 10).expect("read");
    assert_eq!(a.count, 0, "an end before the start is an empty span");
}

#[test]
fn limit_counts_everything_and_says_more() {
    let m = keys();
    let mut s = prefix("b/");
    s.limit = 2;
    let a = read(&m, &s, 10).expect("read");
    assert_eq!((names(&a), a.count, a.more), (vec!["b/1", "b/2"], 3, true));
    s.limit = 3;
    let a = read(&m, &s, 10).expect("read");
    assert_eq!((a.kvs.len(), a.count, a.more), (3, 3, false));
}

#[test]
fn the_mutex_recipe_finds_the_oldest_and_the_next_older_waiter() {
    // etcd's concurrency.Mutex: the owner is the key with the smallest create revision under
    // the prefix; a waiter waits on the newest key created before its own.
    let m = keys();
    let mut first = prefix("b/");
    first.sort = Some((SortBy::CreateRevision, false));
    first.limit = 1;
    let a = read(&m, &first, 10).expect("read");
    assert_eq!((names(&a), a.more, a.count), (vec!["b/2"], true, 3));
    let mut older = prefix("b/");
    older.sort = Some((SortBy::CreateRevision, true));
    older.limit = 1;
    older.max_create_revision = 6;
    let a = read(&m, &older, 10).expect("read");
    assert_eq!(
        names(&a),
        vec!["b/1"],
        "created at 5, the newest at or before 6"
    );
}

#[test]
fn filters_sorts_and_shapes() {
    let m = keys();
    let mut s = span("", SpanEnd::All);
    s.min_mod_revision = 3;
    s.max_mod_revision = 8;
    let a = read(&m, &s, 10).expect("read");
    assert_eq!(names(&a), vec!["b/2", "b/3"]);
    assert_eq!(a.count, 5, "etcd counts the span before its filters");
    let mut s = span("", SpanEnd::All);
    s.sort = Some((SortBy::Value, false));
    assert_eq!(
        names(&read(&m, &s, 10).expect("read")),
        vec!["a", "c", "b/3", "b/2", "b/1"]
    );
    s.sort = Some((SortBy::Key, true));
    assert_eq!(
        names(&read(&m, &s, 10).expect("read")),
        vec!["c", "b/3", "b/2", "b/1", "a"]
    );
    let mut s = prefix("b/");
    s.keys_only = true;
    let a = read(&m, &s, 10).expect("read");
    assert!(a.kvs.iter().all(|k| k.value.is_empty()));
    s.count_only = true;
    let a = read(&m, &s, 10).expect("read");
    assert_eq!((a.kvs.len(), a.count), (0, 3));
}

#[test]
fn a_span_too_large_to_count_is_refused_not_miscounted() {
    let mut m = crate::cow::Map::new();
    for i in 0..=SPAN_SCAN_MAX {
        m.insert(format!("k{i:07}"), record(1, 1, 1, "").into());
    }
    assert_eq!(
        read(&m, &span("", SpanEnd::All), 1),
        Err(SpanError::TooLarge)
    );
    let a = read(&m, &prefix("k000001"), 1).expect("a narrow prefix is fine");
    assert_eq!(a.count, 10);
}

#[test]
fn answers_are_cut_at_the_item_bound() {
    let mut m = crate::cow::Map::new();
    for i in 0..SPAN_ITEMS_MAX + 5 {
        m.insert(format!("k{i:06}"), record(1, 1, 1, "").into());
    }
    let a = read(&m, &span("", SpanEnd::All), 1).expect("read");
    assert_eq!(
        (a.kvs.len(), a.more, a.count),
        (SPAN_ITEMS_MAX, true, (SPAN_ITEMS_MAX + 5) as u64)
    );
}

#[test]
fn guard_prefix_is_the_narrowest_cover() {
    assert_eq!(prefix("app/").guard_prefix(), "app/");
    assert_eq!(span("app/x", SpanEnd::One).guard_prefix(), "app/x");
    assert_eq!(
        span("app/a", SpanEnd::Before("app/c".into())).guard_prefix(),
        "app/"
    );
    assert_eq!(
        span("app/a", SpanEnd::Before("b".into())).guard_prefix(),
        "a"
    );
    assert_eq!(
        span("app/a", SpanEnd::Before("c".into())).guard_prefix(),
        ""
    );
    assert_eq!(span("app/a", SpanEnd::All).guard_prefix(), "");
    // Keys between the start and the end all start with the guard.
    for (start, end) in [("app/a", "app/c"), ("ab", "ac"), ("x", "xz"), ("a", "b")] {
        let s = span(start, SpanEnd::Before(end.into()));
        let g = s.guard_prefix();
        for k in [
            "a", "aa", "ab", "ab/", "ac", "app/a", "app/b", "app/bzz", "x", "xa", "xy",
        ] {
            if k >= start && k < end {
                assert!(
                    k.starts_with(g),
                    "{k} in [{start}, {end}) outside guard {g}"
                );
            }
        }
    }
}

#[test]
fn prefix_end_is_etcds() {
    assert_eq!(prefix_end(b"abc"), Some(b"abd".to_vec()));
    assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
    assert_eq!(prefix_end(b"\xff\xff"), None);
    assert_eq!(prefix_end(b""), None);
}
