//! Keep alive (MQTT 3.1.1 section 3.1.2.10, MQTT 5.0 sections 3.1.2.10 and 3.2.2.3.14).

use crate::common::*;
use hayate_codec::ProtocolVersion;
use hayate_testkit::{connect_packet, TestBroker};
use std::time::{Duration, Instant};

/// v5 [MQTT-3.1.2-22] / [3.1.1: MQTT-3.1.2-24] If the Keep Alive value is non-zero and the
/// Server does not receive a Control Packet from the Client within one and a half times the
/// Keep Alive time period, it MUST disconnect the Network Connection (v5: DISCONNECT 0x8D
/// Keep Alive timeout first, section 4.13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_22_keep_alive_timeout_closes_connection() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let mut connect = connect_packet(version, &cid("keepalive", version), true);
        connect.keep_alive = 1;
        let (mut client, _) = connect_ok(&broker, connect).await;
        let connected_at = Instant::now();
        assert_closed_with(&mut client, Some(0x8D)).await;
        let elapsed = connected_at.elapsed();
        assert!(
            elapsed >= Duration::from_millis(1200),
            "{version:?}: closed before 1.5 × keep alive: {elapsed:?}"
        );
        assert!(
            elapsed < Duration::from_millis(3000),
            "{version:?}: closed long after 1.5 × keep alive: {elapsed:?}"
        );
    }
    assert_broker_serves(&broker).await;
}

/// [MQTT-3.12.4-1] (same number in 3.1.1) The Server MUST send a PINGRESP packet in response to
/// a PINGREQ packet; and any packet received resets the keep-alive clock, so a client that pings
/// keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_12_4_1_pingreq_answered_and_keeps_connection_alive() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let mut connect = connect_packet(version, &cid("pinger", version), true);
        connect.keep_alive = 1;
        let (mut client, _) = connect_ok(&broker, connect).await;
        // 2.8 s of pinging every 0.7 s: well past 1.5 × keep alive.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            ping(&mut client).await;
        }
        disconnect(&mut client).await;
    }
}

/// v5 / 3.1.1 section 3.1.2.10: a Keep Alive value of 0 has the effect of turning off the Keep
/// Alive mechanism — the Server does not disconnect a silent client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_10_keep_alive_zero_disables_timeout() {
    let broker = TestBroker::start().await;
    let mut clients = Vec::new();
    for version in VERSIONS {
        let mut connect = connect_packet(version, &cid("no-keepalive", version), true);
        connect.keep_alive = 0;
        let (client, ack) = connect_ok(&broker, connect).await;
        assert_eq!(
            ack.properties.server_keep_alive, None,
            "{version:?}: no limit configured"
        );
        clients.push(client);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for mut client in clients {
        expect_no_publish(&mut client, Duration::from_millis(10)).await;
        ping(&mut client).await;
        disconnect(&mut client).await;
    }
}

/// v5 [MQTT-3.2.2-21] If the Server sends a Server Keep Alive on the CONNACK packet, the Client
/// MUST use this value instead of the Keep Alive value it sent: a client asking for more than
/// `broker.max_keep_alive` is told the maximum, and the Server enforces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_21_server_keep_alive_caps_client_keep_alive() {
    let broker = TestBroker::start_with(|c| c.broker.max_keep_alive = 1).await;
    let version = ProtocolVersion::V5;

    // Asking for no more than the maximum: no Server Keep Alive.
    let mut within = connect_packet(version, "ka-within", true);
    within.keep_alive = 1;
    let (mut client, ack) = connect_ok(&broker, within).await;
    assert_eq!(ack.properties.server_keep_alive, None, "{ack:?}");
    disconnect(&mut client).await;

    // Asking for more: Server Keep Alive 1, and a silent client is closed after 1.5 s.
    let mut over = connect_packet(version, "ka-over", true);
    over.keep_alive = 60;
    let (mut client, ack) = connect_ok(&broker, over).await;
    assert_eq!(ack.properties.server_keep_alive, Some(1), "{ack:?}");
    let connected_at = Instant::now();
    assert_closed_with(&mut client, Some(0x8D)).await;
    let elapsed = connected_at.elapsed();
    assert!(
        elapsed < Duration::from_millis(3000),
        "Server Keep Alive not enforced: {elapsed:?}"
    );
}
