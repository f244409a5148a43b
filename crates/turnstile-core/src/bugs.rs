//! Deliberately broken behaviour for the chaos harness's bug-injection runs (feature
//! `bug-injection`, never in a release build). The harness must catch each switch; a switch it
//! cannot catch means a checker that tests nothing.
//!
//! The flag is process-global because the state machine is pure and takes no configuration;
//! every node of a bug-injection run sets the same value before it applies anything, so
//! replicas still agree with each other.

use std::sync::atomic::{AtomicBool, Ordering};

static GRANT_DUE_WAITERS: AtomicBool = AtomicBool::new(false);

/// Breaks "a waiter whose lease is due is never granted" (etcd#11456): expiry frees the due
/// holders' locks before failing the due leases' waits, so a freed lock can be handed to a
/// waiter whose own lease expires in the same entry.
pub fn set_grant_due_waiters(on: bool) {
    GRANT_DUE_WAITERS.store(on, Ordering::SeqCst);
}

pub(crate) fn grant_due_waiters() -> bool {
    GRANT_DUE_WAITERS.load(Ordering::Relaxed)
}
