//! The run report: one self-contained HTML page (inline CSS and SVG, no scripts, no external
//! assets) with the checkers' verdicts, the operations over time, latencies and op counts.
//!
//! Every recorded string (titles, problems, lock names, nemesis kinds) is escaped. The page
//! stays bounded whatever the run's size: at most [`OP_MARKS_MAX`] operations are drawn per
//! plot (sampled deterministically), at most [`TIMELINE_ROWS_MAX`] timeline rows, and capped
//! numbers of nemesis bands and leader ticks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use crate::history::{pair, EventType, NemesisWindow, Op, OpValue, Recorded, TimeNs};
use crate::{CheckResult, Validity};

/// Operations drawn per plot; more are sampled down to this.
pub const OP_MARKS_MAX: usize = 20_000;
/// Timeline rows; more processes are drawn per node, or in groups of processes.
pub const TIMELINE_ROWS_MAX: usize = 60;
const NEMESIS_BANDS_MAX: usize = 500;
const LEADER_TICKS_MAX: usize = 1_000;
/// Leader ticks are labelled only when this few (labels of more would overlap).
const LEADER_LABELS_MAX: usize = 40;
const NEMESIS_LABEL_ROWS: usize = 3;
/// A nemesis label starting this far right is drawn leftwards, so it stays inside the page.
const LABEL_FLIP_FRACTION: f64 = 0.8;

const PLOT_WIDTH_PX: f64 = 1100.0;
const MARGIN_LEFT_PX: f64 = 110.0;
const MARGIN_RIGHT_PX: f64 = 20.0;
/// Above a plot: nemesis labels and leader ticks.
const HEADER_HEIGHT_PX: f64 = 48.0;
/// Below a plot: the time axis.
const AXIS_HEIGHT_PX: f64 = 34.0;
const ROW_HEIGHT_PX: f64 = 12.0;
const BAR_HEIGHT_PX: f64 = 8.0;
const LATENCY_HEIGHT_PX: f64 = 360.0;
/// Latencies below this are drawn at it (a log axis has no zero).
const LATENCY_MS_MIN: f64 = 0.01;
const TIME_TICKS_TARGET: f64 = 10.0;
const NS_PER_S: f64 = 1e9;
const NS_PER_MS: f64 = 1e6;

const COLOUR_OK: &str = "#2e9d4a";
const COLOUR_FAIL: &str = "#d9534f";
const COLOUR_INFO: &str = "#f0a020";
const NEMESIS_COLOURS: [&str; 6] = [
    "#7b61ff", "#ff6f61", "#00a3a3", "#c49000", "#d63ab5", "#4a7bd0",
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f2f2f2}td.n{text-align:right}\
.valid{background:#c8ecd0}.invalid{background:#f6c6c6}.unknown{background:#fde3b0}\
ul{margin:0;padding-left:1.2em}svg{display:block;margin-bottom:1.5em}\
svg text{font-size:10px;fill:#333}.legend span{margin-right:1.2em}";

/// Renders the report of one run: verdict table, operations timeline, latency scatter and op
/// counts, as one HTML document.
pub fn render_html(recorded: &Recorded, results: &[CheckResult], title: &str) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; the fmt::Result only threads `?` through the helpers.
    let _ = render(&mut out, recorded, results, title);
    out
}

fn render(
    out: &mut String,
    recorded: &Recorded,
    results: &[CheckResult],
    title: &str,
) -> fmt::Result {
    let title = escape(title);
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>\n"
    )?;
    let (ops, pair_error) = match pair(&recorded.events) {
        Ok(ops) => (ops, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let scale = TimeScale::of(recorded);
    summary(out, recorded, &ops, results, pair_error.as_deref())?;
    verdicts(out, results)?;
    let shown = sample(&ops);
    timeline(out, recorded, &ops, &shown, &scale)?;
    latency(out, recorded, &ops, &shown, &scale)?;
    counts(out, &ops)?;
    nemesis_table(out, &recorded.nemesis)?;
    out.push_str("</body></html>\n");
    Ok(())
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The operation's name as the history spells it (`f`).
pub fn op_kind(value: &OpValue) -> &'static str {
    match value {
        OpValue::Read { .. } => "read",
        OpValue::Write { .. } => "write",
        OpValue::Cas { .. } => "cas",
        OpValue::Incr { .. } => "incr",
        OpValue::CounterRead { .. } => "counter_read",
        OpValue::Acquire { .. } => "acquire",
        OpValue::Release { .. } => "release",
        OpValue::SetAdd { .. } => "set_add",
        OpValue::SetRead { .. } => "set_read",
    }
}

fn kind_colour(kind: &str) -> &'static str {
    match kind {
        "read" => "#1f77b4",
        "write" => "#ff7f0e",
        "cas" => "#9467bd",
        "incr" => "#8c564b",
        "counter_read" => "#e377c2",
        "acquire" => "#2ca02c",
        "release" => "#7f7f7f",
        "set_add" => "#bcbd22",
        _ => "#17becf",
    }
}

fn status_name(status: EventType) -> &'static str {
    match status {
        EventType::Invoke => "invoke",
        EventType::Ok => "ok",
        EventType::Fail => "fail",
        EventType::Info => "info",
    }
}

fn status_colour(status: EventType) -> &'static str {
    match status {
        EventType::Ok => COLOUR_OK,
        EventType::Fail => COLOUR_FAIL,
        EventType::Invoke | EventType::Info => COLOUR_INFO,
    }
}

fn validity_name(v: Validity) -> &'static str {
    match v {
        Validity::Valid => "valid",
        Validity::Invalid => "invalid",
        Validity::Unknown => "unknown",
    }
}

/// Invalid if any check is, else Unknown if any is (or none ran), else Valid.
fn overall(results: &[CheckResult]) -> Validity {
    if results.iter().any(|r| r.validity == Validity::Invalid) {
        Validity::Invalid
    } else if results.is_empty() || results.iter().any(|r| r.validity == Validity::Unknown) {
        Validity::Unknown
    } else {
        Validity::Valid
    }
}

/// Maps run time onto the x axis of every plot.
struct TimeScale {
    end_ns: TimeNs,
}

impl TimeScale {
    /// Spans everything recorded, so `info` bars and open nemesis windows end at the run's end.
    fn of(recorded: &Recorded) -> Self {
        let events = recorded.events.iter().map(|e| e.time_ns);
        let nemesis = recorded
            .nemesis
            .iter()
            .flat_map(|w| [Some(w.start_ns), w.end_ns])
            .flatten();
        let leaders = recorded.leaders.iter().map(|l| l.time_ns);
        let watch = recorded.watch.iter().map(|d| d.time_ns);
        let end_ns = events
            .chain(nemesis)
            .chain(leaders)
            .chain(watch)
            .max()
            .unwrap_or(0)
            .max(1);
        TimeScale { end_ns }
    }

    fn x(&self, ns: TimeNs) -> f64 {
        MARGIN_LEFT_PX + PLOT_WIDTH_PX * (ns.min(self.end_ns) as f64 / self.end_ns as f64)
    }

    fn seconds(&self) -> f64 {
        self.end_ns as f64 / NS_PER_S
    }
}

fn summary(
    out: &mut String,
    recorded: &Recorded,
    ops: &[Op],
    results: &[CheckResult],
    pair_error: Option<&str>,
) -> fmt::Result {
    let verdict = overall(results);
    let processes: BTreeSet<u64> = ops.iter().map(|o| o.process).collect();
    let nodes: BTreeSet<u64> = ops.iter().map(|o| o.node).collect();
    let terms: BTreeSet<u64> = recorded.leaders.iter().map(|l| l.term).collect();
    writeln!(
        out,
        "<p>Verdict: <b class=\"{v}\">&nbsp;{v}&nbsp;</b> &middot; {} operations by {} processes \
         on {} nodes over {:.3} s &middot; {} nemesis windows &middot; {} leader terms observed \
         &middot; {} watch deliveries &middot; {} final node states</p>",
        ops.len(),
        processes.len(),
        nodes.len(),
        TimeScale::of(recorded).seconds(),
        recorded.nemesis.len(),
        terms.len(),
        recorded.watch.len(),
        recorded.final_nodes.len(),
        v = validity_name(verdict),
    )?;
    if let Some(e) = pair_error {
        writeln!(
            out,
            "<p class=\"invalid\">The history could not be paired: {}</p>",
            escape(e)
        )?;
    }
    Ok(())
}

fn verdicts(out: &mut String, results: &[CheckResult]) -> fmt::Result {
    out.push_str(
        "<h2>Verdicts</h2>\n<table><tr><th>check</th><th>verdict</th><th>checked</th>\
         <th>problems</th></tr>\n",
    );
    for r in results {
        let v = validity_name(r.validity);
        write!(
            out,
            "<tr><td>{}</td><td class=\"{v}\">{v}</td><td>{}</td><td>",
            escape(&r.name),
            escape(&r.checked)
        )?;
        if !r.problems.is_empty() {
            out.push_str("<ul>");
            for p in &r.problems {
                write!(out, "<li>{}</li>", escape(p))?;
            }
            out.push_str("</ul>");
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</table>\n");
    Ok(())
}

/// The indices of the ops to draw: all of them up to [`OP_MARKS_MAX`], else an even spread,
/// `fail` and `info` ops (the interesting ones) given up to half the budget first.
fn sample(ops: &[Op]) -> Vec<usize> {
    if ops.len() <= OP_MARKS_MAX {
        return (0..ops.len()).collect();
    }
    let (ok, other): (Vec<usize>, Vec<usize>) =
        (0..ops.len()).partition(|&i| ops[i].status == EventType::Ok);
    let other = stride(&other, OP_MARKS_MAX / 2);
    let ok = stride(&ok, OP_MARKS_MAX - other.len());
    let mut shown: Vec<usize> = ok.into_iter().chain(other).collect();
    shown.sort_unstable();
    shown
}

/// `budget` elements spread evenly over `items` (all of them if they fit).
fn stride(items: &[usize], budget: usize) -> Vec<usize> {
    if items.len() <= budget {
        return items.to_vec();
    }
    (0..budget)
        .filter_map(|j| items.get(j * items.len() / budget).copied())
        .collect()
}

/// Which timeline row each op goes in, and the rows' names.
struct Rows {
    heading: &'static str,
    names: Vec<String>,
    of_process: BTreeMap<u64, usize>,
    of_node: Option<BTreeMap<u64, usize>>,
}

impl Rows {
    /// One row per process; per node if there are more than [`TIMELINE_ROWS_MAX`] processes;
    /// else processes in consecutive groups.
    fn of(ops: &[Op]) -> Self {
        let processes: Vec<u64> = ops
            .iter()
            .map(|o| o.process)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let nodes: BTreeSet<u64> = ops.iter().map(|o| o.node).collect();
        if processes.len() <= TIMELINE_ROWS_MAX {
            return Rows {
                heading: "one row per process",
                names: processes.iter().map(|p| format!("process {p}")).collect(),
                of_process: processes.iter().enumerate().map(|(i, p)| (*p, i)).collect(),
                of_node: None,
            };
        }
        if nodes.len() <= TIMELINE_ROWS_MAX {
            return Rows {
                heading: "one row per node (too many processes to draw one row each)",
                names: nodes.iter().map(|n| format!("node {n}")).collect(),
                of_process: BTreeMap::new(),
                of_node: Some(nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect()),
            };
        }
        let per_row = processes.len().div_ceil(TIMELINE_ROWS_MAX);
        let names = processes
            .chunks(per_row)
            .map(|c| match (c.first(), c.last()) {
                (Some(a), Some(b)) => format!("p {a}..{b}"),
                _ => String::new(),
            })
            .collect();
        Rows {
            heading: "processes in groups (too many processes and nodes for one row each)",
            names,
            of_process: processes
                .iter()
                .enumerate()
                .map(|(i, p)| (*p, i / per_row))
                .collect(),
            of_node: None,
        }
    }

    fn row(&self, op: &Op) -> usize {
        match &self.of_node {
            Some(of_node) => of_node.get(&op.node).copied().unwrap_or(0),
            None => self.of_process.get(&op.process).copied().unwrap_or(0),
        }
    }
}

fn svg_open(out: &mut String, plot_height: f64, label: &str) -> fmt::Result {
    let width = MARGIN_LEFT_PX + PLOT_WIDTH_PX + MARGIN_RIGHT_PX;
    let height = HEADER_HEIGHT_PX + plot_height + AXIS_HEIGHT_PX;
    write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"{}\">\n\
         <rect class=\"plot\" x=\"{MARGIN_LEFT_PX}\" y=\"{HEADER_HEIGHT_PX}\" width=\"{PLOT_WIDTH_PX}\" \
         height=\"{plot_height:.1}\" fill=\"#fafafa\" stroke=\"#bbb\"/>\n",
        escape(label)
    )
}

/// Vertical grid lines and labels in seconds below a plot.
fn time_axis(out: &mut String, scale: &TimeScale, plot_height: f64) -> fmt::Result {
    let span_s = scale.seconds();
    let step_s = nice_step(span_s / TIME_TICKS_TARGET);
    let decimals = (-step_s.log10().floor()).max(0.0) as usize;
    let bottom = HEADER_HEIGHT_PX + plot_height;
    let ticks = ((span_s / step_s).floor() as usize).min(10 * TIME_TICKS_TARGET as usize);
    for i in 0..=ticks {
        let t_s = i as f64 * step_s;
        let x = scale.x((t_s * NS_PER_S) as TimeNs);
        writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{HEADER_HEIGHT_PX}\" x2=\"{x:.1}\" y2=\"{:.1}\" \
             stroke=\"#e4e4e4\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">\
             {t_s:.decimals$}</text>",
            bottom + 4.0,
            bottom + 15.0
        )?;
    }
    writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (s)</text>",
        MARGIN_LEFT_PX + PLOT_WIDTH_PX / 2.0,
        bottom + 29.0
    )
}

/// The smallest of 1, 2, 5 × 10^k at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Translucent bands over a plot, one per nemesis window, labelled with kind and targets.
fn nemesis_bands(
    out: &mut String,
    nemesis: &[NemesisWindow],
    scale: &TimeScale,
    plot_height: f64,
) -> fmt::Result {
    let kinds: Vec<&str> = nemesis
        .iter()
        .map(|w| w.kind.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for (i, w) in nemesis.iter().take(NEMESIS_BANDS_MAX).enumerate() {
        let colour = kinds
            .iter()
            .position(|k| *k == w.kind)
            .map_or(NEMESIS_COLOURS[0], |k| {
                NEMESIS_COLOURS[k % NEMESIS_COLOURS.len()]
            });
        let x1 = scale.x(w.start_ns);
        let x2 = scale.x(w.end_ns.unwrap_or(scale.end_ns));
        let label = escape(&format!("{} {:?}", w.kind, w.targets));
        let end = w.end_ns.map_or("the end".to_string(), |e| {
            format!("{:.3} s", e as f64 / NS_PER_S)
        });
        // Drawn over the op marks, so the band stays visible; the band lets the pointer
        // through to the marks and the label carries the details instead.
        let (label_x, anchor) = if x1 > MARGIN_LEFT_PX + PLOT_WIDTH_PX * LABEL_FLIP_FRACTION {
            (x2.max(x1 + 1.0) - 2.0, "end")
        } else {
            (x1 + 2.0, "start")
        };
        writeln!(
            out,
            "<rect class=\"nemesis-band\" x=\"{x1:.1}\" y=\"{HEADER_HEIGHT_PX}\" \
             width=\"{:.1}\" height=\"{plot_height:.1}\" fill=\"{colour}\" fill-opacity=\"0.18\" \
             pointer-events=\"none\"/><text x=\"{label_x:.1}\" y=\"{:.1}\" fill=\"{colour}\" \
             text-anchor=\"{anchor}\"><title>{label}: {:.3} s to {end}, minority {}</title>\
             {label}</text>",
            (x2 - x1).max(1.0),
            HEADER_HEIGHT_PX - 12.0 - 11.0 * (i % NEMESIS_LABEL_ROWS) as f64,
            w.start_ns as f64 / NS_PER_S,
            escape(&format!("{:?}", w.minority)),
        )?;
    }
    Ok(())
}

fn timeline(
    out: &mut String,
    recorded: &Recorded,
    ops: &[Op],
    shown: &[usize],
    scale: &TimeScale,
) -> fmt::Result {
    let rows = Rows::of(ops);
    let plot_height = ROW_HEIGHT_PX * rows.names.len().max(1) as f64;
    write!(
        out,
        "<h2>Operations over time</h2>\n<p>{}; bars from invocation to completion, \
         <span style=\"color:{COLOUR_OK}\">ok</span>, <span style=\"color:{COLOUR_FAIL}\">fail\
         </span>, <span style=\"color:{COLOUR_INFO}\">info</span> (drawn to the end of the run); \
         shaded bands are nemesis windows, ticks on top are leader changes. {} of {} operations \
         drawn.</p>\n",
        rows.heading,
        shown.len(),
        ops.len()
    )?;
    svg_open(out, plot_height, "operations over time")?;
    for (i, name) in rows.names.iter().enumerate() {
        writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            MARGIN_LEFT_PX - 4.0,
            HEADER_HEIGHT_PX + ROW_HEIGHT_PX * (i as f64 + 0.8),
            escape(name)
        )?;
    }
    time_axis(out, scale, plot_height)?;
    for op in shown.iter().filter_map(|&i| ops.get(i)) {
        let x1 = scale.x(op.call_ns);
        let x2 = scale.x(op.ret_ns.unwrap_or(scale.end_ns));
        let y = HEADER_HEIGHT_PX
            + ROW_HEIGHT_PX * rows.row(op) as f64
            + (ROW_HEIGHT_PX - BAR_HEIGHT_PX) / 2.0;
        writeln!(
            out,
            "<rect x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_HEIGHT_PX}\" \
             fill=\"{}\"><title>op {} p{} n{} {} {}</title></rect>",
            (x2 - x1).max(1.0),
            status_colour(op.status),
            op.id,
            op.process,
            op.node,
            op_kind(&op.value),
            status_name(op.status)
        )?;
    }
    nemesis_bands(out, &recorded.nemesis, scale, plot_height)?;
    leader_ticks(out, recorded, scale, plot_height)?;
    out.push_str("</svg>\n");
    Ok(())
}

/// A tick above the plot (and a faint line through it) wherever the observed leader or term
/// changes.
fn leader_ticks(
    out: &mut String,
    recorded: &Recorded,
    scale: &TimeScale,
    plot_height: f64,
) -> fmt::Result {
    let mut observed: Vec<_> = recorded.leaders.iter().collect();
    observed.sort_by_key(|l| (l.time_ns, l.term, l.node));
    let mut changes = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for l in observed {
        if current != Some((l.node, l.term)) {
            current = Some((l.node, l.term));
            changes.push(l);
        }
    }
    let labelled = changes.len() <= LEADER_LABELS_MAX;
    for l in changes.iter().take(LEADER_TICKS_MAX) {
        let x = scale.x(l.time_ns);
        write!(
            out,
            "<g class=\"leader-tick\"><title>node {} leads term {} (seen at {:.3} s)</title>\
             <line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{HEADER_HEIGHT_PX}\" \
             stroke=\"#000\" stroke-width=\"2\"/><line x1=\"{x:.1}\" y1=\"{HEADER_HEIGHT_PX}\" \
             x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#000\" stroke-opacity=\"0.25\" \
             stroke-dasharray=\"2,3\"/></g>",
            l.node,
            l.term,
            l.time_ns as f64 / NS_PER_S,
            HEADER_HEIGHT_PX - 8.0,
            HEADER_HEIGHT_PX + plot_height
        )?;
        if labelled {
            write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\">n{}/t{}</text>",
                x + 2.0,
                HEADER_HEIGHT_PX - 1.0,
                l.node,
                l.term
            )?;
        }
        out.push('\n');
    }
    Ok(())
}

/// Latency in ms, floored at [`LATENCY_MS_MIN`]; `None` for `info` ops (no completion).
fn latency_ms(op: &Op) -> Option<f64> {
    let ret = op.ret_ns?;
    Some((ret.saturating_sub(op.call_ns) as f64 / NS_PER_MS).max(LATENCY_MS_MIN))
}

/// The latency plot's log-scale y axis, whole decades from below the smallest to above the
/// largest latency drawn.
struct LogAxis {
    lo_decade: f64,
    hi_decade: f64,
}

impl LogAxis {
    fn of(latencies_ms: impl Iterator<Item = f64>) -> Self {
        let (lo, hi) =
            latencies_ms.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
        if lo > hi {
            // Nothing to draw: show 1 ms to 1 s.
            return LogAxis {
                lo_decade: 0.0,
                hi_decade: 3.0,
            };
        }
        let lo_decade = lo.log10().floor();
        LogAxis {
            lo_decade,
            hi_decade: hi.log10().ceil().max(lo_decade + 1.0),
        }
    }

    fn y(&self, latency_ms: f64) -> f64 {
        let fraction = (latency_ms.log10() - self.lo_decade) / (self.hi_decade - self.lo_decade);
        HEADER_HEIGHT_PX + LATENCY_HEIGHT_PX * (1.0 - fraction)
    }

    fn draw(&self, out: &mut String) -> fmt::Result {
        let mut decade = self.lo_decade;
        while decade <= self.hi_decade {
            let latency_ms = 10f64.powf(decade);
            let y = self.y(latency_ms);
            writeln!(
                out,
                "<line x1=\"{MARGIN_LEFT_PX}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" \
                 stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">\
                 {latency_ms} ms</text>",
                MARGIN_LEFT_PX + PLOT_WIDTH_PX,
                MARGIN_LEFT_PX - 4.0,
                y + 3.0,
            )?;
            decade += 1.0;
        }
        Ok(())
    }
}

fn latency(
    out: &mut String,
    recorded: &Recorded,
    ops: &[Op],
    shown: &[usize],
    scale: &TimeScale,
) -> fmt::Result {
    let points: Vec<(&Op, f64)> = shown
        .iter()
        .filter_map(|&i| ops.get(i))
        .filter_map(|op| latency_ms(op).map(|l| (op, l)))
        .collect();
    let axis = LogAxis::of(points.iter().map(|(_, l)| *l));
    let kinds: BTreeSet<&str> = points.iter().map(|(op, _)| op_kind(&op.value)).collect();
    out.push_str("<h2>Latency</h2>\n<p class=\"legend\">");
    for k in &kinds {
        write!(
            out,
            "<span style=\"color:{}\">&#9679; {k}</span>",
            kind_colour(k)
        )?;
    }
    writeln!(
        out,
        "<span>&#9675; hollow: fail</span> {} of {} completed operations drawn; info operations \
         have no latency.</p>",
        points.len(),
        ops.iter().filter(|o| o.ret_ns.is_some()).count()
    )?;
    svg_open(out, LATENCY_HEIGHT_PX, "latency over time")?;
    axis.draw(out)?;
    time_axis(out, scale, LATENCY_HEIGHT_PX)?;
    nemesis_bands(out, &recorded.nemesis, scale, LATENCY_HEIGHT_PX)?;
    for (op, l) in &points {
        let colour = kind_colour(op_kind(&op.value));
        let paint = if op.status == EventType::Ok {
            format!("fill=\"{colour}\"")
        } else {
            format!("fill=\"none\" stroke=\"{colour}\"")
        };
        writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" {paint}><title>op {} {} {} {l:.3} ms\
             </title></circle>",
            scale.x(op.call_ns),
            axis.y(*l),
            op.id,
            op_kind(&op.value),
            status_name(op.status)
        )?;
    }
    out.push_str("</svg>\n");
    Ok(())
}

fn counts(out: &mut String, ops: &[Op]) -> fmt::Result {
    let mut by_kind: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for op in ops {
        let column = match op.status {
            EventType::Ok => 0,
            EventType::Fail => 1,
            EventType::Invoke | EventType::Info => 2,
        };
        by_kind.entry(op_kind(&op.value)).or_default()[column] += 1;
    }
    out.push_str(
        "<h2>Operations by kind and status</h2>\n<table><tr><th>kind</th><th>ok</th>\
         <th>fail</th><th>info</th><th>total</th></tr>\n",
    );
    let mut totals = [0usize; 3];
    for (kind, c) in &by_kind {
        for (t, n) in totals.iter_mut().zip(c) {
            *t += n;
        }
        writeln!(
            out,
            "<tr><td>{kind}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            c[0],
            c[1],
            c[2],
            c.iter().sum::<usize>()
        )?;
    }
    write!(
        out,
        "<tr><th>all</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th>\
         <th class=\"n\">{}</th></tr>\n</table>\n",
        totals[0],
        totals[1],
        totals[2],
        totals.iter().sum::<usize>()
    )
}

fn nemesis_table(out: &mut String, nemesis: &[NemesisWindow]) -> fmt::Result {
    if nemesis.is_empty() {
        return Ok(());
    }
    out.push_str(
        "<h2>Nemesis windows</h2>\n<table><tr><th>kind</th><th>from (s)</th><th>to (s)</th>\
         <th>targets</th><th>minority</th></tr>\n",
    );
    for w in nemesis.iter().take(NEMESIS_BANDS_MAX) {
        let end = w.end_ns.map_or("end of run".to_string(), |e| {
            format!("{:.3}", e as f64 / NS_PER_S)
        });
        writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{end}</td><td>{}</td>\
             <td>{}</td></tr>",
            escape(&w.kind),
            w.start_ns as f64 / NS_PER_S,
            escape(&format!("{:?}", w.targets)),
            escape(&format!("{:?}", w.minority))
        )?;
    }
    if nemesis.len() > NEMESIS_BANDS_MAX {
        writeln!(
            out,
            "<tr><td colspan=\"5\">... and {} more</td></tr>",
            nemesis.len() - NEMESIS_BANDS_MAX
        )?;
    }
    out.push_str("</table>\n");
    Ok(())
}
