//! Stops the process when Raft's core stops on its own: a storage error (a snapshot file whose
//! write or `fsync` failed, a state machine that could not apply) or a panic in the core.
//!
//! Why: openraft ends its core on such an error and never restarts it, but the HTTP server
//! kept running, so the node stayed up without Raft: every write answered `503 no_quorum`,
//! `/readyz` 503, forever, and a supervisor saw nothing to restart (measured: `fsync` failed
//! with libfiu under a snapshot, 2026-12-02). A failed log sync already exits
//! (`turnstile_raft::log_store::SyncFailure::ExitProcess`); this does the same for the rest, so
//! the node is gone rather than half-alive, and a restart recovers from what is on disk (the
//! log is never purged past a snapshot that was not written) and from its peers.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::Fatal;
use tokio::sync::watch;
use turnstile_raft::log_store::SYNC_FAILED_EXIT_CODE;

use crate::app::App;

/// Exit status after a panic in Raft's core: `EX_SOFTWARE` in sysexits.h.
pub const RAFT_PANICKED_EXIT_CODE: i32 = 70;

/// Waits until Raft's core stops; exits the process if it stopped on an error while this node
/// was not shutting down. Returns when the node stops (`stop` fires, or Raft stops normally).
pub async fn exit_when_raft_fails(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    // The core sets `running_state` before its task ends, and the end drops the senders of
    // all its metrics channels, so waiting for the server metrics (vote, role, leader,
    // membership: sent only when they change) to close is waiting for the core to stop.
    // `metrics()` itself is sent on every turn of the core's loop, several times per commit,
    // and a task woken by it cost the node a wake-up each time.
    let mut server = app.raft.server_metrics();
    loop {
        tokio::select! {
            changed = server.changed() => if changed.is_err() { break },
            _ = stop.changed() => return,
        }
    }
    let (code, error) = match &app.raft.metrics().borrow_watched().running_state {
        Ok(()) | Err(Fatal::Stopped) => return,
        Err(Fatal::StorageError(e)) => (SYNC_FAILED_EXIT_CODE, e.to_string()),
        Err(Fatal::Panicked) => (RAFT_PANICKED_EXIT_CODE, "panicked".to_string()),
    };
    if *app.stopping.borrow() || *stop.borrow() {
        return;
    }
    if !app.cfg.bugs.exit_on_raft_failure() {
        tracing::error!(error, "BUG INJECTION: Raft stopped on an error; staying up");
        return;
    }
    tracing::error!(
        error,
        exit_code = code,
        "Raft stopped on an error: stopping this node now. Restart it once the cause is fixed \
         (a failing disk: docs/operations.md, \"Disk faults\"); it recovers what it had synced \
         and catches up from its peers"
    );
    std::process::exit(code);
}
