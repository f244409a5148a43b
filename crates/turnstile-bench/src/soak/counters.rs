//! `Counters`: what the soak's clients have done so far, shared by all of them and read by the
//! sampler every interval: completed cycles, answered calls, request ids used and acknowledged,
//! and every call that did not succeed, by its HTTP status and error code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Distinct refusal labels kept; later ones are counted under [`OTHER_LABEL`]. Turnstile has
/// about twenty error codes, so only a server answering garbage reaches this.
pub const REFUSAL_LABELS_MAX: usize = 64;
/// Label of refusals past [`REFUSAL_LABELS_MAX`].
pub const OTHER_LABEL: &str = "other";
/// Label of calls that got no answer (connection failure, timeout).
pub const NO_ANSWER_LABEL: &str = "no answer";

/// Shared, monotonic counts.
#[derive(Debug, Default)]
pub struct Counters {
    cycles: AtomicU64,
    answered_ok: AtomicU64,
    ids_used: AtomicU64,
    ids_acked: AtomicU64,
    refusals: AtomicU64,
    unanswered: AtomicU64,
    by_label: Mutex<BTreeMap<String, u64>>,
    first_failure: Mutex<Option<String>>,
}

/// The counts at one instant; differences of two give an interval's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Acquire + release pairs completed.
    pub cycles: u64,
    /// Calls answered 2xx (acquires, releases, keepalives).
    pub answered_ok: u64,
    /// Request ids sent (each acquire and release carries a fresh one).
    pub ids_used: u64,
    /// Ids named in `x-turnstile-ack` headers of requests that were answered.
    pub ids_acked: u64,
    /// Calls answered with a non-2xx status.
    pub refusals: u64,
    /// Calls that got no answer.
    pub unanswered: u64,
}

impl Counts {
    /// `self - before`, field by field.
    pub fn since(self, before: Counts) -> Counts {
        Counts {
            cycles: self.cycles.saturating_sub(before.cycles),
            answered_ok: self.answered_ok.saturating_sub(before.answered_ok),
            ids_used: self.ids_used.saturating_sub(before.ids_used),
            ids_acked: self.ids_acked.saturating_sub(before.ids_acked),
            refusals: self.refusals.saturating_sub(before.refusals),
            unanswered: self.unanswered.saturating_sub(before.unanswered),
        }
    }
}

impl Counters {
    pub fn cycle(&self) {
        self.cycles.fetch_add(1, Ordering::Relaxed);
    }

    pub fn id_used(&self) {
        self.ids_used.fetch_add(1, Ordering::Relaxed);
    }

    pub fn acked(&self, ids: usize) {
        self.ids_acked.fetch_add(ids as u64, Ordering::Relaxed);
    }

    pub fn answered_ok(&self) {
        self.answered_ok.fetch_add(1, Ordering::Relaxed);
    }

    /// A non-2xx answer, labelled `"{status} {code}"`; `detail` is kept if it is the first.
    pub fn refused(&self, status: u16, code: &str, detail: &str) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        self.count(format!("{status} {code}").trim_end(), detail);
    }

    /// A call that got no answer.
    pub fn unanswered(&self, detail: &str) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        self.count(NO_ANSWER_LABEL, detail);
    }

    fn count(&self, label: &str, detail: &str) {
        if let Ok(mut m) = self.by_label.lock() {
            let label = if m.contains_key(label) || m.len() < REFUSAL_LABELS_MAX {
                label
            } else {
                OTHER_LABEL
            };
            *m.entry(label.to_string()).or_insert(0) += 1;
        }
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert_with(|| format!("{label}: {detail}"));
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            cycles: self.cycles.load(Ordering::Relaxed),
            answered_ok: self.answered_ok.load(Ordering::Relaxed),
            ids_used: self.ids_used.load(Ordering::Relaxed),
            ids_acked: self.ids_acked.load(Ordering::Relaxed),
            refusals: self.refusals.load(Ordering::Relaxed),
            unanswered: self.unanswered.load(Ordering::Relaxed),
        }
    }

    /// Failed calls by label (`"429 limit_reached"`, `"no answer"`).
    pub fn by_label(&self) -> BTreeMap<String, u64> {
        self.by_label.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The first failure, with its detail.
    pub fn first_failure(&self) -> Option<String> {
        self.first_failure.lock().ok().and_then(|f| f.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_by_label_and_bounded() {
        let c = Counters::default();
        c.refused(429, "limit_reached", "full");
        c.refused(429, "limit_reached", "still full");
        c.unanswered("timed out");
        for i in 0..REFUSAL_LABELS_MAX + 3 {
            c.refused(500, &format!("odd{i}"), "");
        }
        let m = c.by_label();
        assert_eq!(m["429 limit_reached"], 2);
        assert_eq!(m[NO_ANSWER_LABEL], 1);
        assert_eq!(m.len(), REFUSAL_LABELS_MAX + 1, "the cap plus `other`");
        assert_eq!(m[OTHER_LABEL], 5);
        let n = c.counts();
        assert_eq!(
            (n.refusals, n.unanswered),
            (REFUSAL_LABELS_MAX as u64 + 5, 1)
        );
        assert_eq!(
            c.first_failure().as_deref(),
            Some("429 limit_reached: full")
        );
        assert_eq!(n.since(n), Counts::default());
    }
}
