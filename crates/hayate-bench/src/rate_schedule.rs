//! `fan-in --rate-schedule`: an open-loop offered rate that changes over time (performance
//! target P11, overload), and the *recovery* figure computed after each rate decrease.
//!
//! A schedule is a list of phases `SECONDS@RATE` run in order (`60@300000,30@50000`: one
//! minute at 300k msg/s, then 30 s at 50k msg/s). Within a phase the senders follow a fixed
//! schedule exactly as with `--rate`, and latency is measured from each message's intended
//! send time. A sender held back by the broker (back-pressure: the broker stops reading its
//! socket, or QoS 1/2 acknowledgements stop coming) falls behind the schedule and the latency
//! of what it sends late grows accordingly; it catches up only within the usual bounds (at
//! most `--batch` messages per write, `--inflight` unacknowledged per connection, whatever the
//! socket accepts). At the end of a phase, whatever of it was not sent yet is abandoned and
//! counted as *unsent*: the next phase starts on its own schedule, so each phase offers its
//! own load and the recovery measured afterwards is the broker's, not the draining of a
//! backlog the load generator kept.
//!
//! # Recovery
//!
//! For every phase whose offered rate is lower than the previous phase's, using the time
//! series (`--sample-interval`) intervals that lie entirely inside the phase, an interval is
//! *good* when
//! - its delivered rate (messages received in the interval / interval length) is within
//!   ±[`RATE_TOLERANCE`] (10%) of the phase's offered rate, and
//! - its p99 latency (from the intended send time, of the messages received in the interval)
//!   is at most the threshold: `--recovery-p99-ms`, or by default twice the p99 of the
//!   messages received in the second half of the last phase (its final, steady half), but at
//!   least [`MIN_DEFAULT_THRESHOLD_US`] (1 ms, so that scheduling jitter on an idle broker
//!   does not count as unrecovered). The default needs that half to be steady
//!   ([`reference_steady`]); when it is not, there is no threshold and no recovery time.
//!
//! The recovery time is the time from the start of the phase to the start of the first good
//! interval that begins a run of good intervals lasting [`RECOVERY_HOLD_S`] (3 s), or lasting
//! until the end of the phase when less than that remains. `null` when the phase ends without
//! such a run (not recovered). The same rule applied to each criterion alone gives the
//! throughput and the latency recovery times.

pub use crate::results::RatePhase;

/// Most phases a schedule may have.
pub const MAX_PHASES: usize = 32;

/// Tolerance of the delivered rate around the offered rate for a good interval (fraction).
pub const RATE_TOLERANCE: f64 = 0.10;

/// How long the criteria must hold (from the recovery point on) to count as recovered, s.
pub const RECOVERY_HOLD_S: f64 = 3.0;

/// Floor of the default p99 threshold, µs.
pub const MIN_DEFAULT_THRESHOLD_US: f64 = 1000.0;

/// Factor applied to the reference p99 (the last phase's final half) for the default threshold.
pub const DEFAULT_THRESHOLD_FACTOR: f64 = 2.0;

/// Parses `SECONDS@RATE[,SECONDS@RATE...]`. Seconds may be fractional; a rate may end in `k`
/// (thousands) or `M` (millions). Errors say what is wrong with which phase.
pub fn parse(text: &str) -> Result<Vec<RatePhase>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(
            "--rate-schedule is empty (expected SECONDS@RATE[,SECONDS@RATE...], e.g. 60@300000,30@50000)"
                .into(),
        );
    }
    let mut phases = Vec::new();
    for (i, item) in text.split(',').enumerate() {
        let item = item.trim();
        let bad = |why: &str| {
            format!(
                "--rate-schedule phase {} {item:?}: {why} (expected SECONDS@RATE, e.g. 60@300000)",
                i + 1
            )
        };
        if item.is_empty() {
            return Err(bad("empty phase"));
        }
        let (secs, rate) = item.split_once('@').ok_or_else(|| bad("missing @"))?;
        let duration_s: f64 = secs
            .trim()
            .parse()
            .map_err(|_| bad("the duration is not a number of seconds"))?;
        if !(duration_s.is_finite() && duration_s > 0.0) {
            return Err(bad("the duration must be positive"));
        }
        let rate = rate.trim();
        let (digits, scale) = match rate.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1e3),
            None => match rate.strip_suffix('M') {
                Some(d) => (d, 1e6),
                None => (rate, 1.0),
            },
        };
        let rate_per_s = digits
            .trim()
            .parse::<f64>()
            .map_err(|_| bad("the rate is not a number of messages per second"))?
            * scale;
        if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
            return Err(bad("the rate must be positive"));
        }
        phases.push(RatePhase {
            duration_s,
            rate_per_s,
        });
    }
    if phases.len() > MAX_PHASES {
        return Err(format!(
            "--rate-schedule has {} phases; at most {MAX_PHASES}",
            phases.len()
        ));
    }
    Ok(phases)
}

/// Total length of a schedule, seconds.
pub fn total_s(phases: &[RatePhase]) -> f64 {
    phases.iter().map(|p| p.duration_s).sum()
}

/// Phase boundaries relative to the start of the traffic phase, ns: `[0, d1, d1+d2, ...]`
/// (one more entry than phases).
pub fn offsets_ns(phases: &[RatePhase]) -> Vec<u64> {
    let mut out = Vec::with_capacity(phases.len() + 1);
    let mut acc = 0.0;
    out.push(0);
    for p in phases {
        acc += p.duration_s;
        out.push(crate::clock::secs_to_ns(acc));
    }
    out
}

/// The schedule as written back (`60@300000,30@50000`).
pub fn format(phases: &[RatePhase]) -> String {
    phases
        .iter()
        .map(|p| format!("{}@{}", p.duration_s, p.rate_per_s))
        .collect::<Vec<_>>()
        .join(",")
}

/// Index of the phase whose window `[bounds[i], bounds[i+1])` holds `t`.
pub fn phase_of(bounds: &[u64], t: u64) -> Option<usize> {
    if bounds.len() < 2 || t < bounds[0] || t >= bounds[bounds.len() - 1] {
        return None;
    }
    Some(bounds.partition_point(|&b| b <= t) - 1)
}

/// One time series interval as the recovery computation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalSample {
    /// Start of the interval, ns (same clock as the phase bounds).
    pub start_ns: u64,
    /// Messages received in the interval.
    pub delivered: u64,
    /// p99 latency of the messages received in the interval, µs; `None` when none.
    pub p99_us: Option<f64>,
}

/// What [`recovery`] found for one phase.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Recovery {
    /// Seconds from the phase start to the recovery point (both criteria); `None`: never.
    pub recovery_s: Option<f64>,
    /// The same for the delivered rate alone.
    pub throughput_s: Option<f64>,
    /// The same for the p99 latency alone.
    pub latency_s: Option<f64>,
    /// Intervals entirely inside the phase (the ones assessed).
    pub intervals: u64,
    /// Of those, the ones meeting both criteria.
    pub good_intervals: u64,
}

/// Recovery of one phase `[start_ns, end_ns)` offered at `offered_rate` msg/s, from
/// `intervals` of `interval_ns` each (any order; those not entirely inside the phase are
/// ignored). `threshold_us`: the p99 bound (`None`: no interval meets the latency criterion).
/// See the module documentation for the definition.
pub fn recovery(
    intervals: &[IntervalSample],
    interval_ns: u64,
    (start_ns, end_ns): (u64, u64),
    offered_rate: f64,
    threshold_us: Option<f64>,
) -> Recovery {
    let interval_ns = interval_ns.max(1);
    let mut inside: Vec<&IntervalSample> = intervals
        .iter()
        .filter(|s| s.start_ns >= start_ns && s.start_ns.saturating_add(interval_ns) <= end_ns)
        .collect();
    inside.sort_by_key(|s| s.start_ns);
    let secs = interval_ns as f64 / 1e9;
    let rate_ok: Vec<bool> = inside
        .iter()
        .map(|s| (s.delivered as f64 / secs - offered_rate).abs() <= RATE_TOLERANCE * offered_rate)
        .collect();
    let latency_ok: Vec<bool> = inside
        .iter()
        .map(|s| matches!((s.p99_us, threshold_us), (Some(p), Some(t)) if p <= t))
        .collect();
    let both: Vec<bool> = rate_ok
        .iter()
        .zip(&latency_ok)
        .map(|(a, b)| *a && *b)
        .collect();
    let hold = ((RECOVERY_HOLD_S * 1e9 / interval_ns as f64).ceil() as usize).max(1);
    let at = |flags: &[bool]| {
        first_sustained(flags, hold).map(|i| (inside[i].start_ns - start_ns) as f64 / 1e9)
    };
    Recovery {
        recovery_s: at(&both),
        throughput_s: at(&rate_ok),
        latency_s: at(&latency_ok),
        intervals: inside.len() as u64,
        good_intervals: both.iter().filter(|b| **b).count() as u64,
    }
}

/// The first index from which `hold` consecutive flags (or all the remaining ones, when fewer
/// remain) are true.
pub fn first_sustained(flags: &[bool], hold: usize) -> Option<usize> {
    (0..flags.len()).find(|&i| {
        flags[i..(i + hold.max(1)).min(flags.len())]
            .iter()
            .all(|f| *f)
    })
}

/// Whether the final half `[mid_ns, end_ns)` of the last phase looks steady, so that its p99
/// (`reference_p99_us`) can stand for normal latency: it has at least one whole interval, every
/// whole interval of it delivered within [`RATE_TOLERANCE`] of the offered rate, and its p99 is
/// shorter than the half itself (the receivers no longer get messages sent before the half
/// began: a backlog of the overload still draining is not steady).
pub fn reference_steady(
    intervals: &[IntervalSample],
    interval_ns: u64,
    (mid_ns, end_ns): (u64, u64),
    offered_rate: f64,
    reference_p99_us: Option<f64>,
) -> bool {
    let Some(p99) = reference_p99_us else {
        return false;
    };
    let r = recovery(
        intervals,
        interval_ns,
        (mid_ns, end_ns),
        offered_rate,
        Some(f64::MAX),
    );
    r.intervals > 0 && r.good_intervals == r.intervals && p99 * 1000.0 < (end_ns - mid_ns) as f64
}

/// The default p99 threshold from the reference p99 (µs) of the last phase's final half.
pub fn default_threshold_us(reference_p99_us: f64) -> f64 {
    (DEFAULT_THRESHOLD_FACTOR * reference_p99_us).max(MIN_DEFAULT_THRESHOLD_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schedules() {
        let p = parse("60@300000,30@50000").unwrap();
        assert_eq!(
            p,
            vec![
                RatePhase {
                    duration_s: 60.0,
                    rate_per_s: 300_000.0
                },
                RatePhase {
                    duration_s: 30.0,
                    rate_per_s: 50_000.0
                }
            ]
        );
        let p = parse(" 0.5@2k , 2@1.5M,1@10").unwrap();
        assert_eq!(p[0].duration_s, 0.5);
        assert_eq!(p[0].rate_per_s, 2000.0);
        assert_eq!(p[1].rate_per_s, 1_500_000.0);
        assert_eq!(p[2].rate_per_s, 10.0);
        assert_eq!(total_s(&p), 3.5);
        assert_eq!(
            offsets_ns(&p),
            vec![0, 500_000_000, 2_500_000_000, 3_500_000_000]
        );
        assert_eq!(
            format(&parse("60@300000,30@50000").unwrap()),
            "60@300000,30@50000"
        );
    }

    #[test]
    fn rejects_bad_schedules() {
        for (text, why) in [
            ("", "empty"),
            ("   ", "empty"),
            ("60", "missing @"),
            ("60@", "not a number"),
            ("@1000", "not a number of seconds"),
            ("60@1000,", "empty phase"),
            ("60@1000,,30@5", "empty phase"),
            ("x@1000", "not a number of seconds"),
            ("60@fast", "not a number"),
            ("0@1000", "duration must be positive"),
            ("-5@1000", "duration must be positive"),
            ("inf@1000", "duration must be positive"),
            ("NaN@1000", "duration must be positive"),
            ("60@0", "rate must be positive"),
            ("60@-3", "rate must be positive"),
            ("60@1e400", "rate must be positive"),
            ("60@1000@2", "not a number"),
            ("60:1000", "missing @"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(err.contains("--rate-schedule"), "{text:?}: {err}");
        }
        let many = vec!["1@10"; MAX_PHASES + 1].join(",");
        assert!(parse(&many).unwrap_err().contains("at most"));
        // Which phase is wrong is said.
        assert!(parse("1@10,2@x").unwrap_err().contains("phase 2"));
    }

    #[test]
    fn phase_lookup() {
        let b = [100, 200, 300];
        assert_eq!(phase_of(&b, 99), None);
        assert_eq!(phase_of(&b, 100), Some(0));
        assert_eq!(phase_of(&b, 199), Some(0));
        assert_eq!(phase_of(&b, 200), Some(1));
        assert_eq!(phase_of(&b, 299), Some(1));
        assert_eq!(phase_of(&b, 300), None);
        assert_eq!(phase_of(&[], 5), None);
    }

    const S: u64 = 1_000_000_000;

    /// One-second intervals from `from` s: (delivered, p99 µs) each.
    fn series(from: u64, points: &[(u64, Option<f64>)]) -> Vec<IntervalSample> {
        points
            .iter()
            .enumerate()
            .map(|(i, &(delivered, p99_us))| IntervalSample {
                start_ns: (from + i as u64) * S,
                delivered,
                p99_us,
            })
            .collect()
    }

    #[test]
    fn immediate_recovery_is_zero() {
        let s = series(10, &[(1000, Some(500.0)); 10]);
        let r = recovery(&s, S, (10 * S, 20 * S), 1000.0, Some(1000.0));
        assert_eq!(r.recovery_s, Some(0.0));
        assert_eq!(r.throughput_s, Some(0.0));
        assert_eq!(r.latency_s, Some(0.0));
        assert_eq!((r.intervals, r.good_intervals), (10, 10));
    }

    #[test]
    fn recovery_waits_for_both_criteria() {
        // Offered 1000/s. Throughput is back after 2 s (a drain burst first, then a dip),
        // latency after 4 s.
        let s = series(
            60,
            &[
                (3000, Some(900_000.0)), // burst: the broker drains its queues
                (700, Some(400_000.0)),  // below 90%
                (1000, Some(50_000.0)),
                (1050, Some(5_000.0)),
                (980, Some(800.0)), // both good from here (t = 4 s)
                (1000, Some(700.0)),
                (1000, Some(900.0)),
                (1000, Some(800.0)),
            ],
        );
        let r = recovery(&s, S, (60 * S, 68 * S), 1000.0, Some(1000.0));
        assert_eq!(r.throughput_s, Some(2.0));
        assert_eq!(r.latency_s, Some(4.0));
        assert_eq!(r.recovery_s, Some(4.0));
        assert_eq!((r.intervals, r.good_intervals), (8, 4));
    }

    #[test]
    fn a_short_good_spell_is_not_recovery() {
        // One good interval then bad again: not recovered there; recovered at 5 s.
        let mut points = vec![(1000, Some(5000.0)); 10];
        points[1] = (1000, Some(500.0));
        for p in points.iter_mut().skip(5) {
            *p = (1000, Some(500.0));
        }
        let s = series(0, &points);
        let r = recovery(&s, S, (0, 10 * S), 1000.0, Some(1000.0));
        assert_eq!(r.recovery_s, Some(5.0));
        // A good run that reaches the end of the phase counts even if shorter than the hold.
        let mut points = vec![(0, None); 10];
        points[9] = (1000, Some(10.0));
        let r = recovery(&series(0, &points), S, (0, 10 * S), 1000.0, Some(1000.0));
        assert_eq!(r.recovery_s, Some(9.0));
    }

    #[test]
    fn never_recovered_is_none() {
        // Latency stays high (the backlog never drains).
        let s = series(0, &[(1000, Some(30_000_000.0)); 6]);
        let r = recovery(&s, S, (0, 6 * S), 1000.0, Some(2000.0));
        assert_eq!(r.recovery_s, None);
        assert_eq!(r.throughput_s, Some(0.0));
        assert_eq!(r.latency_s, None);
        // No threshold: the latency criterion cannot be met.
        let s = series(0, &[(1000, Some(10.0)); 6]);
        assert_eq!(recovery(&s, S, (0, 6 * S), 1000.0, None).recovery_s, None);
        // Nothing delivered at all.
        let s = series(0, &[(0, None); 6]);
        let r = recovery(&s, S, (0, 6 * S), 1000.0, Some(1000.0));
        assert_eq!(
            (r.recovery_s, r.throughput_s, r.latency_s),
            (None, None, None)
        );
        // No interval inside the phase.
        let r = recovery(&[], S, (0, 6 * S), 1000.0, Some(1000.0));
        assert_eq!((r.recovery_s, r.intervals), (None, 0));
    }

    #[test]
    fn intervals_outside_or_straddling_the_phase_are_ignored() {
        // Phase [2.5 s, 8 s): the interval starting at 2 s straddles it, 8 s is after it.
        let mut points = vec![(1000, Some(100.0)); 10];
        points[3] = (10, Some(100.0)); // the first interval inside is bad
        let s = series(0, &points);
        let r = recovery(&s, S, (2_500_000_000, 8 * S), 1000.0, Some(1000.0));
        assert_eq!(r.intervals, 5); // 3, 4, 5, 6 and 7 (which ends exactly at the phase end)
        let r2 = recovery(&s, S, (2_500_000_000, 8 * S + 1), 1000.0, Some(1000.0));
        assert_eq!(r2.intervals, r.intervals);
        assert_eq!(r.recovery_s, Some(1.5)); // 4 s − 2.5 s
    }

    #[test]
    fn rate_tolerance_is_ten_percent() {
        for (delivered, ok) in [(900, true), (1100, true), (899, false), (1101, false)] {
            let s = series(0, &[(delivered, Some(1.0)); 3]);
            let r = recovery(&s, S, (0, 3 * S), 1000.0, Some(1000.0));
            assert_eq!(r.recovery_s.is_some(), ok, "{delivered}");
        }
        // Half-second intervals: counts are per interval, rates per second.
        let s: Vec<IntervalSample> = (0..6)
            .map(|i| IntervalSample {
                start_ns: i * S / 2,
                delivered: 500,
                p99_us: Some(1.0),
            })
            .collect();
        let r = recovery(&s, S / 2, (0, 3 * S), 1000.0, Some(1000.0));
        assert_eq!(r.recovery_s, Some(0.0));
        assert_eq!(r.intervals, 6);
    }

    #[test]
    fn sustained_runs() {
        assert_eq!(first_sustained(&[false, true, true, true], 3), Some(1));
        assert_eq!(first_sustained(&[true, false, true, true], 3), Some(2));
        assert_eq!(first_sustained(&[false, false], 3), None);
        assert_eq!(first_sustained(&[], 3), None);
        assert_eq!(first_sustained(&[false, true], 0), Some(1));
    }

    #[test]
    fn the_reference_must_be_steady() {
        // Last phase [10 s, 20 s), final half [15 s, 20 s), offered 1000/s.
        let steady = series(10, &[(1000, Some(800.0)); 10]);
        let half = (15 * S, 20 * S);
        assert!(reference_steady(&steady, S, half, 1000.0, Some(800.0)));
        // Still draining the overload's backlog: p99 longer than the half.
        let draining = series(10, &[(1000, Some(12_000_000.0)); 10]);
        assert!(!reference_steady(
            &draining,
            S,
            half,
            1000.0,
            Some(12_000_000.0)
        ));
        // One interval of the half short of the offered rate.
        let mut points = vec![(1000, Some(800.0)); 10];
        points[8] = (500, Some(800.0));
        assert!(!reference_steady(
            &series(10, &points),
            S,
            half,
            1000.0,
            Some(800.0)
        ));
        // The first half does not matter.
        points[8] = (1000, Some(800.0));
        points[1] = (0, None);
        assert!(reference_steady(
            &series(10, &points),
            S,
            half,
            1000.0,
            Some(800.0)
        ));
        // Nothing received; no whole interval in the half.
        assert!(!reference_steady(&steady, S, half, 1000.0, None));
        assert!(!reference_steady(
            &steady,
            S,
            (15 * S, 15 * S + S / 2),
            1000.0,
            Some(1.0)
        ));
    }

    #[test]
    fn default_threshold_has_a_floor() {
        assert_eq!(default_threshold_us(100.0), 1000.0);
        assert_eq!(default_threshold_us(4000.0), 8000.0);
    }
}
