//! The soak's judgement, from its samples alone: the per-minute table and the three
//! verdicts. Every window is cut on the samples' scheduled ends (`at_s`), so a verdict reads the
//! same samples however the machine's timing jittered:
//!
//! - **refusals**: every call (acquire, release, keepalive) answered 2xx: no refusal by any
//!   code, and no call left without an answer;
//! - **memory flat after warm-up**: on every node, the peak VmRSS of the second half of the run
//!   is at most [`SOAK_RSS_GROWTH_FRACTION_MAX`] above the peak of the reference period, which
//!   runs from the end of the warm-up ([`SOAK_WARMUP_S`]) to the fifth minute
//!   ([`SOAK_REFERENCE_END_S`]) or half the run, whichever is first. Peaks, not means: RSS saws
//!   up and down by 10 to 15 MiB within a minute, and a peak over minutes does not depend on
//!   where in the sawtooth the samples fell, while any spike in the second half counts against
//!   the run. Not judged when the run is too short to have both periods (twice the warm-up or
//!   less);
//! - **throughput held**: cycles/s over the last [`SOAK_THROUGHPUT_WINDOW_S`] divided by
//!   cycles/s over the first is at least [`SOAK_THROUGHPUT_RATIO_MIN`]. Cycles are what the
//!   clients get done; the leader's entries/s is shown beside it. Not judged when the two
//!   windows would overlap.

use std::collections::BTreeMap;

use super::counters::Counts;
use super::sample::Sample;
use crate::plan::{
    SOAK_REFERENCE_END_S, SOAK_RSS_GROWTH_FRACTION_MAX, SOAK_THROUGHPUT_RATIO_MIN,
    SOAK_THROUGHPUT_WINDOW_S, SOAK_WARMUP_S,
};
use crate::report::{count, num};
use crate::turnstile_api::RequestRecords;

/// Bytes per mebibyte.
pub const MIB: f64 = 1_048_576.0;
/// Seconds per minute of the per-minute table.
const MINUTE_S: f64 = 60.0;

/// One row of the per-minute table: the samples whose scheduled end falls in the minute.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Minute {
    /// 1 for the first minute of load.
    pub minute: usize,
    /// Scheduled end of its last sample (below a whole minute for a partial last minute).
    pub to_s: f64,
    pub samples: usize,
    pub cycles_per_s: f64,
    pub entries_per_s: Option<f64>,
    /// Refused and unanswered calls.
    pub failed_calls: u64,
    /// Per node, lowest and highest VmRSS sampled in the minute, in MiB.
    pub rss_mib_min: Vec<f64>,
    pub rss_mib_max: Vec<f64>,
    /// The leader's records at the minute's last sample that had them.
    pub records: Option<RequestRecords>,
}

/// Pass, fail, or not judged (the run was too short for the verdict's windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Judgement {
    Pass,
    Fail,
    NotJudged,
}

impl Judgement {
    pub fn word(self) -> &'static str {
        match self {
            Judgement::Pass => "PASS",
            Judgement::Fail => "FAIL",
            Judgement::NotJudged => "not judged",
        }
    }
}

/// One verdict with its rule and what was measured against it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    pub name: &'static str,
    pub rule: String,
    pub measured: String,
    pub judgement: Judgement,
}

/// Minute of a sample: the one its scheduled end falls in, ends included.
fn minute_of(at_s: f64) -> usize {
    ((at_s / MINUTE_S).ceil() as usize).max(1)
}

/// Cycles/s and entries/s over `samples` taken together.
fn rates<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> (f64, Option<f64>) {
    let (mut cycles, mut secs, mut entries, mut entry_secs) = (0u64, 0.0, 0u64, 0.0);
    for s in samples {
        cycles += s.counts.cycles;
        secs += s.interval_s;
        if let Some(e) = s.entries {
            entries += e;
            entry_secs += s.interval_s;
        }
    }
    let per_s = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let entries_per_s = (entry_secs > 0.0).then(|| per_s(entries, entry_secs));
    (per_s(cycles, secs), entries_per_s)
}

/// The per-minute table.
pub fn minutes(samples: &[Sample]) -> Vec<Minute> {
    let mut groups: BTreeMap<usize, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        groups.entry(minute_of(s.at_s)).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|(minute, group)| {
            let (cycles_per_s, entries_per_s) = rates(group.iter().copied());
            let nodes = group.iter().map(|s| s.rss_bytes.len()).max().unwrap_or(0);
            let rss = |node: usize| group.iter().filter_map(move |s| s.rss_bytes.get(node));
            Minute {
                minute,
                to_s: group.last().map_or(0.0, |s| s.at_s),
                samples: group.len(),
                cycles_per_s,
                entries_per_s,
                failed_calls: group
                    .iter()
                    .map(|s| s.counts.refusals + s.counts.unanswered)
                    .sum(),
                rss_mib_min: (0..nodes)
                    .map(|n| rss(n).min().map_or(0.0, |&b| b as f64 / MIB))
                    .collect(),
                rss_mib_max: (0..nodes)
                    .map(|n| rss(n).max().map_or(0.0, |&b| b as f64 / MIB))
                    .collect(),
                records: group.iter().rev().find_map(|s| s.records),
            }
        })
        .collect()
}

/// Zero refused and zero unanswered calls.
pub fn refusals(total: Counts, by_label: &BTreeMap<String, u64>) -> Verdict {
    let failed = total.refusals + total.unanswered;
    let calls = total.answered_ok + failed;
    let mut measured = format!(
        "{} refused and {} unanswered of {} calls",
        count(total.refusals),
        count(total.unanswered),
        count(calls)
    );
    if !by_label.is_empty() {
        let labels: Vec<String> = by_label.iter().map(|(l, n)| format!("{l}: {n}")).collect();
        measured.push_str(&format!(" ({})", labels.join(", ")));
    }
    Verdict {
        name: "zero refusals",
        rule: "every acquire, release and keepalive answered 2xx".into(),
        measured,
        judgement: if failed == 0 {
            Judgement::Pass
        } else {
            Judgement::Fail
        },
    }
}

/// Minutes, for the rules' text: `5 min`, `1.50 min`.
fn min(s: f64) -> String {
    let m = s / MINUTE_S;
    if (m - m.round()).abs() < 1e-9 {
        format!("{m:.0} min")
    } else {
        format!("{} min", num(m))
    }
}

/// A fraction as a percentage: `10%`.
fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

/// Peak per-node RSS flat from the reference period to the second half (module docs).
pub fn memory(samples: &[Sample], duration_s: f64) -> Verdict {
    let half = duration_s / 2.0;
    let ref_end = SOAK_REFERENCE_END_S.min(half);
    let mut rule = format!(
        "on each node, peak VmRSS over the second half of the run at most {} above its peak \
         from the end of the warm-up ({}) to {} or half the run, whichever is first",
        percent(SOAK_RSS_GROWTH_FRACTION_MAX),
        min(SOAK_WARMUP_S),
        min(SOAK_REFERENCE_END_S)
    );
    if ref_end > SOAK_WARMUP_S {
        rule.push_str(&format!(
            ": here {}–{} against {}–{}",
            min(half),
            min(duration_s),
            min(SOAK_WARMUP_S),
            min(ref_end)
        ));
    }
    let not_judged = |why: &str| Verdict {
        name: "memory flat after warm-up",
        rule: rule.clone(),
        measured: why.to_string(),
        judgement: Judgement::NotJudged,
    };
    if ref_end <= SOAK_WARMUP_S {
        return not_judged("the run is shorter than twice the warm-up");
    }
    let reference: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_s > SOAK_WARMUP_S && s.at_s <= ref_end)
        .collect();
    let late: Vec<&Sample> = samples.iter().filter(|s| s.at_s > half).collect();
    let nodes = samples.iter().map(|s| s.rss_bytes.len()).max().unwrap_or(0);
    let peak =
        |set: &[&Sample], n: usize| set.iter().filter_map(|s| s.rss_bytes.get(n)).max().copied();
    let mut parts = Vec::new();
    let mut flat = true;
    for n in 0..nodes {
        let (Some(r), Some(l)) = (peak(&reference, n), peak(&late, n)) else {
            return not_judged("a period has no sample");
        };
        flat &= l as f64 <= r as f64 * (1.0 + SOAK_RSS_GROWTH_FRACTION_MAX);
        let growth = l as f64 / (r as f64).max(1.0) - 1.0;
        parts.push(format!(
            "node {}: {} → {} MiB ({:+.1}%)",
            n + 1,
            num(r as f64 / MIB),
            num(l as f64 / MIB),
            growth * 100.0
        ));
    }
    Verdict {
        name: "memory flat after warm-up",
        rule,
        measured: parts.join("; "),
        judgement: if flat {
            Judgement::Pass
        } else {
            Judgement::Fail
        },
    }
}

/// Last-window over first-window cycles/s (module docs).
pub fn throughput(samples: &[Sample], duration_s: f64) -> Verdict {
    let w = SOAK_THROUGHPUT_WINDOW_S;
    let rule = format!(
        "cycles/s over the last {} ÷ cycles/s over the first {} ≥ {}",
        min(w),
        min(w),
        SOAK_THROUGHPUT_RATIO_MIN
    );
    let verdict = |measured: String, judgement| Verdict {
        name: "throughput held",
        rule: rule.clone(),
        measured,
        judgement,
    };
    if duration_s < 2.0 * w {
        return verdict(
            "the run is shorter than the two windows".into(),
            Judgement::NotJudged,
        );
    }
    let (first, first_entries) = rates(samples.iter().filter(|s| s.at_s <= w));
    let (last, last_entries) = rates(samples.iter().filter(|s| s.at_s > duration_s - w));
    let ratio = if first > 0.0 { last / first } else { 0.0 };
    let mut measured = format!("{} / {} cycles/s = {}", num(last), num(first), num(ratio));
    if let (Some(l), Some(f)) = (last_entries, first_entries) {
        if f > 0.0 {
            measured.push_str(&format!(
                " (leader entries/s: {} / {} = {})",
                num(l),
                num(f),
                num(l / f)
            ));
        }
    }
    let judgement = if first > 0.0 && ratio >= SOAK_THROUGHPUT_RATIO_MIN {
        Judgement::Pass
    } else {
        Judgement::Fail
    };
    verdict(measured, judgement)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample every 10 s with `cycles` in it and node RSS `rss_mib` (node 2 at twice it).
    fn sample(at_s: f64, cycles: u64, rss_mib: u64) -> Sample {
        Sample {
            at_s,
            interval_s: 10.0,
            counts: Counts {
                cycles,
                ..Counts::default()
            },
            cycles_per_s: cycles as f64 / 10.0,
            entries: Some(cycles * 2),
            entries_per_s: Some(cycles as f64 / 5.0),
            leader: Some(1),
            applied_index: None,
            records: None,
            acks_dropped: None,
            rss_bytes: vec![rss_mib << 20, (2 * rss_mib) << 20],
            read_ms: 1.0,
        }
    }

    fn run(minutes: u64, cycles: impl Fn(f64) -> u64, rss: impl Fn(f64) -> u64) -> Vec<Sample> {
        (1..=minutes * 6)
            .map(|k| {
                let at = k as f64 * 10.0;
                sample(at, cycles(at), rss(at))
            })
            .collect()
    }

    #[test]
    fn minutes_group_samples_by_scheduled_end() {
        let s = run(3, |at| if at <= 60.0 { 100 } else { 50 }, |_| 40);
        let m = minutes(&s);
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].minute, m[0].samples, m[0].to_s), (1, 6, 60.0));
        assert_eq!(m[0].cycles_per_s, 10.0);
        assert_eq!(m[1].cycles_per_s, 5.0);
        assert_eq!(m[1].entries_per_s, Some(10.0));
        assert_eq!(
            (m[2].rss_mib_min.clone(), m[2].rss_mib_max.clone()),
            (vec![40.0, 80.0], vec![40.0, 80.0])
        );
    }

    #[test]
    fn memory_is_judged_on_peaks_after_warm_up() {
        // Growth in the warm-up does not count; a flat line after it passes.
        let s = run(30, |_| 1, |at| if at <= 60.0 { 10 } else { 50 });
        assert_eq!(memory(&s, 1_800.0).judgement, Judgement::Pass);
        // 5 MiB over 50 is 10%: still flat. 6 is not.
        let s = run(30, |_| 1, |at| if at <= 900.0 { 50 } else { 55 });
        assert_eq!(memory(&s, 1_800.0).judgement, Judgement::Pass);
        let s = run(30, |_| 1, |at| if at <= 900.0 { 50 } else { 56 });
        let v = memory(&s, 1_800.0);
        assert_eq!(v.judgement, Judgement::Fail, "{v:?}");
        assert!(
            v.measured.contains("node 1: 50.0 → 56.0 MiB (+12.0%)"),
            "{v:?}"
        );
        // A slow leak (1 MiB every two minutes) is caught.
        let s = run(30, |_| 1, |at| 50 + (at as u64) / 120);
        assert_eq!(memory(&s, 1_800.0).judgement, Judgement::Fail);
        // Three minutes: reference 1–1.5 min, second half 1.5–3 min.
        let s = run(3, |_| 1, |_| 50);
        let v = memory(&s, 180.0);
        assert_eq!(v.judgement, Judgement::Pass);
        assert!(
            v.rule
                .contains("here 1.50 min–3 min against 1 min–1.50 min"),
            "{}",
            v.rule
        );
        assert_eq!(
            memory(&run(1, |_| 1, |_| 50), 60.0).judgement,
            Judgement::NotJudged
        );
    }

    #[test]
    fn throughput_compares_the_last_minute_with_the_first() {
        let s = run(30, |at| if at > 1_740.0 { 80 } else { 100 }, |_| 50);
        let v = throughput(&s, 1_800.0);
        assert_eq!(v.judgement, Judgement::Pass, "{v:?}");
        assert!(
            v.measured.starts_with("8.00 / 10.0 cycles/s = 0.800"),
            "{v:?}"
        );
        let s = run(30, |at| if at > 1_740.0 { 79 } else { 100 }, |_| 50);
        assert_eq!(throughput(&s, 1_800.0).judgement, Judgement::Fail);
        let s = run(3, |_| 0, |_| 50);
        assert_eq!(
            throughput(&s, 180.0).judgement,
            Judgement::Fail,
            "no cycles at all"
        );
        assert_eq!(
            throughput(&run(1, |_| 1, |_| 50), 90.0).judgement,
            Judgement::NotJudged
        );
    }

    #[test]
    fn any_failed_call_fails_the_refusals_verdict() {
        let ok = Counts {
            answered_ok: 10,
            ..Counts::default()
        };
        assert_eq!(refusals(ok, &BTreeMap::new()).judgement, Judgement::Pass);
        let refused = Counts { refusals: 1, ..ok };
        let labels = BTreeMap::from([("429 limit_reached".to_string(), 1)]);
        let v = refusals(refused, &labels);
        assert_eq!(v.judgement, Judgement::Fail);
        assert!(v.measured.contains("(429 limit_reached: 1)"), "{v:?}");
        let lost = Counts {
            unanswered: 1,
            ..ok
        };
        assert_eq!(refusals(lost, &BTreeMap::new()).judgement, Judgement::Fail);
    }
}
