//! CONNECT / CONNACK (MQTT 3.1.1 section 3.1-3.2, MQTT 5.0 section 3.1-3.2).

use crate::common::*;
use hayate_codec::{Packet, Properties, ProtocolVersion, QoS, ReasonCode};
use hayate_testkit::{connect_packet, TestBroker};
use std::time::{Duration, Instant};

/// [MQTT-3.1.0-1] After a Network Connection is established by a Client to a Server, the first
/// packet sent from the Client to the Server MUST be a CONNECT packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_0_1_first_packet_must_be_connect() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        // PINGREQ first: no PINGRESP, the connection is closed.
        let mut client = broker.raw(version).await;
        client.send(Packet::PingReq).await;
        assert_closed_before_connack(&mut client).await;

        // SUBSCRIBE first: no SUBACK, the connection is closed.
        let mut client = broker.raw(version).await;
        let props: &[u8] = if version.is_v5() { &[0x00] } else { &[] };
        let subscribe = raw_packet(
            0x82,
            &[&[0x00, 0x01][..], props, &field(b"a/b"), &[0x00]].concat(),
        );
        client.send_raw(&subscribe).await;
        assert_closed_before_connack(&mut client).await;
    }
    assert_broker_serves(&broker).await;
}

/// [MQTT-3.1.0-2] The Server MUST process a second CONNECT packet sent from a Client as a
/// Protocol Error and close the Network Connection (v5: DISCONNECT 0x82 first; 3.1.1: close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_0_2_second_connect_is_protocol_error() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let id = cid("second-connect", version);
        let mut client = broker.client(version, &id).await;
        client
            .send(Packet::Connect(Box::new(connect_packet(
                version, &id, true,
            ))))
            .await;
        assert_closed_with(&mut client, Some(0x82)).await;
    }
    assert_broker_serves(&broker).await;
}

/// Builds a 3.1.1 CONNECT and rewrites its protocol level byte.
fn connect_with_level(level: u8) -> Vec<u8> {
    let mut bytes = encode_bytes(
        &Packet::Connect(Box::new(connect_packet(
            ProtocolVersion::V311,
            "level-test",
            true,
        ))),
        ProtocolVersion::V311,
    );
    assert_eq!(&bytes[2..9], &[0x00, 0x04, b'M', b'Q', b'T', b'T', 4]);
    bytes[8] = level;
    bytes
}

/// [3.1.1: MQTT-3.1.2-2] The Server MUST respond to the CONNECT packet with a CONNACK return code
/// 0x01 (unacceptable protocol level) and then disconnect the Client if the Protocol Level is not
/// supported by the Server (v5 [MQTT-3.1.2-2] allows CONNACK 0x84; the 3.1.1 answer is the one
/// every client level can read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_2_unsupported_protocol_level_connack_0x01_then_close() {
    let broker = TestBroker::start().await;
    for level in [0u8, 2, 6, 0x7F, 0xFF] {
        // The answer comes in the 3.1.1 form, which every client level can read.
        let mut client = broker.raw(ProtocolVersion::V311).await;
        client.send_raw(&connect_with_level(level)).await;
        match client.recv().await {
            Packet::ConnAck(ack) => {
                assert_eq!(
                    ack.reason_code,
                    ReasonCode::V3_UNACCEPTABLE_PROTOCOL_VERSION,
                    "level {level}"
                );
                assert!(!ack.session_present, "level {level}");
            }
            other => panic!("level {level}: expected CONNACK 0x01, got {other:?}"),
        }
        let after = client.expect_closed().await;
        assert!(
            after.is_empty(),
            "level {level}: packets after CONNACK: {after:?}"
        );
    }
    assert_broker_serves(&broker).await;
}

/// MQTT 3.1.1 section 3.1.2.2: a Server may accept other protocol levels; Hayate accepts MQTT
/// 3.1 clients (protocol name `MQIsdp`, level 3) and serves them normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_1_mqisdp_level_3_client_accepted() {
    let broker = TestBroker::start().await;
    let mut client = broker.raw(ProtocolVersion::V31).await;
    let bytes = encode_bytes(
        &Packet::Connect(Box::new(connect_packet(
            ProtocolVersion::V31,
            "mqtt31",
            true,
        ))),
        ProtocolVersion::V31,
    );
    assert_eq!(
        &bytes[2..11],
        &[0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', 3]
    );
    let ack = client
        .connect(connect_packet(ProtocolVersion::V31, "mqtt31", true))
        .await;
    assert_eq!(ack.reason_code, ReasonCode::V3_ACCEPTED, "{ack:?}");
    assert_eq!(
        client.subscribe("v31/t", QoS::AtLeastOnce, 1).await,
        vec![1]
    );
    client
        .publish("v31/t", b"hello 3.1", QoS::AtLeastOnce, false, 2)
        .await;
    let publish = client.recv_publish().await;
    assert_eq!(&publish.payload[..], b"hello 3.1");
    ping(&mut client).await;
    disconnect(&mut client).await;
}

/// [MQTT-3.1.2-3] The Server MUST validate that the reserved flag in the CONNECT packet is set
/// to 0 and disconnect the Client if it is not (v5: it is a Malformed Packet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_3_connect_reserved_flag_must_be_zero() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let mut bytes = encode_bytes(
            &Packet::Connect(Box::new(connect_packet(
                version,
                &cid("reserved", version),
                true,
            ))),
            version,
        );
        assert_eq!(&bytes[4..9], &[b'M', b'Q', b'T', b'T', version.level()]);
        bytes[9] |= 0x01;
        let mut client = broker.raw(version).await;
        client.send_raw(&bytes).await;
        assert_closed_before_connack(&mut client).await;
    }
    assert_broker_serves(&broker).await;
}

/// [3.1.1: MQTT-3.1.3-6] A Server MAY allow a Client to supply a ClientId of zero bytes; it
/// MUST then assign a unique ClientId — accepted with Clean Session 1. [3.1.1: MQTT-3.1.3-8]:
/// with CleanSession 0 the Server MUST respond with CONNACK 0x02 and close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_8_v311_empty_client_id_needs_clean_session() {
    let broker = TestBroker::start().await;
    let version = ProtocolVersion::V311;
    let (mut client, ack) = connect_ok(&broker, connect_packet(version, "", true)).await;
    assert!(!ack.session_present);
    ping(&mut client).await;
    assert_connect_refused(&broker, connect_packet(version, "", false), 0x85, 0x02).await;
    disconnect(&mut client).await;
}

/// v5 [MQTT-3.1.3-6] [MQTT-3.1.3-7] If the Server allows a zero-length ClientID it MUST assign
/// a unique ClientID and MUST return it in the Assigned Client Identifier of the CONNACK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_7_v5_empty_client_id_gets_assigned_client_identifier() {
    let broker = TestBroker::start().await;
    let mut assigned = Vec::new();
    for clean_start in [true, false] {
        let (mut client, ack) = connect_ok(
            &broker,
            connect_packet(ProtocolVersion::V5, "", clean_start),
        )
        .await;
        let id = ack
            .properties
            .assigned_client_identifier
            .clone()
            .expect("Assigned Client Identifier");
        assert!(!id.is_empty(), "assigned id must not be empty");
        assert!(
            !assigned.contains(&id.to_string()),
            "assigned ids must be unique: {id}"
        );
        assigned.push(id.to_string());
        ping(&mut client).await;
        disconnect(&mut client).await;
    }
    // A client that gives its own id gets no Assigned Client Identifier.
    let (mut client, ack) =
        connect_ok(&broker, connect_packet(ProtocolVersion::V5, "own-id", true)).await;
    assert_eq!(ack.properties.assigned_client_identifier, None);
    disconnect(&mut client).await;
}

/// v5 [MQTT-3.1.3-8] / [3.1.1: MQTT-3.1.3-9] If the Server rejects the ClientID it responds
/// with CONNACK 0x85 (v5) / 0x02 Identifier rejected (3.1.1) and then MUST close the Network
/// Connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_8_client_id_longer_than_limit_rejected() {
    let broker = TestBroker::start_with(|c| c.broker.max_client_id_len = 8).await;
    for version in VERSIONS {
        assert_connect_refused(
            &broker,
            connect_packet(version, "abcdefghi", true),
            0x85,
            0x02,
        )
        .await;
        // Exactly at the limit is fine.
        let (mut client, _) = connect_ok(
            &broker,
            connect_packet(version, &format!("abcdef-{}", version.level()), true),
        )
        .await;
        ping(&mut client).await;
        disconnect(&mut client).await;
    }
}

/// v5 [MQTT-3.1.4-2] / 3.1.1 §3.1.4 the Server SHOULD perform authentication; if it
/// fails it refuses with CONNACK 0x87 Not authorized (v5) / 0x05 (3.1.1) and MUST close the
/// Network Connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_4_2_anonymous_client_refused_when_not_allowed() {
    let broker = TestBroker::start_with(|c| c.auth.allow_anonymous = false).await;
    for version in VERSIONS {
        assert_connect_refused(
            &broker,
            connect_packet(version, &cid("anon", version), true),
            0x87,
            0x05,
        )
        .await;
        let mut connect = connect_packet(version, &cid("named", version), true);
        connect.username = Some("user".into());
        let (mut client, _) = connect_ok(&broker, connect).await;
        ping(&mut client).await;
        disconnect(&mut client).await;
    }
}

/// v5 [MQTT-4.12.0-1] If the Server does not support the Authentication Method supplied by the
/// Client, it MAY send a CONNACK with Reason Code 0x8C (Bad authentication method) and MUST
/// close the Network Connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_12_0_1_unsupported_authentication_method_connack_0x8c() {
    let broker = TestBroker::start().await;
    let mut connect = connect_packet(ProtocolVersion::V5, "auth-method", true);
    connect.properties.authentication_method = Some("SCRAM-SHA-256".into());
    connect.properties.authentication_data = Some(bytes::Bytes::from_static(b"client-first"));
    assert_connect_refused(&broker, connect, 0x8C, 0x03).await;
    assert_broker_serves(&broker).await;
}

/// v5 section 3.2.2.3: the Server announces its limits in CONNACK — Receive Maximum
/// (3.2.2.3.3), Maximum Packet Size (3.2.2.3.6) and Topic Alias Maximum (3.2.2.3.8) — as
/// configured. A 3.1.1 CONNACK has no properties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_3_connack_properties_announce_configured_limits() {
    let broker = TestBroker::start_with(|c| {
        c.broker.receive_maximum = 10;
        c.broker.max_packet_size = 2048;
        c.broker.topic_alias_maximum = 5;
    })
    .await;
    let (mut client, ack) = connect_ok(
        &broker,
        connect_packet(ProtocolVersion::V5, "limits-v5", true),
    )
    .await;
    assert_eq!(ack.properties.receive_maximum, Some(10), "{ack:?}");
    assert_eq!(ack.properties.maximum_packet_size, Some(2048), "{ack:?}");
    assert_eq!(ack.properties.topic_alias_maximum, Some(5), "{ack:?}");
    assert_eq!(ack.properties.assigned_client_identifier, None);
    disconnect(&mut client).await;

    let (mut client, ack) = connect_ok(
        &broker,
        connect_packet(ProtocolVersion::V311, "limits-v3", true),
    )
    .await;
    assert_eq!(ack.properties, Properties::default());
    disconnect(&mut client).await;

    // Topic Alias Maximum 0 means "no aliases": the property is absent (default 0).
    let broker = TestBroker::start_with(|c| c.broker.topic_alias_maximum = 0).await;
    let (mut client, ack) = connect_ok(
        &broker,
        connect_packet(ProtocolVersion::V5, "no-alias", true),
    )
    .await;
    assert!(
        matches!(ack.properties.topic_alias_maximum, None | Some(0)),
        "{ack:?}"
    );
    disconnect(&mut client).await;
}

/// v5 [MQTT-3.2.2-7] / [3.1.1: MQTT-3.2.2-5]: a Server over its connection limit refuses with
/// CONNACK 0x97 Quota exceeded (v5) / 0x03 Server unavailable (3.1.1) and then MUST close the
/// Network Connection; existing clients are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_7_max_connections_reached_refused() {
    let broker = TestBroker::start_with(|c| c.server.max_connections = 1).await;
    let mut first = broker.client(ProtocolVersion::V5, "holder").await;
    for version in VERSIONS {
        assert_connect_refused(
            &broker,
            connect_packet(version, &cid("over", version), true),
            0x97,
            0x03,
        )
        .await;
    }
    ping(&mut first).await;
    disconnect(&mut first).await;
}

/// MQTT 3.1.1 section 3.1.4 / 5.0 section 3.1.4: if the Server does not receive a CONNECT
/// within a reasonable amount of time after the Network Connection is established, the Server
/// SHOULD close the connection (`server.connect_timeout_secs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_4_connect_timeout_closes_silent_socket() {
    let broker = TestBroker::start_with(|c| c.server.connect_timeout_secs = 1).await;
    let started = Instant::now();
    let mut silent = broker.raw(ProtocolVersion::V311).await;
    let after = silent.expect_closed().await;
    let elapsed = started.elapsed();
    assert!(
        after.is_empty(),
        "nothing may be sent to a client that never connected: {after:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(900),
        "closed too early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "closed too late: {elapsed:?}"
    );

    // A partial CONNECT that never completes is closed as well.
    let mut partial = broker.raw(ProtocolVersion::V311).await;
    partial.send_raw(&[0x10, 0x20, 0x00, 0x04, b'M']).await;
    let after = partial.expect_closed().await;
    assert!(after.is_empty(), "{after:?}");
    assert_broker_serves(&broker).await;
}
