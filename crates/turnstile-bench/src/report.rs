//! `Report`: every figure of the run, merged into side-by-side rows (Turnstile, etcd, ratio
//! Turnstile / etcd; one row per transport), plus the cost of TLS (TLS / plain) when a run has
//! both, rendered as a Markdown document (also printed) and as JSON.

use std::fmt::Write as _;

use crate::limit::Limit;
use crate::machine::Machine;
use crate::measure::{Better, Measure};
use crate::plan::{Plan, System, Transport};
use crate::workloads::{LogRow, Outcome};

/// How the run was set up.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    pub command: String,
    pub quick: bool,
    pub duration_s: f64,
    pub systems: Vec<&'static str>,
    pub workloads: Vec<&'static str>,
    pub transports: Vec<&'static str>,
}

/// One figure with the system it belongs to.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Entry {
    pub system: &'static str,
    pub transport: &'static str,
    #[serde(flatten)]
    pub measure: Measure,
}

/// One system's value in a row.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Cell {
    pub value: f64,
    pub ops: u64,
    pub errors: u64,
}

/// A side-by-side row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub workload: &'static str,
    pub transport: &'static str,
    pub label: String,
    pub unit: &'static str,
    pub better: Better,
    pub turnstile: Option<Cell>,
    /// Turnstile's etcd port, driven by the etcd client (`System::TurnstileEtcd`).
    pub etcd_port: Option<Cell>,
    pub etcd: Option<Cell>,
    /// Turnstile / etcd.
    pub ratio: Option<f64>,
    /// Turnstile's etcd port / etcd.
    pub port_ratio: Option<f64>,
    pub note: &'static str,
}

/// A workload that failed on one system.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    pub system: &'static str,
    pub transport: &'static str,
    pub workload: &'static str,
    pub error: String,
}

/// Everything the run produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub settings: Settings,
    pub machine: Machine,
    pub limit: Limit,
    pub entries: Vec<Entry>,
    pub rows: Vec<Row>,
    pub log_rows: Vec<LogRow>,
    pub failures: Vec<Failure>,
    pub wall_s: f64,
    /// `/proc/loadavg` when the run ended.
    pub loadavg_end: String,
}

impl Report {
    pub fn new(plan: &Plan, machine: Machine, limit: Limit) -> Report {
        Report {
            settings: Settings {
                command: std::env::args().collect::<Vec<_>>().join(" "),
                quick: plan.quick,
                duration_s: plan.duration.as_secs_f64(),
                systems: plan.systems.iter().map(|s| s.name()).collect(),
                workloads: plan.workloads.iter().map(|w| w.name()).collect(),
                transports: plan.transports.iter().map(|t| t.name()).collect(),
            },
            machine,
            limit,
            entries: Vec::new(),
            rows: Vec::new(),
            log_rows: Vec::new(),
            failures: Vec::new(),
            wall_s: 0.0,
            loadavg_end: String::new(),
        }
    }

    pub fn add(&mut self, system: System, transport: Transport, outcome: Outcome) {
        self.entries
            .extend(outcome.measures.into_iter().map(|measure| Entry {
                system: system.name(),
                transport: transport.name(),
                measure,
            }));
        self.log_rows
            .extend(outcome.log_rows.into_iter().map(|mut r| {
                if system == System::TurnstileEtcd {
                    r.measurement = format!("{}, etcd port", r.measurement);
                }
                if transport != Transport::Plain {
                    r.measurement = format!("{} ({})", r.measurement, transport.name());
                }
                r
            }));
        self.rows = rows(&self.entries);
    }

    pub fn fail(
        &mut self,
        system: System,
        transport: Transport,
        workload: &'static str,
        error: &anyhow::Error,
    ) {
        self.failures.push(Failure {
            system: system.name(),
            transport: transport.name(),
            workload,
            error: format!("{error:#}"),
        });
    }

    pub fn to_json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// The Markdown document: settings, machine, the limit, the table, log counters, errors.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let m = &self.machine;
        let _ = writeln!(s, "# turnstile-bench results\n");
        let _ = writeln!(s, "- command: `{}`", self.settings.command);
        let _ = writeln!(
            s,
            "- {} s per measurement{}; wall time {:.0} s",
            self.settings.duration_s,
            if self.settings.quick {
                " (quick: sizes reduced, figures not meaningful)"
            } else {
                ""
            },
            self.wall_s
        );
        s.push_str(&m.markdown_lines(&self.loadavg_end));
        if let Some(v) = &m.etcd_version {
            let _ = writeln!(s, "- etcd {v}");
        }
        s.push_str(&limit_section(&self.limit));
        s.push_str(&table(&self.rows));
        s.push_str(&tls_cost_table(&self.rows));
        s.push_str(&log_table(&self.log_rows));
        s.push_str(&self.errors_section());
        s
    }

    fn errors_section(&self) -> String {
        let mut s = String::new();
        let mut seen: Vec<(&str, &str, &str, &str)> = Vec::new();
        for e in &self.entries {
            let Some(first) = e.measure.first_error.as_deref() else {
                continue;
            };
            let key = (e.system, e.transport, e.measure.workload, first);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let _ = writeln!(
                s,
                "- {} ({}) {} ({}): {} errors; first: {}",
                e.system, e.transport, e.measure.workload, e.measure.label, e.measure.errors, first
            );
        }
        for f in &self.failures {
            let _ = writeln!(
                s,
                "- {} ({}) {} FAILED: {}",
                f.system, f.transport, f.workload, f.error
            );
        }
        if s.is_empty() {
            return "\n## Errors\n\nNone.\n".into();
        }
        format!("\n## Errors\n\n{s}")
    }
}

fn limit_section(l: &Limit) -> String {
    format!(
        "\n## The limit\n\n\
         One quorum commit on this machine, measured before the clusters run: 2 x (p50 of a 4 KiB \
         write + fdatasync, appended to a preallocated file in the run's directory, {} samples: \
         {:.3} ms; p99 {:.3} ms) + (p50 of a 64-byte TCP round trip on loopback, {} samples: \
         {:.3} ms) = **{:.3} ms**, so a strictly sequential chain of commits (a lock handed from \
         one waiter to the next) runs at most **{:.0} per second**. W2 measures it again just \
         before each of its points (other work on the machine moves fdatasync latency) and \
         divides its handoffs per second by that figure (`handoffs / limit`).\n",
        l.fsync_samples,
        l.fsync.p50_ms,
        l.fsync.p99_ms,
        l.rtt_samples,
        l.rtt.p50_ms,
        l.commit_ms,
        l.commits_per_s
    )
}

/// Merges entries into rows in order of first appearance.
pub fn rows(entries: &[Entry]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for e in entries {
        let m = &e.measure;
        let pos = out.iter().position(|r| {
            r.workload == m.workload && r.transport == e.transport && r.label == m.label
        });
        let i = pos.unwrap_or_else(|| {
            out.push(Row {
                workload: m.workload,
                transport: e.transport,
                label: m.label.clone(),
                unit: m.unit,
                better: m.better,
                turnstile: None,
                etcd_port: None,
                etcd: None,
                ratio: None,
                port_ratio: None,
                note: m.note,
            });
            out.len() - 1
        });
        let cell = Some(Cell {
            value: m.value,
            ops: m.ops,
            errors: m.errors,
        });
        let row = &mut out[i];
        if e.system == System::Turnstile.name() {
            row.turnstile = cell;
        } else if e.system == System::TurnstileEtcd.name() {
            row.etcd_port = cell;
        } else {
            row.etcd = cell;
        }
        let over_etcd = |c: Option<Cell>| match (c, row.etcd) {
            (Some(t), Some(e)) if e.value != 0.0 => Some(t.value / e.value),
            _ => None,
        };
        row.ratio = over_etcd(row.turnstile);
        row.port_ratio = over_etcd(row.etcd_port);
    }
    out
}

/// A number with a precision that suits its size.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 1_000.0 {
        let whole = format!("{:.0}", v.abs());
        let mut grouped = String::new();
        for (i, ch) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(ch);
        }
        format!("{}{grouped}", if v < 0.0 { "-" } else { "" })
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A count with thousands separators: `1,234,567`, `0`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Units whose figures are whole numbers (W8's checks and record counts), shown as counts.
const COUNT_UNITS: [&str; 2] = ["count", "records"];

/// A figure in its unit: a count as `1,234` or `0`, anything else by [`num`].
fn value(v: f64, unit: &str) -> String {
    if COUNT_UNITS.contains(&unit) && v >= 0.0 && v < u64::MAX as f64 {
        return count(v.round() as u64);
    }
    num(v)
}

fn cell(c: Option<Cell>, unit: &str) -> String {
    match c {
        None => "n/a".into(),
        Some(c) if c.errors > 0 => format!("{} ({} err)", value(c.value, unit), c.errors),
        Some(c) => value(c.value, unit),
    }
}

/// A ratio as `1.23x`, or nothing.
fn ratio(x: Option<f64>) -> String {
    x.map_or_else(String::new, |x| format!("{}x", num(x)))
}

/// The results table; with a Transport column when any row is not plain.
fn table(rows: &[Row]) -> String {
    let by_transport = rows.iter().any(|r| r.transport != Transport::Plain.name());
    let (head, rule) = if by_transport {
        ("| Workload | Transport |", "|---|---|")
    } else {
        ("| Workload |", "|---|")
    };
    let port = rows.iter().any(|r| r.etcd_port.is_some());
    let (port_head, port_rule) = if port {
        (" Turnstile etcd port | etcd port / etcd |", "--:|--:|")
    } else {
        ("", "")
    };
    let mut s = format!(
        "\n## Results\n\nRatio is Turnstile / etcd: above 1 is better for rates, below 1 for \
         latencies and memory.{}\n\n\
         {head} Figure | Unit | Turnstile | etcd | Turnstile / etcd |{port_head} Note |\n\
         {rule}---|---|--:|--:|--:|{port_rule}---|\n",
        if port {
            " \"Turnstile etcd port\" is the same Turnstile cluster driven through its etcd \
             port (`--etcd-listen`) by the etcd workloads' own client (etcd-client), W1, W3 \
             and W4 only."
        } else {
            ""
        }
    );
    for r in rows {
        let workload = if by_transport {
            format!("{} | {}", r.workload, r.transport)
        } else {
            r.workload.to_string()
        };
        let port_cells = if port {
            format!(" {} | {} |", cell(r.etcd_port, r.unit), ratio(r.port_ratio))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |{} {} |",
            workload,
            r.label,
            r.unit,
            cell(r.turnstile, r.unit),
            cell(r.etcd, r.unit),
            ratio(r.ratio),
            port_cells,
            r.note
        );
    }
    s
}

/// TLS / plain of one system's cells, when both exist.
fn tls_over_plain(tls: Option<Cell>, plain: Option<Cell>) -> Option<f64> {
    match (tls, plain) {
        (Some(t), Some(p)) if p.value != 0.0 => Some(t.value / p.value),
        _ => None,
    }
}

/// Every TLS row beside its plain row, with TLS / plain per system: what TLS and client
/// authentication cost each system. Empty unless the run had both transports.
fn tls_cost_table(rows: &[Row]) -> String {
    let tls = Transport::Tls.name();
    let plain = Transport::Plain.name();
    let mut body = String::new();
    for t in rows.iter().filter(|r| r.transport == tls) {
        let Some(p) = rows
            .iter()
            .find(|p| p.transport == plain && p.workload == t.workload && p.label == t.label)
        else {
            continue;
        };
        let _ = writeln!(
            body,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.workload,
            t.label,
            t.unit,
            cell(p.turnstile, t.unit),
            cell(t.turnstile, t.unit),
            ratio(tls_over_plain(t.turnstile, p.turnstile)),
            cell(p.etcd, t.unit),
            cell(t.etcd, t.unit),
            ratio(tls_over_plain(t.etcd, p.etcd)),
        );
    }
    if body.is_empty() {
        return String::new();
    }
    format!(
        "\n## Cost of TLS and authentication\n\nTLS / plain of each system: below 1 is a loss \
         for rates, above 1 for latencies. TLS rows: HTTPS or gRPC over TLS, peers on mutual \
         TLS, every client presenting a certificate from the cluster CA (Turnstile: user \
         `root`, auth on).\n\n\
         | Workload | Figure | Unit | Turnstile plain | Turnstile TLS | Turnstile TLS / plain \
         | etcd plain | etcd TLS | etcd TLS / plain |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|\n{body}"
    )
}

fn log_table(rows: &[LogRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n## Turnstile log counters\n\nThe leader's `/v1/cluster` `log` counters, after minus \
         before each measurement window.\n\n\
         | Measurement | Ops | Entries | Batches | fdatasyncs | Entries / batch | fdatasyncs / batch | Entries / op |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in rows {
        let d = r.delta;
        let per = |a: u64, b: u64| {
            if b > 0 {
                num(a as f64 / b as f64)
            } else {
                "n/a".into()
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.measurement,
            r.ops,
            d.entries_appended,
            d.append_batches,
            d.fdatasyncs,
            per(d.entries_appended, d.append_batches),
            per(d.fdatasyncs, d.append_batches),
            per(d.entries_appended, r.ops)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(system: System, label: &str, value: f64) -> Entry {
        Entry {
            system: system.name(),
            transport: Transport::Plain.name(),
            measure: Measure::new("W1", label, "cycles/s", Better::Higher, value),
        }
    }

    #[test]
    fn rows_pair_systems_and_compute_ratios() {
        let rows = rows(&[
            entry(System::Turnstile, "64 clients: throughput", 3_000.0),
            entry(System::Turnstile, "only ours", 1.0),
            entry(System::Etcd, "64 clients: throughput", 1_500.0),
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].ratio, Some(2.0));
        assert!(rows[1].etcd.is_none() && rows[1].ratio.is_none());
        let md = table(&rows);
        assert!(
            md.contains("| W1 | 64 clients: throughput | cycles/s | 3,000 | 1,500 | 2.00x |"),
            "{md}"
        );
        assert!(md.contains("| n/a |"), "{md}");
        assert!(tls_cost_table(&rows).is_empty());
        assert!(
            !md.contains("etcd port"),
            "no port column without port figures: {md}"
        );
    }

    #[test]
    fn the_etcd_port_gets_its_own_column_and_ratio() {
        let rows = rows(&[
            entry(System::Turnstile, "64 clients: throughput", 3_000.0),
            entry(System::TurnstileEtcd, "64 clients: throughput", 2_250.0),
            entry(System::Etcd, "64 clients: throughput", 1_500.0),
            entry(System::Turnstile, "only native", 5.0),
        ]);
        assert_eq!((rows[0].ratio, rows[0].port_ratio), (Some(2.0), Some(1.5)));
        let md = table(&rows);
        assert!(
            md.contains("| W1 | 64 clients: throughput | cycles/s | 3,000 | 1,500 | 2.00x | 2,250 | 1.50x |"),
            "{md}"
        );
        assert!(
            md.contains("| W1 | only native | cycles/s | 5.00 | n/a |  | n/a |  |"),
            "{md}"
        );
    }

    #[test]
    fn tls_rows_stand_beside_plain_rows_with_their_cost() {
        let tls = |e: Entry| Entry {
            transport: Transport::Tls.name(),
            ..e
        };
        let rows = rows(&[
            entry(System::Turnstile, "64 clients: throughput", 3_000.0),
            entry(System::Etcd, "64 clients: throughput", 1_500.0),
            tls(entry(System::Turnstile, "64 clients: throughput", 2_400.0)),
            tls(entry(System::Etcd, "64 clients: throughput", 1_200.0)),
        ]);
        assert_eq!(rows.len(), 2);
        let md = table(&rows);
        assert!(
            md.contains("| W1 | tls | 64 clients: throughput | cycles/s | 2,400 | 1,200 | 2.00x |"),
            "{md}"
        );
        let cost = tls_cost_table(&rows);
        assert!(
            cost.contains(
                "| W1 | 64 clients: throughput | cycles/s | 3,000 | 2,400 | 0.800x | 1,500 | 1,200 | 0.800x |"
            ),
            "{cost}"
        );
    }

    #[test]
    fn numbers_are_readable() {
        assert_eq!(num(1_234_567.8), "1,234,568");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.1234), "0.123");
        assert_eq!(num(-2_500.0), "-2,500");
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(value(0.0, "count"), "0");
        assert_eq!(value(12_345.0, "records"), "12,345");
        assert_eq!(value(0.0, "ms"), "0.000");
    }
}
