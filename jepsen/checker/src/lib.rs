//! Checkers for the histories the chaos harness (`turnstile-jepsen`) records: a WGL
//! linearizability search with per-key partitioning (`wgl`, `models`), lock and fencing checks
//! (`locks`), watch checks (`watch`), and the run report (`report`).

mod findings;
pub mod history;
pub mod locks;
pub mod models;
pub mod outcomes;
pub mod report;
pub mod watch;
pub mod wgl;

use serde::{Deserialize, Serialize};

/// A checker's verdict.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Validity {
    Valid,
    Invalid,
    /// The checker could not decide (a search deadline passed, or the evidence it needs was
    /// not recorded). Never reported as a pass.
    Unknown,
}

/// What one checker found.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CheckResult {
    /// For example `linearizable-register`, `lock-token-order`, `set-lost-adds`.
    pub name: String,
    pub validity: Validity,
    /// How much evidence was checked, e.g. "412 grants on 3 locks".
    pub checked: String,
    /// Human-readable problems: each violation with the operations involved (ids, processes,
    /// times, values), or why the result is unknown. Capped at 20 entries.
    pub problems: Vec<String>,
}

/// Most problems a [`CheckResult`] lists; the count of the rest is appended.
pub const PROBLEMS_LISTED_MAX: usize = 20;
