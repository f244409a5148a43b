//! The node's waiter registry: queued acquires whose HTTP request is held by this node.
//!
//! A waiter registers before its acquire is proposed (so the entry that grants it cannot slip
//! by), and the state machine's apply listener hands each notice to the registrations of its
//! waiter id on this node only: one response per grant, no broadcast, no polling. The same
//! listener publishes the applied index, which wakes watch streams.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};
use turnstile_core::{Notice, Outcome, Response, State};
use turnstile_raft::state_machine::ApplyListener;

/// Most waiting requests one node holds at once.
pub const WAITERS_PER_NODE_MAX: usize = 100_000;

type Slots = HashMap<String, Vec<(u64, oneshot::Sender<Response>)>>;

/// Registrations by waiter id; shared by the handlers and the apply listener.
pub struct WaiterRegistry {
    slots: Mutex<Slots>,
    next_id: AtomicU64,
    applied: watch::Sender<u64>,
}

/// One waiting request. Dropping it deregisters.
pub struct Registration {
    registry: Arc<WaiterRegistry>,
    waiter_id: String,
    id: u64,
    pub rx: oneshot::Receiver<Response>,
}

/// The node holds too many waiting requests.
#[derive(Debug, thiserror::Error)]
#[error("this node holds {WAITERS_PER_NODE_MAX} waiting requests already")]
pub struct RegistryFull;

impl WaiterRegistry {
    pub fn new() -> Arc<WaiterRegistry> {
        let (applied, _) = watch::channel(0);
        Arc::new(WaiterRegistry {
            slots: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            applied,
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A panic while holding the lock leaves a map of senders; still usable.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers interest in `waiter_id`'s final outcome.
    pub fn register(self: &Arc<Self>, waiter_id: &str) -> Result<Registration, RegistryFull> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots();
        if slots.len() >= WAITERS_PER_NODE_MAX {
            return Err(RegistryFull);
        }
        slots
            .entry(waiter_id.to_string())
            .or_default()
            .push((id, tx));
        Ok(Registration {
            registry: self.clone(),
            waiter_id: waiter_id.to_string(),
            id,
            rx,
        })
    }

    /// Number of requests on this node waiting for `waiter_id`.
    pub fn registrations(&self, waiter_id: &str) -> usize {
        self.slots().get(waiter_id).map_or(0, Vec::len)
    }

    /// Number of waiting requests held here.
    pub fn len(&self) -> usize {
        self.slots().values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A receiver of the applied index, for watch streams.
    pub fn applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    fn deliver(&self, waiter_id: &str, response: &Response) {
        let senders = self.slots().remove(waiter_id).unwrap_or_default();
        for (_, tx) in senders {
            let _ = tx.send(response.clone());
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut slots = self.registry.slots();
        if let Some(v) = slots.get_mut(&self.waiter_id) {
            v.retain(|(id, _)| *id != self.id);
            if v.is_empty() {
                slots.remove(&self.waiter_id);
            }
        }
    }
}

impl ApplyListener for WaiterRegistry {
    fn applied(&self, notices: Vec<Notice>, applied_index: u64) {
        for n in notices {
            self.deliver(&n.waiter_id, &n.response);
        }
        self.applied.send_replace(applied_index);
    }

    fn replaced(&self, state: &State) {
        let ids: Vec<String> = self.slots().keys().cloned().collect();
        for id in ids {
            let Some(record) = state.requests.get(&id) else {
                continue;
            };
            if !matches!(record.response.outcome, Ok(Outcome::Queued { .. })) {
                self.deliver(&id, &record.response);
            }
        }
        self.applied.send_replace(state.applied_index);
    }
}
