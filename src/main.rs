use std::process::ExitCode;

use clap::Parser;

mod cli;
mod telemetry;

/// jemalloc, not glibc's malloc: with glibc, memory freed after nudge's start-up
/// and change bursts stayed in per-thread arenas (the large benchmark: about
/// 100 MiB resident for 40 MiB of live heap). jemalloc's background thread hands
/// unused pages back to the OS within seconds. The `system-allocator` feature
/// (heap profiling with heaptrack) leaves the system malloc in place.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    cli::Cli::parse().run().await
}
