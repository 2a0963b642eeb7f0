use std::process::ExitCode;

/// jemalloc, not glibc's malloc: with glibc, memory freed after nudge's start-up
/// and change bursts stayed in per-thread arenas (the large benchmark: about
/// 100 MiB resident for 40 MiB of live heap). jemalloc's background thread hands
/// unused pages back to the OS within seconds. The `system-allocator` feature
/// (heap profiling with heaptrack), or a build without the default `jemalloc`
/// feature, leaves the system malloc in place.
#[cfg(all(feature = "jemalloc", not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: one arena instead of four per CPU
/// (nudge's threads are few and mostly idle, and every arena keeps its own dirty
/// pages: the large benchmark's peak RSS fell from 71 to 57 MiB), freed pages
/// handed back after a second instead of ten, skipping the muzzy stage, and no
/// per-thread caches of freed objects (large benchmark: steady RSS 35.7 → 33.5
/// MiB, peak 49.1 → 43.6 MiB, latency unchanged).
#[cfg(all(feature = "jemalloc", not(feature = "system-allocator")))]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf =
    MallocConf(c"narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache:false".as_ptr());

/// A C string pointer jemalloc reads as its `malloc_conf` global.
#[cfg(all(feature = "jemalloc", not(feature = "system-allocator")))]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable C string literal.
#[cfg(all(feature = "jemalloc", not(feature = "system-allocator")))]
unsafe impl Sync for MallocConf {}

#[tokio::main]
async fn main() -> ExitCode {
    nudge::cli::run(|controller| controller).await
}
