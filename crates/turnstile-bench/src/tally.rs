//! `Tally`: what one worker (or, merged, one measurement) counted: an HDR histogram of latencies
//! in microseconds, completed operations, and errors with the first error's text.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Largest latency the histograms hold (10 minutes); larger samples are clamped to it.
pub const LATENCY_US_MAX: u64 = 600_000_000;
/// Significant decimal digits the histograms keep.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Counts of one worker or one measurement.
#[derive(Clone)]
pub struct Tally {
    lat_us: Histogram<u64>,
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            lat_us: Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
                .expect("constant histogram bounds are valid: 1 <= low, high >= 2 * low, 3 digits"),
            ops: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// One completed operation that took `d`.
    pub fn record(&mut self, d: Duration) {
        self.record_sample(d);
        self.ops += 1;
    }

    /// A latency sample that is not an operation of its own (W5's deliveries).
    pub fn record_sample(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(LATENCY_US_MAX);
        self.lat_us.saturating_record(us.clamp(1, LATENCY_US_MAX));
    }

    pub fn error(&mut self, e: &anyhow::Error) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{e:#}"));
        }
    }

    pub fn merge(&mut self, other: &Tally) {
        // Both histograms have the same bounds, so adding cannot fail; saturate if it would.
        if self.lat_us.add(&other.lat_us).is_err() {
            self.lat_us.saturating_record(LATENCY_US_MAX);
        }
        self.ops += other.ops;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    pub fn percentiles(&self) -> Percentiles {
        let ms = |us: u64| us as f64 / 1_000.0;
        if self.lat_us.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50_ms: ms(self.lat_us.value_at_quantile(0.50)),
            p99_ms: ms(self.lat_us.value_at_quantile(0.99)),
            max_ms: ms(self.lat_us.max()),
        }
    }
}

/// Merges worker tallies into one.
pub fn merge_all<'a>(tallies: impl IntoIterator<Item = &'a Tally>) -> Tally {
    let mut total = Tally::new();
    for t in tallies {
        total.merge(t);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let mut a = Tally::new();
        for ms in 1..=100 {
            a.record(Duration::from_millis(ms));
        }
        let mut b = Tally::new();
        b.error(&anyhow::anyhow!("boom"));
        b.record(Duration::from_secs(2));
        let t = merge_all([&a, &b]);
        assert_eq!(t.ops, 101);
        assert_eq!(t.errors, 1);
        assert_eq!(t.first_error.as_deref(), Some("boom"));
        let p = t.percentiles();
        assert!((p.p50_ms - 51.0).abs() < 0.5, "{p:?}");
        assert!((p.max_ms - 2_000.0).abs() < 2.0, "{p:?}");
    }

    #[test]
    fn empty_tally_reads_zero() {
        assert_eq!(Tally::new().percentiles().p99_ms, 0.0);
    }
}
