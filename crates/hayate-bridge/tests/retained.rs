//! Retained messages set or deleted while the link is down reach the remote broker when it
//! comes back (Mosquitto #1040), against a real Mosquitto that keeps its retained messages
//! across the restart (persistence).

mod common;

use common::{bridge, drain, hayate_with, topic, wait_for_state, Mosquitto};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol};
use hayate_codec::{ProtocolVersion, QoS};
use std::collections::BTreeMap;
use std::time::Duration;

const V5: ProtocolVersion = ProtocolVersion::V5;

/// The retained messages under `state/#` on Mosquitto, as a fresh subscriber gets them.
async fn remote_retained(mosquitto: &Mosquitto, id: &str) -> BTreeMap<String, String> {
    let mut client = mosquitto.client(V5, id, true).await;
    client.subscribe("state/#", QoS::AtLeastOnce, 1).await;
    drain(&mut client, Duration::from_millis(700))
        .await
        .into_iter()
        .filter(|p| p.retain)
        .map(|p| {
            (
                p.topic.to_string(),
                String::from_utf8_lossy(&p.payload).into_owned(),
            )
        })
        .collect()
}

async fn retained_changes_while_down(protocol: BridgeProtocol) {
    let mut mosquitto = Mosquitto::start(true);
    let config = bridge(
        "retained",
        mosquitto.port,
        protocol,
        vec![topic("state/#", BridgeDirection::Out, 1, "", "")],
    );
    let hayate = hayate_with(config).await;
    let mut watcher = hayate.client(V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/retained-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    wait_for_state(&mut watcher, b"1").await;
    let mut publisher = hayate.client(V5, "publisher").await;
    for name in ["a", "b", "c"] {
        publisher
            .publish(&format!("state/{name}"), b"1", QoS::AtLeastOnce, true, 1)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = remote_retained(&mosquitto, "check-1").await;
    assert_eq!(before.len(), 3, "{before:?}");

    mosquitto.stop();
    wait_for_state(&mut watcher, b"0").await;
    // While the link is down:
    // a deleted at QoS 0 (not queued for the offline bridge session),
    publisher
        .publish("state/a", b"", QoS::AtMostOnce, true, 0)
        .await;
    // b changed at QoS 0,
    publisher
        .publish("state/b", b"2", QoS::AtMostOnce, true, 0)
        .await;
    // c set at QoS 1 (queued: it goes out when the session resumes) and then deleted at QoS 0
    // (the queued value must not win),
    publisher
        .publish("state/c", b"3", QoS::AtLeastOnce, true, 2)
        .await;
    publisher
        .publish("state/c", b"", QoS::AtMostOnce, true, 0)
        .await;
    // d set at QoS 0.
    publisher
        .publish("state/d", b"4", QoS::AtMostOnce, true, 0)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    mosquitto.restart();
    wait_for_state(&mut watcher, b"1").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = remote_retained(&mosquitto, "check-2").await;
    let expected: BTreeMap<String, String> = [("state/b", "2"), ("state/d", "4")]
        .into_iter()
        .map(|(t, p)| (t.to_string(), p.to_string()))
        .collect();
    assert_eq!(after, expected);
    assert_eq!(
        hayate.handle.broker.router.retained_count(),
        2 + 1,
        "b, d and the bridge's state topic locally"
    );
}

#[tokio::test]
async fn retained_set_and_deleted_while_down_reach_mosquitto_v311() {
    retained_changes_while_down(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn retained_set_and_deleted_while_down_reach_mosquitto_v5() {
    retained_changes_while_down(BridgeProtocol::Mqttv50).await;
}

/// The remote broker down from the bridge's start: the retained messages there when the bridge
/// starts (QoS 0 and 1) and the changes made before its first link (a deletion, a QoS 0 set)
/// reach the remote broker when the link first comes up, including the deletion of a value
/// the remote broker held from before.
#[tokio::test]
async fn retained_state_from_before_the_first_link_reaches_mosquitto() {
    let mut mosquitto = Mosquitto::start(true);
    let mut old = mosquitto.client(V5, "old", true).await;
    old.publish("state/c", b"old", QoS::AtLeastOnce, true, 1)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(old);
    mosquitto.stop();

    let hayate = hayate_testkit::TestBroker::start().await;
    let mut publisher = hayate.client(V5, "publisher").await;
    publisher
        .publish("state/a", b"a0", QoS::AtMostOnce, true, 0)
        .await;
    publisher
        .publish("state/b", b"b1", QoS::AtLeastOnce, true, 1)
        .await;
    publisher
        .publish("state/c", b"c-local", QoS::AtMostOnce, true, 0)
        .await;
    let config = bridge(
        "first",
        mosquitto.port,
        BridgeProtocol::Mqttv311,
        vec![topic("state/#", BridgeDirection::Out, 1, "", "")],
    );
    let report = hayate.handle.reload_bridges(vec![config]).await;
    assert_eq!(report.added, ["first"]);
    let mut watcher = hayate.client(V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/first-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    wait_for_state(&mut watcher, b"0").await;
    // Before the first link: c deleted, d set, both at QoS 0 (not queued).
    publisher
        .publish("state/c", b"", QoS::AtMostOnce, true, 0)
        .await;
    publisher
        .publish("state/d", b"d", QoS::AtMostOnce, true, 0)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    mosquitto.restart();
    wait_for_state(&mut watcher, b"1").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = remote_retained(&mosquitto, "check").await;
    let expected: BTreeMap<String, String> =
        [("state/a", "a0"), ("state/b", "b1"), ("state/d", "d")]
            .into_iter()
            .map(|(t, p)| (t.to_string(), p.to_string()))
            .collect();
    assert_eq!(after, expected);
}
