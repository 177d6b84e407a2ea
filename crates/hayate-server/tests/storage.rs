//! The server with a data directory (`[storage]`): the store's figures in `$SYS`.

use hayate_codec::{ProtocolVersion, QoS};
use hayate_testkit::{connect_packet, RawClient, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reports_its_queue_and_fsyncs_in_sys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_path_buf();
    let broker = TestBroker::start_with(move |c| {
        c.storage.dir = Some(path);
        c.storage.sync_interval_ms = 10;
        c.server.sys_interval_secs = 1;
    })
    .await;
    let v = ProtocolVersion::V311;
    let mut device = RawClient::connect_tcp(broker.addr, v).await;
    device.connect(connect_packet(v, "device", false)).await;
    device.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    drop(device);
    let mut publisher = RawClient::connect_tcp(broker.addr, v).await;
    publisher
        .connect(connect_packet(v, "publisher", true))
        .await;
    for n in 1..=5u16 {
        publisher
            .publish("q/x", b"m", QoS::AtLeastOnce, false, n)
            .await;
    }
    let mut watcher = RawClient::connect_tcp(broker.addr, v).await;
    watcher.connect(connect_packet(v, "watcher", true)).await;
    watcher
        .subscribe("$SYS/broker/store/#", QoS::AtMostOnce, 1)
        .await;
    let mut seen = std::collections::BTreeMap::new();
    // Retained values may predate the publishes; updates follow every second.
    for _ in 0..60 {
        let message = watcher.recv_publish().await;
        seen.insert(
            message.topic.to_string(),
            String::from_utf8_lossy(&message.payload).into_owned(),
        );
        let value = |topic: &str| seen.get(topic).map(String::as_str);
        if value("$SYS/broker/store/queued messages") == Some("5")
            && value("$SYS/broker/store/fsyncs").is_some_and(|n| n != "0")
            && value("$SYS/broker/store/fsync latency/p99 us").is_some_and(|n| n != "0")
            && value("$SYS/broker/store/commit latency/p99 us").is_some_and(|n| n != "0")
        {
            // A bucket bound: never below the mean's bucket, never above the maximum's.
            for name in ["fsync", "commit"] {
                let figure = |f: &str| -> u64 {
                    value(&format!("$SYS/broker/store/{name} latency/{f} us"))
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                assert!(figure("max") >= figure("mean"), "{name}: {seen:?}");
                assert!(figure("p99") >= 10, "{name}: {seen:?}");
            }
            assert_eq!(value("$SYS/broker/store/state"), Some("ok"));
            assert_eq!(value("$SYS/broker/store/refused"), Some("0"));
            let bytes: u64 = value("$SYS/broker/store/bytes").unwrap().parse().unwrap();
            assert!(bytes > 0, "the data directory has files");
            return;
        }
    }
    panic!("the store never reported 5 queued messages, an fsync and their latencies: {seen:?}");
}

/// The lifetime counters are stored at a clean stop and continue after a restart on the same
/// data directory (`$SYS` totals count across restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetime_counters_continue_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let start = |path: std::path::PathBuf| {
        TestBroker::start_with(move |c| {
            c.storage.dir = Some(path);
        })
    };
    let v = ProtocolVersion::V311;
    let broker = start(dir.path().to_path_buf()).await;
    let mut publisher = RawClient::connect_tcp(broker.addr, v).await;
    publisher
        .connect(connect_packet(v, "publisher", true))
        .await;
    for n in 1..=7u16 {
        publisher
            .publish("t/x", b"m", QoS::AtLeastOnce, false, n)
            .await;
    }
    drop(publisher);
    let stats = &broker.handle.broker.stats;
    assert_eq!(stats.publish_received.total(), 7);
    broker.handle.shutdown().await;

    let broker = start(dir.path().to_path_buf()).await;
    let stats = &broker.handle.broker.stats;
    assert_eq!(stats.publish_received.total(), 7);
    assert_eq!(hayate_core::Stats::get(&stats.connections_total), 1);
    assert_eq!(hayate_core::Stats::get(&stats.clients_connected), 0);
    broker.handle.shutdown().await;
}
