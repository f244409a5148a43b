//! Fencing for resources that Turnstile locks protect: a resource server embeds [`Fence`] and
//! refuses reads and writes from lock holders that have been superseded.
//!
//! A lock's lease can expire while its holder is paused; the holder then wakes up and acts with
//! an old grant. The only safe answer is for the resource to compare the grant's fencing token
//! (the Raft log index of the granting entry) with the highest token it has seen, in the same
//! atomic step as the access. `docs/fencing.md` covers the whole picture, including the SQL
//! recipe in `sql/recipe.sql` for resources that live in a database.
//!
//! Module map:
//! - [`fence`]: [`Fence`], the per-resource highest-token check, and its [`FenceStats`].
//! - [`token`]: [`FenceToken`], what a holder presents (`cluster_id`, `lock`, `token`).
//! - [`error`]: [`FenceError`], why an access was refused.
//! - [`limits`]: hard limits, units last in the names.
//! - [`ledger`]: an example protected resource, a small HTTP ledger built on [`Fence`] (and the
//!   `turnstile-ledger` binary that serves it).

pub mod error;
pub mod fence;
pub mod ledger;
pub mod limits;
pub mod token;

pub use error::FenceError;
pub use fence::{Fence, FenceConfig, FenceStats};
pub use token::FenceToken;
