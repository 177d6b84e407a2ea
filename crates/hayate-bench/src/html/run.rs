//! The report of one run: summary, latency and rate-schedule tables, time series.

use super::{
    chart_box, config_text, interval_of, kv_table, machine_rows, page, reasons, run_charts,
    shell_line, target_label, utc_time, warnings_html,
};
use crate::report::{bytes, micros, num, per_write_text, recovery_text, threshold_text};
use crate::results::{BenchResult, LatencySummary, RateScheduleStats, TimePoint};
use crate::svg::esc;
use std::fmt::Write as _;

/// The per-phase table of a rate-schedule run.
fn schedule_html(rs: &RateScheduleStats) -> String {
    let mut o = String::from("<h2>Rate schedule</h2>\n");
    let _ = writeln!(
        o,
        "<p class=\"sub\">Per phase: rates are per second over the phase (sent and delivered by actual time), unsent = due in the phase but not written by its end (publishers held back), lost and latency are of the messages intended in the phase (latency from the intended send time). Recovery, after a rate decrease: {}.</p>",
        esc(&threshold_text(rs))
    );
    o.push_str("<table class=\"phases\"><tr><th class=\"num\">phase</th><th class=\"num\">start</th><th class=\"num\">length</th><th class=\"num\">offered/s</th><th class=\"num\">sent/s</th><th class=\"num\">unsent</th><th class=\"num\">delivered/s</th><th class=\"num\">lost</th><th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">p99.9</th><th class=\"num\">broker RSS max</th><th>recovery</th></tr>\n");
    for (i, p) in rs.phases.iter().enumerate() {
        let lat = |f: fn(&LatencySummary) -> f64| {
            p.latency
                .as_ref()
                .map_or("-".into(), |l| esc(&micros(f(l))))
        };
        let class = |bad: bool| if bad { "bad" } else { "good" };
        let recovery = match &p.recovery {
            Some(r) => {
                let threshold = rs.recovery_threshold_p99_us.is_some();
                format!(
                    "<span class=\"{}\">{}</span>",
                    class(r.recovery_s.is_none()),
                    esc(&recovery_text(r, threshold))
                )
            }
            None => "-".into(),
        };
        let _ = writeln!(
            o,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{:.1} s</td><td class=\"num\">{:.1} s</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\"><span class=\"{}\">{} ({:.2}%)</span></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{recovery}</td></tr>",
            i + 1,
            p.start_s,
            p.duration_s,
            num(p.offered_rate_per_s),
            num(p.send_rate_per_s),
            num(p.unsent as f64),
            num(p.delivered_rate_per_s),
            class(p.lost > 0),
            num(p.lost as f64),
            p.loss_percent,
            lat(|l| l.p50_us),
            lat(|l| l.p99_us),
            lat(|l| l.p999_us),
            p.broker_rss_max_bytes
                .map_or("-".into(), |b| bytes(b as f64)),
        );
    }
    o.push_str("</table>\n");
    o
}

fn latency_table(rows: &[(&str, &LatencySummary)]) -> String {
    let mut o = String::from(
        "<table class=\"latency\"><tr><th></th><th class=\"num\">min</th><th class=\"num\">p50</th><th class=\"num\">p90</th><th class=\"num\">p99</th><th class=\"num\">p99.9</th><th class=\"num\">max</th><th class=\"num\">mean</th><th class=\"num\">samples</th></tr>\n",
    );
    for (name, l) in rows {
        let _ = writeln!(
            o,
            "<tr><th>{}</th><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(name),
            esc(&micros(l.min_us)),
            esc(&micros(l.p50_us)),
            esc(&micros(l.p90_us)),
            esc(&micros(l.p99_us)),
            esc(&micros(l.p999_us)),
            esc(&micros(l.max_us)),
            esc(&micros(l.mean_us)),
            num(l.count as f64)
        );
    }
    o.push_str("</table>\n");
    o
}

/// The summary rows of one run (the HTML counterpart of [`crate::report::summary_text`]).
fn summary_rows(r: &BenchResult) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let k = &r.connections;
    let failed = if k.failed > 0 {
        format!(
            ", <span class=\"bad\">{} failed</span> ({})",
            num(k.failed as f64),
            reasons(&k.failures_by_reason)
        )
    } else {
        ", none failed".into()
    };
    rows.push((
        "connections".into(),
        format!(
            "{} of {} established in {:.2} s ({} conn/s){failed}",
            num(k.established as f64),
            num(k.attempted as f64),
            k.connect_duration_s,
            num(k.connect_rate_per_s)
        ),
    ));
    if let Some(t) = &k.connect_time {
        rows.push((
            "connect time".into(),
            format!(
                "p50 {}, p99 {}, max {}",
                esc(&micros(t.p50_us)),
                esc(&micros(t.p99_us)),
                esc(&micros(t.max_us))
            ),
        ));
    }
    rows.push((
        "disconnect".into(),
        format!(
            "{} in {:.2} s ({} /s); dropped during the run: {}{}",
            num(k.disconnected as f64),
            k.disconnect_duration_s,
            num(k.disconnect_rate_per_s),
            num(k.dropped_during_run as f64),
            if k.drops_by_reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons(&k.drops_by_reason))
            }
        ),
    ));
    if let Some(m) = &r.messages {
        rows.push((
            "messages".into(),
            format!(
                "sent {} ({} msg/s{}), received {} ({} msg/s), success {:.2}%",
                num(m.sent as f64),
                num(m.send_rate_per_s),
                per_write_text(m),
                num(m.received as f64),
                num(m.receive_rate_per_s),
                m.success_percent
            ),
        ));
        let class = |v: u64| if v > 0 { "bad" } else { "good" };
        rows.push((
            "delivery".into(),
            format!(
                "expected {}, <span class=\"{}\">lost {}</span>, <span class=\"{}\">duplicates {}</span>, <span class=\"{}\">reordered {}</span>{}{}",
                num(m.expected as f64),
                class(m.lost),
                num(m.lost as f64),
                class(m.duplicates),
                num(m.duplicates as f64),
                class(m.reordered),
                num(m.reordered as f64),
                if m.publish_errors.is_empty() {
                    String::new()
                } else {
                    format!(", publish errors: {}", reasons(&m.publish_errors))
                },
                if m.window_stalls > 0 {
                    format!(", window stalls {}", num(m.window_stalls as f64))
                } else {
                    String::new()
                }
            ),
        ));
    }
    match &r.broker {
        Some(b) => {
            rows.push((
                "broker CPU".into(),
                format!(
                    "{:.1}% avg, {:.1}% peak of one core, {:.2} CPU-s{}",
                    b.cpu_percent_avg,
                    b.cpu_percent_peak,
                    b.cpu_seconds,
                    b.cpu_seconds_per_million_messages
                        .map_or(String::new(), |v| format!(
                            " (<b>{v:.2} CPU-s per million messages</b>)"
                        ))
                ),
            ));
            rows.push((
                "broker RSS".into(),
                format!(
                    "start {}, connected {}, <b>peak {}</b>, end {}{}",
                    bytes(b.rss_start_bytes as f64),
                    bytes(b.rss_connected_bytes as f64),
                    bytes(b.rss_peak_bytes as f64),
                    bytes(b.rss_end_bytes as f64),
                    b.rss_per_connection_bytes
                        .map_or(String::new(), |v| format!(" ({} per connection)", bytes(v)))
                ),
            ));
        }
        None => rows.push(("broker".into(), "not sampled (no --broker-pid)".into())),
    }
    let bn = &r.bench;
    rows.push((
        "bench".into(),
        format!(
            "CPU {:.1}% avg, {:.1}% peak of {:.0}% available{}; machine busy {:.0}%; RSS {}",
            bn.cpu_percent_avg,
            bn.cpu_percent_peak,
            bn.cpu_percent_capacity,
            if bn.saturated {
                " <span class=\"bad\">SATURATED: the load generator may be the bottleneck</span>"
            } else {
                ""
            },
            bn.machine_cpu_busy_percent,
            bytes(bn.rss_peak_bytes as f64)
        ),
    ));
    rows
}

fn series_table(points: &[TimePoint], every: f64) -> String {
    let mut o = format!(
        "<details><summary>Time series ({} points)</summary>\n<table class=\"series\"><tr><th class=\"num\">t (s)</th><th class=\"num\">conns</th><th class=\"num\">sent/s</th><th class=\"num\">recv/s</th><th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">max</th><th class=\"num\">broker CPU</th><th class=\"num\">broker RSS</th><th class=\"num\">bench CPU</th></tr>\n",
        points.len()
    );
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
    for (i, p) in points.iter().enumerate() {
        let dt = interval_of(points, i, every);
        let _ = writeln!(
            o,
            "<tr><td class=\"num\">{:.2}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            p.t_s,
            num(p.connections as f64),
            num(p.sent as f64 / dt),
            num(p.received as f64 / dt),
            esc(&opt(p.latency_p50_us, &micros)),
            esc(&opt(p.latency_p99_us, &micros)),
            esc(&opt(p.latency_max_us, &micros)),
            opt(p.broker_cpu_percent, &|v| format!("{v:.0}%")),
            opt(p.broker_rss_bytes.map(|b| b as f64), &bytes),
            opt(p.bench_cpu_percent, &|v| format!("{v:.0}%")),
        );
    }
    o.push_str("</table>\n</details>\n");
    o
}

/// The report of one run.
pub fn run_report(r: &BenchResult) -> String {
    let mut b = String::new();
    let title = format!("hayate bench {} → {}", r.scenario, target_label(r));
    let _ = writeln!(b, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(
        b,
        "<p class=\"sub\">{} — started {}</p>",
        esc(&config_text(r)),
        esc(&utc_time(r.started_at_unix_ms))
    );
    b.push_str("<h2>Summary</h2>\n");
    b.push_str(&kv_table(&summary_rows(r)));
    let mut lat = Vec::new();
    if let Some(l) = &r.latency {
        lat.push((
            if l.corrected_for_coordinated_omission {
                "latency (from intended send time, CO-corrected)"
            } else {
                "latency"
            },
            l,
        ));
        if l.corrected_for_coordinated_omission {
            if let Some(u) = &r.latency_uncorrected {
                lat.push(("latency (from actual send time)", u));
            }
        }
    }
    if let Some(t) = &r.connections.connect_time {
        lat.push(("connect time (TCP/TLS to CONNACK)", t));
    }
    if !lat.is_empty() {
        b.push_str(&latency_table(&lat));
    }
    if let Some(rs) = &r.rate_schedule {
        b.push_str(&schedule_html(rs));
    }
    b.push_str(&warnings_html(&r.warnings));
    b.push_str("<h2>Charts</h2>\n<div class=\"charts\">\n");
    for svg in run_charts(r) {
        b.push_str(&chart_box(svg));
    }
    b.push_str("</div>\n");
    if !r.timeseries.is_empty() {
        b.push_str(&series_table(&r.timeseries, r.config.sample_interval_s));
    }
    b.push_str("<h2>Target</h2>\n");
    let t = &r.target;
    let opt = |v: &Option<String>| v.as_deref().map_or("-".to_string(), esc);
    b.push_str(&kv_table(&[
        ("name".into(), opt(&t.name)),
        (
            "address".into(),
            format!("{}:{} → {}", esc(&t.host), t.port, esc(&t.address)),
        ),
        ("broker version".into(), opt(&t.broker_version)),
        (
            "transport".into(),
            format!(
                "{}{}",
                esc(&r.config.transport),
                t.tls_session
                    .as_deref()
                    .map_or(String::new(), |s| format!(" ({})", esc(s)))
            ),
        ),
        ("pid".into(), t.pid.map_or("-".into(), |p| p.to_string())),
        (
            "broker command line".into(),
            t.process_command_line
                .as_deref()
                .map_or("-".into(), |c| format!("<code>{}</code>", esc(c))),
        ),
    ]));
    b.push_str("<h2>Command line and machine</h2>\n");
    let _ = writeln!(b, "<pre>{}</pre>", esc(&shell_line(&r.command_line)));
    let _ = writeln!(
        b,
        "<table class=\"machine\">{}<tr><th>tool</th><td>{} {}</td></tr></table>",
        machine_rows(&r.machine),
        esc(&r.tool.name),
        esc(&r.tool.version)
    );
    page(&title, &b)
}
