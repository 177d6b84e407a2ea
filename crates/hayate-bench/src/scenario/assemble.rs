//! The figures of a run, from what its phases gathered: connections, messages and delivery
//! checks, broker and bench CPU/RSS, the time series; then the [`BenchResult`].

use super::plan::{Plan, Setup};
use super::redact_command_line;
use super::run::{Expected, Finished, Phase, Started};
use super::schedule::{schedule_stats, schedule_warnings};
use super::Env;
use crate::engine::{ConnectReport, PhaseSend, ProcSample};
use crate::procstat::{self, cpu_at, per_interval};
use crate::results::{
    BenchResult, BenchStats, BrokerStats, ConnectionStats, MessageStats, RateScheduleStats,
    TargetInfo, TimePoint, ToolInfo, SCHEMA_VERSION,
};
use crate::stats::{coarse_histogram, hist_from_base64, merge_hist, summarize, Recorder};

/// Everything the phases of a run gathered.
pub(super) struct Gathered {
    pub(super) started: Started,
    pub(super) recv_connect: Vec<ConnectReport>,
    pub(super) send_connect: Vec<ConnectReport>,
    pub(super) broker_connected: super::run::ProcReading,
    pub(super) phase: Phase,
    pub(super) finished: Finished,
    pub(super) expected: Expected,
    pub(super) remote_count: usize,
}

/// The time series grid: interval length and number of points.
#[derive(Debug, Clone, Copy)]
struct Grid {
    interval: u64,
    n_points: usize,
}

/// Assembles the result of a run.
pub(super) fn result(
    plan: Plan,
    s: &Setup,
    env: &Env,
    g: Gathered,
    mut warnings: Vec<String>,
) -> BenchResult {
    let interval = s.interval_ns.max(1);
    let grid = Grid {
        interval,
        n_points: (g.finished.finished_ns.div_ceil(interval)) as usize,
    };
    let (connections, conn_series) = connection_stats(&plan, &g, grid, &mut warnings);
    let mut recorder = Recorder::new(interval, 0);
    for r in &g.finished.recv_reports {
        if let Some(w) = &r.recorder {
            recorder.merge_wire(w);
        }
    }
    let (messages, sent_series) = if plan.traffic {
        let (m, series) = message_stats(&g, &recorder, grid, &mut warnings);
        (Some(m), series)
    } else {
        (None, vec![0u64; grid.n_points])
    };
    let broker = broker_stats(&plan, s, &g, &recorder, grid);
    let processes = 1 + g.remote_count as u64;
    let (bench, bench_series) = bench_stats(s, &g, processes, grid, &mut warnings);
    let broker_intervals = per_interval(&g.finished.broker_samples, interval, grid.n_points);
    let series = Series {
        connections: &conn_series,
        sent: &sent_series,
        broker: &broker_intervals,
        bench: &bench_series,
    };
    let timeseries = timeseries(grid, &series, &recorder);
    let rate_schedule = rate_schedule(&plan, s, &g, &recorder, &mut warnings);
    let has_latency = !recorder.corrected.is_empty();
    let mut config = plan.config;
    config.processes = processes;
    let pid = s.common.broker_pid;
    BenchResult {
        kind: "run".into(),
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "hayate-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        scenario: plan.scenario.into(),
        started_at_unix_ms: g.started.started_at_unix_ms,
        command_line: redact_command_line(&env.command_line),
        machine: g.started.machine,
        target: TargetInfo {
            name: env.target_name.clone(),
            host: s.common.host.clone(),
            port: s.common.port,
            address: s.client.addr.to_string(),
            broker_version: g.started.broker_version,
            pid,
            process_command_line: pid.and_then(procstat::process_command_line),
            tls_session: g.started.tls_session,
        },
        config,
        connections,
        messages,
        latency: has_latency.then(|| summarize(&recorder.corrected, 1, plan.open_loop)),
        latency_uncorrected: has_latency.then(|| summarize(&recorder.uncorrected, 1, false)),
        broker,
        bench,
        timeseries,
        rate_schedule,
        warnings,
    }
}

/// The per-phase figures of a `--rate-schedule` run (`None` for other runs), and their
/// warnings.
fn rate_schedule(
    plan: &Plan,
    s: &Setup,
    g: &Gathered,
    recorder: &Recorder,
    warnings: &mut Vec<String>,
) -> Option<RateScheduleStats> {
    if plan.phases.is_empty() {
        return None;
    }
    let mut sent = vec![PhaseSend::default(); plan.phases.len()];
    for r in &g.finished.send_reports {
        for (t, one) in sent.iter_mut().zip(&r.phases) {
            t.add(one);
        }
    }
    let rs = schedule_stats(
        &plan.phases,
        plan.recovery_p99_ms,
        g.phase.start,
        s.interval_ns.max(1),
        recorder,
        &sent,
        s.common
            .broker_pid
            .map(|_| g.finished.broker_samples.as_slice()),
    );
    schedule_warnings(&rs, warnings);
    Some(rs)
}

fn rate(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// Connect and disconnect figures of the scenario's main connections, and connections
/// established per interval.
fn connection_stats(
    plan: &Plan,
    g: &Gathered,
    grid: Grid,
    warnings: &mut Vec<String>,
) -> (ConnectionStats, Vec<u64>) {
    let (main_connect, main_reports) = if plan.main_is_receivers {
        (&g.recv_connect, &g.finished.recv_reports)
    } else {
        (&g.send_connect, &g.finished.send_reports)
    };
    let mut connections = ConnectionStats::default();
    let mut connect_times = coarse_histogram();
    let mut conn_series = vec![0u64; grid.n_points];
    let mut start = u64::MAX;
    let mut end = 0;
    for r in main_connect {
        connections.attempted += r.attempted;
        connections.established += r.established;
        connections.subscribe_failures += r.subscribe_failures;
        for (k, v) in &r.failures {
            *connections.failures_by_reason.entry(k.clone()).or_default() += v;
        }
        start = start.min(r.start_ns);
        end = end.max(r.end_ns);
        if let Some(h) = hist_from_base64(&r.connect_time_us) {
            merge_hist(&mut connect_times, &h);
        }
        for (i, v) in r.series.iter().enumerate() {
            if i < grid.n_points {
                conn_series[i] += v;
            }
        }
    }
    connections.failed = connections.attempted - connections.established;
    connections.connect_duration_s = end.saturating_sub(start.min(end)) as f64 / 1e9;
    connections.connect_rate_per_s = rate(connections.established, connections.connect_duration_s);
    connections.connect_time =
        (!connect_times.is_empty()).then(|| summarize(&connect_times, 1000, false));
    let mut d_start = u64::MAX;
    let mut d_end = 0;
    for r in main_reports {
        connections.disconnected += r.disconnected;
        for (k, v) in &r.drops {
            connections.dropped_during_run += v;
            *connections.drops_by_reason.entry(k.clone()).or_default() += v;
        }
        d_start = d_start.min(r.disconnect_start_ns);
        d_end = d_end.max(r.disconnect_end_ns);
    }
    connections.disconnect_duration_s = d_end.saturating_sub(d_start.min(d_end)) as f64 / 1e9;
    connections.disconnect_rate_per_s =
        rate(connections.disconnected, connections.disconnect_duration_s);
    if connections.failed > 0 {
        warnings.push(format!(
            "{} of {} connections failed: {:?}",
            connections.failed, connections.attempted, connections.failures_by_reason
        ));
    }
    if connections.subscribe_failures > 0 {
        warnings.push(format!(
            "{} subscriptions failed",
            connections.subscribe_failures
        ));
    }
    (connections, conn_series)
}

/// Message counts and delivery checks, and messages sent per interval.
fn message_stats(
    g: &Gathered,
    recorder: &Recorder,
    grid: Grid,
    warnings: &mut Vec<String>,
) -> (MessageStats, Vec<u64>) {
    let phase_start = g.phase.start;
    let mut sent_series = vec![0u64; grid.n_points];
    let mut m = MessageStats::default();
    let mut last_send = None;
    for r in &g.finished.send_reports {
        m.sent += r.sent;
        m.publish_writes += r.publish_writes;
        m.sent_counted += r.counted;
        m.acknowledged += r.acked;
        m.window_stalls += r.window_stalls;
        for (k, v) in &r.publish_errors {
            *m.publish_errors.entry(k.clone()).or_default() += v;
        }
        last_send = last_send.max(r.last_send_ns);
        for (i, v) in r.series_sent.iter().enumerate() {
            if i < grid.n_points {
                sent_series[i] += v;
            }
        }
    }
    m.expected = g.expected.of(m.sent_counted);
    m.received = recorder.received;
    m.received_counted = recorder.unique_counted;
    m.lost = m.expected.saturating_sub(m.received_counted);
    m.duplicates = recorder.duplicates;
    m.reordered = recorder.reordered;
    m.foreign = recorder.foreign;
    m.success_percent = if m.expected == 0 {
        100.0
    } else {
        100.0 * m.received_counted as f64 / m.expected as f64
    };
    m.send_duration_s = last_send.map_or(0.0, |l| l.saturating_sub(phase_start) as f64 / 1e9);
    m.send_rate_per_s = rate(m.sent, m.send_duration_s);
    m.receive_duration_s = recorder
        .last_ns
        .map_or(0.0, |l| l.saturating_sub(phase_start) as f64 / 1e9);
    m.receive_rate_per_s = rate(m.received, m.receive_duration_s);
    if m.window_stalls > 0 {
        warnings.push(format!(
            "the senders waited more than 1 s for the receiver {} times (messages dropped by the broker do not reopen the window)",
            m.window_stalls
        ));
    }
    (m, sent_series)
}

/// The broker's CPU and RSS figures (`--broker-pid`).
fn broker_stats(
    plan: &Plan,
    s: &Setup,
    g: &Gathered,
    recorder: &Recorder,
    grid: Grid,
) -> Option<BrokerStats> {
    let (phase_start, phase_end) = (g.phase.start, g.phase.end);
    let phase_s = phase_end.saturating_sub(phase_start).max(1) as f64 / 1e9;
    let samples = &g.finished.broker_samples;
    s.common.broker_pid.map(|pid| {
        let cpu_seconds = match g.phase.broker {
            (Some(a), Some(b)) => (b.0 - a.0).max(0.0),
            _ => 0.0,
        };
        let in_phase: Vec<ProcSample> = samples
            .iter()
            .copied()
            .filter(|x| x.t_ns >= phase_start && x.t_ns <= phase_end + grid.interval)
            .collect();
        let peak_cpu = per_interval(&in_phase, grid.interval, grid.n_points)
            .iter()
            .filter_map(|x| x.0)
            .fold(cpu_seconds / phase_s * 100.0, f64::max);
        let delivered = recorder.unique as f64;
        let rss_start = g.started.broker_start.map_or(0, |x| x.1);
        let rss_connected = g.broker_connected.map_or(0, |x| x.1);
        let rss_end = g.finished.broker_end.map_or(0, |x| x.1);
        let peak = samples
            .iter()
            .map(|x| x.rss)
            .chain([rss_start, rss_connected, rss_end])
            .max()
            .unwrap_or(0);
        let all_established: u64 = g
            .recv_connect
            .iter()
            .chain(g.send_connect.iter())
            .map(|r| r.established)
            .sum();
        BrokerStats {
            pid,
            cpu_seconds,
            cpu_percent_avg: cpu_seconds / phase_s * 100.0,
            cpu_percent_peak: peak_cpu,
            cpu_seconds_per_million_messages: (plan.traffic && delivered > 0.0)
                .then(|| cpu_seconds / delivered * 1e6),
            rss_start_bytes: rss_start,
            rss_connected_bytes: rss_connected,
            rss_peak_bytes: peak,
            rss_end_bytes: rss_end,
            rss_per_connection_bytes: (all_established > 0)
                .then(|| (rss_connected as f64 - rss_start as f64) / all_established as f64),
        }
    })
}

/// The load generator's own CPU (this process exactly, workers from their samples) and RSS,
/// and its CPU per interval.
fn bench_stats(
    s: &Setup,
    g: &Gathered,
    processes: u64,
    grid: Grid,
    warnings: &mut Vec<String>,
) -> (BenchStats, Vec<Option<f64>>) {
    let (phase_start, phase_end) = (g.phase.start, g.phase.end);
    let phase_s = phase_end.saturating_sub(phase_start).max(1) as f64 / 1e9;
    let self_samples = &g.finished.self_samples;
    let worker_samples: Vec<&Vec<ProcSample>> = g
        .finished
        .send_reports
        .iter()
        .chain(g.finished.recv_reports.iter())
        .filter(|r| !r.process.is_empty())
        .map(|r| &r.process)
        .collect();
    let self_cpu = match g.phase.me {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => {
            cpu_at(self_samples, phase_end).unwrap_or(0.0)
                - cpu_at(self_samples, phase_start).unwrap_or(0.0)
        }
    };
    let workers_cpu: f64 = worker_samples
        .iter()
        .map(|w| cpu_at(w, phase_end).unwrap_or(0.0) - cpu_at(w, phase_start).unwrap_or(0.0))
        .sum();
    let bench_cpu = (self_cpu + workers_cpu).max(0.0);
    let cores = g.started.machine.cores as f64;
    let capacity = 100.0 * cores.min((s.threads as u64 * processes) as f64);
    let series = bench_cpu_series(self_samples, &worker_samples, grid);
    let bench_avg = bench_cpu / phase_s * 100.0;
    let first_idx = (phase_start / grid.interval) as usize;
    let last_idx = ((phase_end / grid.interval) as usize).min(grid.n_points.saturating_sub(1));
    let bench_peak = (first_idx..=last_idx)
        .filter(|&i| i < grid.n_points)
        .filter_map(|i| series[i])
        .fold(bench_avg, f64::max);
    let machine_busy = match g.phase.machine {
        (Some(a), Some(b)) if b.1 > a.1 => 100.0 * (b.0 - a.0) as f64 / (b.1 - a.1) as f64,
        _ => 0.0,
    };
    let saturated = bench_avg > 0.9 * capacity;
    if saturated {
        warnings.push(format!(
            "the load generator was saturated ({bench_avg:.0}% CPU of {capacity:.0}% available): the broker figures are a lower bound; add --threads/--processes or cores"
        ));
    }
    let bench_rss_peak = self_samples.iter().map(|x| x.rss).max().unwrap_or(0)
        + worker_samples
            .iter()
            .map(|w| w.iter().map(|x| x.rss).max().unwrap_or(0))
            .sum::<u64>();
    let bench = BenchStats {
        processes,
        threads: s.threads as u64,
        cpu_seconds: bench_cpu,
        cpu_percent_avg: bench_avg,
        cpu_percent_peak: bench_peak,
        cpu_percent_capacity: capacity,
        saturated,
        machine_cpu_busy_percent: machine_busy,
        rss_peak_bytes: bench_rss_peak,
    };
    (bench, series)
}

/// The bench's CPU per interval: this process's, plus its workers' (`None` where this
/// process has no figure).
fn bench_cpu_series(
    self_samples: &[ProcSample],
    worker_samples: &[&Vec<ProcSample>],
    grid: Grid,
) -> Vec<Option<f64>> {
    let self_intervals = per_interval(self_samples, grid.interval, grid.n_points);
    let worker_intervals: Vec<Vec<(Option<f64>, Option<u64>)>> = worker_samples
        .iter()
        .map(|w| per_interval(w, grid.interval, grid.n_points))
        .collect();
    (0..grid.n_points)
        .map(|i| {
            let mut total = self_intervals[i].0?;
            for w in &worker_intervals {
                total += w[i].0.unwrap_or(0.0);
            }
            Some(total)
        })
        .collect()
}

/// The per-interval series the time series is made of.
struct Series<'a> {
    connections: &'a [u64],
    sent: &'a [u64],
    broker: &'a [(Option<f64>, Option<u64>)],
    bench: &'a [Option<f64>],
}

fn timeseries(grid: Grid, series: &Series<'_>, recorder: &Recorder) -> Vec<TimePoint> {
    let mut cumulative = 0;
    (0..grid.n_points)
        .map(|i| {
            cumulative += series.connections[i];
            let bucket = recorder.series.get(i).and_then(|b| b.as_ref());
            let lat = bucket.filter(|b| !b.latency.is_empty()).map(|b| &b.latency);
            TimePoint {
                t_s: (i as u64 + 1) as f64 * grid.interval as f64 / 1e9,
                connections: cumulative,
                sent: series.sent[i],
                received: bucket.map_or(0, |b| b.received),
                latency_p50_us: lat.map(|h| h.value_at_quantile(0.5) as f64),
                latency_p99_us: lat.map(|h| h.value_at_quantile(0.99) as f64),
                latency_max_us: lat.map(|h| h.max() as f64),
                broker_cpu_percent: series.broker[i].0,
                broker_rss_bytes: series.broker[i].1,
                bench_cpu_percent: series.bench[i],
            }
        })
        .collect()
}
