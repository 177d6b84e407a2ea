//! The JSON written by `--json` validates against docs/bench-schema.json, and the schema
//! documents exactly the fields the results have.

mod common;

use hayate_testkit::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produced_json_matches_the_schema() {
    let broker = TestBroker::start().await;
    let port = broker.addr.port();
    let dir = tempfile::tempdir().unwrap();
    for (i, line) in [
        format!(
            "fan-in --port {port} -c 5 -w 2 -n 300 -q 1 --sub-qos 1 --broker-pid {}",
            std::process::id()
        ),
        format!("latency --port {port} --interval-ms 10 -d 0.5"),
        format!("conn --port {port} -c 10 --hold 0 --settle 0"),
    ]
    .iter()
    .enumerate()
    {
        let json = dir.path().join(format!("{i}.json"));
        let line = format!(
            "{line} --version-wait-ms 0 --progress 0 --json {}",
            json.display()
        );
        let _ = common::run(&line).await;
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        common::assert_valid(&value);
        assert_eq!(value["kind"], "run");
        assert!(value["machine"]["cores"].as_u64().unwrap() >= 1);
        assert!(!value["machine"]["kernel"].as_str().unwrap().is_empty());
        assert_eq!(value["command_line"][0], "test");
    }
}

#[test]
fn the_checker_catches_problems() {
    let schema = common::schema();
    let mut bad = serde_json::json!({"kind": "run"});
    let mut errors = Vec::new();
    common::validate(&schema, &schema, &bad, "$", &mut errors);
    assert!(errors.iter().any(|e| e.contains("matches 0")), "{errors:?}");
    let bench = &schema["$defs"]["BenchStats"];
    bad = serde_json::json!({"processes": 1});
    errors.clear();
    common::validate(&schema, bench, &bad, "$", &mut errors);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("missing required field \"saturated\"")),
        "{errors:?}"
    );
    bad = serde_json::json!({"processes": -1, "threads": 1, "cpu_seconds": 0.0, "cpu_percent_avg": 0.0,
        "cpu_percent_peak": 0.0, "cpu_percent_capacity": 100.0, "saturated": false,
        "machine_cpu_busy_percent": 1.0, "rss_peak_bytes": 1, "extra": 1});
    errors.clear();
    common::validate(&schema, bench, &bad, "$", &mut errors);
    assert!(errors.iter().any(|e| e.contains("extra")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("processes")), "{errors:?}");
}
