//! The etcd watch's events from the history: etcd's fields, spans, filters, prev_kv, the
//! compacted answer, and a principal's view.

use turnstile_core::{codec, Command, Envelope, State};
use turnstile_etcd_proto::mvccpb::{self, event::EventType};

use super::{events_for, Fill, Watcher};
use crate::key_span::{KeySpan, SpanEnd};

fn apply(state: &mut State, command: Command) {
    let index = state.applied_index + 1;
    let env = Envelope {
        now_ms: 0,
        request_id: None,
        command,
    };
    state.apply(index, 1, &env).outcome.expect("applies");
}

fn put(state: &mut State, key: &str, value: &str) {
    apply(
        state,
        Command::KvPut {
            key: key.into(),
            value: value.into(),
            lease_id: None,
            condition: None,
            fence: None,
        },
    );
}

fn delete(state: &mut State, key: &str) {
    apply(
        state,
        Command::KvDelete {
            key: key.into(),
            condition: None,
            fence: None,
        },
    );
}

fn watcher(start: &str, end: SpanEnd, start_revision: u64) -> Watcher {
    Watcher {
        span: KeySpan::bounds(start.into(), end),
        after: State::position_before(start_revision),
        prev_kv: false,
        no_put: false,
        no_delete: false,
        progress_notify: false,
        sent_since_tick: false,
    }
}

fn events(state: &State, w: &mut Watcher) -> Vec<mvccpb::Event> {
    match events_for(state, None, w) {
        Fill::Events(e, false) => e,
        Fill::Events(_, true) => panic!("cut"),
        Fill::Compacted(r) => panic!("compacted at {r}"),
    }
}

/// `(type, key, value, create, mod, version)` of each event.
fn shown(events: &[mvccpb::Event]) -> Vec<(EventType, String, String, i64, i64, i64)> {
    events
        .iter()
        .map(|e| {
            let kv = e.kv.clone().expect("kv");
            (
                e.r#type(),
                String::from_utf8(kv.key).expect("utf8"),
                String::from_utf8(kv.value).expect("utf8"),
                kv.create_revision,
                kv.mod_revision,
                kv.version,
            )
        })
        .collect()
}

#[test]
fn a_prefix_watch_from_a_revision_sees_etcds_fields() {
    let mut s = State::default();
    put(&mut s, "app/a", "1"); // 1
    put(&mut s, "other", "x"); // 2
    put(&mut s, "app/a", "2"); // 3
    delete(&mut s, "app/a"); // 4
    put(&mut s, "app/b", "3"); // 5
    let mut w = watcher("app/", SpanEnd::Before("app0".into()), 1);
    let got = shown(&events(&s, &mut w));
    use EventType::{Delete, Put};
    assert_eq!(
        got,
        vec![
            (Put, "app/a".into(), "1".into(), 1, 1, 1),
            (Put, "app/a".into(), "2".into(), 1, 3, 2),
            (Delete, "app/a".into(), "".into(), 0, 4, 0),
            (Put, "app/b".into(), "3".into(), 5, 5, 1),
        ]
    );
    // Caught up: nothing more until the next write.
    assert!(events(&s, &mut w).is_empty());
    put(&mut s, "app/b", "4");
    assert_eq!(
        shown(&events(&s, &mut w)),
        vec![(Put, "app/b".into(), "4".into(), 5, 6, 2)]
    );
}

#[test]
fn prev_kv_and_filters() {
    let mut s = State::default();
    put(&mut s, "k", "1");
    put(&mut s, "k", "2");
    delete(&mut s, "k");
    let mut w = watcher("k", SpanEnd::One, 1);
    w.prev_kv = true;
    let got = events(&s, &mut w);
    let prev: Vec<Option<(String, i64)>> = got
        .iter()
        .map(|e| {
            e.prev_kv.as_ref().map(|p| {
                (
                    String::from_utf8(p.value.clone()).expect("utf8"),
                    p.mod_revision,
                )
            })
        })
        .collect();
    assert_eq!(
        prev,
        vec![None, Some(("1".into(), 1)), Some(("2".into(), 2))]
    );

    let mut puts_only = watcher("k", SpanEnd::One, 1);
    puts_only.no_delete = true;
    assert_eq!(events(&s, &mut puts_only).len(), 2);
    let mut deletes_only = watcher("k", SpanEnd::One, 1);
    deletes_only.no_put = true;
    let got = events(&s, &mut deletes_only);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].r#type(), EventType::Delete);
}

#[test]
fn a_start_before_what_the_node_holds_is_compacted() {
    let mut s = State::default();
    put(&mut s, "k", "1");
    put(&mut s, "k", "2");
    // A node that started from a snapshot at 2 knows no change before 3.
    let mut restarted =
        codec::decode_state(&codec::encode_state(&s).expect("encodes")).expect("decodes");
    let mut w = watcher("k", SpanEnd::One, 1);
    assert!(matches!(
        events_for(&restarted, None, &mut w),
        Fill::Compacted(3)
    ));
    // From 3 on it answers, as the node that applied everything does.
    put(&mut restarted, "k", "3");
    put(&mut s, "k", "3");
    let mut on_restarted = watcher("k", SpanEnd::One, 3);
    let mut on_original = watcher("k", SpanEnd::One, 3);
    assert_eq!(
        events(&restarted, &mut on_restarted),
        events(&s, &mut on_original)
    );
    assert_eq!(
        shown(&events(&s, &mut watcher("k", SpanEnd::One, 3))),
        vec![(EventType::Put, "k".into(), "3".into(), 1, 3, 3)]
    );
}

#[test]
fn a_reader_behind_the_history_is_compacted() {
    let mut s = State::default();
    put(&mut s, "k", "0");
    let mut w = watcher("k", SpanEnd::One, 1);
    for i in 0..turnstile_core::limits::WATCH_HISTORY_EVENTS_MAX {
        put(&mut s, "k", &i.to_string());
    }
    // The first event (revision 1) was dropped: a watch may start at 2.
    assert!(matches!(events_for(&s, None, &mut w), Fill::Compacted(2)));
}

#[test]
fn a_long_history_is_sent_in_bounded_pieces() {
    let mut s = State::default();
    for i in 0..1_000 {
        put(&mut s, "k", &i.to_string());
    }
    let mut w = watcher("k", SpanEnd::One, 1);
    let mut seen = 0;
    let mut passes = 0;
    loop {
        passes += 1;
        match events_for(&s, None, &mut w) {
            Fill::Events(e, more) => {
                assert!(e.len() <= super::EVENTS_PER_RESPONSE_MAX);
                seen += e.len();
                if !more {
                    break;
                }
            }
            Fill::Compacted(r) => panic!("compacted at {r}"),
        }
    }
    assert_eq!((seen, passes), (1_000, 4));
}
