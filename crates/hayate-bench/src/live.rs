//! The live figures a part keeps for `--metrics-listen` (read at scrape time by
//! [`crate::metrics`]): PUBLISH packets and payload bytes sent and received by QoS, duplicates,
//! reordered and foreign messages, connection and subscription failures, negative
//! acknowledgements, and the end-to-end latency as fixed histogram buckets.
//!
//! Every figure is a relaxed atomic added to once per write or per read batch, from counts
//! the task kept locally meanwhile: no lock and no atomic per message. A worker process
//! mirrors them to its coordinator with its other live counters (every 100 ms).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds of the latency buckets, in seconds; one more bucket holds what is above the
/// last.
pub const LATENCY_BUCKETS_SECONDS: [f64; 18] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The bucket bounds in nanoseconds.
const BOUNDS_NS: [u64; 18] = [
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets: one per bound and one above them.
pub const LATENCY_BUCKETS: usize = BOUNDS_NS.len() + 1;

fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Relaxed);
    }
}

/// A part's live figures.
#[derive(Debug, Default)]
pub struct LiveMetrics {
    /// PUBLISH packets written, by QoS.
    sent: [AtomicU64; 3],
    /// Their payload bytes, by QoS.
    sent_bytes: [AtomicU64; 3],
    /// PUBLISH packets received by subscribers (every copy), by QoS.
    received: [AtomicU64; 3],
    /// Their payload bytes, by QoS.
    received_bytes: [AtomicU64; 3],
    /// Copies of messages already received.
    duplicates: AtomicU64,
    /// Messages that arrived after a later one of their publisher.
    reordered: AtomicU64,
    /// PUBLISH packets whose payload is not a bench payload.
    foreign: AtomicU64,
    /// Connection attempts that failed.
    connect_failed: AtomicU64,
    /// Subscriptions refused.
    subscribe_failed: AtomicU64,
    /// Negative acknowledgements (PUBACK/PUBREC with an error reason code).
    publish_errors: AtomicU64,
    /// End-to-end latency (from the intended send time) of every bench message received.
    latency: [AtomicU64; LATENCY_BUCKETS],
    /// Their sum, in nanoseconds.
    latency_sum_ns: AtomicU64,
}

impl LiveMetrics {
    /// Counts `packets` PUBLISH packets of `qos` with `payload_bytes` in all, written.
    pub fn sent(&self, qos: u8, packets: u64, payload_bytes: u64) {
        let q = usize::from(qos.min(2));
        add(&self.sent[q], packets);
        add(&self.sent_bytes[q], payload_bytes);
    }

    /// Adds what a subscriber counted over one read.
    pub fn received(&self, tally: &ReceiveTally) {
        for q in 0..3 {
            add(&self.received[q], tally.packets[q]);
            add(&self.received_bytes[q], tally.bytes[q]);
        }
        add(&self.duplicates, tally.duplicates);
        add(&self.reordered, tally.reordered);
        add(&self.foreign, tally.foreign);
        for (bucket, n) in self.latency.iter().zip(&tally.latency) {
            add(bucket, *n);
        }
        add(&self.latency_sum_ns, tally.latency_sum_ns);
    }

    /// Counts a failed connection attempt.
    pub fn connect_failed(&self) {
        add(&self.connect_failed, 1);
    }

    /// Counts a refused subscription.
    pub fn subscribe_failed(&self) {
        add(&self.subscribe_failed, 1);
    }

    /// Counts `n` negative acknowledgements.
    pub fn publish_errors(&self, n: u64) {
        add(&self.publish_errors, n);
    }

    /// Current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let read = |counters: &[AtomicU64]| -> Vec<u64> {
            counters.iter().map(|c| c.load(Relaxed)).collect()
        };
        MetricsSnapshot {
            sent: read(&self.sent),
            sent_bytes: read(&self.sent_bytes),
            received: read(&self.received),
            received_bytes: read(&self.received_bytes),
            duplicates: self.duplicates.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
            foreign: self.foreign.load(Relaxed),
            connect_failed: self.connect_failed.load(Relaxed),
            subscribe_failed: self.subscribe_failed.load(Relaxed),
            publish_errors: self.publish_errors.load(Relaxed),
            latency: read(&self.latency),
            latency_sum_ns: self.latency_sum_ns.load(Relaxed),
        }
    }

    /// Overwrites with a snapshot (a worker process's figures, mirrored).
    pub fn store(&self, s: &MetricsSnapshot) {
        let write = |counters: &[AtomicU64], values: &[u64]| {
            for (c, v) in counters.iter().zip(values) {
                c.store(*v, Relaxed);
            }
        };
        write(&self.sent, &s.sent);
        write(&self.sent_bytes, &s.sent_bytes);
        write(&self.received, &s.received);
        write(&self.received_bytes, &s.received_bytes);
        self.duplicates.store(s.duplicates, Relaxed);
        self.reordered.store(s.reordered, Relaxed);
        self.foreign.store(s.foreign, Relaxed);
        self.connect_failed.store(s.connect_failed, Relaxed);
        self.subscribe_failed.store(s.subscribe_failed, Relaxed);
        self.publish_errors.store(s.publish_errors, Relaxed);
        write(&self.latency, &s.latency);
        self.latency_sum_ns.store(s.latency_sum_ns, Relaxed);
    }
}

/// [`LiveMetrics`] at one moment (and on the wire from a worker process). Per-QoS vectors
/// hold QoS 0, 1, 2; `latency` one count per bucket, not cumulative.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// PUBLISH packets written, by QoS.
    pub sent: Vec<u64>,
    /// Their payload bytes, by QoS.
    pub sent_bytes: Vec<u64>,
    /// PUBLISH packets received (every copy), by QoS.
    pub received: Vec<u64>,
    /// Their payload bytes, by QoS.
    pub received_bytes: Vec<u64>,
    /// Duplicates received.
    pub duplicates: u64,
    /// Messages received out of order.
    pub reordered: u64,
    /// Foreign PUBLISH packets received.
    pub foreign: u64,
    /// Failed connection attempts.
    pub connect_failed: u64,
    /// Refused subscriptions.
    pub subscribe_failed: u64,
    /// Negative acknowledgements.
    pub publish_errors: u64,
    /// Latency observations per bucket.
    pub latency: Vec<u64>,
    /// Their sum, ns.
    pub latency_sum_ns: u64,
}

impl MetricsSnapshot {
    /// Adds another part's figures.
    pub fn add(&mut self, other: &MetricsSnapshot) {
        let sum = |mine: &mut Vec<u64>, theirs: &[u64]| {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        };
        sum(&mut self.sent, &other.sent);
        sum(&mut self.sent_bytes, &other.sent_bytes);
        sum(&mut self.received, &other.received);
        sum(&mut self.received_bytes, &other.received_bytes);
        self.duplicates += other.duplicates;
        self.reordered += other.reordered;
        self.foreign += other.foreign;
        self.connect_failed += other.connect_failed;
        self.subscribe_failed += other.subscribe_failed;
        self.publish_errors += other.publish_errors;
        sum(&mut self.latency, &other.latency);
        self.latency_sum_ns += other.latency_sum_ns;
    }
}

/// What a subscriber's receive loop counts over one read, before adding it to the part's
/// [`LiveMetrics`] in one go.
#[derive(Debug, Default, Clone)]
pub struct ReceiveTally {
    packets: [u64; 3],
    bytes: [u64; 3],
    duplicates: u64,
    reordered: u64,
    foreign: u64,
    latency: [u64; LATENCY_BUCKETS],
    latency_sum_ns: u64,
}

impl ReceiveTally {
    /// Counts one PUBLISH of `qos` with `payload_bytes`.
    pub fn packet(&mut self, qos: u8, payload_bytes: usize) {
        let q = usize::from(qos.min(2));
        self.packets[q] += 1;
        self.bytes[q] += payload_bytes as u64;
    }

    /// Counts a foreign PUBLISH.
    pub fn foreign(&mut self) {
        self.foreign += 1;
    }

    /// Counts duplicates and reordered messages found by the recorder.
    pub fn order(&mut self, duplicates: u64, reordered: u64) {
        self.duplicates += duplicates;
        self.reordered += reordered;
    }

    /// Records one message's end-to-end latency.
    pub fn latency(&mut self, ns: u64) {
        let bucket = BOUNDS_NS.partition_point(|bound| *bound < ns);
        self.latency[bucket] += 1;
        self.latency_sum_ns = self.latency_sum_ns.saturating_add(ns);
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.packets.iter().all(|n| *n == 0) && self.foreign == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_agree() {
        for (ns, s) in BOUNDS_NS.iter().zip(LATENCY_BUCKETS_SECONDS) {
            assert!((*ns as f64 / 1e9 - s).abs() < 1e-12, "{ns} ns vs {s} s");
        }
    }

    #[test]
    fn tallies_add_up_and_travel() {
        let live = LiveMetrics::default();
        let mut tally = ReceiveTally::default();
        tally.packet(1, 100);
        tally.packet(1, 100);
        tally.packet(0, 5);
        tally.order(1, 2);
        tally.latency(10_000); // 10 µs: the first bucket
        tally.latency(30_000); // 30 µs: at most 50 µs
        tally.latency(20_000_000_000); // 20 s: above every bound
        live.received(&tally);
        live.sent(2, 3, 300);
        live.publish_errors(1);
        let s = live.snapshot();
        assert_eq!(s.received, vec![1, 2, 0]);
        assert_eq!(s.received_bytes, vec![5, 200, 0]);
        assert_eq!(s.sent, vec![0, 0, 3]);
        assert_eq!((s.duplicates, s.reordered, s.publish_errors), (1, 2, 1));
        assert_eq!(s.latency[0], 1);
        assert_eq!(s.latency[1], 1);
        assert_eq!(s.latency[LATENCY_BUCKETS - 1], 1);
        assert_eq!(s.latency_sum_ns, 20_000_040_000);

        let mirror = LiveMetrics::default();
        mirror.store(&s);
        assert_eq!(mirror.snapshot(), s);
        let mut sum = MetricsSnapshot::default();
        sum.add(&s);
        sum.add(&s);
        assert_eq!(sum.sent, vec![0, 0, 6]);
        assert_eq!(sum.latency[1], 2);
    }
}
