//! Golden encodings and property tests of the state machine, linked as one executable.

mod golden;
mod properties;
