//! Live heap bytes per held lock of the state machine alone, by collection: the bench's W6
//! (one lease per 1,000 locks, every acquire with its own `request_id`) applied straight to
//! a `State`, under an allocator that counts live bytes. W6 measures a node's RSS; this says
//! how much of it is the state and which collection holds it (docs/benchmarks.md, "W6").
//!
//! `cargo run --release -p turnstile-core --example state_bytes -- [locks, default 50000]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use turnstile_core::State;

#[path = "w6_log/mod.rs"]
mod w6_log;
use w6_log::Log;

/// The system allocator, counting the bytes it has handed out and not yet taken back.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the same arguments; the counter is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

fn main() {
    let locks = w6_log::arg_or(1, 50_000, "state_bytes [locks > 0]");
    let mut log = Log::new();
    let leases = log.grant_leases(locks, 600_000);

    let before = live_bytes();
    for k in 0..locks {
        let name = format!("w6-{k}");
        log.acquire(&name, name.clone(), w6_log::lease_of(&leases, k));
    }
    let per_lock = |bytes: isize| bytes / locks as isize;
    println!(
        "{locks} held locks: {} live bytes per lock in the state",
        per_lock(live_bytes() - before)
    );

    // Each collection's share: the live bytes its emptying frees.
    let state = &mut log.state;
    let mut last = live_bytes();
    let mut share = |what: &str, state: &mut State, empty: fn(&mut State)| {
        empty(state);
        let now = live_bytes();
        println!("  {what:<15} {:>5}", per_lock(last - now));
        last = now;
    };
    share("requests", state, |s| s.requests = Default::default());
    share("locks", state, |s| s.locks = Default::default());
    share("leases", state, |s| s.leases = Default::default());
    share("grant_requests", state, |s| {
        s.grant_requests = Default::default()
    });
    share("events", state, |s| s.events = Default::default());
}
