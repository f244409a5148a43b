//! The checkers' suites, linked as one executable.

mod locks;
mod report;
mod watch;
mod wgl;
