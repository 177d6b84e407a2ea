//! Two Hayate brokers bridged to each other, and the bridge's life in the server (counters,
//! shutdown).

mod common;

use common::{bridge, drain, hayate_with, topic, wait_for_state};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol};
use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{Received, TestBroker};
use std::collections::BTreeMap;
use std::time::Duration;

/// Hayate → Hayate, `both` on one topic: one copy of each message on each side, no loop
/// (v5: No Local; v3: the bridge bit, which Hayate's listeners take).
async fn hayate_to_hayate_both_ways(protocol: BridgeProtocol) {
    let remote = TestBroker::start().await;
    let config = bridge(
        "h2h",
        remote.addr.port(),
        protocol,
        vec![topic("chat/#", BridgeDirection::Both, 2, "", "")],
    );
    let local = hayate_with(config).await;
    let mut local_sub = local.client(ProtocolVersion::V5, "local-sub").await;
    // QoS 1 subscribers (the test client acknowledges QoS 2 one at a time); the messages
    // cross the bridge at QoS 2.
    local_sub.subscribe("chat/#", QoS::AtLeastOnce, 1).await;
    let mut remote_sub = remote.client(ProtocolVersion::V5, "remote-sub").await;
    remote_sub.subscribe("chat/#", QoS::AtLeastOnce, 1).await;
    let mut local_pub = local.client(ProtocolVersion::V5, "local-pub").await;
    let mut remote_pub = remote.client(ProtocolVersion::V5, "remote-pub").await;
    for i in 1..=5u16 {
        local_pub
            .publish(
                "chat/a",
                format!("l{i}").as_bytes(),
                QoS::ExactlyOnce,
                false,
                i,
            )
            .await;
        remote_pub
            .publish(
                "chat/b",
                format!("r{i}").as_bytes(),
                QoS::ExactlyOnce,
                false,
                i,
            )
            .await;
    }
    for (side, client) in [("local", &mut local_sub), ("remote", &mut remote_sub)] {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for p in drain(client, Duration::from_millis(1500)).await {
            *counts
                .entry(String::from_utf8_lossy(&p.payload).into_owned())
                .or_default() += 1;
        }
        assert_eq!(counts.len(), 10, "{side}: {counts:?}");
        assert!(counts.values().all(|c| *c == 1), "{side}: {counts:?}");
    }
}

#[tokio::test]
async fn hayate_to_hayate_both_ways_v5_no_loop() {
    hayate_to_hayate_both_ways(BridgeProtocol::Mqttv50).await;
}

#[tokio::test]
async fn hayate_to_hayate_both_ways_v311_bridge_bit_no_loop() {
    hayate_to_hayate_both_ways(BridgeProtocol::Mqttv311).await;
}

/// A Mosquitto bridge (v3.1.1, `try_private true`) connecting to Hayate, `both` on one topic:
/// Hayate takes the bridge bit and does not send Mosquitto its own messages back.
#[tokio::test]
async fn mosquitto_bridging_to_hayate_with_the_bridge_bit_does_not_loop() {
    let hayate = TestBroker::start().await;
    let section = format!(
        "connection to-hayate\naddress 127.0.0.1:{}\ntopic m/# both 1\n\
         bridge_protocol_version mqttv311\ntry_private true\ncleansession true\n\
         notifications false\nrestart_timeout 1\n",
        hayate.addr.port()
    );
    let mosquitto = common::Mosquitto::start_with(false, &section);
    let mut local_sub = hayate.client(ProtocolVersion::V5, "hayate-sub").await;
    local_sub.subscribe("m/#", QoS::AtLeastOnce, 1).await;
    let mut remote_sub = mosquitto
        .client(ProtocolVersion::V311, "mosquitto-sub", true)
        .await;
    remote_sub.subscribe("m/#", QoS::AtLeastOnce, 1).await;
    // Wait for Mosquitto's bridge: probe until a message crosses.
    let mut remote_pub = mosquitto
        .client(ProtocolVersion::V311, "mosquitto-pub", true)
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut probe = 100u16;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Mosquitto's bridge never connected"
        );
        probe += 1;
        remote_pub
            .publish("m/probe", b"probe", QoS::AtLeastOnce, false, probe)
            .await;
        if matches!(
            local_sub.recv_timeout(Duration::from_millis(300)).await,
            Received::Packet(Packet::Publish(_))
        ) {
            break;
        }
    }
    drain(&mut local_sub, Duration::from_millis(500)).await;
    drain(&mut remote_sub, Duration::from_millis(500)).await;

    let mut local_pub = hayate.client(ProtocolVersion::V5, "hayate-pub").await;
    for i in 1..=5u16 {
        local_pub
            .publish(
                "m/h",
                format!("h{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
        remote_pub
            .publish(
                "m/q",
                format!("q{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i,
            )
            .await;
    }
    for (side, client) in [("hayate", &mut local_sub), ("mosquitto", &mut remote_sub)] {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for p in drain(client, Duration::from_millis(1500)).await {
            *counts
                .entry(String::from_utf8_lossy(&p.payload).into_owned())
                .or_default() += 1;
        }
        counts.remove("probe");
        assert_eq!(counts.len(), 10, "{side}: {counts:?}");
        assert!(counts.values().all(|c| *c == 1), "{side}: {counts:?}");
    }
}

/// The bridge's counters under `$SYS/broker/bridge/<name>/`, and its state topic going to "0"
/// when the remote broker goes away; server shutdown stops the bridge promptly.
#[tokio::test]
async fn counters_state_and_shutdown() {
    let remote = TestBroker::start().await;
    let config = bridge(
        "counted",
        remote.addr.port(),
        BridgeProtocol::Mqttv311,
        vec![topic("c/#", BridgeDirection::Out, 1, "", "")],
    );
    let state = "$SYS/broker/connection/counted-remote/state";
    let local = TestBroker::start_with(|c| {
        c.server.sys_interval_secs = 1;
        c.bridges.push(config);
    })
    .await;
    let mut watcher = local.client(ProtocolVersion::V5, "watcher").await;
    watcher.subscribe(state, QoS::AtMostOnce, 1).await;
    wait_for_state(&mut watcher, b"1").await;
    let mut publisher = local.client(ProtocolVersion::V5, "pub").await;
    for i in 1..=3u16 {
        publisher
            .publish("c/x", b"m", QoS::AtLeastOnce, false, i)
            .await;
    }
    let mut sys = local.client(ProtocolVersion::V5, "sys").await;
    sys.subscribe("$SYS/broker/bridge/counted/#", QoS::AtMostOnce, 1)
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    while seen
        .get("$SYS/broker/bridge/counted/messages/out")
        .map(String::as_str)
        != Some("3")
    {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match sys.recv_timeout(left).await {
            Received::Packet(Packet::Publish(p)) => {
                seen.insert(
                    p.topic.to_string(),
                    String::from_utf8_lossy(&p.payload).into_owned(),
                );
            }
            Received::Packet(_) => {}
            other => panic!("counters not published: {other:?}, seen {seen:?}"),
        }
    }
    assert_eq!(seen["$SYS/broker/bridge/counted/connected"], "1");
    assert_eq!(seen["$SYS/broker/bridge/counted/connects"], "1");

    // The remote broker goes away: the state goes to "0".
    remote.handle.shutdown().await;
    wait_for_state(&mut watcher, b"0").await;

    // Shutdown while the bridge backs off does not wait for the back-off.
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), local.handle.shutdown())
        .await
        .expect("shutdown with a bridge completes");
    assert!(started.elapsed() < Duration::from_secs(5));
}
