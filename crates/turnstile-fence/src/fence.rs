//! [`Fence`]: per resource, the highest fencing token seen, checked and recorded in the same
//! critical section as the access it guards.
//!
//! Locking: one short-lived map lock finds (or creates) a resource's slot; the slot's own mutex
//! is then held across "compare, record, run the caller's closure". So a check and its access
//! never interleave with another access to the same resource, while different resources
//! proceed in parallel. The locks are `std::sync::Mutex`: the critical sections are short and
//! never `.await`, and the closure is synchronous by design (an async write that outlives the
//! check would reopen the check-then-act gap fencing exists to close).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use serde::Serialize;
use tracing::warn;

use crate::error::FenceError;
use crate::limits::{RESOURCES_TRACKED_MAX, RESOURCE_NAME_BYTES_MAX};
use crate::token::{validate_cluster_id, FenceToken};

/// How a [`Fence`] starts.
#[derive(Debug, Clone)]
pub struct FenceConfig {
    /// The only cluster whose tokens are accepted. `None` pins the fence to the first
    /// cluster it sees, which is convenient but trusts that first caller; configure it in
    /// production.
    pub cluster_id: Option<String>,
    /// Most resources tracked, at most [`RESOURCES_TRACKED_MAX`].
    pub resources_tracked_max: usize,
}

impl Default for FenceConfig {
    fn default() -> Self {
        FenceConfig {
            cluster_id: None,
            resources_tracked_max: RESOURCES_TRACKED_MAX,
        }
    }
}

/// Counters since the fence was built. A snapshot: each field is read on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FenceStats {
    /// Reads and writes let through.
    pub accepted: u64,
    /// Reads and writes refused, for any reason.
    pub rejected: u64,
    /// Of `rejected`: a newer token had been seen ([`FenceError::Stale`]).
    pub rejected_stale: u64,
    /// Of `rejected`: a token from another cluster ([`FenceError::ForeignCluster`]).
    pub rejected_foreign_cluster: u64,
    /// Resources with a recorded token.
    pub resources_tracked: u64,
}

/// Enforces fencing tokens for the resources of one server.
///
/// Every [`Fence::read`] and [`Fence::write`] presents a [`FenceToken`]. It is accepted when it
/// comes from the pinned cluster, names the lock that guards the resource (the first lock the
/// resource saw), and is at least the highest token the resource has seen; the token is then
/// recorded and the closure runs, all under the resource's mutex. An equal token is the same
/// grant accessing again (exclusive grants have unique tokens).
///
/// Reads record their token too: once a newer holder has read, an older holder's write is
/// refused, so the older holder cannot overwrite a value the newer one is computing from (a
/// lost update in read-modify-write).
///
/// State lives in memory. A resource that outlives its server must keep its highest token
/// next to its data and compare in the same atomic write (see `docs/fencing.md`).
#[derive(Debug)]
pub struct Fence {
    /// Set once, at construction or by the first valid token.
    cluster_id: OnceLock<String>,
    resources: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
    resources_tracked_max: usize,
    accepted: AtomicU64,
    rejected: AtomicU64,
    rejected_stale: AtomicU64,
    rejected_foreign_cluster: AtomicU64,
}

/// One resource's fencing state.
#[derive(Debug)]
struct Slot {
    /// The lock whose tokens guard the resource.
    lock: String,
    /// The highest token accepted; 0 before the first access (tokens start at 1).
    highest: u64,
}

/// Which kind of access is being fenced, for logs.
#[derive(Debug, Clone, Copy)]
enum Access {
    Read,
    Write,
}

impl Default for Fence {
    fn default() -> Self {
        Fence::build(None, RESOURCES_TRACKED_MAX)
    }
}

impl Fence {
    /// A fence pinned to the first cluster it sees, tracking up to [`RESOURCES_TRACKED_MAX`]
    /// resources.
    pub fn new() -> Self {
        Fence::default()
    }

    /// A fence that accepts only tokens of `cluster_id`.
    pub fn pinned(cluster_id: impl Into<String>) -> Result<Self, FenceError> {
        Fence::with_config(FenceConfig {
            cluster_id: Some(cluster_id.into()),
            ..FenceConfig::default()
        })
    }

    /// A fence from a validated [`FenceConfig`].
    pub fn with_config(config: FenceConfig) -> Result<Self, FenceError> {
        if let Some(id) = &config.cluster_id {
            validate_cluster_id(id)?;
        }
        if config.resources_tracked_max == 0 || config.resources_tracked_max > RESOURCES_TRACKED_MAX
        {
            return Err(FenceError::Invalid {
                field: "resources_tracked_max",
                reason: "must be 1 to RESOURCES_TRACKED_MAX (100000)",
            });
        }
        Ok(Fence::build(
            config.cluster_id,
            config.resources_tracked_max,
        ))
    }

    fn build(cluster_id: Option<String>, resources_tracked_max: usize) -> Self {
        let pinned = OnceLock::new();
        if let Some(id) = cluster_id {
            // A fresh OnceLock is empty, so this set cannot fail.
            let _ = pinned.set(id);
        }
        Fence {
            cluster_id: pinned,
            resources: Mutex::new(HashMap::new()),
            resources_tracked_max,
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            rejected_stale: AtomicU64::new(0),
            rejected_foreign_cluster: AtomicU64::new(0),
        }
    }

    /// Runs `write` if `token` may write `resource`, after recording the token; otherwise
    /// refuses without running it. The token stays recorded even if `write` reports a failure
    /// of its own: the grant was seen, so every older one is superseded all the same.
    pub fn write<T>(
        &self,
        resource: &str,
        token: &FenceToken,
        write: impl FnOnce() -> T,
    ) -> Result<T, FenceError> {
        self.access(Access::Write, resource, token, write)
    }

    /// Runs `read` if `token` may read `resource`, after recording the token; otherwise
    /// refuses. Recording on read is what refuses a superseded holder's write after a newer
    /// holder has read the value it will overwrite.
    pub fn read<T>(
        &self,
        resource: &str,
        token: &FenceToken,
        read: impl FnOnce() -> T,
    ) -> Result<T, FenceError> {
        self.access(Access::Read, resource, token, read)
    }

    /// The highest token recorded for `resource`, if any. A diagnostic: it can be stale as
    /// soon as it returns, so never decide to write from it.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        let slot = self.resources_map().get(resource).cloned()?;
        let highest = lock_slot(&slot).highest;
        (highest > 0).then_some(highest)
    }

    /// The cluster this fence accepts, once known.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.get().map(String::as_str)
    }

    /// The counters so far.
    pub fn stats(&self) -> FenceStats {
        FenceStats {
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            rejected_stale: self.rejected_stale.load(Ordering::Relaxed),
            rejected_foreign_cluster: self.rejected_foreign_cluster.load(Ordering::Relaxed),
            resources_tracked: self.resources_map().len() as u64,
        }
    }

    fn access<T>(
        &self,
        access: Access,
        resource: &str,
        token: &FenceToken,
        run: impl FnOnce() -> T,
    ) -> Result<T, FenceError> {
        match self.admit(resource, token) {
            Ok(slot) => {
                let mut slot = lock_slot(&slot);
                match check(&slot, token) {
                    Ok(()) => {
                        slot.highest = token.token;
                        self.accepted.fetch_add(1, Ordering::Relaxed);
                        // Still under the slot's mutex: no other access to this resource can
                        // record a newer token between the check above and this access.
                        Ok(run())
                    }
                    Err(e) => Err(self.refuse(access, resource, token, e)),
                }
            }
            Err(e) => Err(self.refuse(access, resource, token, e)),
        }
    }

    /// Validates the request, checks the cluster, and returns the resource's slot (creating
    /// it, guarded by the token's lock, if the resource is new and there is room).
    fn admit(&self, resource: &str, token: &FenceToken) -> Result<Arc<Mutex<Slot>>, FenceError> {
        if resource.is_empty() || resource.len() > RESOURCE_NAME_BYTES_MAX {
            return Err(FenceError::Invalid {
                field: "resource",
                reason: "must be 1 to RESOURCE_NAME_BYTES_MAX (512) bytes",
            });
        }
        token.validate()?;
        let pinned = self.cluster_id.get_or_init(|| token.cluster_id.clone());
        if *pinned != token.cluster_id {
            return Err(FenceError::ForeignCluster {
                expected: pinned.clone(),
                got: token.cluster_id.clone(),
            });
        }
        let mut map = self.resources_map();
        if let Some(slot) = map.get(resource) {
            return Ok(Arc::clone(slot));
        }
        if map.len() >= self.resources_tracked_max {
            return Err(FenceError::TooManyResources {
                max: self.resources_tracked_max,
            });
        }
        let slot = Arc::new(Mutex::new(Slot {
            lock: token.lock.clone(),
            highest: 0,
        }));
        map.insert(resource.to_owned(), Arc::clone(&slot));
        Ok(slot)
    }

    /// Counts and logs a refusal, and hands the error back.
    fn refuse(
        &self,
        access: Access,
        resource: &str,
        token: &FenceToken,
        e: FenceError,
    ) -> FenceError {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        let by_reason = match &e {
            FenceError::Stale { .. } => Some(&self.rejected_stale),
            FenceError::ForeignCluster { .. } => Some(&self.rejected_foreign_cluster),
            _ => None,
        };
        if let Some(counter) = by_reason {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        log_refusal(access, resource, token, &e);
        e
    }

    fn resources_map(&self) -> MutexGuard<'_, HashMap<String, Arc<Mutex<Slot>>>> {
        // Only a failed allocation can panic while this lock is held, and it leaves the map
        // whole, so a poisoned map is still a correct map.
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fencing rule for a resource that already has a slot.
fn check(slot: &Slot, token: &FenceToken) -> Result<(), FenceError> {
    if slot.lock != token.lock {
        return Err(FenceError::WrongLock {
            expected: slot.lock.clone(),
            got: token.lock.clone(),
        });
    }
    if token.token < slot.highest {
        return Err(FenceError::Stale {
            highest: slot.highest,
            token: token.token,
        });
    }
    Ok(())
}

fn lock_slot(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // The slot is poisoned when a caller's closure panicked while it was held. The token was
    // recorded before the closure ran, so the slot itself is consistent and still safe to use
    // (whether the caller's own data is, is the caller's lock's business).
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

fn log_refusal(access: Access, resource: &str, token: &FenceToken, e: &FenceError) {
    let highest = match e {
        FenceError::Stale { highest, .. } => Some(*highest),
        _ => None,
    };
    let (reason, lock, cluster_id, token) = (
        e.reason(),
        token.lock.as_str(),
        token.cluster_id.as_str(),
        token.token,
    );
    match access {
        Access::Write => warn!(
            resource = %resource, token, highest, lock, cluster_id, reason, error = %e,
            "fenced write rejected"
        ),
        Access::Read => warn!(
            resource = %resource, token, highest, lock, cluster_id, reason, error = %e,
            "fenced read rejected"
        ),
    }
}

#[cfg(test)]
#[path = "fence_test.rs"]
mod fence_test;
