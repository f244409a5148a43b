//! Lock-free fixed-bucket histograms of the log store's group commits (sync duration, append
//! durability latency, entries per sync). The flusher thread records into them with relaxed
//! atomics; the node's metrics endpoint reads a [`HistogramSnapshot`] and exports it. Kept here,
//! without any exporter crate, so the storage layer does not depend on how figures are shown.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (inclusive) of the duration buckets, in microseconds: 50 µs to 1 s. An
/// `fdatasync` on a healthy SSD takes ~0.1–2 ms; the long tail is what an alert looks for.
pub const DURATION_US_BOUNDS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// Upper bounds (inclusive) of the entries-per-batch buckets: powers of two up to 4096.
pub const ENTRIES_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_024, 4_096];

/// A histogram with fixed integer bucket bounds and an implicit `+Inf` bucket. Relaxed
/// atomics suffice: a reader only needs each bucket to be monotonic, and a snapshot taken
/// while the flusher records may be off by the observation in flight, never more.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One per bound, plus the `+Inf` bucket; NOT cumulative.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds of every bucket but the last (`+Inf`).
    pub bounds: &'static [u64],
    /// Observations per bucket, `bounds.len() + 1` of them; NOT cumulative.
    pub counts: Vec<u64>,
    /// Sum of all observed values, in the histogram's unit.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Total number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl Histogram {
    /// A histogram with these bucket bounds (ascending).
    pub fn new(bounds: &'static [u64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            bounds,
            counts,
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&b| b < value);
        if let Some(c) = self.counts.get(bucket) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// A copy of the current counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// The log store's histograms, shared like its counters by every clone and the flusher.
#[derive(Debug)]
pub struct SyncHistograms {
    /// One group commit: sled `flush` plus `fdatasync`, in microseconds.
    pub sync_us: Histogram,
    /// From an `append` call to its entries being durable (queueing plus sync), in
    /// microseconds. Only appends that succeeded.
    pub append_durable_us: Histogram,
    /// Log entries made durable by one group commit (0 for a sync of a vote or purge only).
    pub sync_batch_entries: Histogram,
}

impl Default for SyncHistograms {
    fn default() -> Self {
        Self {
            sync_us: Histogram::new(DURATION_US_BOUNDS),
            append_durable_us: Histogram::new(DURATION_US_BOUNDS),
            sync_batch_entries: Histogram::new(ENTRIES_BOUNDS),
        }
    }
}

/// A point-in-time copy of [`SyncHistograms`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncHistogramsSnapshot {
    pub sync_us: HistogramSnapshot,
    pub append_durable_us: HistogramSnapshot,
    pub sync_batch_entries: HistogramSnapshot,
}

impl SyncHistograms {
    pub fn snapshot(&self) -> SyncHistogramsSnapshot {
        SyncHistogramsSnapshot {
            sync_us: self.sync_us.snapshot(),
            append_durable_us: self.append_durable_us.snapshot(),
            sync_batch_entries: self.sync_batch_entries.snapshot(),
        }
    }
}

/// Microseconds in `d`, saturating (a sync longer than 584 000 years is not our problem).
pub(super) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_holds_them() {
        let h = Histogram::new(&[1, 10, 100]);
        for v in [0, 1, 2, 10, 11, 100, 101, 5_000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.sum, 1 + 2 + 10 + 11 + 100 + 101 + 5_000);
        assert_eq!(s.bounds, &[1, 10, 100]);
    }

    #[test]
    fn store_bounds_ascend() {
        for bounds in [DURATION_US_BOUNDS, ENTRIES_BOUNDS] {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
