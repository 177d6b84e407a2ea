//! The per-phase figures of a `--rate-schedule` run and the recovery after each rate
//! decrease.

use crate::engine::{PhaseSend, ProcSample};
use crate::procstat::cpu_at;
use crate::rate_schedule::{self, IntervalSample, RatePhase};
use crate::report;
use crate::results::{RatePhaseStats, RateScheduleStats, RecoveryStats};
use crate::stats::{coarse_histogram, merge_hist, summarize, Recorder};

/// The inputs of the per-phase figures, shared by every phase.
struct Inputs<'a> {
    /// Phase boundaries, ns (`[start0, start1, ..., end]`).
    bounds: Vec<u64>,
    samples: Vec<IntervalSample>,
    interval: u64,
    threshold: Option<f64>,
    recorder: &'a Recorder,
    sent: &'a [PhaseSend],
    broker: Option<&'a [ProcSample]>,
}

/// The per-phase figures and recovery of a rate-schedule run. `go`: start of the first phase;
/// `interval`: the time series interval (phases start on interval boundaries);
/// `broker`: the broker's samples with `--broker-pid`.
pub(super) fn schedule_stats(
    phases: &[RatePhase],
    recovery_p99_ms: Option<f64>,
    go: u64,
    interval: u64,
    recorder: &Recorder,
    sent: &[PhaseSend],
    broker: Option<&[ProcSample]>,
) -> RateScheduleStats {
    let bounds: Vec<u64> = rate_schedule::offsets_ns(phases)
        .iter()
        .map(|o| go + o)
        .collect();
    let interval = interval.max(1);
    let n = phases.len();
    let mid = bounds[n - 1] + (bounds[n] - bounds[n - 1]) / 2;
    let reference_p99_us = reference_p99(recorder, interval, mid, bounds[n]);
    let samples = interval_samples(recorder, interval, bounds[n]);
    let reference_steady = rate_schedule::reference_steady(
        &samples,
        interval,
        (mid, bounds[n]),
        phases[n - 1].rate_per_s,
        reference_p99_us,
    );
    let (threshold, source) = match recovery_p99_ms {
        Some(ms) => (Some(ms * 1000.0), "option"),
        None => (
            reference_p99_us
                .filter(|_| reference_steady)
                .map(rate_schedule::default_threshold_us),
            "last-phase",
        ),
    };
    let inputs = Inputs {
        bounds,
        samples,
        interval,
        threshold,
        recorder,
        sent,
        broker,
    };
    let stats = (0..n).map(|i| phase_stats(phases, i, &inputs)).collect();
    RateScheduleStats {
        recovery_threshold_p99_us: threshold,
        recovery_threshold_source: source.into(),
        reference_p99_us,
        reference_steady,
        recovery_rate_tolerance_percent: rate_schedule::RATE_TOLERANCE * 100.0,
        recovery_hold_s: rate_schedule::RECOVERY_HOLD_S,
        phases: stats,
    }
}

/// Reference: the p99 of the messages received in the intervals entirely inside
/// `[from, to)` (the second half of the last phase).
fn reference_p99(recorder: &Recorder, interval: u64, from: u64, to: u64) -> Option<f64> {
    // Intervals entirely inside [from, to), as indices of the recorder's series.
    let inside = from.div_ceil(interval)..(to / interval).max(from.div_ceil(interval));
    let mut reference = coarse_histogram();
    for i in inside {
        if let Some(Some(b)) = recorder.series.get(i as usize) {
            merge_hist(&mut reference, &b.latency);
        }
    }
    (!reference.is_empty()).then(|| reference.value_at_quantile(0.99) as f64)
}

/// Delivered count and p99 per interval, up to the end of the schedule.
fn interval_samples(recorder: &Recorder, interval: u64, end: u64) -> Vec<IntervalSample> {
    let samples = recorder
        .series
        .iter()
        .enumerate()
        .map(|(i, b)| IntervalSample {
            start_ns: i as u64 * interval,
            delivered: b.as_ref().map_or(0, |b| b.received),
            p99_us: b
                .as_ref()
                .filter(|b| !b.latency.is_empty())
                .map(|b| b.latency.value_at_quantile(0.99) as f64),
        });
    // Intervals past the last receive have no bucket: they delivered nothing.
    let last = end.div_ceil(interval);
    samples
        .chain(
            (recorder.series.len() as u64..last).map(|i| IntervalSample {
                start_ns: i * interval,
                delivered: 0,
                p99_us: None,
            }),
        )
        .collect()
}

/// The figures of phase `i`.
fn phase_stats(phases: &[RatePhase], i: usize, x: &Inputs<'_>) -> RatePhaseStats {
    let p = &phases[i];
    let (start, end) = (x.bounds[i], x.bounds[i + 1]);
    let secs = (end - start) as f64 / 1e9;
    let send = x.sent.get(i).copied().unwrap_or_default();
    let rec = x.recorder.phases.get(i);
    let delivered = rec.map_or(0, |r| r.delivered);
    let lost = send.sent.saturating_sub(delivered);
    let broker = x.broker;
    let in_phase: Vec<&ProcSample> = broker
        .unwrap_or_default()
        .iter()
        .filter(|s| s.t_ns > start && s.t_ns <= end)
        .collect();
    let decrease = i > 0 && p.rate_per_s < phases[i - 1].rate_per_s;
    RatePhaseStats {
        start_s: start as f64 / 1e9,
        duration_s: secs,
        offered_rate_per_s: p.rate_per_s,
        offered: send.offered,
        sent: send.sent,
        unsent: send.offered.saturating_sub(send.sent),
        send_rate_per_s: send.sent_in_window as f64 / secs,
        delivered_rate_per_s: rec.map_or(0, |r| r.received_in_window) as f64 / secs,
        delivered,
        lost,
        loss_percent: if send.sent == 0 {
            0.0
        } else {
            100.0 * lost as f64 / send.sent as f64
        },
        latency: rec
            .filter(|r| !r.latency.is_empty())
            .map(|r| summarize(&r.latency, 1, true)),
        broker_rss_max_bytes: broker.and_then(|_| in_phase.iter().map(|s| s.rss).max()),
        broker_cpu_percent_avg: broker
            .and_then(|b| Some(100.0 * (cpu_at(b, end)? - cpu_at(b, start)?) / secs)),
        recovery: decrease.then(|| {
            let r = rate_schedule::recovery(
                &x.samples,
                x.interval,
                (start, end),
                p.rate_per_s,
                x.threshold,
            );
            RecoveryStats {
                recovery_s: r.recovery_s,
                throughput_recovery_s: r.throughput_s,
                latency_recovery_s: r.latency_s,
                intervals: r.intervals,
                good_intervals: r.good_intervals,
            }
        }),
    }
}

/// The warnings a rate-schedule run's figures call for: no default recovery threshold, a
/// suspicious one, phases that did not recover.
pub(super) fn schedule_warnings(rs: &RateScheduleStats, warnings: &mut Vec<String>) {
    let decrease = rs.phases.iter().any(|p| p.recovery.is_some());
    match (rs.recovery_threshold_p99_us, rs.reference_p99_us) {
        (None, reference) if decrease => warnings.push(format!(
            "the last phase did not settle (p99 of its second half {}, or a delivered rate off the offered one): no default latency threshold, so no recovery time; give --recovery-p99-ms",
            reference.map_or("-".into(), report::micros)
        )),
        (Some(_), Some(reference))
            if decrease
                && rs.recovery_threshold_source == "last-phase"
                && reference > 100_000.0 =>
        {
            warnings.push(format!(
                "the recovery threshold is 2 × the last phase's p99 of {}: that presumes this latency is normal; give --recovery-p99-ms otherwise",
                report::micros(reference)
            ))
        }
        _ => {}
    }
    for (i, p) in rs.phases.iter().enumerate() {
        if rs.recovery_threshold_p99_us.is_some()
            && p.recovery.as_ref().is_some_and(|r| r.recovery_s.is_none())
        {
            warnings.push(format!(
                "phase {} ({} msg/s after {} msg/s): throughput and latency did not recover before the phase ended",
                i + 1,
                report::num(p.offered_rate_per_s),
                report::num(rs.phases[i - 1].offered_rate_per_s)
            ));
        }
    }
}
