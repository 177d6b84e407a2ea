//! Operations against a running `hayate serve` process with real MQTT clients: `promtool check
//! metrics` accepts `/metrics`, a real Prometheus server scrapes it and answers queries with
//! Hayate's series, and the dashboard renders live data in headless Chromium.
//!
//! Needs Debian's `prometheus` (with promtool) and `chromium`; `scripts/test` installs them and
//! sets `HAYATE_REQUIRE_TOOLS`, elsewhere a missing tool skips its test with a note.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::ops::{tool_or_skip, HayateProcess, HttpApi};
use hayate_testkit::prometheus::{promtool_check_metrics, Prometheus, ScrapeJob};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "ops-test-token";
const WAIT: Duration = Duration::from_secs(5);

fn hayate() -> HayateProcess {
    HayateProcess::start(Path::new(env!("CARGO_BIN_EXE_hayate")), TOKEN, &[])
}

/// A subscriber on `ops/#` and a publisher that sent `n` messages it received.
fn traffic(process: &HayateProcess, n: usize) -> (BlockingClient, BlockingClient) {
    let mut sub = BlockingClient::connect(process.mqtt, ProtocolVersion::V5, "ops-sub");
    sub.send_subscribe("ops/#", QoS::AtMostOnce, 1);
    assert!(matches!(sub.recv(WAIT), Some(Packet::SubAck(_))));
    let mut publisher = BlockingClient::connect(process.mqtt, ProtocolVersion::V311, "ops-pub");
    for i in 0..n {
        publisher.send_publish("ops/t", format!("m{i}").as_bytes());
    }
    for _ in 0..n {
        sub.recv_publish(WAIT).expect("delivered");
    }
    (sub, publisher)
}

#[test]
fn promtool_accepts_the_metrics() {
    let Some(promtool) = tool_or_skip("promtool") else {
        return;
    };
    // With a data directory, so that the store's figures and histograms are checked too.
    let data = tempfile::tempdir().unwrap();
    let data_arg = data.path().display().to_string();
    let process = HayateProcess::start(
        Path::new(env!("CARGO_BIN_EXE_hayate")),
        TOKEN,
        &["--data-dir", &data_arg],
    );
    let _clients = traffic(&process, 5);
    let (status, text) = HttpApi::new(process.http, Some(TOKEN)).get("/metrics");
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE hayate_store_fsync_duration_seconds histogram"),
        "{text}"
    );
    promtool_check_metrics(&promtool, &text);
}

/// Prometheus scrapes `hayate serve` (with the bearer token) and its query API returns
/// Hayate's series with the values the clients caused.
#[test]
fn prometheus_scrapes_hayate() {
    let Some(binary) = tool_or_skip("prometheus") else {
        return;
    };
    let process = hayate();
    let _clients = traffic(&process, 7);
    let prometheus = Prometheus::start(
        &binary,
        &[ScrapeJob {
            name: "hayate",
            target: process.http,
            token: Some(TOKEN),
        }],
    );
    prometheus.wait_until("hayate", |p| {
        p.query("hayate_clients_connected") == Some(2.0)
    });
    let query = |q: &str| prometheus.query(q);
    assert_eq!(query("sum(hayate_publish_received_total)"), Some(7.0));
    assert_eq!(query("sum(hayate_publish_sent_total)"), Some(7.0));
    assert_eq!(query("hayate_publish_received_total{qos=\"0\"}"), Some(7.0));
    assert_eq!(query("hayate_subscriptions"), Some(1.0));
    assert!(query("process_resident_memory_bytes").unwrap() > 1e6);
    assert_eq!(
        query("sum(hayate_messages_dropped_total)"),
        Some(0.0),
        "a labelled family aggregates"
    );
    // Every query of the Grafana dashboard is valid PromQL for this Prometheus, and those not
    // about the store, bridges or a cluster (this broker has none) return series.
    let dashboard =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/grafana/hayate.json");
    let checked = prometheus.check_dashboard(&dashboard, |q| {
        q.contains("_store_") || q.contains("_bridge_") || q.contains("_cluster_")
    });
    assert!(checked >= 20, "{checked} queries");
}

fn chromium(args: &[&str], url: &str, profile: &Path) -> std::process::Output {
    let chromium = tool_or_skip("chromium").expect("checked by the caller");
    Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,900",
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs")
}

/// The dashboard, opened with the token in its address, shows the broker's live figures and
/// its clients (read back from the DOM after the data arrived), and its screenshot is a
/// picture with content, not a blank page.
#[test]
fn dashboard_renders_live_data_in_chromium() {
    if tool_or_skip("chromium").is_none() {
        return;
    }
    let process = hayate();
    let _clients = traffic(&process, 20);
    // Two history samples (every 2 s) so the charts have lines.
    std::thread::sleep(Duration::from_millis(2500));
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{}/#token={TOKEN}", process.http);
    let dom = chromium(&["--dump-dom"], &url, profile.path());
    let dom = String::from_utf8_lossy(&dom.stdout);
    for expected in [
        "id=\"clients-connected\">2<",
        "data-client-id=\"ops-sub\"",
        "data-client-id=\"ops-pub\"",
        "id=\"status\" class=\"\">updated",
        "<polyline",
    ] {
        assert!(
            dom.contains(expected),
            "{expected:?} not in the DOM:\n{dom}"
        );
    }

    let shot = profile.path().join("dashboard.png");
    chromium(
        &[&format!("--screenshot={}", shot.display())],
        &url,
        profile.path(),
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("a screenshot"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let mut colours = std::collections::HashMap::new();
    for pixel in pixels[..info.buffer_size()].chunks(channels) {
        *colours.entry(pixel[..3].to_vec()).or_insert(0usize) += 1;
    }
    let total = (info.width * info.height) as usize;
    let background = colours.values().max().copied().unwrap_or(0);
    assert!(colours.len() > 50, "only {} colours", colours.len());
    assert!(
        background < total * 9 / 10,
        "a page that is 90% one colour is blank"
    );
    // The header bar (#111827) and the clients line's blue (#2563eb) are drawn.
    assert!(colours.contains_key(&vec![0x11, 0x18, 0x27]));
    assert!(colours.contains_key(&vec![0x25, 0x63, 0xeb]));
}

/// Waits until `path` holds a line containing `needle`; returns the file's text.
fn wait_for_line(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{needle:?} never in {}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--log-format json --log-file`: one JSON object per line in the file, and SIGHUP reopens it
/// under its name after logrotate moved it.
#[test]
fn json_log_file_is_reopened_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hayate.log");
    let log_arg = log.display().to_string();
    let process = HayateProcess::start(
        Path::new(env!("CARGO_BIN_EXE_hayate")),
        TOKEN,
        &["--log-format", "json", "--log-file", &log_arg],
    );
    let text = wait_for_line(&log, "hayate_started");
    for line in text.lines() {
        let object: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            object["timestamp"].is_string() && object["level"].is_string(),
            "{line}"
        );
    }
    let rotated = dir.path().join("hayate.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let status = Command::new("kill")
        .args(["-HUP", &process.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let reopened = wait_for_line(&log, "reload_requested");
    assert!(!reopened.contains("hayate_started"), "a new file");
    assert!(std::fs::read_to_string(&rotated)
        .unwrap()
        .contains("hayate_started"));
}

/// Started by systemd (`Type=notify`), `hayate serve` sends READY=1 once it serves, and
/// STOPPING=1 when told to stop.
#[test]
fn sd_notify_readiness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let process = HayateProcess::start_with_env(
        Path::new(env!("CARGO_BIN_EXE_hayate")),
        TOKEN,
        &[],
        &[("NOTIFY_SOCKET", path.to_str().unwrap())],
    );
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("READY=1 arrives");
    assert_eq!(&buf[..n], b"READY=1");
    // It serves by then.
    let mut client = BlockingClient::connect(process.mqtt, ProtocolVersion::V5, "after-ready");
    client.send_publish("t", b"x");
    let status = Command::new("kill")
        .args(["-TERM", &process.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let n = socket.recv(&mut buf).expect("STOPPING=1 arrives");
    assert_eq!(&buf[..n], b"STOPPING=1");
}

/// SIGHUP applies a new `server.log_level` from the configuration file without a restart, and
/// names the changed keys it does not apply.
#[test]
fn sighup_applies_a_new_log_level() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hayate.log");
    let config = dir.path().join("hayate.toml");
    let write_config = |level: &str, extra: &str| {
        let text = format!(
            "[server]\nlog_level = \"{level}\"\nlog_file = \"{}\"\n{extra}",
            log.display()
        );
        std::fs::write(&config, text).unwrap();
    };
    write_config("warn", "");
    let config_arg = config.display().to_string();
    let process = HayateProcess::start(
        Path::new(env!("CARGO_BIN_EXE_hayate")),
        TOKEN,
        &["--config", &config_arg],
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("hayate_started"),
        "info lines are filtered out at warn"
    );
    write_config("info", "sys_interval_secs = 3\n");
    let status = Command::new("kill")
        .args(["-HUP", &process.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for_line(&log, "log_level_changed");
    // Info lines are written from then on (the reload of the password and ACL files that
    // follows logs one).
    let text = wait_for_line(&log, "auth_reloaded");
    let needs_restart = text
        .lines()
        .find(|line| line.contains("config_changed_needs_restart"))
        .unwrap_or_else(|| panic!("no restart line in {text}"));
    assert!(
        needs_restart.contains("server.sys_interval_secs") && !needs_restart.contains("log_level"),
        "{needs_restart}"
    );
}
