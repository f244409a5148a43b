//! `SoakReport`: everything a soak produced (settings, machine, verdicts, the per-minute table,
//! every sample, totals), rendered as a Markdown document (also printed) and as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::counters::Counts;
use super::sample::Sample;
use super::verdict::{self, Judgement, Minute, Verdict};
use crate::machine::Machine;
use crate::plan::{SoakPlan, SOAK_KEEPALIVE_INTERVAL_MS, SOAK_LEASE_TTL_MS};
use crate::report::{count, num};
use crate::turnstile_api::RequestRecords;
use turnstile_client::ACKS_PER_REQUEST_MAX;

/// How the soak was set up.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SoakSettings {
    pub command: String,
    pub minutes: f64,
    pub clients: usize,
    /// Whether clients acknowledged answered ids (`x-turnstile-ack`).
    pub ack: bool,
    pub acks_per_request_max: usize,
    pub sample_s: f64,
    pub lease_ttl_ms: u64,
    pub keepalive_interval_ms: u64,
}

/// Everything the soak produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SoakReport {
    pub settings: SoakSettings,
    pub machine: Machine,
    pub verdicts: Vec<Verdict>,
    pub minutes: Vec<Minute>,
    pub samples: Vec<Sample>,
    /// What the clients did over the whole run.
    pub totals: Counts,
    /// Refused and unanswered calls by `"{status} {code}"` or `"no answer"`.
    pub failures_by_label: BTreeMap<String, u64>,
    pub first_failure: Option<String>,
    /// The leader's records at the last sample, and the most any sample saw.
    pub records_end: Option<RequestRecords>,
    pub records_total_max: Option<u64>,
    pub acks_dropped_end: Option<u64>,
    /// Why sampling stopped before the end (a node died), if it did.
    pub stopped_early: Option<String>,
    pub wall_s: f64,
    /// `/proc/loadavg` when the soak ended.
    pub loadavg_end: String,
}

/// What the run gathered, for [`SoakReport::new`].
pub struct Gathered {
    pub samples: Vec<Sample>,
    pub totals: Counts,
    pub failures_by_label: BTreeMap<String, u64>,
    pub first_failure: Option<String>,
    pub stopped_early: Option<String>,
}

impl SoakReport {
    /// Judges the gathered samples.
    pub fn new(plan: &SoakPlan, machine: Machine, g: Gathered) -> SoakReport {
        let duration_s = plan.duration.as_secs_f64();
        let mut verdicts = vec![
            verdict::refusals(g.totals, &g.failures_by_label),
            verdict::memory(&g.samples, duration_s),
            verdict::throughput(&g.samples, duration_s),
        ];
        if let Some(why) = &g.stopped_early {
            verdicts.push(Verdict {
                name: "ran to the end",
                rule: "every node ran, and was sampled, to the end".into(),
                measured: why.clone(),
                judgement: Judgement::Fail,
            });
        }
        SoakReport {
            settings: SoakSettings {
                command: std::env::args().collect::<Vec<_>>().join(" "),
                minutes: duration_s / 60.0,
                clients: plan.clients,
                ack: plan.ack,
                acks_per_request_max: ACKS_PER_REQUEST_MAX,
                sample_s: plan.sample.as_secs_f64(),
                lease_ttl_ms: SOAK_LEASE_TTL_MS,
                keepalive_interval_ms: SOAK_KEEPALIVE_INTERVAL_MS,
            },
            machine,
            verdicts,
            minutes: verdict::minutes(&g.samples),
            records_end: g.samples.iter().rev().find_map(|s| s.records),
            records_total_max: g
                .samples
                .iter()
                .filter_map(|s| s.records)
                .map(|r| r.total)
                .max(),
            acks_dropped_end: g.samples.iter().rev().find_map(|s| s.acks_dropped),
            samples: g.samples,
            totals: g.totals,
            failures_by_label: g.failures_by_label,
            first_failure: g.first_failure,
            stopped_early: g.stopped_early,
            wall_s: 0.0,
            loadavg_end: String::new(),
        }
    }

    /// No verdict failed (one not judged does not fail the run).
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.judgement != Judgement::Fail)
    }

    pub fn to_json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// The Markdown document: settings, machine, verdicts, totals, the per-minute table.
    pub fn to_markdown(&self) -> String {
        let mut s = String::from("# turnstile-bench soak\n\n");
        let st = &self.settings;
        let m = &self.machine;
        let _ = writeln!(s, "- command: `{}`", st.command);
        let _ = writeln!(
            s,
            "- {} clients for {} min, each with its own lease (TTL {} s, renewed every {} s) and \
             its own lock, looping try-acquire (`wait_ms: 0`) + release, every call with a fresh \
             `request_id`",
            st.clients,
            num(st.minutes),
            st.lease_ttl_ms / 1_000,
            st.keepalive_interval_ms / 1_000
        );
        let acks = if st.ack {
            format!(
                "on: each answered id rides in `x-turnstile-ack` on the client's next request, at \
                 most {} per request",
                st.acks_per_request_max
            )
        } else {
            "off (`--no-ack`): records stay for their retry window".into()
        };
        let _ = writeln!(s, "- acknowledgments {acks}");
        let _ = writeln!(
            s,
            "- sampled every {} s; wall time {:.0} s",
            num(st.sample_s),
            self.wall_s
        );
        s.push_str(&m.markdown_lines(&self.loadavg_end));
        s.push_str(&self.verdicts_section());
        s.push_str(&self.totals_section());
        s.push_str(&minutes_table(&self.minutes));
        s
    }

    fn verdicts_section(&self) -> String {
        let mut s = String::from(
            "\n## Verdicts\n\n| Verdict | Rule | Measured | Result |\n|---|---|---|---|\n",
        );
        for v in &self.verdicts {
            let _ = writeln!(
                s,
                "| {} | {} | {} | **{}** |",
                v.name,
                v.rule,
                v.measured,
                v.judgement.word()
            );
        }
        s
    }

    fn totals_section(&self) -> String {
        let t = &self.totals;
        let mut s = String::from("\n## Totals\n\n");
        let run_s = self.settings.minutes * 60.0;
        let _ = writeln!(
            s,
            "- cycles: {} ({} per second over the run); calls answered 2xx: {}",
            count(t.cycles),
            num(t.cycles as f64 / run_s.max(1e-9)),
            count(t.answered_ok)
        );
        let _ = writeln!(
            s,
            "- request ids used: {}; acknowledged: {}",
            count(t.ids_used),
            count(t.ids_acked)
        );
        if let Some(r) = self.records_end {
            let _ = writeln!(
                s,
                "- the leader's request-id records at the last sample: {} ({} pinned, {} on the \
                 window); most at any sample: {}",
                count(r.total),
                count(r.pinned),
                count(r.windowed),
                count(self.records_total_max.unwrap_or(0))
            );
        }
        if let Some(d) = self.acks_dropped_end {
            let _ = writeln!(s, "- acknowledged ids the leader dropped: {d}");
        }
        if let Some(f) = &self.first_failure {
            let _ = writeln!(s, "- first failed call: {f}");
        }
        if let Some(why) = &self.stopped_early {
            let _ = writeln!(s, "- **stopped early**: {why}");
        }
        s
    }
}

fn minutes_table(minutes: &[Minute]) -> String {
    let nodes = minutes
        .iter()
        .map(|m| m.rss_mib_max.len())
        .max()
        .unwrap_or(0);
    let mut s = String::from(
        "\n## Per minute\n\nRates over the minute's samples; RSS is each node's lowest and \
         highest sampled VmRSS; records are the leader's at the minute's last sample.\n\n\
         | Minute | cycles/s | leader entries/s | failed calls |",
    );
    for n in 1..=nodes {
        let _ = write!(s, " node {n} RSS MiB |");
    }
    s.push_str(" records (total / windowed) |\n|--:|--:|--:|--:|");
    s.push_str(&"--:|".repeat(nodes));
    s.push_str("--:|\n");
    for m in minutes {
        let partial = if m.to_s < m.minute as f64 * 60.0 - 1e-6 {
            " (partial)"
        } else {
            ""
        };
        let _ = write!(
            s,
            "| {}{} | {} | {} | {} |",
            m.minute,
            partial,
            num(m.cycles_per_s),
            m.entries_per_s.map_or_else(|| "n/a".into(), num),
            m.failed_calls
        );
        for (lo, hi) in m.rss_mib_min.iter().zip(&m.rss_mib_max) {
            let _ = write!(s, " {}–{} |", num(*lo), num(*hi));
        }
        let records = m.records.map_or_else(
            || "n/a".into(),
            |r| format!("{} / {}", count(r.total), count(r.windowed)),
        );
        let _ = writeln!(s, " {records} |");
    }
    s
}
