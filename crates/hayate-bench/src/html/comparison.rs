//! The report of a comparison: median bars per target, ratios, every run's charts and tables.

use super::{
    chart_box, config_text, distribution_chart, interval_of, machine_rows, page, shell_line,
    target_label, utc_time, warnings_html,
};
use crate::compare::METRICS;
use crate::report::{bytes, micros, num};
use crate::results::{BenchResult, CompareResult};
use crate::svg::{esc, BarChart, BarSeries, Format, LineChart, Scale, Series, PALETTE};
use std::fmt::Write as _;

/// The metrics shown as bars in a comparison, by scenario.
fn main_metrics(scenario: &str) -> &'static [&'static str] {
    if scenario == "conn" {
        &[
            "connect_rate_per_s",
            "broker_rss_per_connection",
            "broker_rss_peak",
            "broker_cpu_percent_avg",
        ]
    } else {
        &[
            "receive_rate_per_s",
            "broker_cpu_s_per_million",
            "latency_p99_us",
            "broker_rss_peak",
        ]
    }
}

fn metric_label(metric: &str) -> &str {
    match metric {
        "receive_rate_per_s" => "receive rate",
        "send_rate_per_s" => "send rate",
        "broker_cpu_s_per_million" => "broker CPU-s per million msgs",
        "latency_p99_us" => "p99 latency",
        "latency_p50_us" => "p50 latency",
        "broker_rss_peak" => "broker peak RSS",
        "broker_rss_per_connection" => "broker RSS per connection",
        "connect_rate_per_s" => "connect rate",
        "broker_cpu_percent_avg" => "broker CPU (avg)",
        other => other,
    }
}

fn metric_format(unit: &str) -> Format {
    match unit {
        "msg/s" => Format::Rate("msg/s"),
        "conn/s" => Format::Rate("conn/s"),
        "µs" => Format::Micros,
        "bytes" => Format::Bytes,
        "%" => Format::Percent,
        "cpu-s" => Format::Plain("CPU-s"),
        _ => Format::Plain(""),
    }
}

fn metric_value(metric: &str, r: &BenchResult) -> Option<f64> {
    METRICS
        .iter()
        .find(|m| m.0 == metric)
        .and_then(|m| (m.3)(r))
}

fn target_color(c: &CompareResult, name: &str) -> String {
    let i = c.targets.iter().position(|t| t == name).unwrap_or(0);
    PALETTE[i % PALETTE.len()].to_string()
}

/// The charts of a comparison: medians per target for the main metrics (runs as dots), their
/// ratios to the first target, every run's latency distribution and receive rate over time.
pub fn compare_charts(c: &CompareResult) -> Vec<String> {
    let mut out = Vec::new();
    let metrics: Vec<&crate::results::CompareRow> = main_metrics(&c.scenario)
        .iter()
        .filter_map(|m| c.rows.iter().find(|r| r.metric == *m))
        .filter(|r| r.medians.values().any(Option::is_some))
        .collect();
    // Ratios to the first target, all main metrics in one grouped chart.
    let ratio = BarChart {
        title: format!(
            "Median ratio to {} (lower is better for CPU, latency and RSS)",
            c.targets.first().map_or("-", String::as_str)
        ),
        categories: metrics
            .iter()
            .map(|r| metric_label(&r.metric).to_string())
            .collect(),
        series: c
            .targets
            .iter()
            .map(|t| BarSeries {
                name: t.clone(),
                color: target_color(c, t),
                values: metrics
                    .iter()
                    .map(|r| r.ratio_to_first.get(t).copied().flatten())
                    .collect(),
                dots: vec![Vec::new(); metrics.len()],
            })
            .collect(),
        y_label: "ratio to the first target".into(),
        format: Format::Ratio,
        reference: Some(1.0),
        width: 720.0,
        height: 340.0,
    };
    if !ratio.is_empty() {
        out.push(ratio.render());
    }
    for row in &metrics {
        let chart = BarChart {
            title: format!(
                "{} — median of {} ({} is better)",
                metric_label(&row.metric),
                c.repeat,
                row.better
            ),
            categories: vec![metric_label(&row.metric).to_string()],
            series: c
                .targets
                .iter()
                .map(|t| BarSeries {
                    name: t.clone(),
                    color: target_color(c, t),
                    values: vec![row.medians.get(t).copied().flatten()],
                    dots: vec![c
                        .runs
                        .iter()
                        .filter(|r| r.target.name.as_deref() == Some(t.as_str()))
                        .filter_map(|r| metric_value(&row.metric, r))
                        .collect()],
                })
                .collect(),
            y_label: metric_label(&row.metric).to_string(),
            format: metric_format(&row.unit),
            reference: None,
            width: 440.0,
            height: 300.0,
        };
        if !chart.is_empty() {
            out.push(chart.render());
        }
    }
    let mut round: std::collections::BTreeMap<&str, u32> = Default::default();
    let mut lines = Vec::new();
    let mut rates = Vec::new();
    for r in &c.runs {
        let name = r.target.name.as_deref().unwrap_or("-");
        let n = round.entry(name).or_default();
        *n += 1;
        let color = target_color(c, name);
        if let Some(l) = &r.latency {
            lines.push((format!("{name} run {n}"), color.clone(), *n > 1, l));
        }
        if r.messages.is_some() {
            let ts = &r.timeseries;
            rates.push(Series {
                name: format!("{name} run {n}"),
                color,
                points: (0..ts.len())
                    .map(|i| {
                        (
                            ts[i].t_s,
                            Some(
                                ts[i].received as f64
                                    / interval_of(ts, i, r.config.sample_interval_s),
                            ),
                        )
                    })
                    .collect(),
                dashed: *n > 1,
            });
        }
    }
    if let Some(chart) = distribution_chart("Latency percentile distribution, every run", lines) {
        out.push(chart.render());
    }
    let chart = LineChart {
        title: "Received messages per second over time, every run".into(),
        x_label: "time since start of the run".into(),
        x_scale: Scale::Linear,
        x_format: Format::Seconds,
        y_label: "messages per second".into(),
        y_scale: Scale::Linear,
        y_format: Format::Rate("msg/s"),
        series: rates,
        width: 720.0,
        height: 320.0,
    };
    if !chart.is_empty() {
        out.push(chart.render());
    }
    out
}

/// The report of a comparison.
pub fn compare_report(c: &CompareResult) -> String {
    let mut b = String::new();
    let title = format!(
        "hayate bench compare: {} — {}",
        c.scenario,
        c.targets.join(" vs ")
    );
    let _ = writeln!(b, "<h1>{}</h1>", esc(&title));
    let first = c.targets.first().map_or("-", String::as_str);
    let _ = writeln!(
        b,
        "<p class=\"sub\">Median of {} run(s) per target, targets alternating; ratios relative to {}.{}</p>",
        c.repeat,
        esc(first),
        c.runs
            .first()
            .map_or(String::new(), |r| format!(" {}.", esc(&config_text(r))))
    );
    // The table in the shape of the text one.
    b.push_str("<h2>Summary</h2>\n<table class=\"compare\"><tr><th>metric</th>");
    for t in &c.targets {
        let _ = write!(b, "<th class=\"num\">{}</th>", esc(t));
    }
    for t in c.targets.iter().skip(1) {
        let _ = write!(b, "<th class=\"num\">{}/{}</th>", esc(t), esc(first));
    }
    b.push_str("</tr>\n");
    for row in &c.rows {
        if row.medians.values().all(Option::is_none) {
            continue;
        }
        let _ = write!(
            b,
            "<tr><th>{} <small>({}, {} is better)</small></th>",
            esc(&row.metric),
            esc(&row.unit),
            esc(&row.better)
        );
        let format = metric_format(&row.unit);
        for t in &c.targets {
            let v = row.medians.get(t).copied().flatten();
            let text = v.map_or("-".to_string(), |v| match format {
                Format::Bytes => bytes(v),
                Format::Micros => micros(v),
                _ if v.abs() < 100.0 && v.fract() != 0.0 => format!("{v:.2}"),
                _ => num(v),
            });
            let _ = write!(b, "<td class=\"num\">{}</td>", esc(&text));
        }
        for t in c.targets.iter().skip(1) {
            let v = row.ratio_to_first.get(t).copied().flatten();
            let better = v.map(|v| {
                if (v - 1.0).abs() < 0.02 {
                    ""
                } else if (v > 1.0) == (row.better == "higher") {
                    "good"
                } else {
                    "bad"
                }
            });
            let _ = write!(
                b,
                "<td class=\"num {}\">{}</td>",
                better.unwrap_or(""),
                v.map_or("-".to_string(), |v| format!("×{v:.2}"))
            );
        }
        b.push_str("</tr>\n");
    }
    b.push_str("</table>\n");
    b.push_str("<h2>Charts</h2>\n<div class=\"charts\">\n");
    for svg in compare_charts(c) {
        b.push_str(&chart_box(svg));
    }
    b.push_str("</div>\n");
    b.push_str("<h2>Runs</h2>\n<table class=\"runs\"><tr><th>#</th><th>target</th><th class=\"num\">connections</th><th class=\"num\">recv rate</th><th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">lost</th><th class=\"num\">broker CPU-s/M</th><th class=\"num\">broker peak RSS</th><th class=\"num\">bench CPU</th><th>started</th></tr>\n");
    for (i, r) in c.runs.iter().enumerate() {
        let m = r.messages.as_ref();
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.0}%{}</td><td>{}</td></tr>",
            i + 1,
            esc(&target_label(r)),
            num(r.connections.established as f64),
            m.map_or("-".into(), |m| num(m.receive_rate_per_s)),
            esc(&r.latency.as_ref().map_or("-".into(), |l| micros(l.p50_us))),
            esc(&r.latency.as_ref().map_or("-".into(), |l| micros(l.p99_us))),
            m.map_or("-".into(), |m| num(m.lost as f64)),
            r.broker
                .as_ref()
                .and_then(|b| b.cpu_seconds_per_million_messages)
                .map_or("-".into(), |v| format!("{v:.2}")),
            r.broker
                .as_ref()
                .map_or("-".into(), |b| bytes(b.rss_peak_bytes as f64)),
            r.bench.cpu_percent_avg,
            if r.bench.saturated { " <span class=\"bad\">saturated</span>" } else { "" },
            esc(&utc_time(r.started_at_unix_ms)),
        );
    }
    b.push_str("</table>\n");
    let warnings: Vec<String> = c
        .runs
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.warnings.iter().map(move |w| {
                format!(
                    "run {} ({}): {w}",
                    i + 1,
                    r.target.name.as_deref().unwrap_or("-")
                )
            })
        })
        .collect();
    b.push_str(&warnings_html(&warnings));
    b.push_str("<h2>Targets</h2>\n<table class=\"targets\"><tr><th>target</th><th>address</th><th>broker version</th><th>transport</th><th>pid</th><th>broker command line</th></tr>\n");
    for t in &c.targets {
        if let Some(r) = c
            .runs
            .iter()
            .find(|r| r.target.name.as_deref() == Some(t.as_str()))
        {
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td><code>{}</code></td></tr>",
                esc(t),
                esc(&r.target.address),
                esc(r.target.broker_version.as_deref().unwrap_or("-")),
                esc(&r.config.transport),
                r.target
                    .tls_session
                    .as_deref()
                    .map_or(String::new(), |s| format!(" ({})", esc(s))),
                r.target.pid.map_or("-".into(), |p| p.to_string()),
                esc(r.target.process_command_line.as_deref().unwrap_or("-")),
            );
        }
    }
    b.push_str("</table>\n");
    b.push_str("<h2>Command line and machine</h2>\n");
    let _ = writeln!(b, "<pre>{}</pre>", esc(&shell_line(&c.command_line)));
    let _ = writeln!(
        b,
        "<table class=\"machine\">{}<tr><th>tool</th><td>{} {}</td></tr></table>",
        machine_rows(&c.machine),
        esc(&c.tool.name),
        esc(&c.tool.version)
    );
    page(&title, &b)
}
