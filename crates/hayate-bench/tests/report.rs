//! `--report FILE.html`: small runs against an in-process Hayate produce one self-contained
//! page with an inline `<svg>` per chart, each with real data.

mod common;

use hayate_bench::Outcome;
use hayate_testkit::TestBroker;
use std::path::Path;

const Q: &str = "--version-wait-ms 0 --progress 0";

/// One `<svg>...</svg>` of the page.
struct Svg<'a> {
    title: String,
    text: &'a str,
}

fn svgs(html: &str) -> Vec<Svg<'_>> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("unclosed <svg>") + start + 6;
        let text = &rest[start..end];
        let title = text
            .split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
            .expect("every chart has a <title>")
            .to_string();
        out.push(Svg { title, text });
        rest = &rest[end..];
    }
    out
}

/// Points of each data line (`<path class="series" d="M.. L..">`) of a chart.
fn line_points(svg: &str) -> Vec<usize> {
    svg.split("<path class=\"series\"")
        .skip(1)
        .map(|p| {
            let d = p
                .split(" d=\"")
                .nth(1)
                .and_then(|d| d.split('"').next())
                .expect("path with d");
            // Every point is one M or L command followed by two numbers.
            let commands = d.matches(['M', 'L']).count();
            let numbers = d
                .split(|c: char| c == 'M' || c == 'L' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .inspect(|t| {
                    t.parse::<f64>()
                        .unwrap_or_else(|_| panic!("bad number {t:?} in {d}"));
                })
                .count();
            assert_eq!(numbers, 2 * commands, "{d}");
            commands
        })
        .collect()
}

/// Checks a report page: self-contained, every chart titled, every line chart with a line of
/// at least two points, every bar chart with bars. Returns the chart titles.
fn check_page(path: &Path) -> Vec<String> {
    let html = std::fs::read_to_string(path).expect("report written");
    assert!(html.starts_with("<!DOCTYPE html>"), "not an HTML page");
    assert!(html.trim_end().ends_with("</html>"));
    // Self-contained: no scripts, no links, no external references except the SVG namespace.
    let without_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(
        !without_ns.contains("http://") && !without_ns.contains("https://"),
        "external reference in the report"
    );
    for bad in [
        "<script", "<link", "<img", "<iframe", "src=", "@import", "url(",
    ] {
        assert!(!html.contains(bad), "{bad} in the report");
    }
    assert!(html.contains("<style>"), "inline CSS");
    let charts = svgs(&html);
    assert!(!charts.is_empty(), "no chart");
    for c in &charts {
        assert!(!c.title.is_empty());
        assert!(
            c.text.contains("class=\"tick\""),
            "{}: no tick labels",
            c.title
        );
        assert!(c.text.contains("class=\"axis"), "{}: no axes", c.title);
        assert!(
            c.text.contains("class=\"legend\""),
            "{}: no legend",
            c.title
        );
        if c.text.contains("class=\"chart line-chart\"") {
            let lines = line_points(c.text);
            assert!(
                lines.iter().any(|&n| n >= 2),
                "{}: no line with 2 points ({lines:?})",
                c.title
            );
        } else {
            assert!(c.text.contains("class=\"chart bar-chart\""), "{}", c.title);
            assert!(
                c.text.contains("<rect class=\"bar\""),
                "{}: no bars",
                c.title
            );
        }
    }
    charts.into_iter().map(|c| c.title).collect()
}

fn has(titles: &[String], prefix: &str) -> bool {
    titles.iter().any(|t| t.starts_with(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_have_their_charts() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let dir = tempfile::tempdir().unwrap();
    // The test process stands in for the broker's pid (the broker runs in it).
    let pid = std::process::id();
    let fan_in = dir.path().join("fan-in.html");
    let r = common::run(&format!(
        "fan-in --port {port} {Q} -c 10 -w 2 --rate 2000 -d 1.2 -q 1 --sub-qos 1 --sample-interval 0.2 --broker-pid {pid} --report {}",
        fan_in.display()
    ))
    .await;
    common::assert_delivered(&r, "fan-in");
    let titles = check_page(&fan_in);
    for t in [
        "Latency over time",
        "Latency percentile distribution",
        "Throughput over time",
        "Broker CPU over time",
        "Broker RSS over time",
    ] {
        assert!(has(&titles, t), "{t} missing from {titles:?}");
    }
    let html = std::fs::read_to_string(&fan_in).unwrap();
    // The summary table, the command line and the machine.
    for text in [
        "<h2>Summary</h2>",
        "CO-corrected",
        "lost 0",
        "CPU-s per million messages",
        "<h2>Command line and machine</h2>",
        "<pre>test</pre>",
        "cores",
        "kernel",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    // Percentile axis labels.
    for label in [">50%<", ">90%<", ">99%<"] {
        assert!(html.contains(label), "{label} missing");
    }

    // conn: no messages; connections over time instead of throughput, no broker charts
    // without --broker-pid.
    let conn = dir.path().join("conn.html");
    common::run(&format!(
        "conn --port {port} {Q} -c 50 --connect-rate 100 --hold 0.2 --settle 0 --sample-interval 0.1 --report {}",
        conn.display()
    ))
    .await;
    let titles = check_page(&conn);
    assert!(has(&titles, "Connections over time"), "{titles:?}");
    assert!(has(&titles, "Bench CPU over time"), "{titles:?}");
    assert!(!has(&titles, "Throughput"), "{titles:?}");
    assert!(!has(&titles, "Broker RSS"), "{titles:?}");

    // latency
    let lat = dir.path().join("latency.html");
    common::run(&format!(
        "latency --port {port} {Q} --interval-ms 5 -d 1 -q 1 --sub-qos 1 --sample-interval 0.25 --report {}",
        lat.display()
    ))
    .await;
    let titles = check_page(&lat);
    assert!(has(&titles, "Latency over time"), "{titles:?}");
    assert!(
        has(&titles, "Latency percentile distribution"),
        "{titles:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_report_has_grouped_bars() {
    let a = TestBroker::start().await;
    let b = TestBroker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("compare.html");
    let pid = std::process::id();
    let line = format!(
        "compare --target a={},pid={pid} --target b={},pid={pid} --repeat 2 --report {} fan-in {Q} -c 5 -w 2 -n 800 -q 1 --sub-qos 1 --sample-interval 0.1",
        a.addr,
        b.addr,
        html.display()
    );
    let Outcome::Compare(c) = hayate_bench::run_command(&common::cmd(&line), &common::env())
        .await
        .unwrap()
    else {
        panic!("expected a comparison")
    };
    assert_eq!(c.runs.len(), 4);
    let titles = check_page(&html);
    for t in [
        "Median ratio to a",
        "receive rate",
        "broker CPU-s per million msgs",
        "p99 latency",
        "broker peak RSS",
        "Latency percentile distribution, every run",
    ] {
        assert!(has(&titles, t), "{t} missing from {titles:?}");
    }
    let text = std::fs::read_to_string(&html).unwrap();
    // One bar per target in each per-metric chart, the runs as dots, a table per target.
    let p99 = svgs(&text)
        .into_iter()
        .find(|s| s.title.starts_with("p99 latency"))
        .unwrap();
    assert_eq!(p99.text.matches("<rect class=\"bar\"").count(), 2);
    assert_eq!(p99.text.matches("class=\"run\"").count(), 4);
    assert!(text.contains("b/a"));
    // --report after the scenario name writes the comparison too.
    let html2 = dir.path().join("compare2.html");
    let line = format!(
        "compare --target a={} --target b={} --repeat 1 fan-in {Q} -c 4 -w 2 -n 200 --report {}",
        a.addr,
        b.addr,
        html2.display()
    );
    hayate_bench::run_command(&common::cmd(&line), &common::env())
        .await
        .unwrap();
    let titles = check_page(&html2);
    assert!(has(&titles, "Median ratio to a"), "{titles:?}");
}
