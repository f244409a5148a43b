//! `Measure`: one figure a workload measured on one system (a rate, a latency, a size), with
//! the operation and error counts behind it; and helpers that turn a `Tally` into figures.

use std::time::Duration;

use crate::tally::Tally;

/// Which direction of a figure is better, for reading the ratio.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Better {
    Higher,
    Lower,
    /// A diagnostic, not a score.
    Info,
}

/// One figure of one system.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measure {
    pub workload: &'static str,
    /// What was measured, at which point: `64 clients: cycles/s`.
    pub label: String,
    pub unit: &'static str,
    pub better: Better,
    pub value: f64,
    /// Operations behind the figure.
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Said beside the figure in the table.
    pub note: &'static str,
}

impl Measure {
    pub fn new(
        workload: &'static str,
        label: impl Into<String>,
        unit: &'static str,
        better: Better,
        value: f64,
    ) -> Measure {
        Measure {
            workload,
            label: label.into(),
            unit,
            better,
            value,
            ops: 0,
            errors: 0,
            first_error: None,
            note: "",
        }
    }

    /// Attaches the operation and error counts of `t`.
    pub fn counts(mut self, t: &Tally) -> Measure {
        self.ops = t.ops;
        self.errors = t.errors;
        self.first_error.clone_from(&t.first_error);
        self
    }

    pub fn note(mut self, note: &'static str) -> Measure {
        self.note = note;
        self
    }
}

/// Operations per second of `t` over `window`.
pub fn rate(t: &Tally, window: Duration) -> f64 {
    let s = window.as_secs_f64();
    if s > 0.0 {
        t.ops as f64 / s
    } else {
        0.0
    }
}

/// The throughput figure and the p50/p99/max latency figures of one tally.
pub fn rate_and_latency(
    workload: &'static str,
    point: &str,
    rate_unit: &'static str,
    t: &Tally,
    window: Duration,
) -> Vec<Measure> {
    let mut out = vec![Measure::new(
        workload,
        format!("{point}: throughput"),
        rate_unit,
        Better::Higher,
        rate(t, window),
    )
    .counts(t)];
    out.extend(latency(workload, point, "latency", t));
    out
}

/// p50, p99 and max of `t`, labelled `{point}: {what} p50` and so on.
pub fn latency(workload: &'static str, point: &str, what: &str, t: &Tally) -> Vec<Measure> {
    let p = t.percentiles();
    [("p50", p.p50_ms), ("p99", p.p99_ms), ("max", p.max_ms)]
        .into_iter()
        .map(|(q, v)| {
            Measure::new(
                workload,
                format!("{point}: {what} {q}"),
                "ms",
                Better::Lower,
                v,
            )
            .counts(t)
        })
        .collect()
}
