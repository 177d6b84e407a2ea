//! Connection options against a real Mosquitto: `start_type lazy` (with `threshold` and
//! `idle_timeout`) and `bridge_bind_address`.

mod common;

use common::{bridge, drain, hayate_with, topic, Mosquitto};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol, BridgeStartType};
use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{RawClient, Received, TestBroker};
use std::time::Duration;

const V5: ProtocolVersion = ProtocolVersion::V5;

/// The next state the bridge publishes within `within` (`None`: none).
async fn next_state(watcher: &mut RawClient, within: Duration) -> Option<String> {
    match watcher.recv_timeout(within).await {
        Received::Packet(Packet::Publish(p)) => Some(String::from_utf8_lossy(&p.payload).into()),
        Received::Timeout => None,
        other => panic!("watcher: {other:?}"),
    }
}

/// Lazy: no connection until `threshold` messages wait; they all go when it connects; the link
/// closes after `idle_timeout` and opens again at the next `threshold` messages.
#[tokio::test]
async fn lazy_bridge_connects_at_the_threshold_and_disconnects_when_idle() {
    let mosquitto = Mosquitto::start(false);
    let mut remote = mosquitto.client(V5, "remote-sub", true).await;
    remote.subscribe("lazy/#", QoS::AtLeastOnce, 1).await;
    let mut config = bridge(
        "lazy",
        mosquitto.port,
        BridgeProtocol::Mqttv311,
        vec![topic("lazy/#", BridgeDirection::Out, 1, "", "")],
    );
    config.start_type = BridgeStartType::Lazy;
    config.threshold = 3;
    config.idle_timeout_secs = 2;
    let hayate = TestBroker::start_with(|c| c.bridges.push(config)).await;
    let mut watcher = hayate.client(V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/lazy-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    assert_eq!(
        next_state(&mut watcher, Duration::from_secs(2))
            .await
            .as_deref(),
        Some("0")
    );
    let mut publisher = hayate.client(V5, "publisher").await;
    let mut id = 0;
    let mut publish = |n: usize| {
        let start = id;
        id += n;
        (start + 1..=start + n)
            .map(|i| format!("m{i}"))
            .collect::<Vec<_>>()
    };

    for round in 0..2 {
        let batch = publish(3);
        for (i, payload) in batch[..2].iter().enumerate() {
            publisher
                .publish(
                    "lazy/x",
                    payload.as_bytes(),
                    QoS::AtLeastOnce,
                    false,
                    i as u16 + 1,
                )
                .await;
        }
        // Below the threshold: no connection.
        assert_eq!(
            next_state(&mut watcher, Duration::from_millis(1500)).await,
            None,
            "round {round}"
        );
        assert!(drain(&mut remote, Duration::from_millis(100))
            .await
            .is_empty());
        publisher
            .publish("lazy/x", batch[2].as_bytes(), QoS::AtLeastOnce, false, 3)
            .await;
        assert_eq!(
            next_state(&mut watcher, Duration::from_secs(5))
                .await
                .as_deref(),
            Some("1"),
            "round {round}"
        );
        let got: Vec<String> = drain(&mut remote, Duration::from_millis(700))
            .await
            .iter()
            .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
            .collect();
        assert_eq!(got, batch, "round {round}");
        // Idle for idle_timeout (2 s): the link closes.
        assert_eq!(
            next_state(&mut watcher, Duration::from_secs(5))
                .await
                .as_deref(),
            Some("0"),
            "round {round}"
        );
    }
}

/// `bridge_bind_address`: the bridge connects from that address (Mosquitto logs it).
#[tokio::test]
async fn bind_address_is_the_source_of_the_connection() {
    let log = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(log.path(), std::fs::Permissions::from_mode(0o777));
    }
    let log_file = log.path().join("mosquitto.log");
    let mosquitto = Mosquitto::start_with(
        false,
        &format!("log_dest file {}\nlog_type all\n", log_file.display()),
    );
    let mut config = bridge(
        "bound",
        mosquitto.port,
        BridgeProtocol::Mqttv311,
        vec![topic("b/#", BridgeDirection::Out, 1, "", "")],
    );
    config.bind_address = Some("127.0.0.2".into());
    let _hayate = hayate_with(config).await;
    let logged = std::fs::read_to_string(&log_file).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("as bound-remote"))
        .unwrap_or_else(|| panic!("no connection of bound-remote in the log:\n{logged}"));
    assert!(line.contains("from 127.0.0.2:"), "{line}");
}

/// `bridge_attempt_unsubscribe`: a topic that was `in` and is now `out` only is unsubscribed
/// from the remote session kept since (`cleansession false`), so the remote broker stops
/// sending it; without it the stale subscription keeps delivering (dropped by the bridge).
#[tokio::test]
async fn attempt_unsubscribe_removes_the_remote_subscription_of_a_topic_now_out() {
    let mosquitto = Mosquitto::start(false);
    for attempt_unsubscribe in [true, false] {
        let name = format!("unsub-{attempt_unsubscribe}");
        let mut config = bridge(
            &name,
            mosquitto.port,
            BridgeProtocol::Mqttv311,
            vec![topic("x/#", BridgeDirection::In, 1, "", "")],
        );
        config.attempt_unsubscribe = attempt_unsubscribe;
        let before = hayate_with(config.clone()).await;
        before.handle.shutdown().await;
        config.topics = vec![topic("x/#", BridgeDirection::Out, 1, "", "")];
        let after = hayate_with(config).await;
        let mut remote = mosquitto
            .client(ProtocolVersion::V311, &format!("pub-{name}"), true)
            .await;
        remote
            .publish("x/1", b"stale?", QoS::AtLeastOnce, false, 1)
            .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let counters = after.handle.bridges.counters();
        let dropped = counters[0]
            .1
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(dropped, u64::from(!attempt_unsubscribe), "{name}");
        after.handle.shutdown().await;
    }
}
