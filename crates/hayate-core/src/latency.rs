//! Latency histograms: a count per fixed bucket in relaxed atomics, observed where something
//! is timed (the store thread once per commit or fsync, a node link once per keep-alive round
//! trip; never per message), read by `$SYS` and `/metrics` at any time. The durations come
//! from the caller: nothing here reads a clock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds; one more bucket holds what is above the last.
pub const LATENCY_BUCKETS_MICROS: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];

/// Buckets of a histogram: one per bound and one above them.
const BUCKETS: usize = LATENCY_BUCKETS_MICROS.len() + 1;

/// A latency histogram written by any thread and read by any (one observation is three
/// relaxed additions and a relaxed maximum).
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS],
    sum_micros: AtomicU64,
    max_micros: AtomicU64,
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn observe(&self, took: Duration) {
        let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
        let bucket = LATENCY_BUCKETS_MICROS.partition_point(|bound| *bound < micros);
        self.buckets[bucket].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
        self.max_micros.fetch_max(micros, Relaxed);
    }

    /// Its figures now.
    pub fn read(&self) -> Latency {
        let mut buckets = [0; BUCKETS];
        for (out, bucket) in buckets.iter_mut().zip(&self.buckets) {
            *out = bucket.load(Relaxed);
        }
        Latency {
            buckets,
            sum_micros: self.sum_micros.load(Relaxed),
            max_micros: self.max_micros.load(Relaxed),
        }
    }
}

/// A latency histogram's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// Observations per bucket (not cumulative): bucket `i` holds those at most
    /// `LATENCY_BUCKETS_MICROS[i]` and above the bound before; the last, those above every
    /// bound.
    pub buckets: [u64; BUCKETS],
    /// The sum of the observations, in microseconds.
    pub sum_micros: u64,
    /// The largest observation, in microseconds.
    pub max_micros: u64,
}

impl Latency {
    /// Observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The mean, in microseconds (0 without observations).
    pub fn mean_micros(&self) -> u64 {
        self.sum_micros.checked_div(self.count()).unwrap_or(0)
    }

    /// The upper bound of the bucket holding quantile `q` (0 to 1) of the observations, in
    /// microseconds: at least that share of them took at most this long. Above the last
    /// bound, the largest observation. `None` without observations.
    pub fn quantile_bound_micros(&self, q: f64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(
                    LATENCY_BUCKETS_MICROS
                        .get(i)
                        .copied()
                        .unwrap_or(self.max_micros),
                );
            }
        }
        Some(self.max_micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let histogram = LatencyHistogram::default();
        for micros in [5, 10, 11, 900, 2_000_000] {
            histogram.observe(Duration::from_micros(micros));
        }
        let latency = histogram.read();
        assert_eq!(latency.count(), 5);
        assert_eq!(latency.buckets[0], 2, "5 and 10 µs: at most 10");
        assert_eq!(latency.buckets[1], 1, "11 µs: at most 25");
        assert_eq!(latency.buckets[6], 1, "900 µs: at most 1 ms");
        assert_eq!(latency.buckets[BUCKETS - 1], 1, "2 s: above every bound");
        assert_eq!(latency.sum_micros, 2_000_926);
        assert_eq!(latency.max_micros, 2_000_000);
        assert_eq!(latency.quantile_bound_micros(0.5), Some(25));
        assert_eq!(latency.quantile_bound_micros(0.8), Some(1_000));
        assert_eq!(latency.quantile_bound_micros(1.0), Some(2_000_000));
        assert_eq!(Latency::default().quantile_bound_micros(0.99), None);
        assert_eq!(Latency::default().mean_micros(), 0);
    }
}
