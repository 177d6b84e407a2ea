//! End-to-end runs of every scenario against an in-process Hayate.

mod common;

use common::{assert_delivered, run, run_err};
use hayate_bench::{BenchError, Outcome};
use hayate_testkit::TestBroker;

const Q: &str = "--version-wait-ms 0 --progress 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_in_all_qos_levels_deliver_everything() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    for qos in 0..=2 {
        for mqtt in ["3.1.1", "5"] {
            let r = run(&format!(
                "fan-in --port {port} {Q} -c 20 -w 4 -n 3000 -q {qos} --sub-qos {qos} --window 500 --mqtt {mqtt}"
            ))
            .await;
            let what = format!("fan-in qos {qos} mqtt {mqtt}");
            assert_eq!(r.connections.established, 20, "{what}");
            assert_eq!(r.connections.disconnected, 20, "{what}");
            let m = r.messages.as_ref().unwrap();
            assert_eq!(m.sent, 3000, "{what}");
            assert_delivered(&r, &what);
            if qos > 0 {
                assert_eq!(m.acknowledged, 3000, "{what}");
            }
            if qos == 2 {
                assert_eq!(m.reordered, 0, "{what}");
            }
            assert!(!r.timeseries.is_empty());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_in_fixed_rate_is_corrected_and_paced() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "fan-in --port {port} {Q} -c 10 -w 2 --rate 2000 -d 1 -q 1 --sub-qos 1"
    ))
    .await;
    assert_delivered(&r, "fixed rate");
    let m = r.messages.as_ref().unwrap();
    // 2000/s for 1 s, give or take the first and last tick.
    assert!((1900..=2100).contains(&m.sent), "sent {}", m.sent);
    assert!(
        r.latency
            .as_ref()
            .unwrap()
            .corrected_for_coordinated_omission
    );
    assert!(
        !r.latency_uncorrected
            .as_ref()
            .unwrap()
            .corrected_for_coordinated_omission
    );
    assert_eq!(r.config.pacing.as_deref(), Some("fixed-rate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_reports_percentiles_and_a_time_series() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!("latency --port {port} {Q} --interval-ms 5 -d 1.5 --warmup 0.5 -q 2 --sub-qos 2 --sample-interval 0.5")).await;
    assert_delivered(&r, "latency");
    let m = r.messages.as_ref().unwrap();
    assert_eq!(m.reordered, 0);
    // 1.5 s at 5 ms: ~300 sent, ~200 after the warm-up.
    assert!((280..=320).contains(&m.sent), "sent {}", m.sent);
    assert!(
        (180..=220).contains(&m.sent_counted),
        "counted {}",
        m.sent_counted
    );
    let l = r.latency.as_ref().unwrap();
    assert!(l.corrected_for_coordinated_omission);
    assert!(l.min_us > 0.0 && l.min_us <= l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.max_us);
    assert_eq!(l.distribution.len(), 14);
    let with_latency = r
        .timeseries
        .iter()
        .filter(|p| p.latency_p99_us.is_some())
        .count();
    assert!(with_latency >= 2, "{:?}", r.timeseries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_own_shared_and_share_group() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    // Own topics: every message reaches one subscriber.
    let r = run(&format!(
        "fan-out --port {port} {Q} -S 60 --publishers 3 --rate 600 -d 1.2 --warmup 0.4 -q 1"
    ))
    .await;
    assert_delivered(&r, "fan-out own");
    let m = r.messages.as_ref().unwrap();
    assert!(m.sent_counted < m.sent, "the warm-up is excluded");
    assert_eq!(m.expected, m.sent_counted);
    assert_eq!(r.connections.established, 60);
    // One shared topic: every message reaches every subscriber.
    let r = run(&format!(
        "fan-out --port {port} {Q} -S 8 --publishers 2 --rate 200 -d 1 --warmup 0.2 -q 2 --topic-mode shared"
    ))
    .await;
    assert_delivered(&r, "fan-out shared");
    let m = r.messages.as_ref().unwrap();
    assert_eq!(m.expected, m.sent_counted * 8);
    assert_eq!(m.reordered, 0);
    // A $share group: every message reaches one member.
    let r = run(&format!(
        "fan-out --port {port} {Q} -S 4 --publishers 2 --rate 200 -d 1 --warmup 0.2 -q 1 --topic-mode share-group --mqtt 5"
    ))
    .await;
    assert_delivered(&r, "fan-out share-group");
    assert_eq!(
        r.messages.as_ref().unwrap().expected,
        r.messages.as_ref().unwrap().sent_counted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conn_holds_connections_and_samples_the_broker() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    // The broker runs in this test process: sample it.
    let pid = std::process::id();
    let r = run(&format!(
        "conn --port {port} {Q} -c 300 --hold 0.3 --settle 0.2 --connect-concurrency 50 --broker-pid {pid}"
    ))
    .await;
    assert_eq!(r.connections.established, 300);
    assert_eq!(r.connections.failed, 0);
    assert_eq!(r.connections.disconnected, 300);
    assert!(r.connections.connect_rate_per_s > 0.0);
    assert!(r.messages.is_none());
    let b = r.broker.as_ref().expect("broker figures");
    assert_eq!(b.pid, pid);
    assert!(b.rss_start_bytes > 0 && b.rss_peak_bytes >= b.rss_start_bytes);
    assert!(b.rss_per_connection_bytes.is_some());
    assert!(r.target.process_command_line.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_of_low_rate_clients_with_persistent_sessions() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "swarm --port {port} {Q} -c 50 --every 0.5 -d 1.5 -s 100 --persistent --mqtt 5 --sample-interval 0.5"
    ))
    .await;
    assert_delivered(&r, "swarm");
    let m = r.messages.as_ref().unwrap();
    // 50 clients every 0.5 s for 1.5 s: ~150 messages.
    assert!((140..=160).contains(&m.sent), "sent {}", m.sent);
    assert!(!r.config.clean_session);
    assert_eq!(r.config.payload_bytes, Some(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_processes_merge_their_results() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "fan-in --port {port} {Q} -c 40 -w 8 -n 4000 -q 1 --sub-qos 1 --window 400 --processes 2"
    ))
    .await;
    assert_delivered(&r, "fan-in over 2 worker processes");
    assert_eq!(r.bench.processes, 3);
    assert_eq!(r.connections.established, 40);
    assert_eq!(r.messages.as_ref().unwrap().sent, 4000);
    let r = run(&format!(
        "conn --port {port} {Q} -c 100 --hold 0.1 --settle 0 --processes 2"
    ))
    .await;
    assert_eq!(r.connections.established, 100);
    assert_eq!(r.connections.disconnected, 100);
    let r = run(&format!(
        "fan-out --port {port} {Q} -S 20 --publishers 2 --rate 200 -d 1 --warmup 0.2 -q 1 --processes 2"
    ))
    .await;
    assert_delivered(&r, "fan-out over 2 worker processes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_addresses_are_used_round_robin() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "fan-in --port {port} {Q} -c 10 -w 2 -n 200 --source-ips 127.0.0.2-127.0.0.3"
    ))
    .await;
    assert_eq!(r.connections.established, 10);
    assert_eq!(r.config.source_ips, vec!["127.0.0.2", "127.0.0.3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_errors() {
    // Nothing listens on a port we just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = run_err(&format!("fan-in --port {port} {Q} -c 1 -n 1")).await;
    assert!(matches!(e, BenchError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("connection refused"), "{e}");
    // TLS toward a closed port is still "unreachable" (the TCP connect fails first).
    let e = run_err(&format!("swarm --port {port} {Q} --insecure")).await;
    assert!(matches!(e, BenchError::Unreachable { .. }), "{e}");
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    for bad in [
        "fan-in --rate 100 --window 10",
        "fan-in -c 0",
        "fan-in --topic fixed",
        "latency --processes 2",
        "latency --warmup 5 -d 2",
        "fan-out -S 2 --publishers 3",
        "swarm -c 10 --every 100 -d 1",
        "conn --source-ips 10.0.0.9-10.0.0.1",
        "conn --connect-concurrency 0",
    ] {
        let e = run_err(&format!("{bad} --port {port} {Q}")).await;
        assert!(matches!(e, BenchError::InvalidOption(_)), "{bad}: {e}");
    }
    // A broker that refuses the client: anonymous access off.
    let closed = TestBroker::start_with(|c| c.auth.allow_anonymous = false).await;
    let e = run_err(&format!("conn --port {} {Q} -c 1", closed.addr.port())).await;
    assert!(matches!(e, BenchError::ProbeRefused { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_two_targets() {
    let a = TestBroker::start().await;
    let b = TestBroker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("compare.json");
    let line = format!(
        "compare --target a={} --target b={} --repeat 2 --compare-json {} fan-in {Q} -c 5 -w 2 -n 500 -q 1 --sub-qos 1",
        a.addr,
        b.addr,
        json.display()
    );
    let out = hayate_bench::run_command(&common::cmd(&line), &common::env())
        .await
        .unwrap();
    let Outcome::Compare(c) = out else {
        panic!("expected a comparison")
    };
    assert_eq!(c.targets, vec!["a", "b"]);
    assert_eq!(c.runs.len(), 4);
    // Alternating order: a b, b a.
    let order: Vec<_> = c
        .runs
        .iter()
        .map(|r| r.target.name.clone().unwrap())
        .collect();
    assert_eq!(order, vec!["a", "b", "b", "a"]);
    let recv = c
        .rows
        .iter()
        .find(|r| r.metric == "receive_rate_per_s")
        .unwrap();
    assert!(recv.medians["a"].is_some() && recv.ratio_to_first["b"].is_some());
    assert_eq!(recv.ratio_to_first["a"], Some(1.0));
    let text = hayate_bench::report::compare_text(&c);
    assert!(text.contains("b/a"), "{text}");
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    common::assert_valid(&value);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_in_rate_schedule_reports_phases_and_recovery() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("schedule.json");
    let html = dir.path().join("schedule.html");
    // The broker runs in this test process: sample it.
    let pid = std::process::id();
    let r = run(&format!(
        "fan-in --port {port} {Q} -c 10 -w 2 --rate-schedule 2@2000,2@500 -q 1 --sub-qos 1 --sample-interval 0.5 --recovery-p99-ms 1000 --broker-pid {pid} --json {} --report {}",
        json.display(),
        html.display()
    ))
    .await;
    assert_delivered(&r, "rate schedule");
    assert_eq!(r.config.pacing.as_deref(), Some("rate-schedule"));
    assert_eq!(r.config.duration_s, Some(4.0));
    assert_eq!(r.config.rate_per_s, None);
    assert_eq!(r.config.recovery_p99_ms, Some(1000.0));
    assert_eq!(r.config.rate_schedule.as_ref().map(Vec::len), Some(2));
    assert!(
        r.latency
            .as_ref()
            .unwrap()
            .corrected_for_coordinated_omission
    );
    let rs = r.rate_schedule.as_ref().expect("per-phase figures");
    assert_eq!(rs.recovery_threshold_p99_us, Some(1_000_000.0));
    assert_eq!(rs.recovery_threshold_source, "option");
    assert_eq!(rs.phases.len(), 2);
    let m = r.messages.as_ref().unwrap();
    assert_eq!(
        rs.phases.iter().map(|p| p.sent).sum::<u64>(),
        m.sent,
        "every message belongs to a phase"
    );
    for (i, (p, rate)) in rs.phases.iter().zip([2000.0, 500.0]).enumerate() {
        let what = format!("phase {}", i + 1);
        assert_eq!(p.offered_rate_per_s, rate, "{what}");
        assert_eq!(p.duration_s, 2.0, "{what}");
        // The schedule had 2 s × rate messages due; all (or all but a straggler at the
        // boundary on a busy machine) were sent.
        let due = (2.0 * rate) as u64;
        assert!(
            p.offered.abs_diff(due) <= 1,
            "{what}: offered {}",
            p.offered
        );
        assert_eq!(p.sent + p.unsent, p.offered, "{what}");
        assert!(p.unsent * 100 <= p.offered, "{what}: unsent {}", p.unsent);
        // QoS 1 end to end: everything sent was delivered.
        assert_eq!(p.delivered, p.sent, "{what}");
        assert_eq!((p.lost, p.loss_percent), (0, 0.0), "{what}");
        let near = |v: f64| (v - rate).abs() <= 0.1 * rate;
        assert!(
            near(p.send_rate_per_s),
            "{what}: sent/s {}",
            p.send_rate_per_s
        );
        assert!(
            near(p.delivered_rate_per_s),
            "{what}: delivered/s {}",
            p.delivered_rate_per_s
        );
        let l = p.latency.as_ref().expect("phase latency");
        assert!(l.corrected_for_coordinated_omission);
        assert!(l.count >= p.delivered, "{what}");
        assert!(l.p50_us > 0.0 && l.p50_us <= l.p99_us && l.p99_us <= l.p999_us);
        assert!(p.broker_rss_max_bytes.is_some_and(|b| b > 0), "{what}");
        assert!(p.broker_cpu_percent_avg.is_some(), "{what}");
    }
    // Phases start on interval boundaries, one after the other.
    assert!((rs.phases[1].start_s - rs.phases[0].start_s - 2.0).abs() < 1e-6);
    assert!((rs.phases[0].start_s / 0.5 - (rs.phases[0].start_s / 0.5).round()).abs() < 1e-6);
    // Recovery only after the decrease: four 0.5 s intervals assessed.
    assert!(rs.phases[0].recovery.is_none());
    let rec = rs.phases[1]
        .recovery
        .as_ref()
        .expect("recovery after the decrease");
    assert_eq!(rec.intervals, 4);
    assert!(rec.recovery_s.is_some_and(|s| s <= 1.5), "{rec:?}");
    // The outputs.
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    common::assert_valid(&value);
    assert_eq!(
        value["rate_schedule"]["phases"].as_array().unwrap().len(),
        2
    );
    let page = std::fs::read_to_string(&html).unwrap();
    for text in [
        "<h2>Rate schedule</h2>",
        "offered",
        "rate schedule 2 s @ 2,000/s",
    ] {
        assert!(page.contains(text), "{text} missing from the report");
    }
    let text = hayate_bench::report::summary_text(&r);
    assert!(text.contains("rate schedule"), "{text}");

    // Invalid combinations are refused before anything connects.
    for bad in [
        "fan-in --rate-schedule 1@100 --rate 100",
        "fan-in --rate-schedule 1@100 -n 100",
        "fan-in --rate-schedule 1@100 -d 1",
        "fan-in --rate-schedule 1@100 --window 10",
        "fan-in --rate-schedule 1@100,x@5",
        "fan-in --rate-schedule 1@0",
        "fan-in --recovery-p99-ms 5",
        "fan-in --rate-schedule 1@100 --recovery-p99-ms 0",
    ] {
        let e = run_err(&format!("{bad} --port {port} {Q}")).await;
        assert!(matches!(e, BenchError::InvalidOption(_)), "{bad}: {e}");
    }
}

/// An offered rate far beyond what the publishers can get through (QoS 1, one message in
/// flight per connection): they fall behind, the shortfall shows as unsent messages and a
/// send rate below the offered one, and latency from the intended send time grows; once the
/// rate falls, the backlog of the overload phase is abandoned and the run recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_visible_and_recovery_is_measured() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let r = run(&format!(
        "fan-in --port {port} {Q} -c 2 -w 1 --inflight 1 -q 1 --sub-qos 1 --rate-schedule 1@2M,1.5@200 --sample-interval 0.5 --recovery-p99-ms 50"
    ))
    .await;
    assert_delivered(&r, "overload");
    let rs = r.rate_schedule.as_ref().unwrap();
    let (over, after) = (&rs.phases[0], &rs.phases[1]);
    assert!(over.offered >= 1_999_000, "offered {}", over.offered);
    assert!(over.unsent > over.offered / 2, "unsent {}", over.unsent);
    assert!(
        over.send_rate_per_s < 1_000_000.0,
        "{}",
        over.send_rate_per_s
    );
    // What was sent was sent late: latency from the intended send time shows it.
    let l = over.latency.as_ref().unwrap();
    assert!(l.p50_us > 100_000.0, "p50 {} µs", l.p50_us);
    assert_eq!(over.lost, 0);
    // After the decrease: the new phase runs on its own schedule.
    assert!(after.unsent <= 2, "unsent {}", after.unsent);
    // Everything intended in the new phase arrives; its delivered rate (receipts during the
    // phase) is at least the offered rate, plus whatever backlog of the overload phase the
    // broker still held for the subscriber when the rate fell (more on a loaded machine).
    assert_eq!(after.lost, 0);
    assert!(after.delivered + 2 >= after.sent, "{after:?}");
    assert!(
        after.delivered_rate_per_s >= 180.0,
        "{}",
        after.delivered_rate_per_s
    );
    let rec = after.recovery.as_ref().unwrap();
    assert_eq!(rec.intervals, 3);
    assert!(rec.recovery_s.is_some_and(|s| s <= 1.0), "{rec:?}");
}
