//! `hayate bench --metrics-listen`: a real fan-in run against a real `hayate serve`, its
//! endpoint scraped while it runs (counters grow, the latency histogram fills), checked by
//! `promtool check metrics`, and scraped by a real Prometheus that answers every query of the
//! bench's Grafana dashboard (`packaging/grafana/hayate-bench.json`).
//!
//! Needs Debian's `prometheus` (with promtool) for the last two; `scripts/test` installs it and
//! sets `HAYATE_REQUIRE_TOOLS`, elsewhere a missing tool skips that part with a note.

use hayate_testkit::ops::{tool_or_skip, HayateProcess, HttpApi};
use hayate_testkit::prometheus::{promtool_check_metrics, Prometheus, ScrapeJob};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-metrics-token";
const PUBLISHERS: u64 = 20;
const PAYLOAD: u64 = 64;

/// Ends a child process when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of the sample `series` (name and labels, exactly as written) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

/// Scrapes `/metrics` until `ready` holds for its text (or 30 s pass).
fn scrape_until(api: &HttpApi, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, text)) = api.try_get("/metrics") {
            if ready(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "{what} never held:\n{text}");
        }
        assert!(Instant::now() < deadline, "the bench never served /metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bench_serves_live_metrics_during_a_run() {
    let hayate = Path::new(env!("CARGO_BIN_EXE_hayate"));
    let broker = HayateProcess::start(hayate, TOKEN, &[]);
    let endpoint = SocketAddr::from(([127, 0, 0, 1], hayate_testkit::free_port()));
    let _bench = Reaped(
        Command::new(hayate)
            .args(["bench", "fan-in", "--host", "127.0.0.1", "--port"])
            .arg(broker.mqtt.port().to_string())
            .args(["-c", &PUBLISHERS.to_string(), "-w", "4", "-q", "1"])
            .args(["--sub-qos", "1", "-s", &PAYLOAD.to_string()])
            .args(["--rate", "2000", "-d", "60", "--quiet", "--progress", "0"])
            .args(["--metrics-listen", &endpoint.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("hayate bench starts"),
    );
    let api = HttpApi::new(endpoint, None);
    let sent = "hayate_bench_publish_sent_total{qos=\"1\"}";
    let received = "hayate_bench_publish_received_total{qos=\"1\"}";
    let latency_count = "hayate_bench_latency_seconds_count";
    let first = scrape_until(&api, "messages flowing", |text| {
        sample(text, received).is_some_and(|n| n > 0.0)
    });
    let value = |text: &str, series: &str| {
        sample(text, series).unwrap_or_else(|| panic!("{series} missing in:\n{text}"))
    };
    // Mid-run, a second later: every counter of the traffic grew.
    let second = scrape_until(&api, "the counters grew", |text| {
        [sent, received, latency_count]
            .iter()
            .all(|series| sample(text, series) > sample(&first, series))
    });
    for (role, n) in [("publisher", PUBLISHERS), ("subscriber", 1)] {
        let open = format!("hayate_bench_connections{{role=\"{role}\"}}");
        let established = format!("hayate_bench_connections_established_total{{role=\"{role}\"}}");
        assert_eq!(value(&second, &open), n as f64, "{second}");
        assert_eq!(value(&second, &established), n as f64, "{second}");
    }
    let sent_now = value(&second, sent);
    let sent_bytes = value(
        &second,
        "hayate_bench_publish_sent_payload_bytes_total{qos=\"1\"}",
    );
    assert_eq!(sent_bytes, sent_now * PAYLOAD as f64, "{second}");
    assert_eq!(
        value(&second, "hayate_bench_publish_sent_total{qos=\"0\"}"),
        0.0
    );
    // The histogram: samples, cumulative buckets ending at the count, a plausible sum.
    let count = value(&second, latency_count);
    assert!(count > 0.0, "{second}");
    assert_eq!(
        value(&second, "hayate_bench_latency_seconds_bucket{le=\"+Inf\"}"),
        count
    );
    let mut previous = 0.0;
    for line in second
        .lines()
        .filter(|l| l.starts_with("hayate_bench_latency_seconds_bucket"))
    {
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= previous, "cumulative buckets: {second}");
        previous = n;
    }
    let mean = value(&second, "hayate_bench_latency_seconds_sum") / count;
    assert!(mean > 0.0 && mean < 5.0, "mean latency {mean} s");

    if let Some(promtool) = tool_or_skip("promtool") {
        promtool_check_metrics(&promtool, &second);
    }
    let Some(binary) = tool_or_skip("prometheus") else {
        return;
    };
    let prometheus = Prometheus::start(
        &binary,
        &[ScrapeJob {
            name: "bench",
            target: endpoint,
            token: None,
        }],
    );
    prometheus.wait_until("bench", |p| {
        p.query("sum(rate(hayate_bench_publish_received_total[1m]))")
            .is_some_and(|rate| rate > 0.0)
    });
    let dashboard =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/grafana/hayate-bench.json");
    let checked = prometheus.check_dashboard(&dashboard, |_| false);
    assert!(checked >= 15, "{checked} queries");
}
