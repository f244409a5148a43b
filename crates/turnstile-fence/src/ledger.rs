//! The example protected resource: an in-memory ledger of account balances whose every fenced
//! read and write goes through a [`Fence`], one fence resource per account.
//!
//! [`http`] serves it (`router`), [`error`] maps its refusals to HTTP. The `unfenced` mode
//! ignores tokens altogether: it is the negative control that shows what fencing prevents (the
//! same paused-holder workload loses an update there).

pub mod error;
pub mod http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;

pub use error::LedgerError;
pub use http::router;

use crate::fence::{Fence, FenceStats};
use crate::limits::{LEDGER_ACCOUNTS_MAX, LEDGER_ACCOUNT_NAME_BYTES_MAX, LEDGER_AMOUNT_ABS_MAX};
use crate::token::FenceToken;

/// Whether the ledger enforces fencing tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Writes need a token and go through the fence; reads may carry one.
    Fenced,
    /// Tokens are ignored. Only for demonstrating lost updates.
    Unfenced,
}

/// Counters for `GET /stats`.
#[derive(Debug, Clone, Serialize)]
pub struct LedgerStats {
    /// The ledger's mode.
    pub mode: Mode,
    /// Accounts that exist.
    pub accounts: u64,
    /// Writes applied (accepted and successful).
    pub writes_applied: u64,
    /// The fence's counters (all zero in unfenced mode).
    pub fence: FenceStats,
}

/// Account balances, guarded by a [`Fence`] in [`Mode::Fenced`].
#[derive(Debug)]
pub struct Ledger {
    mode: Mode,
    fence: Fence,
    /// Locked only briefly, and (in fenced mode) always inside the account's fence slot, so
    /// the lock order is fence slot, then accounts.
    accounts: Mutex<HashMap<String, i64>>,
    writes_applied: AtomicU64,
}

impl Ledger {
    /// A ledger in `mode`, checking tokens with `fence` (unused when unfenced).
    pub fn new(mode: Mode, fence: Fence) -> Self {
        Ledger {
            mode,
            fence,
            accounts: Mutex::new(HashMap::new()),
            writes_applied: AtomicU64::new(0),
        }
    }

    /// A fenced ledger pinned to the first cluster it sees.
    pub fn fenced() -> Self {
        Ledger::new(Mode::Fenced, Fence::new())
    }

    /// The negative control: a ledger that ignores tokens.
    pub fn unfenced() -> Self {
        Ledger::new(Mode::Unfenced, Fence::new())
    }

    /// The ledger's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The balance of `account` (0 if it has never been written). With a token, in fenced mode,
    /// the read is fenced and records the token; without one it is a plain read.
    pub fn balance(&self, account: &str, fence: Option<&FenceToken>) -> Result<i64, LedgerError> {
        validate_account(account)?;
        let read = || self.accounts().get(account).copied().unwrap_or(0);
        match (self.mode, fence) {
            (Mode::Fenced, Some(token)) => Ok(self.fence.read(account, token, read)?),
            _ => Ok(read()),
        }
    }

    /// Adds `amount` to `account`, returning the new balance.
    pub fn add(
        &self,
        account: &str,
        amount: i64,
        fence: Option<&FenceToken>,
    ) -> Result<i64, LedgerError> {
        check_amount(amount)?;
        self.update(account, fence, |old| {
            old.checked_add(amount)
                .filter(|b| b.unsigned_abs() <= LEDGER_AMOUNT_ABS_MAX.unsigned_abs())
                .ok_or(LedgerError::OutOfRange)
        })
    }

    /// Sets `account` to `balance` (the write of a client-side read-modify-write).
    pub fn set(
        &self,
        account: &str,
        balance: i64,
        fence: Option<&FenceToken>,
    ) -> Result<i64, LedgerError> {
        check_amount(balance)?;
        self.update(account, fence, |_| Ok(balance))
    }

    /// The counters so far.
    pub fn stats(&self) -> LedgerStats {
        LedgerStats {
            mode: self.mode,
            accounts: self.accounts().len() as u64,
            writes_applied: self.writes_applied.load(Ordering::Relaxed),
            fence: self.fence.stats(),
        }
    }

    /// Applies `new_balance` to `account`, through the fence in fenced mode.
    fn update(
        &self,
        account: &str,
        fence: Option<&FenceToken>,
        new_balance: impl FnOnce(i64) -> Result<i64, LedgerError>,
    ) -> Result<i64, LedgerError> {
        validate_account(account)?;
        let apply = || {
            let mut accounts = self.accounts();
            let old = accounts.get(account).copied();
            if old.is_none() && accounts.len() >= LEDGER_ACCOUNTS_MAX {
                return Err(LedgerError::TooManyAccounts {
                    max: LEDGER_ACCOUNTS_MAX,
                });
            }
            let balance = new_balance(old.unwrap_or(0))?;
            accounts.insert(account.to_owned(), balance);
            self.writes_applied.fetch_add(1, Ordering::Relaxed);
            Ok(balance)
        };
        match (self.mode, fence) {
            (Mode::Fenced, Some(token)) => self.fence.write(account, token, apply)?,
            (Mode::Fenced, None) => Err(LedgerError::FenceRequired),
            (Mode::Unfenced, _) => apply(),
        }
    }

    fn accounts(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        // Nothing that holds this lock can panic between changes, so a poisoned map is whole.
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn validate_account(account: &str) -> Result<(), LedgerError> {
    if account.is_empty() || account.len() > LEDGER_ACCOUNT_NAME_BYTES_MAX {
        return Err(LedgerError::BadRequest(format!(
            "account name must be 1 to {LEDGER_ACCOUNT_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

fn check_amount(amount: i64) -> Result<(), LedgerError> {
    if amount.unsigned_abs() > LEDGER_AMOUNT_ABS_MAX.unsigned_abs() {
        return Err(LedgerError::OutOfRange);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FenceError;

    fn tok(token: u64) -> FenceToken {
        FenceToken::new("c", "acct-lock", token)
    }

    #[test]
    fn fenced_ledger_refuses_a_superseded_read_modify_write() {
        let ledger = Ledger::fenced();
        assert_eq!(ledger.set("a", 100, Some(&tok(9))), Ok(100));
        let a_read = ledger.balance("a", Some(&tok(10))).expect("A reads");
        let b_read = ledger.balance("a", Some(&tok(11))).expect("B reads");
        assert_eq!(ledger.set("a", b_read + 1, Some(&tok(11))), Ok(101));
        assert_eq!(
            ledger.set("a", a_read + 1, Some(&tok(10))),
            Err(LedgerError::Fence(FenceError::Stale {
                highest: 11,
                token: 10
            }))
        );
        assert_eq!(ledger.balance("a", None), Ok(101));
    }

    #[test]
    fn unfenced_ledger_loses_the_update() {
        let ledger = Ledger::unfenced();
        assert_eq!(ledger.set("a", 100, None), Ok(100));
        let a_read = ledger.balance("a", Some(&tok(10))).expect("A reads");
        let b_read = ledger.balance("a", Some(&tok(11))).expect("B reads");
        assert_eq!(ledger.set("a", b_read + 1, Some(&tok(11))), Ok(101));
        assert_eq!(ledger.set("a", a_read + 1, Some(&tok(10))), Ok(101));
        assert_eq!(
            ledger.balance("a", None),
            Ok(101),
            "two increments, one kept"
        );
    }

    #[test]
    fn fenced_writes_need_a_token_and_amounts_are_bounded() {
        let ledger = Ledger::fenced();
        assert_eq!(ledger.add("a", 1, None), Err(LedgerError::FenceRequired));
        assert_eq!(
            ledger.add("a", LEDGER_AMOUNT_ABS_MAX + 1, Some(&tok(1))),
            Err(LedgerError::OutOfRange)
        );
        assert_eq!(
            ledger.add("a", LEDGER_AMOUNT_ABS_MAX, Some(&tok(1))),
            Ok(1 << 53)
        );
        assert_eq!(
            ledger.add("a", 1, Some(&tok(1))),
            Err(LedgerError::OutOfRange)
        );
        assert!(ledger.balance("", None).is_err());
        assert_eq!(ledger.stats().writes_applied, 1);
    }
}
