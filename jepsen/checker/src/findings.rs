//! What checks report with: a capped collector of violations and reasons for doubt
//! ([`Findings`]), and how a problem line names operations and times.

use crate::history::{Op, TimeNs};
use crate::{CheckResult, Validity, PROBLEMS_LISTED_MAX};

/// Operations named in one problem line; the rest are counted.
const OPS_PER_PROBLEM_MAX: usize = 4;
const NS_PER_MS: f64 = 1e6;

/// `ns` as milliseconds since the run started, for problem lines.
pub(crate) fn ms(ns: TimeNs) -> String {
    format!("{:.3}ms", ns as f64 / NS_PER_MS)
}

/// "op 12 (process 3, node 1, 10.000ms..12.500ms)": what a problem line names an op by.
pub(crate) fn describe(op: &Op) -> String {
    match op.ret_ns {
        Some(ret) => format!(
            "op {} (process {}, node {}, {}..{})",
            op.id,
            op.process,
            op.node,
            ms(op.call_ns),
            ms(ret)
        ),
        None => format!(
            "op {} (process {}, node {}, invoked {}, outcome unknown)",
            op.id,
            op.process,
            op.node,
            ms(op.call_ns)
        ),
    }
}

/// Collects a check's violations and reasons for doubt, keeping at most
/// [`PROBLEMS_LISTED_MAX`] of each in memory (a broken run can produce thousands).
#[derive(Default)]
pub(crate) struct Findings {
    violations: Vec<String>,
    violations_total: usize,
    unknowns: Vec<String>,
    unknowns_total: usize,
}

impl Findings {
    pub(crate) fn violation(&mut self, problem: String) {
        self.violations_total += 1;
        if self.violations.len() < PROBLEMS_LISTED_MAX {
            self.violations.push(problem);
        }
    }

    pub(crate) fn unknown(&mut self, reason: String) {
        self.unknowns_total += 1;
        if self.unknowns.len() < PROBLEMS_LISTED_MAX {
            self.unknowns.push(reason);
        }
    }

    /// Invalid if anything was violated, else Unknown if anything was undecided. Violations
    /// are listed first; reasons for doubt follow, marked, only as room allows.
    pub(crate) fn finish(self, name: &str, checked: String) -> CheckResult {
        let validity = if self.violations_total > 0 {
            Validity::Invalid
        } else if self.unknowns_total > 0 {
            Validity::Unknown
        } else {
            Validity::Valid
        };
        let invalid = validity == Validity::Invalid;
        let mut problems = self.violations;
        problems.extend(self.unknowns.into_iter().map(|u| {
            if invalid {
                format!("undecided: {u}")
            } else {
                u
            }
        }));
        let total = self.violations_total + self.unknowns_total;
        problems.truncate(PROBLEMS_LISTED_MAX);
        if total > problems.len() {
            problems.push(format!("... and {} more", total - problems.len()));
        }
        CheckResult {
            name: name.to_string(),
            validity,
            checked,
            problems,
        }
    }
}

/// Names up to [`OPS_PER_PROBLEM_MAX`] ops and counts the rest.
pub(crate) fn list_ops<'a>(ops: impl IntoIterator<Item = &'a Op>) -> String {
    let all: Vec<&Op> = ops.into_iter().collect();
    let mut text: Vec<String> = all
        .iter()
        .take(OPS_PER_PROBLEM_MAX)
        .map(|op| describe(op))
        .collect();
    if all.len() > OPS_PER_PROBLEM_MAX {
        text.push(format!("{} more", all.len() - OPS_PER_PROBLEM_MAX));
    }
    text.join(", ")
}
