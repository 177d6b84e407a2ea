//! Statistics: latency histograms, per-stream loss/duplicate/reorder tracking, and the
//! receive-side [`Recorder`] that combines them with a per-interval time series.
//!
//! Everything here is mergeable: a worker process ships its [`RecorderWire`] (histograms as
//! base64 HdrHistogram V2) to the coordinator, which adds it into its own recorder.

use crate::results::{LatencySummary, PercentilePoint};
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Highest latency a histogram holds (one hour in ns); larger values are clamped to it.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    // Bounds are constants known to be valid.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).unwrap_or_else(|_| unreachable_hist())
}

/// A coarse histogram (2 significant digits, microseconds) for per-interval figures and
/// connect times, small enough to keep one per second of a long run.
pub fn coarse_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS / 1000, 2).unwrap_or_else(|_| unreachable_hist())
}

fn unreachable_hist() -> Histogram<u64> {
    // new(3) with auto-resize cannot fail for sigfig 3.
    Histogram::new(3).expect("sigfig 3 is valid")
}

/// Serializes a histogram as base64 of its HdrHistogram V2 encoding.
pub fn hist_to_base64(hist: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    if V2Serializer::new().serialize(hist, &mut bytes).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Parses [`hist_to_base64`] output; `None` when malformed.
pub fn hist_from_base64(text: &str) -> Option<Histogram<u64>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    Deserializer::new().deserialize(&mut bytes.as_slice()).ok()
}

/// Adds `src` into `dst`, clamping values `dst` cannot hold.
pub fn merge_hist(dst: &mut Histogram<u64>, src: &Histogram<u64>) {
    if dst.add(src).is_err() {
        for v in src.iter_recorded() {
            dst.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// Summary of a histogram whose values are in `unit_ns` nanoseconds (1 for ns, 1000 for µs);
/// figures are returned in microseconds.
pub fn summarize(hist: &Histogram<u64>, unit_ns: u64, corrected: bool) -> LatencySummary {
    let us = |v: u64| (v as f64 * unit_ns as f64) / 1000.0;
    let empty = hist.is_empty();
    let q = |quantile: f64| {
        if empty {
            0.0
        } else {
            us(hist.value_at_quantile(quantile))
        }
    };
    let distribution = if empty {
        Vec::new()
    } else {
        [
            0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
        ]
        .iter()
        .map(|&p| PercentilePoint {
            percentile: p,
            value_us: us(hist.value_at_quantile(p / 100.0)),
        })
        .collect()
    };
    LatencySummary {
        count: hist.len(),
        min_us: if empty { 0.0 } else { us(hist.min()) },
        mean_us: if empty {
            0.0
        } else {
            hist.mean() * unit_ns as f64 / 1000.0
        },
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: if empty { 0.0 } else { us(hist.max()) },
        corrected_for_coordinated_omission: corrected,
        distribution,
        histogram_v2: if unit_ns == 1 && !empty {
            Some(hist_to_base64(hist))
        } else {
            None
        },
    }
}

/// What [`StreamTracker::record`] concluded about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// First copy of this sequence number; `reordered` when a higher one arrived before it.
    New {
        /// A message with a higher sequence number of the same stream arrived earlier.
        reordered: bool,
    },
    /// A copy of a sequence number already received (or one given up as lost long ago).
    Duplicate,
}

/// How far ahead of the oldest missing message a stream may run before that message is given
/// up as lost (bounds the per-stream memory under heavy loss).
pub const REORDER_WINDOW: u64 = 4096;

/// Per-stream sequence state: which sequence numbers arrived, compactly.
///
/// `next` is the lowest sequence number not yet received; everything below it arrived (or was
/// given up). Arrivals above `next` are kept in a ring bitmap of [`REORDER_WINDOW`] bits that
/// exists only while there is a gap.
#[derive(Debug, Clone, Default)]
pub struct StreamTracker {
    next: u64,
    seen_upto: u64,
    ring: Option<Box<[u64; (REORDER_WINDOW / 64) as usize]>>,
    pending: u32,
}

impl StreamTracker {
    /// One past the highest sequence number seen (0 before any).
    pub fn seen_upto(&self) -> u64 {
        self.seen_upto
    }

    fn bit(seq: u64) -> (usize, u64) {
        let pos = seq % REORDER_WINDOW;
        ((pos / 64) as usize, 1u64 << (pos % 64))
    }

    /// Records the arrival of `seq`.
    pub fn record(&mut self, seq: u64) -> Arrival {
        if seq < self.next {
            return Arrival::Duplicate;
        }
        let reordered = seq + 1 < self.seen_upto;
        if seq + 1 > self.seen_upto {
            self.seen_upto = seq + 1;
        }
        if seq == self.next && self.ring.is_none() {
            self.next += 1;
            return Arrival::New { reordered };
        }
        // Too far ahead: give up the oldest missing messages so `seq` fits in the window.
        if seq >= self.next + REORDER_WINDOW {
            let new_next = seq + 1 - REORDER_WINDOW;
            if let Some(ring) = self.ring.as_mut() {
                while self.next < new_next && self.pending > 0 {
                    let (w, b) = Self::bit(self.next);
                    if ring[w] & b != 0 {
                        ring[w] &= !b;
                        self.pending -= 1;
                    }
                    self.next += 1;
                }
            }
            self.next = self.next.max(new_next);
        }
        let ring = self
            .ring
            .get_or_insert_with(|| Box::new([0u64; (REORDER_WINDOW / 64) as usize]));
        let (w, b) = Self::bit(seq);
        if ring[w] & b != 0 {
            return Arrival::Duplicate;
        }
        ring[w] |= b;
        self.pending += 1;
        // Advance over the contiguous prefix.
        loop {
            let (w, b) = Self::bit(self.next);
            if ring[w] & b == 0 {
                break;
            }
            ring[w] &= !b;
            self.pending -= 1;
            self.next += 1;
        }
        if self.pending == 0 {
            self.ring = None;
        }
        Arrival::New { reordered }
    }
}

/// Shaping credit of one group of senders: they may send while their `sent` count is below
/// `value`. Updated by the receiver (or, for a worker process, from its coordinator).
#[derive(Debug, Default)]
pub struct Credit {
    /// Senders may send while their count of sent messages is below this.
    pub value: AtomicU64,
    /// Woken when `value` grows.
    pub notify: Notify,
}

impl Credit {
    /// A credit starting at `value`.
    pub fn new(value: u64) -> Credit {
        Credit {
            value: AtomicU64::new(value),
            notify: Notify::new(),
        }
    }

    /// Raises the credit to `value` (never lowers it) and wakes waiting senders.
    pub fn raise(&self, value: u64) {
        if self.value.fetch_max(value, Ordering::AcqRel) < value {
            self.notify.notify_waiters();
        }
    }
}

/// Links a receiver to the shaping credit of the sender groups (parts) it receives from:
/// stream `s` belongs to part `s / chunk`, whose credit is its progress plus its window share.
#[derive(Debug, Clone)]
pub struct CreditHook {
    /// Streams per part.
    pub chunk: u64,
    /// Window share of each part.
    pub window: Vec<u64>,
    /// Credit of each part.
    pub credits: Vec<Arc<Credit>>,
}

/// Per-interval receive figures.
#[derive(Debug, Clone)]
pub struct IntervalBucket {
    /// Messages received in the interval (all, including duplicates).
    pub received: u64,
    /// Latency (corrected) of the messages received in it, µs.
    pub latency: Histogram<u64>,
}

/// What the receivers saw of one phase of a rate schedule.
#[derive(Debug, Clone)]
pub struct PhaseRecord {
    /// Latency (from the intended send time, ns) of the messages intended in the phase.
    pub latency: Histogram<u64>,
    /// First copies received of messages intended in the phase.
    pub delivered: u64,
    /// First copies received during the phase's window (whatever phase they were intended in).
    pub received_in_window: u64,
}

impl PhaseRecord {
    fn new() -> PhaseRecord {
        PhaseRecord {
            latency: latency_histogram(),
            delivered: 0,
            received_in_window: 0,
        }
    }
}

/// The receive side's statistics.
#[derive(Debug)]
pub struct Recorder {
    interval_ns: u64,
    warmup_end_ns: u64,
    /// Latency from the intended send time (coordinated-omission corrected), ns.
    pub corrected: Histogram<u64>,
    /// Latency from the actual send time, ns.
    pub uncorrected: Histogram<u64>,
    /// Per interval of receive time.
    pub series: Vec<Option<IntervalBucket>>,
    streams: HashMap<u64, StreamTracker>,
    /// Every PUBLISH received.
    pub received: u64,
    /// First copies.
    pub unique: u64,
    /// First copies of messages intended after the warm-up (what loss is computed from).
    pub unique_counted: u64,
    /// Copies of messages already received.
    pub duplicates: u64,
    /// Messages that arrived after a higher sequence number of their stream.
    pub reordered: u64,
    /// PUBLISH packets whose payload is not a bench payload.
    pub foreign: u64,
    /// Receive time of the first message.
    pub first_ns: Option<u64>,
    /// Receive time of the last message.
    pub last_ns: Option<u64>,
    /// Rate schedule: the phases' windows (`[start0, start1, ..., end]`, ns); empty otherwise.
    pub phase_bounds: Vec<u64>,
    /// Rate schedule: per phase.
    pub phases: Vec<PhaseRecord>,
    hook: Option<CreditHook>,
    progress: Vec<u64>,
}

impl Recorder {
    /// A recorder with time series buckets of `interval_ns`; messages intended before
    /// `warmup_end_ns` are not in the latency figures nor in the loss accounting.
    pub fn new(interval_ns: u64, warmup_end_ns: u64) -> Recorder {
        Recorder {
            interval_ns: interval_ns.max(1),
            warmup_end_ns,
            corrected: latency_histogram(),
            uncorrected: latency_histogram(),
            series: Vec::new(),
            streams: HashMap::new(),
            received: 0,
            unique: 0,
            unique_counted: 0,
            duplicates: 0,
            reordered: 0,
            foreign: 0,
            first_ns: None,
            last_ns: None,
            phase_bounds: Vec::new(),
            phases: Vec::new(),
            hook: None,
            progress: Vec::new(),
        }
    }

    /// Sets the end of the warm-up (known once the coordinator says go).
    pub fn set_warmup_end(&mut self, ns: u64) {
        self.warmup_end_ns = ns;
    }

    /// Sets the windows of the phases of a rate schedule (`[start0, start1, ..., end]`, ns):
    /// messages are then also accounted per phase, by intended send time and by receive time.
    pub fn set_phases(&mut self, bounds: Vec<u64>) {
        self.phases = (1..bounds.len()).map(|_| PhaseRecord::new()).collect();
        self.phase_bounds = bounds;
    }

    /// True once [`Recorder::set_warmup_end`] was called (or a finite warm-up was given).
    pub fn warmup_set(&self) -> bool {
        self.warmup_end_ns != u64::MAX
    }

    /// Attaches the shaping credit of the senders.
    pub fn with_hook(mut self, hook: CreditHook) -> Recorder {
        self.progress = vec![0; hook.credits.len()];
        self.hook = Some(hook);
        self
    }

    /// Records one message of stream `key`, received at `now`. Returns true when it is a first
    /// copy counted for loss (intended after the warm-up).
    pub fn record(&mut self, key: u64, seq: u64, intended_ns: u64, sent_ns: u64, now: u64) -> bool {
        self.received += 1;
        self.first_ns.get_or_insert(now);
        self.last_ns = Some(now);
        let tracker = self.streams.entry(key).or_default();
        let before = tracker.seen_upto();
        let arrival = tracker.record(seq);
        let advanced = tracker.seen_upto() - before;
        if advanced > 0 {
            if let Some(hook) = &self.hook {
                let part = (key / hook.chunk.max(1)) as usize;
                if let Some(p) = self.progress.get_mut(part) {
                    *p += advanced;
                }
            }
        }
        let idx = (now / self.interval_ns) as usize;
        if self.series.len() <= idx {
            self.series.resize(idx + 1, None);
        }
        let bucket = self.series[idx].get_or_insert_with(|| IntervalBucket {
            received: 0,
            latency: coarse_histogram(),
        });
        bucket.received += 1;
        let counted = intended_ns >= self.warmup_end_ns;
        let corrected = now.saturating_sub(intended_ns).max(1);
        if counted {
            self.corrected.saturating_record(corrected);
            self.uncorrected
                .saturating_record(now.saturating_sub(sent_ns).max(1));
            bucket.latency.saturating_record((corrected / 1000).max(1));
        }
        if !self.phases.is_empty() {
            let first = matches!(arrival, Arrival::New { .. });
            if let Some(p) = crate::rate_schedule::phase_of(&self.phase_bounds, intended_ns) {
                let phase = &mut self.phases[p];
                phase.latency.saturating_record(corrected);
                phase.delivered += u64::from(first);
            }
            if let Some(p) = crate::rate_schedule::phase_of(&self.phase_bounds, now) {
                self.phases[p].received_in_window += u64::from(first);
            }
        }
        match arrival {
            Arrival::Duplicate => {
                self.duplicates += 1;
                false
            }
            Arrival::New { reordered } => {
                self.unique += 1;
                if reordered {
                    self.reordered += 1;
                }
                if counted {
                    self.unique_counted += 1;
                }
                counted
            }
        }
    }

    /// Publishes the receive progress to the senders' credit (call after each batch).
    pub fn flush_credit(&self) {
        if let Some(hook) = &self.hook {
            for (i, credit) in hook.credits.iter().enumerate() {
                let progress = self.progress.get(i).copied().unwrap_or(0);
                credit.raise(progress + hook.window.get(i).copied().unwrap_or(0));
            }
        }
    }

    /// The mergeable form.
    pub fn to_wire(&self) -> RecorderWire {
        RecorderWire {
            corrected: hist_to_base64(&self.corrected),
            uncorrected: hist_to_base64(&self.uncorrected),
            series: self
                .series
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    b.as_ref()
                        .map(|b| (i as u64, b.received, hist_to_base64(&b.latency)))
                })
                .collect(),
            received: self.received,
            unique: self.unique,
            unique_counted: self.unique_counted,
            duplicates: self.duplicates,
            reordered: self.reordered,
            foreign: self.foreign,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            phase_bounds: self.phase_bounds.clone(),
            phases: self
                .phases
                .iter()
                .map(|p| {
                    (
                        hist_to_base64(&p.latency),
                        p.delivered,
                        p.received_in_window,
                    )
                })
                .collect(),
        }
    }

    /// Adds the figures of another recorder (stream states are not merged: streams of
    /// different processes are disjoint, see the docs on shared-subscription fan-out).
    pub fn merge_wire(&mut self, wire: &RecorderWire) {
        if let Some(h) = hist_from_base64(&wire.corrected) {
            merge_hist(&mut self.corrected, &h);
        }
        if let Some(h) = hist_from_base64(&wire.uncorrected) {
            merge_hist(&mut self.uncorrected, &h);
        }
        for (idx, received, hist) in &wire.series {
            let idx = *idx as usize;
            if self.series.len() <= idx {
                self.series.resize(idx + 1, None);
            }
            let bucket = self.series[idx].get_or_insert_with(|| IntervalBucket {
                received: 0,
                latency: coarse_histogram(),
            });
            bucket.received += received;
            if let Some(h) = hist_from_base64(hist) {
                merge_hist(&mut bucket.latency, &h);
            }
        }
        self.received += wire.received;
        self.unique += wire.unique;
        self.unique_counted += wire.unique_counted;
        self.duplicates += wire.duplicates;
        self.reordered += wire.reordered;
        self.foreign += wire.foreign;
        self.first_ns = match (self.first_ns, wire.first_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ns = self.last_ns.max(wire.last_ns);
        if self.phases.is_empty() && !wire.phases.is_empty() {
            self.set_phases(wire.phase_bounds.clone());
        }
        for (mine, (hist, delivered, in_window)) in self.phases.iter_mut().zip(&wire.phases) {
            if let Some(h) = hist_from_base64(hist) {
                merge_hist(&mut mine.latency, &h);
            }
            mine.delivered += delivered;
            mine.received_in_window += in_window;
        }
    }
}

/// A [`Recorder`] in transferable form (between processes).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RecorderWire {
    /// Corrected latency histogram, base64 V2, ns.
    pub corrected: String,
    /// Uncorrected latency histogram, base64 V2, ns.
    pub uncorrected: String,
    /// (interval index, received, latency histogram base64 V2 in µs).
    pub series: Vec<(u64, u64, String)>,
    /// See [`Recorder::received`].
    pub received: u64,
    /// See [`Recorder::unique`].
    pub unique: u64,
    /// See [`Recorder::unique_counted`].
    pub unique_counted: u64,
    /// See [`Recorder::duplicates`].
    pub duplicates: u64,
    /// See [`Recorder::reordered`].
    pub reordered: u64,
    /// See [`Recorder::foreign`].
    pub foreign: u64,
    /// See [`Recorder::first_ns`].
    pub first_ns: Option<u64>,
    /// See [`Recorder::last_ns`].
    pub last_ns: Option<u64>,
    /// See [`Recorder::phase_bounds`].
    #[serde(default)]
    pub phase_bounds: Vec<u64>,
    /// Per phase: (latency histogram base64 V2 in ns, delivered, received in the window).
    #[serde(default)]
    pub phases: Vec<(String, u64, u64)>,
}

/// Median of a list (None when empty); NaNs are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Schedule;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = latency_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap(); // 1 µs .. 10 ms
        }
        let s = summarize(&h, 1, false);
        assert_eq!(s.count, 10_000);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002 + 0.01;
        assert!(close(s.min_us, 1.0), "{}", s.min_us);
        assert!(close(s.p50_us, 5000.0), "{}", s.p50_us);
        assert!(close(s.p90_us, 9000.0), "{}", s.p90_us);
        assert!(close(s.p99_us, 9900.0), "{}", s.p99_us);
        assert!(close(s.p999_us, 9990.0), "{}", s.p999_us);
        assert!(close(s.max_us, 10_000.0), "{}", s.max_us);
        assert!(close(s.mean_us, 5000.5), "{}", s.mean_us);
        assert_eq!(s.distribution.first().map(|p| p.percentile), Some(0.0));
        assert_eq!(s.distribution.last().map(|p| p.percentile), Some(100.0));
        // Round trip through the wire format.
        let back = hist_from_base64(s.histogram_v2.as_deref().unwrap()).unwrap();
        assert_eq!(back.len(), 10_000);
        assert_eq!(back.value_at_quantile(0.99), h.value_at_quantile(0.99));
    }

    #[test]
    fn empty_summary_is_zero() {
        let s = summarize(&latency_histogram(), 1, true);
        assert_eq!(s.count, 0);
        assert_eq!(s.p99_us, 0.0);
        assert!(s.distribution.is_empty());
    }

    #[test]
    fn median_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }

    /// A sender scheduled every 1 ms is stalled for 100 ms once (the broker stopped reading).
    /// Measured from the actual send time only the one message in flight during the stall
    /// looks slow; measured from the intended time every message that should have been sent
    /// during the stall carries its share of the wait, which is what a user would have seen.
    #[test]
    fn coordinated_omission_correction() {
        let sched = Schedule::new(0, 1000.0); // 1 ms period
        let service = 100_000u64; // 100 µs per message when all is well
        let stall_at = 500u64; // message 500 takes 100 ms
        let stall = 100_000_000u64;
        let mut corrected = Recorder::new(1_000_000_000, 0);
        let mut free = 0u64; // when the sender can send again (closed after the stall)
        let mut rec_uncorrected = latency_histogram();
        for k in 0..1000u64 {
            let intended = sched.intended(k);
            let sent = intended.max(free);
            let took = if k == stall_at { stall } else { service };
            let received = sent + took;
            free = received; // one message in flight at a time
            corrected.record(0, k, intended, sent, received);
            rec_uncorrected.record(received - sent).unwrap();
        }
        // Uncorrected: only one message of 1000 is slow, so p99 stays at the service time.
        assert!(rec_uncorrected.value_at_quantile(0.99) < 200_000);
        // Corrected: ~100 messages were due during the stall and waited for it; p90 and p99
        // show it (p99 ≈ 100 ms - 10 ms ≈ 90 ms, p90 of the stalled 10% ≈ tiny, p95 large).
        let p99 = corrected.corrected.value_at_quantile(0.99);
        assert!(p99 > 80_000_000, "corrected p99 {p99}");
        let p95 = corrected.corrected.value_at_quantile(0.95);
        assert!(p95 > 40_000_000, "corrected p95 {p95}");
        // The recorder's own uncorrected histogram agrees with the direct one.
        assert!(corrected.uncorrected.value_at_quantile(0.99) < 200_000);
        // The schedule itself: due counts and intended times.
        assert_eq!(sched.due(0), 1);
        assert_eq!(sched.due(999_999), 1);
        assert_eq!(sched.due(1_000_000), 2);
        assert_eq!(sched.intended(3), 3_000_000);
    }

    #[test]
    fn tracker_in_order() {
        let mut t = StreamTracker::default();
        for s in 0..10 {
            assert_eq!(t.record(s), Arrival::New { reordered: false });
        }
        assert_eq!(t.seen_upto(), 10);
        assert!(t.ring.is_none());
    }

    #[test]
    fn tracker_duplicates_and_reordering() {
        let mut t = StreamTracker::default();
        assert_eq!(t.record(0), Arrival::New { reordered: false });
        assert_eq!(t.record(2), Arrival::New { reordered: false });
        assert_eq!(t.record(2), Arrival::Duplicate);
        assert_eq!(t.record(1), Arrival::New { reordered: true });
        assert_eq!(t.record(1), Arrival::Duplicate);
        assert_eq!(t.record(0), Arrival::Duplicate);
        assert_eq!(t.record(3), Arrival::New { reordered: false });
        assert!(t.ring.is_none(), "gap closed, bitmap released");
    }

    #[test]
    fn tracker_loss_is_bounded() {
        let mut t = StreamTracker::default();
        // Message 0 never arrives; the tracker keeps a bounded window and eventually gives up.
        for s in 1..(3 * REORDER_WINDOW) {
            assert_eq!(t.record(s), Arrival::New { reordered: false });
        }
        assert!(t.ring.is_none() || t.pending < REORDER_WINDOW as u32);
        assert_eq!(t.seen_upto(), 3 * REORDER_WINDOW);
        // A very late copy of 0 is indistinguishable from a duplicate.
        assert_eq!(t.record(0), Arrival::Duplicate);
    }

    #[test]
    fn recorder_counts_loss_duplicates_reordering() {
        let mut r = Recorder::new(1_000_000_000, 1000);
        // Stream 1: 0,1,3,2,3 (one reorder, one duplicate); message 4 lost.
        // Stream 2: 0 before the warm-up end (not counted), 1.
        for (key, seq, intended) in [
            (1, 0, 2000),
            (1, 1, 2000),
            (1, 3, 2000),
            (1, 2, 2000),
            (1, 3, 2000),
            (2, 0, 10),
            (2, 1, 2000),
        ] {
            r.record(key, seq, intended, intended, 5000);
        }
        assert_eq!(r.received, 7);
        assert_eq!(r.unique, 6);
        assert_eq!(r.unique_counted, 5);
        assert_eq!(r.duplicates, 1);
        assert_eq!(r.reordered, 1);
        assert_eq!(r.corrected.len(), 6); // the warm-up message is not in the latency figures
                                          // Merging through the wire doubles everything.
        let wire = r.to_wire();
        r.merge_wire(&wire);
        assert_eq!(r.received, 14);
        assert_eq!(r.corrected.len(), 12);
        assert_eq!(r.series[0].as_ref().unwrap().received, 14);
    }

    #[test]
    fn recorder_accounts_phases_by_intended_and_receive_time() {
        let mut r = Recorder::new(1_000_000_000, 0);
        r.set_phases(vec![1000, 2000, 3000]);
        // Intended in phase 0, received in phase 1 (late): latency and delivery go to phase 0,
        // the receive to phase 1's window.
        r.record(1, 0, 1500, 1500, 2500);
        // Intended and received in phase 1; then a duplicate of it.
        r.record(1, 1, 2100, 2100, 2200);
        r.record(1, 1, 2100, 2100, 2300);
        // Received after the last phase (drain): delivered counts, no window.
        r.record(1, 2, 2900, 2900, 3500);
        assert_eq!(r.phases[0].delivered, 1);
        assert_eq!(r.phases[0].received_in_window, 0);
        assert_eq!(r.phases[0].latency.len(), 1);
        assert_eq!(r.phases[0].latency.max(), 1000);
        assert_eq!(r.phases[1].delivered, 2);
        assert_eq!(r.phases[1].received_in_window, 2);
        assert_eq!(r.phases[1].latency.len(), 3); // every copy's latency, as the totals
        let mut merged = Recorder::new(1_000_000_000, 0);
        merged.merge_wire(&r.to_wire());
        merged.merge_wire(&r.to_wire());
        assert_eq!(merged.phase_bounds, vec![1000, 2000, 3000]);
        assert_eq!(merged.phases[1].delivered, 4);
        assert_eq!(merged.phases[1].latency.len(), 6);
    }

    #[test]
    fn credit_follows_progress() {
        let credits = vec![Arc::new(Credit::new(10)), Arc::new(Credit::new(10))];
        let hook = CreditHook {
            chunk: 100,
            window: vec![10, 10],
            credits: credits.clone(),
        };
        let mut r = Recorder::new(1_000_000_000, 0).with_hook(hook);
        r.record(5, 0, 0, 0, 1);
        r.record(5, 4, 0, 0, 1); // 1..=3 presumed lost for shaping purposes
        r.record(150, 0, 0, 0, 1);
        r.flush_credit();
        assert_eq!(credits[0].value.load(Ordering::Relaxed), 15);
        assert_eq!(credits[1].value.load(Ordering::Relaxed), 11);
    }
}
