//! Human output: the summary table, the periodic progress line, and the comparison table.
//! The only module that prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use crate::clock::Clock;
use crate::engine::PartLive;
use crate::procstat::SampleLog;
use crate::results::{
    BenchResult, CompareResult, LatencySummary, MessageStats, RateScheduleStats, RecoveryStats,
    RunConfig, TimePoint,
};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

/// fan-in's `--shape` for the config line: `shape batch (capacity test)`, `shape open (one
/// PUBLISH per write, 1 msg/s per connection)`...; `None` for the other scenarios.
pub fn shape_text(c: &RunConfig) -> Option<String> {
    let shape = c.shape.as_deref()?;
    let per_connection = c.rate_per_connection_per_s.map_or(String::new(), |r| {
        format!(", {} msg/s per connection", num(r))
    });
    Some(match shape {
        "batch" => "shape batch (capacity test)".into(),
        "paho" => format!("shape paho (one PUBLISH per write, each waited for{per_connection})"),
        other => format!("shape {other} (one PUBLISH per write{per_connection})"),
    })
}

/// `, N msg/write` when the publishers' writes were counted.
pub fn per_write_text(m: &MessageStats) -> String {
    if m.publish_writes == 0 {
        return String::new();
    }
    format!(", {:.2} msg/write", m.sent as f64 / m.publish_writes as f64)
}

/// Bytes in human units.
pub fn bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", units[u])
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// A count or rate with thousands separators.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let neg = v < 0.0;
    let int = v.abs().round() as u64;
    let s = int.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if neg {
        format!("-{out}")
    } else {
        out
    }
}

/// Microseconds in a readable unit.
pub fn micros(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn latency_line(l: &LatencySummary) -> String {
    format!(
        "min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (n={})",
        micros(l.min_us),
        micros(l.p50_us),
        micros(l.p90_us),
        micros(l.p99_us),
        micros(l.p999_us),
        micros(l.max_us),
        num(l.count as f64)
    )
}

/// The summary of one run as text.
pub fn summary_text(r: &BenchResult) -> String {
    let mut o = String::new();
    let c = &r.config;
    let target = match &r.target.name {
        Some(n) => format!("{n} ({})", r.target.address),
        None => r.target.address.clone(),
    };
    let _ = writeln!(
        o,
        "hayate bench {} → {}{}",
        r.scenario,
        target,
        r.target
            .broker_version
            .as_ref()
            .map_or(String::new(), |v| format!(" [{v}]"))
    );
    let _ = writeln!(
        o,
        "machine       {} cores, {}, {} {}",
        r.machine.cores,
        bytes(r.machine.memory_bytes as f64),
        r.machine.os,
        r.machine.kernel
    );
    if !c.publisher_targets.is_empty() || !c.subscriber_targets.is_empty() {
        let list = |l: &[String]| {
            if l.is_empty() {
                r.target.address.clone()
            } else {
                l.join(",")
            }
        };
        let _ = writeln!(
            o,
            "targets       publishers → {}; subscribers → {} (round robin){}",
            list(&c.publisher_targets),
            list(&c.subscriber_targets),
            c.cross_target_fraction.map_or(String::new(), |f| format!(
                "; {:.1} % cross brokers",
                f * 100.0
            ))
        );
    }
    let mut cfg = format!(
        "mqtt {}, {} connections",
        c.mqtt_version,
        num(c.connections as f64)
    );
    if let Some(p) = c.publishers {
        let _ = write!(cfg, ", {} publishers", num(p as f64));
    }
    if let Some(s) = c.subscribers {
        let _ = write!(cfg, ", {} subscribers", num(s as f64));
    }
    if let (Some(q), Some(sq)) = (c.publish_qos, c.subscribe_qos) {
        let _ = write!(cfg, ", qos {q}→{sq}");
    }
    if let Some(p) = c.payload_bytes {
        let _ = write!(cfg, ", payload {p} B");
    }
    if let Some(p) = &c.pacing {
        match (p.as_str(), c.rate_per_s, c.window) {
            ("fixed-rate", Some(rate), _) => {
                let _ = write!(cfg, ", fixed rate {}/s", num(rate));
            }
            ("rate-schedule", _, _) => {
                let _ = write!(
                    cfg,
                    ", rate schedule {}",
                    schedule_config_text(c.rate_schedule.as_deref().unwrap_or_default())
                );
            }
            (_, _, Some(w)) => {
                let _ = write!(cfg, ", closed loop (window {})", num(w as f64));
            }
            _ => {}
        }
    }
    if let Some(shape) = shape_text(c) {
        let _ = write!(cfg, ", {shape}");
    }
    let _ = write!(
        cfg,
        ", {} process(es) × {} thread(s)",
        c.processes, c.threads
    );
    let _ = writeln!(o, "config        {cfg}");
    let k = &r.connections;
    let _ = writeln!(
        o,
        "connections   {} of {} established in {:.2} s ({} conn/s), {} failed{}",
        num(k.established as f64),
        num(k.attempted as f64),
        k.connect_duration_s,
        num(k.connect_rate_per_s),
        num(k.failed as f64),
        if k.failures_by_reason.is_empty() {
            String::new()
        } else {
            format!(" {:?}", k.failures_by_reason)
        }
    );
    if let Some(t) = &k.connect_time {
        let _ = writeln!(
            o,
            "connect time  p50 {}  p99 {}  max {}",
            micros(t.p50_us),
            micros(t.p99_us),
            micros(t.max_us)
        );
    }
    let _ = writeln!(
        o,
        "disconnect    {} in {:.2} s ({} /s); dropped during run {}",
        num(k.disconnected as f64),
        k.disconnect_duration_s,
        num(k.disconnect_rate_per_s),
        num(k.dropped_during_run as f64)
    );
    if let Some(m) = &r.messages {
        let _ = writeln!(
            o,
            "messages      sent {} ({} msg/s{})  received {} ({} msg/s)  success {:.2}%",
            num(m.sent as f64),
            num(m.send_rate_per_s),
            per_write_text(m),
            num(m.received as f64),
            num(m.receive_rate_per_s),
            m.success_percent
        );
        let _ = writeln!(
            o,
            "delivery      expected {}  lost {}  duplicates {}  reordered {}{}",
            num(m.expected as f64),
            num(m.lost as f64),
            num(m.duplicates as f64),
            num(m.reordered as f64),
            if m.publish_errors.is_empty() {
                String::new()
            } else {
                format!("  publish errors {:?}", m.publish_errors)
            }
        );
    }
    if let Some(l) = &r.latency {
        let what = if l.corrected_for_coordinated_omission {
            "latency       (from intended send time, CO-corrected)"
        } else {
            "latency"
        };
        let _ = writeln!(o, "{what}\n              {}", latency_line(l));
        if l.corrected_for_coordinated_omission {
            if let Some(u) = &r.latency_uncorrected {
                let _ = writeln!(
                    o,
                    "latency       (from actual send time)\n              {}",
                    latency_line(u)
                );
            }
        }
    }
    if let Some(rs) = &r.rate_schedule {
        let _ = writeln!(o, "{}", schedule_text(rs));
    }
    if let Some(b) = &r.broker {
        let _ = writeln!(
            o,
            "broker        pid {}: cpu {:.1}% avg, {:.1}% peak, {:.2} cpu-s{}",
            b.pid,
            b.cpu_percent_avg,
            b.cpu_percent_peak,
            b.cpu_seconds,
            b.cpu_seconds_per_million_messages
                .map_or(String::new(), |v| format!(
                    " ({v:.2} cpu-s per million msgs)"
                ))
        );
        let _ = writeln!(
            o,
            "broker rss    start {}  connected {}  peak {}  end {}{}",
            bytes(b.rss_start_bytes as f64),
            bytes(b.rss_connected_bytes as f64),
            bytes(b.rss_peak_bytes as f64),
            bytes(b.rss_end_bytes as f64),
            b.rss_per_connection_bytes
                .map_or(String::new(), |v| format!(
                    "  ({} per connection)",
                    bytes(v)
                ))
        );
    } else {
        let _ = writeln!(
            o,
            "broker        (no --broker-pid: CPU and RSS not sampled)"
        );
    }
    let bn = &r.bench;
    let _ = writeln!(
        o,
        "bench         cpu {:.1}% avg, {:.1}% peak of {:.0}% available{}; machine busy {:.0}%; rss {}",
        bn.cpu_percent_avg,
        bn.cpu_percent_peak,
        bn.cpu_percent_capacity,
        if bn.saturated { " [SATURATED]" } else { "" },
        bn.machine_cpu_busy_percent,
        bytes(bn.rss_peak_bytes as f64)
    );
    if !r.timeseries.is_empty() {
        let _ = writeln!(o, "{}", series_text(&r.timeseries));
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    o
}

/// A rate schedule as `60 s @ 300,000/s → 30 s @ 50,000/s`.
pub fn schedule_config_text(phases: &[crate::results::RatePhase]) -> String {
    phases
        .iter()
        .map(|p| format!("{} s @ {}/s", p.duration_s, num(p.rate_per_s)))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// How the recovery threshold was set, in words.
pub fn threshold_text(rs: &RateScheduleStats) -> String {
    let rule = format!(
        "recovered when, for {} s in a row, every interval delivers within ±{}% of the offered rate",
        rs.recovery_hold_s, rs.recovery_rate_tolerance_percent
    );
    let Some(bound) = rs.recovery_threshold_p99_us else {
        let why = match rs.reference_p99_us {
            Some(reference) => format!(
                "the last phase's second half (p99 {}) was not steady",
                micros(reference)
            ),
            None => "nothing was received in the last phase's second half".to_string(),
        };
        return format!("{rule} with p99 under a threshold: none, {why}; give --recovery-p99-ms");
    };
    let why = match (rs.recovery_threshold_source.as_str(), rs.reference_p99_us) {
        ("option", _) => "--recovery-p99-ms".to_string(),
        (_, Some(reference)) => format!(
            "2 × the p99 of the last phase's second half, {}, at least 1 ms",
            micros(reference)
        ),
        _ => "2 × the last phase's p99, at least 1 ms".to_string(),
    };
    format!("{rule} with p99 ≤ {} ({why})", micros(bound))
}

/// A phase's recovery in words: `2.0 s (throughput 1.0 s, latency 2.0 s)`; `threshold`: whether
/// there was a latency threshold (without one, only the throughput can be judged).
pub fn recovery_text(r: &RecoveryStats, threshold: bool) -> String {
    let s = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.1} s"));
    if !threshold {
        return format!(
            "unknown: no latency threshold (throughput {})",
            s(r.throughput_recovery_s)
        );
    }
    format!(
        "{} (throughput {}, latency {})",
        r.recovery_s
            .map_or("NOT RECOVERED".to_string(), |v| format!("{v:.1} s")),
        s(r.throughput_recovery_s),
        s(r.latency_recovery_s)
    )
}

/// The per-phase table of a rate-schedule run.
pub fn schedule_text(rs: &RateScheduleStats) -> String {
    let mut o = format!(
        "rate schedule {}
",
        threshold_text(rs)
    );
    let _ = writeln!(
        o,
        "              phase  start  length  offered/s     sent/s     unsent delivered/s       lost    p50 lat   p99 lat p99.9 lat  broker rss  recovery"
    );
    for (i, p) in rs.phases.iter().enumerate() {
        let lat =
            |f: fn(&LatencySummary) -> f64| p.latency.as_ref().map_or("-".into(), |l| micros(f(l)));
        let _ = writeln!(
            o,
            "              {:>5} {:>6.1} {:>7.1} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>9} {:>9} {:>11}  {}",
            i + 1,
            p.start_s,
            p.duration_s,
            num(p.offered_rate_per_s),
            num(p.send_rate_per_s),
            num(p.unsent as f64),
            num(p.delivered_rate_per_s),
            if p.lost > 0 {
                format!("{} ({:.2}%)", num(p.lost as f64), p.loss_percent)
            } else {
                "0".into()
            },
            lat(|l| l.p50_us),
            lat(|l| l.p99_us),
            lat(|l| l.p999_us),
            p.broker_rss_max_bytes.map_or("-".into(), |b| bytes(b as f64)),
            p.recovery.as_ref().map_or("-".into(), |r| recovery_text(
                r,
                rs.recovery_threshold_p99_us.is_some()
            )),
        );
    }
    o.trim_end().to_string()
}

/// The time series as a table, grouped to at most 20 rows.
pub fn series_text(points: &[TimePoint]) -> String {
    let group = points.len().div_ceil(20).max(1);
    let mut o = String::from(
        "time series   t(s)    conns     sent/s     recv/s   p50 lat   p99 lat   max lat  broker cpu  broker rss  bench cpu\n",
    );
    for chunk in points.chunks(group) {
        let last = &chunk[chunk.len() - 1];
        let span = if chunk.len() > 1 {
            last.t_s - chunk[0].t_s + (chunk[1].t_s - chunk[0].t_s)
        } else if points.len() > 1 {
            points[1].t_s - points[0].t_s
        } else {
            last.t_s
        };
        let span = if span > 0.0 { span } else { 1.0 };
        let sent: u64 = chunk.iter().map(|p| p.sent).sum();
        let recv: u64 = chunk.iter().map(|p| p.received).sum();
        let maxf = |f: &dyn Fn(&TimePoint) -> Option<f64>| {
            chunk
                .iter()
                .filter_map(f)
                .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
        };
        let avgf = |f: &dyn Fn(&TimePoint) -> Option<f64>| {
            let v: Vec<f64> = chunk.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
        let _ = writeln!(
            o,
            "              {:>5.0} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>11} {:>11} {:>10}",
            last.t_s,
            num(last.connections as f64),
            num(sent as f64 / span),
            num(recv as f64 / span),
            opt(maxf(&|p| p.latency_p50_us), &micros),
            opt(maxf(&|p| p.latency_p99_us), &micros),
            opt(maxf(&|p| p.latency_max_us), &micros),
            opt(avgf(&|p| p.broker_cpu_percent), &|v| format!("{v:.0}%")),
            opt(maxf(&|p| p.broker_rss_bytes.map(|b| b as f64)), &bytes),
            opt(avgf(&|p| p.bench_cpu_percent), &|v| format!("{v:.0}%")),
        );
    }
    o.trim_end().to_string()
}

/// Prints the summary of one run on stdout.
pub fn print_summary(r: &BenchResult) {
    println!("{}", summary_text(r));
}

/// The comparison as text: one row per metric, one column per target, then ratios.
pub fn compare_text(c: &CompareResult) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "hayate bench compare: {} — median of {} run(s) per target; ratios relative to {}",
        c.scenario,
        c.repeat,
        c.targets.first().map_or("-", |s| s.as_str())
    );
    let mut header = format!("{:<48}", "metric");
    for t in &c.targets {
        let _ = write!(header, " {t:>14}");
    }
    for t in c.targets.iter().skip(1) {
        let _ = write!(header, " {:>14}", format!("{t}/{}", c.targets[0]));
    }
    let _ = writeln!(o, "{header}");
    for row in &c.rows {
        if row.medians.values().all(|v| v.is_none()) {
            continue;
        }
        let mut line = format!(
            "{:<48}",
            format!("{} ({}, {} better)", row.metric, row.unit, row.better)
        );
        for t in &c.targets {
            let v = row.medians.get(t).copied().flatten();
            let text = v.map_or("-".to_string(), |v| {
                if row.unit == "bytes" {
                    bytes(v)
                } else if v.abs() < 100.0 && v.fract() != 0.0 {
                    format!("{v:.2}")
                } else {
                    num(v)
                }
            });
            let _ = write!(line, " {text:>14}");
        }
        for t in c.targets.iter().skip(1) {
            let v = row.ratio_to_first.get(t).copied().flatten();
            let _ = write!(
                line,
                " {:>14}",
                v.map_or("-".to_string(), |v| format!("×{v:.2}"))
            );
        }
        let _ = writeln!(o, "{line}");
    }
    o.trim_end().to_string()
}

/// Prints the comparison on stdout.
pub fn print_compare(c: &CompareResult) {
    println!("{}", compare_text(c));
}

/// Prints one line per finished run of a comparison on stderr.
pub fn print_run_line(name: &str, round: u64, r: &BenchResult) {
    let m = r.messages.as_ref();
    eprintln!(
        "[compare] {name} run {}: conns {} ({}/s) recv {}/s p99 {} loss {}",
        round + 1,
        num(r.connections.established as f64),
        num(r.connections.connect_rate_per_s),
        m.map_or("-".into(), |m| num(m.receive_rate_per_s)),
        r.latency.as_ref().map_or("-".into(), |l| micros(l.p99_us)),
        m.map_or("-".into(), |m| num(m.lost as f64)),
    );
}

fn last_two(log: &SampleLog) -> Option<(f64, u64)> {
    let v = log.lock();
    let n = v.len();
    if n < 2 {
        return v.last().map(|s| (0.0, s.rss));
    }
    let (a, b) = (v[n - 2], v[n - 1]);
    let dt = (b.t_ns.saturating_sub(a.t_ns)) as f64 / 1e9;
    Some((
        if dt > 0.0 {
            100.0 * (b.cpu_s - a.cpu_s) / dt
        } else {
            0.0
        },
        b.rss,
    ))
}

/// Prints a progress line on stderr every `every_ns` until `stop`.
#[allow(clippy::too_many_arguments)]
pub async fn progress_task(
    scenario: &'static str,
    traffic: bool,
    clock: Clock,
    every_ns: u64,
    main: Vec<Arc<PartLive>>,
    senders: Vec<Arc<PartLive>>,
    receivers: Vec<Arc<PartLive>>,
    broker: Option<SampleLog>,
    me: SampleLog,
    mut stop: watch::Receiver<bool>,
) {
    let sum = |v: &[Arc<PartLive>], f: fn(&PartLive) -> u64| v.iter().map(|l| f(l)).sum::<u64>();
    let mut last = (
        clock.now_ns(),
        sum(&senders, |l| l.sent.load(Ordering::Relaxed)),
        sum(&receivers, |l| l.received.load(Ordering::Relaxed)),
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_nanos(every_ns.max(100_000_000))) => {}
            r = stop.changed() => { if r.is_err() || *stop.borrow() { return; } continue; }
        }
        let now = clock.now_ns();
        let sent = sum(&senders, |l| l.sent.load(Ordering::Relaxed));
        let recv = sum(&receivers, |l| l.received.load(Ordering::Relaxed));
        let dt = (now - last.0).max(1) as f64 / 1e9;
        let conns = sum(&main, |l| l.connected.load(Ordering::Relaxed));
        let dropped = sum(&main, |l| l.dropped.load(Ordering::Relaxed));
        let mut line = format!(
            "[{scenario} {:>6.1}s] conns {}{}",
            now as f64 / 1e9,
            num(conns as f64),
            if dropped > 0 {
                format!(" (-{dropped})")
            } else {
                String::new()
            },
        );
        if traffic {
            let _ = write!(
                line,
                " | sent {} ({}/s) | recv {} ({}/s)",
                num(sent as f64),
                num(sent.saturating_sub(last.1) as f64 / dt),
                num(recv as f64),
                num(recv.saturating_sub(last.2) as f64 / dt),
            );
        }
        if let Some((cpu, rss)) = broker.as_ref().and_then(last_two) {
            let _ = write!(line, " | broker cpu {cpu:.0}% rss {}", bytes(rss as f64));
        }
        if let Some((cpu, _)) = last_two(&me) {
            let _ = write!(line, " | bench cpu {cpu:.0}%");
        }
        eprintln!("{line}");
        last = (now, sent, recv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(num(1234567.4), "1,234,567");
        assert_eq!(num(12.0), "12");
        assert_eq!(bytes(2048.0), "2.0 KiB");
        assert_eq!(micros(1500.0), "1.50 ms");
        assert_eq!(micros(15.0), "15 µs");
    }

    #[test]
    fn rate_schedule_texts() {
        use crate::results::{RatePhase, RatePhaseStats};
        let phase = |rate: f64, recovery: Option<RecoveryStats>| RatePhaseStats {
            start_s: 1.0,
            duration_s: 2.0,
            offered_rate_per_s: rate,
            offered: 2 * rate as u64,
            sent: rate as u64,
            unsent: rate as u64,
            send_rate_per_s: rate / 2.0,
            delivered_rate_per_s: rate / 2.0,
            delivered: rate as u64 - 10,
            lost: 10,
            loss_percent: 1000.0 / rate,
            latency: None,
            broker_rss_max_bytes: Some(1 << 20),
            broker_cpu_percent_avg: Some(50.0),
            recovery,
        };
        let recovered = RecoveryStats {
            recovery_s: Some(2.0),
            throughput_recovery_s: Some(1.0),
            latency_recovery_s: Some(2.0),
            intervals: 4,
            good_intervals: 2,
        };
        let mut rs = RateScheduleStats {
            recovery_threshold_p99_us: Some(1000.0),
            recovery_threshold_source: "last-phase".into(),
            reference_p99_us: Some(300.0),
            reference_steady: true,
            recovery_rate_tolerance_percent: 10.0,
            recovery_hold_s: 3.0,
            phases: vec![phase(3000.0, None), phase(500.0, Some(recovered.clone()))],
        };
        let text = schedule_text(&rs);
        assert!(text.contains("p99 ≤ 1.00 ms (2 × the p99 of the last phase's second half, 300 µs, at least 1 ms)"), "{text}");
        assert!(
            text.contains("2.0 s (throughput 1.0 s, latency 2.0 s)"),
            "{text}"
        );
        assert!(text.contains("10 (2.00%)"), "{text}");
        assert!(text.contains("1.0 MiB"), "{text}");
        // Not steady: no threshold, no verdict.
        rs.recovery_threshold_p99_us = None;
        rs.reference_steady = false;
        rs.reference_p99_us = Some(12e6);
        let text = schedule_text(&rs);
        assert!(text.contains("none, the last phase's second half (p99 12.00 s) was not steady; give --recovery-p99-ms"), "{text}");
        assert!(
            text.contains("unknown: no latency threshold (throughput 1.0 s)"),
            "{text}"
        );
        // Not recovered.
        let never = RecoveryStats {
            recovery_s: None,
            latency_recovery_s: None,
            ..recovered
        };
        assert_eq!(
            recovery_text(&never, true),
            "NOT RECOVERED (throughput 1.0 s, latency never)"
        );
        let phases = [
            RatePhase {
                duration_s: 60.0,
                rate_per_s: 300_000.0,
            },
            RatePhase {
                duration_s: 30.0,
                rate_per_s: 50_000.0,
            },
        ];
        assert_eq!(
            schedule_config_text(&phases),
            "60 s @ 300,000/s → 30 s @ 50,000/s"
        );
    }
}
