//! The charts of one run: time series, the latency distribution and the offered rate of a
//! rate schedule.

use super::interval_of;
use crate::results::{BenchResult, LatencySummary, RateScheduleStats, TimePoint};
use crate::stats::hist_from_base64;
use crate::svg::{nines, Format, LineChart, Scale, Series, PALETTE};

/// Latency over time (p50, p99, max of each interval).
pub fn latency_over_time(r: &BenchResult) -> Option<LineChart> {
    let ts = &r.timeseries;
    let line = |name: &str, color: usize, f: fn(&TimePoint) -> Option<f64>| Series {
        name: name.into(),
        color: PALETTE[color].into(),
        points: ts.iter().map(|p| (p.t_s, f(p))).collect(),
        dashed: false,
    };
    let chart = LineChart {
        title: "Latency over time".into(),
        x_label: "time since start".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "latency".into(),
        y_scale: Scale::Linear,
        y_format: Format::Micros,
        series: vec![
            line("p50", 0, |p| p.latency_p50_us),
            line("p99", 1, |p| p.latency_p99_us),
            line("max", 6, |p| p.latency_max_us),
        ],
        width: 720.0,
        height: 320.0,
    };
    (!chart.is_empty()).then_some(chart)
}

/// Messages sent and received per second over time.
pub fn throughput_over_time(r: &BenchResult) -> Option<LineChart> {
    r.messages.as_ref()?;
    let ts = &r.timeseries;
    let every = r.config.sample_interval_s;
    let rate = |f: fn(&TimePoint) -> u64| -> Vec<(f64, Option<f64>)> {
        (0..ts.len())
            .map(|i| {
                (
                    ts[i].t_s,
                    Some(f(&ts[i]) as f64 / interval_of(ts, i, every)),
                )
            })
            .collect()
    };
    let chart = LineChart {
        title: "Throughput over time".into(),
        x_label: "time since start".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "messages per second".into(),
        y_scale: Scale::Linear,
        y_format: Format::Rate("msg/s"),
        series: vec![
            Series {
                name: "sent".into(),
                color: PALETTE[0].into(),
                points: rate(|p| p.sent),
                dashed: false,
            },
            Series {
                name: "received".into(),
                color: PALETTE[2].into(),
                points: rate(|p| p.received),
                dashed: true,
            },
        ]
        .into_iter()
        .chain(
            r.rate_schedule
                .as_ref()
                .map(|rs| offered_series(rs, ts, every)),
        )
        .collect(),
        width: 720.0,
        height: 320.0,
    };
    (!chart.is_empty()).then_some(chart)
}

/// A rate schedule's offered rate at each time series point (the phase holding the interval;
/// none outside the schedule).
fn offered_series(rs: &RateScheduleStats, ts: &[TimePoint], every: f64) -> Series {
    let points = (0..ts.len())
        .map(|i| {
            let mid = ts[i].t_s - interval_of(ts, i, every) / 2.0;
            let rate = rs
                .phases
                .iter()
                .find(|p| mid >= p.start_s && mid < p.start_s + p.duration_s)
                .map(|p| p.offered_rate_per_s);
            (ts[i].t_s, rate)
        })
        .collect();
    Series {
        name: "offered".into(),
        color: PALETTE[6].into(),
        points,
        dashed: true,
    }
}

/// Connections established over time.
pub fn connections_over_time(r: &BenchResult) -> Option<LineChart> {
    let chart = LineChart {
        title: "Connections over time".into(),
        x_label: "time since start".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "connections established".into(),
        y_scale: Scale::Linear,
        y_format: Format::Plain("conns"),
        series: vec![Series {
            name: "connections".into(),
            color: PALETTE[0].into(),
            points: r
                .timeseries
                .iter()
                .map(|p| (p.t_s, Some(p.connections as f64)))
                .collect(),
            dashed: false,
        }],
        width: 720.0,
        height: 320.0,
    };
    (!chart.is_empty()).then_some(chart)
}

/// Broker and bench CPU over time.
pub fn cpu_over_time(r: &BenchResult) -> Option<LineChart> {
    let ts = &r.timeseries;
    let mut series = Vec::new();
    if r.broker.is_some() {
        series.push(Series {
            name: "broker".into(),
            color: PALETTE[1].into(),
            points: ts.iter().map(|p| (p.t_s, p.broker_cpu_percent)).collect(),
            dashed: false,
        });
    }
    series.push(Series {
        name: "bench (all its processes)".into(),
        color: PALETTE[5].into(),
        points: ts.iter().map(|p| (p.t_s, p.bench_cpu_percent)).collect(),
        dashed: true,
    });
    let chart = LineChart {
        title: if r.broker.is_some() {
            "Broker CPU over time".into()
        } else {
            "Bench CPU over time (broker not sampled: no --broker-pid)".into()
        },
        x_label: "time since start".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "CPU, % of one core".into(),
        y_scale: Scale::Linear,
        y_format: Format::Percent,
        series,
        width: 720.0,
        height: 320.0,
    };
    (!chart.is_empty()).then_some(chart)
}

/// Broker RSS over time (only with `--broker-pid`).
pub fn rss_over_time(r: &BenchResult) -> Option<LineChart> {
    r.broker.as_ref()?;
    let chart = LineChart {
        title: "Broker RSS over time".into(),
        x_label: "time since start".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "resident memory".into(),
        y_scale: Scale::Linear,
        y_format: Format::Bytes,
        series: vec![Series {
            name: "broker RSS".into(),
            color: PALETTE[1].into(),
            points: r
                .timeseries
                .iter()
                .map(|p| (p.t_s, p.broker_rss_bytes.map(|b| b as f64)))
                .collect(),
            dashed: false,
        }],
        width: 720.0,
        height: 320.0,
    };
    (!chart.is_empty()).then_some(chart)
}

/// Points of a latency distribution on the `1 - p` axis, µs: from the full histogram when
/// the result has one (every 0.05 of a decade), else from the summary's percentiles. The
/// last point is the maximum, at `log10(count)` (the last sample).
pub fn distribution_points(l: &LatencySummary) -> Vec<(f64, Option<f64>)> {
    if l.count == 0 {
        return Vec::new();
    }
    let top = (l.count as f64).log10().max(1.0);
    if let Some(h) = l.histogram_v2.as_deref().and_then(hist_from_base64) {
        if !h.is_empty() {
            let mut pts = Vec::new();
            let mut k = 0u32;
            loop {
                let x = f64::from(k) * 0.05;
                if x >= top - 1e-9 {
                    break;
                }
                let q = 1.0 - 10f64.powf(-x);
                pts.push((x, Some(h.value_at_quantile(q) as f64 / 1000.0)));
                k += 1;
            }
            pts.push((top, Some(h.max() as f64 / 1000.0)));
            return pts;
        }
    }
    let mut pts: Vec<(f64, Option<f64>)> = l
        .distribution
        .iter()
        .filter(|p| p.percentile < 100.0 && nines(p.percentile) < top - 1e-9)
        .map(|p| (nines(p.percentile), Some(p.value_us)))
        .collect();
    pts.push((top, Some(l.max_us)));
    pts
}

/// The latency percentile distribution of one or more summaries (name, colour, dashed).
pub fn distribution_chart(
    title: &str,
    lines: Vec<(String, String, bool, &LatencySummary)>,
) -> Option<LineChart> {
    let series: Vec<Series> = lines
        .into_iter()
        .map(|(name, color, dashed, l)| Series {
            name,
            color,
            points: distribution_points(l),
            dashed,
        })
        .collect();
    let values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.1))
        .collect();
    let max = values.iter().copied().fold(0.0, f64::max);
    let min_pos = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    // A log latency axis when the tail is far above the median.
    let y_scale = if min_pos.is_finite() && max / min_pos > 50.0 {
        Scale::Log
    } else {
        Scale::Linear
    };
    let chart = LineChart {
        title: title.into(),
        x_label: "percentile (log scale of 1 − p; the last point is the maximum)".into(),
        x_scale: Scale::Percentile,
        x_format: Format::Plain(""),
        y_label: if y_scale == Scale::Log {
            "latency, log scale".into()
        } else {
            "latency".into()
        },
        y_scale,
        y_format: Format::Micros,
        series,
        width: 720.0,
        height: 340.0,
    };
    (!chart.is_empty()).then_some(chart)
}

fn run_distribution(r: &BenchResult) -> Option<LineChart> {
    let l = r.latency.as_ref()?;
    let mut lines = vec![(
        if l.corrected_for_coordinated_omission {
            "from intended send time (CO-corrected)".to_string()
        } else {
            "latency".to_string()
        },
        PALETTE[0].to_string(),
        false,
        l,
    )];
    if l.corrected_for_coordinated_omission {
        if let Some(u) = &r.latency_uncorrected {
            lines.push(("from actual send time".into(), PALETTE[1].into(), true, u));
        }
    }
    distribution_chart("Latency percentile distribution", lines)
}

/// The charts of one run, as SVG elements, in report order.
pub fn run_charts(r: &BenchResult) -> Vec<String> {
    let show_connections = r.scenario == "conn"
        || r.scenario == "swarm"
        || r.timeseries.iter().any(|p| p.connections >= 100);
    [
        latency_over_time(r),
        run_distribution(r),
        throughput_over_time(r),
        show_connections.then(|| connections_over_time(r)).flatten(),
        cpu_over_time(r),
        rss_over_time(r),
    ]
    .into_iter()
    .flatten()
    .map(|c| c.render())
    .collect()
}
