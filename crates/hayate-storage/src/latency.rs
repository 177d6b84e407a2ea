//! The store thread's latency histograms (commit, fsync): `hayate_core::latency`'s, observed
//! once per commit or fsync, never per message.

pub use hayate_core::latency::{Latency, LatencyHistogram, LATENCY_BUCKETS_MICROS};
