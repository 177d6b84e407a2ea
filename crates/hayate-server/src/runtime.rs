//! The Tokio runtime Hayate runs on, built in one place so the binary and the tests that
//! check its scheduling use the same settings.
//!
//! Arrival order: packets from different connections are handled in the order the kernel
//! reported them ready. Tokio's multi-threaded scheduler has a "LIFO slot" that runs the task
//! woken last before the ones woken earlier; when one poll of the I/O driver wakes a
//! subscriber's connection (its SUBSCRIBE arrived) and then a publisher's (its PUBLISH arrived
//! microseconds later), the slot runs the publisher first and the subscriber misses a message
//! that Mosquitto would deliver. Hayate turns the slot off. The switch is an unstable Tokio
//! API, enabled by `--cfg tokio_unstable` in the workspace's `.cargo/config.toml`; a build
//! without it still works, keeps the LIFO slot, and says so in a warning at start-up.

use std::io;

/// A multi-threaded runtime with `threads` workers (at least 1) and every driver enabled. With
/// `keep_arrival_order` the LIFO slot is off where the build allows it (see the module docs);
/// without it Tokio keeps the slot, which saves about 10 % CPU per message in the one message
/// per wake-up shape and reverses the order of tasks woken together.
pub fn build(threads: usize, keep_arrival_order: bool) -> io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(threads.max(1))
        .thread_name("hayate-worker")
        .enable_all();
    #[cfg(tokio_unstable)]
    if keep_arrival_order {
        builder.disable_lifo_slot();
    }
    #[cfg(not(tokio_unstable))]
    let _ = keep_arrival_order;
    builder.build()
}

/// False when this build keeps Tokio's LIFO slot, so arrival order across connections is not
/// kept (built without `--cfg tokio_unstable`, for example with `RUSTFLAGS` set, which replaces
/// `.cargo/config.toml`'s flags).
pub fn keeps_arrival_order() -> bool {
    cfg!(tokio_unstable)
}
