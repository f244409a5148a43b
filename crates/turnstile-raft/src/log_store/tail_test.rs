//! Tests of the log tail (`tail.rs`): table cases for each operation, and a property test that
//! drives the tail and a model of sled's tree with the same writes and checks that every read
//! the tail answers is what the tree would answer.

use std::collections::BTreeMap;

use openraft::alias::EntryOf;
use openraft::entry::RaftEntry;
use openraft::testing::log_id;
use proptest::prelude::*;

use super::tail::Tail;

openraft::declare_raft_types!(TailConfig: D = String, R = String, Node = openraft::BasicNode);

type Entry = EntryOf<TailConfig>;

fn entry(term: u64, index: u64) -> (Entry, usize) {
    let data = format!("t{term}-i{index}");
    let len = data.len();
    (
        Entry::new_normal(log_id::<TailConfig>(term, 1, index), data),
        len,
    )
}

fn batch(term: u64, indexes: std::ops::Range<u64>) -> Vec<(Entry, usize)> {
    indexes.map(|i| entry(term, i)).collect()
}

fn ids(entries: Option<Vec<Entry>>) -> Option<Vec<(u64, u64)>> {
    entries.map(|es| {
        es.iter()
            .map(|e| (e.log_id().leader_id.term, e.index()))
            .collect()
    })
}

#[test]
fn reads_what_was_written_and_defers_below_its_start() {
    let mut tail = Tail::<Entry>::new(5);
    tail.written(batch(1, 5..9));
    assert_eq!(ids(tail.read(6, 8, usize::MAX)), Some(vec![(1, 6), (1, 7)]));
    assert_eq!(
        ids(tail.read(7, u64::MAX, usize::MAX)),
        Some(vec![(1, 7), (1, 8)])
    );
    assert_eq!(
        ids(tail.read(20, u64::MAX, usize::MAX)),
        Some(vec![]),
        "past the end"
    );
    assert_eq!(
        tail.read(4, 8, usize::MAX).map(|v| v.len()),
        None,
        "below: sled"
    );
}

#[test]
fn truncation_and_overwrite_follow_the_tree() {
    let mut tail = Tail::<Entry>::new(1);
    tail.written(batch(1, 1..6));
    tail.truncated_after(Some(3));
    tail.written(batch(2, 4..6));
    assert_eq!(
        ids(tail.read(1, u64::MAX, usize::MAX)),
        Some(vec![(1, 1), (1, 2), (1, 3), (2, 4), (2, 5)])
    );
    tail.truncated_after(None);
    assert_eq!(ids(tail.read(0, u64::MAX, usize::MAX)), Some(vec![]));
}

#[test]
fn limits_evict_the_oldest_and_purge_forgets() {
    let mut tail = Tail::<Entry>::with_limits(1, 3, usize::MAX);
    tail.written(batch(1, 1..6));
    assert_eq!(tail.first_index(), 3);
    assert_eq!(tail.read(2, 6, usize::MAX).map(|v| v.len()), None);
    tail.purged_through(4);
    assert_eq!(tail.first_index(), 5);
    assert_eq!(ids(tail.read(5, 6, usize::MAX)), Some(vec![(1, 5)]));
    let mut by_bytes = Tail::<Entry>::with_limits(1, 100, 10);
    by_bytes.written(batch(1, 1..4)); // "t1-i1" is 5 bytes: two fit
    assert_eq!(by_bytes.first_index(), 2);
}

#[test]
fn a_read_stops_at_its_byte_limit_after_one_entry() {
    let mut tail = Tail::<Entry>::new(1);
    tail.written(batch(1, 1..5));
    assert_eq!(ids(tail.read(1, u64::MAX, 1)), Some(vec![(1, 1)]));
    assert_eq!(ids(tail.read(1, u64::MAX, 6)), Some(vec![(1, 1), (1, 2)]));
}

/// A write to the log tree, as the store makes them.
#[derive(Debug, Clone)]
enum Op {
    /// Append `len` entries of `term` at the end.
    Append {
        term: u64,
        len: u64,
    },
    /// Write `len` entries starting `back` below the end (an overwrite without truncation).
    Overwrite {
        term: u64,
        back: u64,
        len: u64,
    },
    TruncateAfter(Option<u64>),
    Purge(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..5u64, 1..6u64).prop_map(|(term, len)| Op::Append { term, len }),
        1 => (1..5u64, 0..8u64, 1..6u64).prop_map(|(term, back, len)| Op::Overwrite { term, back, len }),
        1 => proptest::option::of(0..40u64).prop_map(Op::TruncateAfter),
        1 => (0..40u64).prop_map(Op::Purge),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_answer_matches_the_tree(
        ops in proptest::collection::vec(op(), 1..40),
        reads in proptest::collection::vec((0..45u64, 0..50u64, 1..40usize), 1..10),
        entries_max in 1..12usize,
        bytes_max in 5..80usize,
    ) {
        let mut tree: BTreeMap<u64, (Entry, usize)> = BTreeMap::new();
        let mut tail = Tail::<Entry>::with_limits(1, entries_max, bytes_max);
        let mut purged: Option<u64> = None;
        for op in ops {
            let end = tree.keys().next_back().map_or(purged.map_or(1, |p| p + 1), |l| l + 1);
            match op {
                Op::Append { term, len } => {
                    let written = batch(term, end..end + len);
                    for (e, l) in &written {
                        tree.insert(e.index(), (e.clone(), *l));
                    }
                    tail.written(written);
                }
                Op::Overwrite { term, back, len } => {
                    let start = end.saturating_sub(back).max(purged.map_or(1, |p| p + 1));
                    let written = batch(term, start..start + len);
                    for (e, l) in &written {
                        tree.insert(e.index(), (e.clone(), *l));
                    }
                    tail.written(written);
                }
                Op::TruncateAfter(last) => {
                    tree.retain(|i, _| last.is_some_and(|l| *i <= l));
                    tail.truncated_after(last);
                }
                Op::Purge(through) => {
                    tree.retain(|i, _| *i > through);
                    purged = Some(purged.map_or(through, |p| p.max(through)));
                    tail.purged_through(through);
                }
            }
        }
        for (start, span, bytes) in reads {
            let end = start + span;
            let Some(got) = tail.read(start, end, bytes) else { continue };
            let mut want = Vec::new();
            let mut read = 0usize;
            for (_, (e, l)) in tree.range(start..end) {
                want.push(e.clone());
                read += l;
                if read >= bytes {
                    break;
                }
            }
            prop_assert_eq!(ids(Some(got)), ids(Some(want)), "read {}..{} ({} bytes)", start, end, bytes);
        }
    }
}
