//! The log store's suites (openraft's storage suite, reopen), linked as one executable.

mod log_store_reopen;
mod storage_suite;
