//! When to take a snapshot: after as many entries as the state holds records, and never
//! fewer than `--snapshot-logs`, staggered between replicas.
//!
//! A snapshot costs time proportional to the state (every record is walked, encoded and
//! written), so a fixed "every N entries" makes the snapshot work per entry grow with the
//! state: at a million records, one snapshot every 10,000 entries spent more CPU on snapshots
//! than on the entries themselves. Waiting for as many entries as there are records keeps the
//! amortised snapshot cost per entry at about one record's encoding, whatever the state's size,
//! and bounds the log behind the newest snapshot at about the snapshot's own size (restart
//! replays at most that many entries). openraft's own policy is turned off
//! (`SnapshotPolicy::Never`); this task triggers builds instead.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

use crate::app::App;

/// How often the policy looks at the log.
pub const SNAPSHOT_POLICY_CHECK_MS: u64 = 200;

/// Entries to wait for since the newest snapshot (or the last build asked for) before the
/// next one: the state's records, at least `min_entries`, plus a node-dependent eighth per
/// step (`node_id % 4` steps). Every replica holds the same state and log, so without the
/// stagger all of them would snapshot at the same entry and compete for the CPU together.
pub fn entries_due(records: u64, min_entries: u64, node_id: u64) -> u64 {
    let base = records.max(min_entries);
    base + base / 8 * (node_id % 4)
}

/// Runs until `stop`: asks openraft for a snapshot when [`entries_due`] entries have been
/// applied since the newest snapshot and since the last request.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(SNAPSHOT_POLICY_CHECK_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The applied index at the last request: a build in flight is not asked for again (and
    // openraft ignores a request while it builds), and a failed one is retried only after
    // another full interval of entries.
    let mut asked_at = 0u64;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.changed() => return,
        }
        let (applied, snapshot) = {
            let m = app.raft.metrics().borrow_watched().clone();
            (
                m.last_applied.map_or(0, |l| l.index),
                m.snapshot.map_or(0, |l| l.index),
            )
        };
        let records = app.sm.read().state.records_count();
        let since = applied.saturating_sub(snapshot.max(asked_at));
        if since < entries_due(records, app.cfg.snapshot_logs, app.node_id()) {
            continue;
        }
        tracing::debug!(applied, snapshot, records, "snapshot due");
        asked_at = applied;
        if let Err(e) = app.raft.trigger().snapshot().await {
            tracing::debug!(error = %e, "snapshot not triggered: raft stopped");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_as_many_entries_as_records_and_at_least_the_minimum() {
        assert_eq!(entries_due(0, 10_000, 4), 10_000);
        assert_eq!(entries_due(9_999, 10_000, 4), 10_000);
        assert_eq!(entries_due(1_000_000, 10_000, 4), 1_000_000);
    }

    #[test]
    fn replicas_are_staggered() {
        let due: Vec<u64> = (1..=3).map(|id| entries_due(800_000, 10_000, id)).collect();
        assert_eq!(due, vec![900_000, 1_000_000, 1_100_000]);
    }
}
