//! `Reply`: the write responder openraft completes when an entry applies (or fails before it
//! does), as a closure of the caller's choosing.
//!
//! Why: `Raft::client_write_many` answers through one oneshot per entry and a stream that
//! awaits them in order, so a caller needs a task of its own to read that stream and pass each
//! answer on: one more wake-up between an entry's apply and its HTTP handler. A `Reply` runs
//! where openraft completes the entry (its state-machine worker, or its core for an entry that
//! failed early), so the leader's proposer hands each answer straight to the waiting handlers.
//! The closure must be quick and must not block: it runs inside Raft's own tasks.

use openraft::OptionalSend;

use crate::types::TypeConfig;

/// Runs its closure with the entry's result; dropped unrun if Raft stops first.
pub struct Reply<T>(Box<dyn FnOnce(T) + Send>);

impl<T> Reply<T> {
    pub fn new(on_complete: impl FnOnce(T) + Send + 'static) -> Reply<T> {
        Reply(Box::new(on_complete))
    }
}

impl<T> openraft::raft::responder::Responder<TypeConfig, T> for Reply<T>
where
    T: OptionalSend + 'static,
{
    fn on_complete(self, result: T) {
        (self.0)(result)
    }
}
