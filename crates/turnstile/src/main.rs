//! The `turnstile` binary: the allocator, then [`turnstile::run`] (the commands are in the
//! crate's library, `src/lib.rs`).

/// jemalloc, not glibc's malloc: a node spent about 14% of its CPU in glibc's allocator under
/// load, and jemalloc raised lock throughput by 13-16% for 10% more memory at rest
/// (docs/benchmarks.md, "Allocator").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    turnstile::run().await
}
