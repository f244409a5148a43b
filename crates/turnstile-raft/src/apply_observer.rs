//! `ApplyObserver`: a read-only view of every applied entry for the node's metrics. The state
//! machine stays pure: figures are derived from what apply produced (the response, the waiter
//! notices, the watch events the entry recorded) and the state it left, never from inside
//! `turnstile_core`. Every replica applies the same log, so every replica observes the same.

use turnstile_core::{Applied, Envelope, State};

/// Sees each applied application entry, and every wholesale replacement of the state.
///
/// Called from the apply path while the state's write lock is held, so the state passed in is
/// exactly the one the entry left. Implementations must be quick and must not block: readers
/// of the state wait meanwhile.
pub trait ApplyObserver: Send + Sync + 'static {
    /// Entry `index` carried `env` and produced `applied`; `state` is the state after it.
    fn entry_applied(&self, state: &State, index: u64, env: &Envelope, applied: &Applied);

    /// The state was loaded from a snapshot (at open, or installed from the leader): whatever
    /// the observer tracks about holds and waits must be rebuilt from it.
    fn state_loaded(&self, state: &State);
}
