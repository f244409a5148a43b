//! The run report is one self-contained HTML page with inline SVG plots, escaped text and a
//! bounded size whatever the run's length.
#![allow(clippy::unwrap_used)]

use turnstile_checker::history::{
    Event, EventType, FinalNodeState, LeaderObservation, NemesisWindow, OpValue, Recorded,
};
use turnstile_checker::report::{render_html, OP_MARKS_MAX};
use turnstile_checker::{CheckResult, Validity};

const MS: u64 = 1_000_000;

fn write(key: &str, value: i64) -> OpValue {
    OpValue::Write {
        key: key.into(),
        value,
    }
}

/// Appends one operation: an invoke and, unless `completion` is `None`, its completion.
fn push_op(
    events: &mut Vec<Event>,
    process: u64,
    call_ns: u64,
    completion: Option<(u64, EventType)>,
    op: OpValue,
) {
    let invoke = Event {
        index: events.len() as u64,
        time_ns: call_ns,
        process,
        kind: EventType::Invoke,
        node: process % 3 + 1,
        op,
        error: None,
    };
    let done = completion.map(|(ret_ns, kind)| Event {
        index: invoke.index + 1,
        time_ns: ret_ns,
        kind,
        error: (kind != EventType::Ok).then(|| "timeout <b>".to_string()),
        ..invoke.clone()
    });
    events.push(invoke);
    events.extend(done);
}

fn small_run() -> Recorded {
    let mut events = Vec::new();
    push_op(
        &mut events,
        1,
        0,
        Some((5 * MS, EventType::Ok)),
        write("k", 1),
    );
    push_op(
        &mut events,
        2,
        MS,
        Some((900 * MS, EventType::Fail)),
        write("k", 2),
    );
    push_op(
        &mut events,
        1,
        10 * MS,
        Some((12 * MS, EventType::Ok)),
        write("k", 3),
    );
    push_op(
        &mut events,
        3,
        20 * MS,
        Some((1500 * MS, EventType::Info)),
        OpValue::Acquire {
            lock: "l".into(),
            request_id: "r1".into(),
            lease_id: Some(4),
            token: None,
            term: None,
        },
    );
    Recorded {
        events,
        nemesis: vec![NemesisWindow {
            kind: "partition-majority".into(),
            start_ns: 300 * MS,
            end_ns: Some(1200 * MS),
            targets: vec![3],
            minority: vec![3],
        }],
        leaders: vec![
            LeaderObservation {
                time_ns: 0,
                node: 1,
                term: 1,
            },
            LeaderObservation {
                time_ns: 400 * MS,
                node: 2,
                term: 2,
            },
        ],
        final_nodes: vec![FinalNodeState {
            node: 1,
            applied_index: 9,
            state_digest: "ab".into(),
        }],
        ..Recorded::default()
    }
}

fn results() -> Vec<CheckResult> {
    vec![
        CheckResult {
            name: "lock-token-order".into(),
            validity: Validity::Valid,
            checked: "3 grants on 1 locks".into(),
            problems: vec![],
        },
        CheckResult {
            name: "set-lost-adds".into(),
            validity: Validity::Invalid,
            checked: "1 sets".into(),
            problems: vec!["element <script>alert(1)</script> & more".into()],
        },
    ]
}

#[test]
fn renders_verdicts_plots_and_bands() {
    let html = render_html(&small_run(), &results(), "Run <7> & co");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert_eq!(
        html.matches("<svg").count(),
        2,
        "timeline and latency plots"
    );
    assert!(html.contains("class=\"nemesis-band\""));
    assert!(html.contains("partition-majority [3]"));
    assert!(html.contains("class=\"leader-tick\""));
    assert!(html.contains("n2/t2"));
    assert!(html.contains("lock-token-order"));
    assert!(html.contains("set-lost-adds"));
    assert!(html.contains("<td class=\"invalid\">invalid</td>"));
    assert!(
        html.contains("<b class=\"invalid\">"),
        "the overall verdict is invalid"
    );
    // The counts table: 3 writes (2 ok, 1 fail) and 1 acquire (info).
    assert!(html.contains(
        "<tr><td>write</td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">0</td>"
    ));
    assert!(html.contains(
        "<tr><td>acquire</td><td class=\"n\">0</td><td class=\"n\">0</td><td class=\"n\">1</td>"
    ));
}

#[test]
fn escapes_all_recorded_text() {
    let html = render_html(&small_run(), &results(), "Run <7> & co");
    assert!(!html.contains("<script"), "no script element of any kind");
    assert!(html.contains("element &lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
    assert!(html.contains("<title>Run &lt;7&gt; &amp; co</title>"));
    assert!(!html.contains("<7>"));
}

#[test]
fn reports_a_history_that_cannot_be_paired() {
    let mut run = small_run();
    let stray = Event {
        index: 99,
        kind: EventType::Ok,
        process: 42,
        ..run.events[0].clone()
    };
    run.events.push(stray);
    let html = render_html(&run, &results(), "broken");
    assert!(html.contains("could not be paired"));
    assert!(html.contains("<svg"));
}

#[test]
fn stays_bounded_on_a_long_run_with_many_processes() {
    let mut events = Vec::new();
    let ops = 3 * OP_MARKS_MAX as u64;
    for i in 0..ops {
        let status = if i % 50 == 0 {
            EventType::Info
        } else {
            EventType::Ok
        };
        // 1,000 processes: too many rows, so the timeline groups them by node.
        push_op(
            &mut events,
            i % 1_000,
            i * MS,
            Some((i * MS + 3 * MS, status)),
            write("k", 1),
        );
    }
    let run = Recorded {
        events,
        ..Recorded::default()
    };
    let html = render_html(&run, &[], "long");
    let bars = html.matches("<rect x=").count();
    assert!(bars <= OP_MARKS_MAX, "{bars} bars drawn");
    assert!(bars >= OP_MARKS_MAX * 9 / 10, "{bars} bars drawn");
    assert!(html.matches("<circle").count() <= OP_MARKS_MAX);
    assert!(html.contains("one row per node"));
    assert!(html.contains("node 1</text>"));
    assert!(html.len() < 12_000_000, "{} bytes", html.len());
    assert!(
        html.contains("<b class=\"unknown\">"),
        "no checks ran: not a pass"
    );
}
