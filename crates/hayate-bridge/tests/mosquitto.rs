//! Hayate bridged to a real Mosquitto started by the test, over real sockets.

mod common;

use common::{bridge, drain, hayate_with, topic, Mosquitto};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol};
use hayate_codec::{ByteStr, Packet, Properties, ProtocolVersion, Publish, QoS};
use hayate_testkit::{publish_packet, Received};
use std::collections::BTreeMap;
use std::time::Duration;

const QUIET: Duration = Duration::from_millis(700);

fn client_version(protocol: BridgeProtocol) -> ProtocolVersion {
    match protocol {
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
        _ => ProtocolVersion::V311,
    }
}

/// `out` QoS 1: published locally under the local prefix, received on Mosquitto under the
/// remote prefix, once each, in order.
async fn out_qos1(protocol: BridgeProtocol) {
    let mosquitto = Mosquitto::start(false);
    let mut remote_sub = mosquitto
        .client(client_version(protocol), "remote-sub", true)
        .await;
    remote_sub.subscribe("remote/#", QoS::AtLeastOnce, 1).await;
    let config = bridge(
        "out",
        mosquitto.port,
        protocol,
        vec![topic("#", BridgeDirection::Out, 1, "local/", "remote/")],
    );
    let hayate = hayate_with(config).await;
    let mut publisher = hayate.client(ProtocolVersion::V5, "pub").await;
    for i in 1..=100u16 {
        publisher
            .publish(
                "local/a/b",
                format!("m{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
    }
    // Not under the local prefix: not bridged.
    publisher
        .publish("elsewhere/x", b"no", QoS::AtLeastOnce, false, 101)
        .await;
    let received = drain(&mut remote_sub, QUIET).await;
    let payloads: Vec<String> = received
        .iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect();
    // More than the in-flight window (20 for v3), so the window must reopen as acks return.
    let expected: Vec<String> = (1..=100).map(|i| format!("m{i}")).collect();
    assert_eq!(payloads, expected);
    assert!(received.iter().all(|p| p.topic.as_str() == "remote/a/b"));
    assert!(received.iter().all(|p| p.qos == QoS::AtLeastOnce));
}

#[tokio::test]
async fn out_qos1_reaches_mosquitto_with_the_remote_prefix_v311() {
    out_qos1(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn out_qos1_reaches_mosquitto_with_the_remote_prefix_v5() {
    out_qos1(BridgeProtocol::Mqttv50).await;
}

#[tokio::test]
async fn out_qos1_reaches_mosquitto_with_the_remote_prefix_v31() {
    out_qos1(BridgeProtocol::Mqttv31).await;
}

/// `in`: published on Mosquitto under the remote prefix, received locally under the local
/// prefix, at min(topic QoS, published QoS).
async fn in_messages(protocol: BridgeProtocol) {
    let mosquitto = Mosquitto::start(false);
    let config = bridge(
        "in",
        mosquitto.port,
        protocol,
        vec![topic("cmd/#", BridgeDirection::In, 1, "site/", "cloud/")],
    );
    let hayate = hayate_with(config).await;
    let mut local_sub = hayate.client(ProtocolVersion::V5, "local-sub").await;
    local_sub.subscribe("site/#", QoS::ExactlyOnce, 1).await;
    let mut remote_pub = mosquitto
        .client(client_version(protocol), "remote-pub", true)
        .await;
    remote_pub
        .publish("cloud/cmd/1", b"q1", QoS::AtLeastOnce, false, 1)
        .await;
    remote_pub
        .publish("cloud/cmd/2", b"q2", QoS::ExactlyOnce, false, 2)
        .await;
    remote_pub
        .publish("cloud/cmd/3", b"q0", QoS::AtMostOnce, false, 3)
        .await;
    remote_pub
        .publish("cloud/other", b"no", QoS::AtLeastOnce, false, 4)
        .await;
    let received = drain(&mut local_sub, QUIET).await;
    let got: Vec<(&str, &[u8], QoS)> = received
        .iter()
        .map(|p| (p.topic.as_str(), p.payload.as_ref(), p.qos))
        .collect();
    assert_eq!(
        got,
        vec![
            ("site/cmd/1", &b"q1"[..], QoS::AtLeastOnce),
            // QoS 2 on Mosquitto, topic QoS 1: QoS 1 locally.
            ("site/cmd/2", &b"q2"[..], QoS::AtLeastOnce),
            ("site/cmd/3", &b"q0"[..], QoS::AtMostOnce),
        ]
    );
}

#[tokio::test]
async fn in_messages_from_mosquitto_reach_a_local_subscriber_v311() {
    in_messages(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn in_messages_from_mosquitto_reach_a_local_subscriber_v5() {
    in_messages(BridgeProtocol::Mqttv50).await;
}

/// `both` on one topic: every message published on either side arrives once at a subscriber
/// on each side, and nothing circulates.
async fn both_ways_no_loop(protocol: BridgeProtocol) {
    let mosquitto = Mosquitto::start(false);
    let config = bridge(
        "both",
        mosquitto.port,
        protocol,
        vec![topic("shared/#", BridgeDirection::Both, 1, "", "")],
    );
    let hayate = hayate_with(config).await;
    let mut local_sub = hayate.client(ProtocolVersion::V5, "local-sub").await;
    local_sub.subscribe("shared/#", QoS::AtLeastOnce, 1).await;
    let mut remote_sub = mosquitto
        .client(client_version(protocol), "remote-sub", true)
        .await;
    remote_sub.subscribe("shared/#", QoS::AtLeastOnce, 1).await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    let mut remote_pub = mosquitto
        .client(client_version(protocol), "remote-pub", true)
        .await;
    for i in 1..=5u16 {
        local_pub
            .publish(
                "shared/l",
                format!("l{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
        remote_pub
            .publish(
                "shared/r",
                format!("r{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
    }
    for (side, client) in [("local", &mut local_sub), ("remote", &mut remote_sub)] {
        let received = drain(client, Duration::from_millis(1500)).await;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for p in &received {
            *counts
                .entry(String::from_utf8_lossy(&p.payload).into_owned())
                .or_default() += 1;
        }
        let expected: BTreeMap<String, usize> = (1..=5)
            .flat_map(|i| [format!("l{i}"), format!("r{i}")])
            .map(|m| (m, 1))
            .collect();
        assert_eq!(counts, expected, "{side} subscriber");
    }
}

#[tokio::test]
async fn both_ways_gives_one_copy_per_message_v311_try_private() {
    both_ways_no_loop(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn both_ways_gives_one_copy_per_message_v5_no_local() {
    both_ways_no_loop(BridgeProtocol::Mqttv50).await;
}

/// v5: QoS 2 out arrives once, with the publisher's properties and the retain flag.
#[tokio::test]
async fn v5_out_keeps_properties_retain_and_qos2() {
    let mosquitto = Mosquitto::start(false);
    let config = bridge(
        "props",
        mosquitto.port,
        BridgeProtocol::Mqttv50,
        vec![topic("p/#", BridgeDirection::Out, 2, "", "")],
    );
    let hayate = hayate_with(config).await;
    let mut remote_sub = mosquitto
        .client(ProtocolVersion::V5, "remote-sub", true)
        .await;
    remote_sub.subscribe("p/#", QoS::ExactlyOnce, 1).await;
    let mut publisher = hayate.client(ProtocolVersion::V5, "pub").await;
    let mut publish = publish_packet("p/1", b"hello", QoS::ExactlyOnce, false, Some(7));
    publish.properties = Properties {
        content_type: Some(ByteStr::from("text/plain")),
        response_topic: Some(ByteStr::from("p/reply")),
        correlation_data: Some(bytes::Bytes::from_static(b"c1")),
        message_expiry_interval: Some(600),
        user_properties: vec![(ByteStr::from("k"), ByteStr::from("v"))],
        ..Properties::default()
    };
    publisher.send(Packet::Publish(publish)).await;
    let Packet::PubRec(_) = publisher.recv().await else {
        panic!("expected PUBREC")
    };
    let id = hayate_codec::PacketId::new(7).unwrap();
    publisher
        .send(Packet::PubRel(hayate_codec::PubResp::new(id)))
        .await;
    let Packet::PubComp(_) = publisher.recv().await else {
        panic!("expected PUBCOMP")
    };
    let received = drain(&mut remote_sub, QUIET).await;
    assert_eq!(received.len(), 1, "{received:?}");
    let got: &Publish = &received[0];
    assert_eq!(got.qos, QoS::ExactlyOnce);
    assert_eq!(got.payload.as_ref(), b"hello");
    let props = &got.properties;
    assert_eq!(
        props.content_type.as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
    assert_eq!(
        props.response_topic.as_ref().map(|s| s.as_str()),
        Some("p/reply")
    );
    assert_eq!(props.correlation_data.as_deref(), Some(&b"c1"[..]));
    assert!(props
        .message_expiry_interval
        .is_some_and(|e| e > 500 && e <= 600));
    assert_eq!(props.user_properties.len(), 1);

    // A retained message keeps its flag (bridge_outgoing_retain true): a late subscriber on
    // Mosquitto gets it.
    publisher
        .publish("p/retained", b"kept", QoS::AtLeastOnce, true, 8)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut late = mosquitto.client(ProtocolVersion::V5, "late", true).await;
    late.subscribe("p/retained", QoS::AtLeastOnce, 1).await;
    match late.recv_timeout(Duration::from_secs(3)).await {
        Received::Packet(Packet::Publish(p)) => {
            assert!(p.retain);
            assert_eq!(p.payload.as_ref(), b"kept");
        }
        other => panic!("no retained message on Mosquitto: {other:?}"),
    }
}

/// The remote Mosquitto is stopped and started again while QoS 1 (or 2) messages flow out:
/// after the link comes back every message arrives (QoS 1: duplicates allowed, bounded by the
/// in-flight window, and counted; QoS 2: none, the flows resume where they were).
async fn remote_restart_loses_nothing(protocol: BridgeProtocol, qos: QoS) {
    const N: u16 = 300;
    let mut mosquitto = Mosquitto::start(true);
    // A persistent subscriber on Mosquitto, offline while the messages flow: Mosquitto queues
    // them for it (and saves them when stopped).
    let mut remote_sub = mosquitto
        .client(client_version(protocol), "remote-sub", false)
        .await;
    remote_sub.subscribe("remote/#", QoS::AtLeastOnce, 1).await;
    remote_sub.drop_connection().await;
    let config = bridge(
        "restart",
        mosquitto.port,
        protocol,
        vec![topic("#", BridgeDirection::Out, 1, "local/", "remote/")],
    );
    let hayate = hayate_with(config).await;
    let mut publisher = hayate.client(ProtocolVersion::V5, "pub").await;
    for i in 1..=N {
        publisher
            .publish(
                "local/t",
                format!("{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
        if i == N / 3 {
            mosquitto.stop();
            // Long enough for the bridge to notice, fail a connection attempt and back off.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        if i == 2 * N / 3 {
            mosquitto.restart();
        }
    }
    // Every message is accepted by Hayate; wait for the link to come back and drain.
    let mut watcher = hayate.client(ProtocolVersion::V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/restart-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    common::wait_for_state(&mut watcher, b"1").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut remote_sub = mosquitto
        .client(client_version(protocol), "remote-sub", false)
        .await;
    let received = drain(&mut remote_sub, Duration::from_secs(2)).await;
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for p in &received {
        let n: u16 = String::from_utf8_lossy(&p.payload).parse().expect("number");
        *counts.entry(n).or_default() += 1;
    }
    let missing: Vec<u16> = (1..=N).filter(|n| !counts.contains_key(n)).collect();
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    eprintln!(
        "{protocol:?} {qos:?}: received {} messages, {} distinct, {duplicates} duplicates",
        received.len(),
        counts.len()
    );
    assert!(missing.is_empty(), "missing after the restart: {missing:?}");
    assert!(
        duplicates <= 100,
        "{duplicates} duplicates: more than the in-flight window"
    );
}

#[tokio::test]
async fn remote_restart_while_qos1_flows_loses_nothing_v311() {
    remote_restart_loses_nothing(BridgeProtocol::Mqttv311, QoS::AtLeastOnce).await;
}

#[tokio::test]
async fn remote_restart_while_qos2_flows_loses_and_repeats_nothing_v311() {
    remote_restart_loses_nothing(BridgeProtocol::Mqttv311, QoS::ExactlyOnce).await;
}

#[tokio::test]
async fn remote_restart_while_qos2_flows_loses_and_repeats_nothing_v5() {
    remote_restart_loses_nothing(BridgeProtocol::Mqttv50, QoS::ExactlyOnce).await;
}

#[tokio::test]
async fn remote_restart_while_qos1_flows_loses_nothing_v5() {
    remote_restart_loses_nothing(BridgeProtocol::Mqttv50, QoS::AtLeastOnce).await;
}

/// With `[storage]`, what queued for the bridge while the remote broker was down survives a
/// restart of Hayate: the new process's bridge resumes its stored local session and delivers
/// it, in order.
#[tokio::test]
async fn queued_messages_survive_a_restart_of_hayate_with_storage() {
    let mut mosquitto = Mosquitto::start(false);
    let data = tempfile::tempdir().unwrap();
    let config = bridge(
        "stored",
        mosquitto.port,
        BridgeProtocol::Mqttv311,
        vec![topic("q/#", BridgeDirection::Out, 1, "", "")],
    );
    let start = |config: hayate_bridge::config::BridgeConfig| {
        let dir = data.path().to_path_buf();
        hayate_testkit::TestBroker::start_with(move |c| {
            c.storage.dir = Some(dir);
            c.storage.sync_interval_ms = 10;
            c.bridges.push(config);
        })
    };
    let hayate = start(config.clone()).await;
    let mut watcher = hayate.client(ProtocolVersion::V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/stored-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    common::wait_for_state(&mut watcher, b"1").await;
    mosquitto.stop();
    common::wait_for_state(&mut watcher, b"0").await;
    let mut publisher = hayate.client(ProtocolVersion::V5, "publisher").await;
    for i in 1..=20u16 {
        publisher
            .publish(
                "q/x",
                format!("m{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
    }
    drop((watcher, publisher));
    hayate.handle.shutdown().await;

    mosquitto.restart();
    let mut remote = mosquitto
        .client(ProtocolVersion::V311, "remote-sub", true)
        .await;
    remote.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    let _hayate = start(config).await;
    let received = drain(&mut remote, Duration::from_secs(3)).await;
    let payloads: Vec<String> = received
        .iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect();
    let expected: Vec<String> = (1..=20).map(|i| format!("m{i}")).collect();
    assert_eq!(payloads, expected);
}
