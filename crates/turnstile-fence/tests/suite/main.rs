//! The fenced ledger and the SQL recipe, linked as one executable. (`refusal_logs.rs` stays
//! alone: it captures tracing output, which concurrent tests in one process would disturb.)

mod ledger;
mod sql_recipe;
