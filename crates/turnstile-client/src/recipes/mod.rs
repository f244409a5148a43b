//! Recipes built on the client's primitives, each with its trade-off stated where it is
//! defined:
//! - [`StripedLock`] (`striped.rs`): N locks for an unbounded key space, chosen by a stable
//!   hash of the key.
//! - [`Barrier`] (`barrier.rs`): a key whose presence holds waiters back until it is deleted.
//! - [`ManyGuard`] (`many.rs`): several locks granted together by one entry, held and
//!   released as one, under a [`crate::Session`].

mod barrier;
mod many;
mod striped;

pub use barrier::Barrier;
pub use many::ManyGuard;
pub use striped::{stripe_of, StripedLock, STRIPES_MAX};
