//! Malformed and hostile input: each must close only the offending connection, and the broker
//! must go on serving everyone else (v5 section 4.13, 3.1.1 section 4.8).

use crate::common::*;
use hayate_codec::{
    Auth, ConnAck, Packet, PacketId, Properties, ProtocolVersion, QoS, ReasonCode, SubAck,
};
use hayate_testkit::{connect_packet, publish_packet, RawClient, TestBroker};

/// What the offending connection must see before it is closed.
#[derive(Clone, Copy)]
enum Expect {
    /// v5: exactly DISCONNECT with this reason; v3: a plain close.
    Reason(u8),
    /// v5: at most a DISCONNECT with an error reason; v3: a plain close.
    AnyError,
}

/// Connects a bystander and an offender, has the offender send `bytes` after a successful
/// CONNECT, checks how it is closed, then checks that the bystander and new clients are served.
async fn offend_after_connect(
    broker: &TestBroker,
    version: ProtocolVersion,
    name: &str,
    bytes: &[u8],
    expect: Expect,
) {
    let mut bystander = broker
        .client(version, &cid(&format!("{name}-bystander"), version))
        .await;
    let filter = topic(&format!("{name}-bystander"), version);
    assert_eq!(
        bystander.subscribe(&filter, QoS::AtLeastOnce, 1).await,
        vec![1]
    );

    let mut offender = broker.client(version, &cid(name, version)).await;
    offender.send_raw(bytes).await;
    check_closed(&mut offender, expect).await;

    ping(&mut bystander).await;
    bystander
        .publish(&filter, b"bystander ok", QoS::AtLeastOnce, false, 2)
        .await;
    assert_eq!(
        &bystander.recv_publish().await.payload[..],
        b"bystander ok",
        "{version:?} {name}"
    );
    disconnect(&mut bystander).await;
    assert_broker_serves(broker).await;
}

async fn check_closed(client: &mut RawClient, expect: Expect) {
    match expect {
        Expect::Reason(code) => assert_closed_with(client, Some(code)).await,
        Expect::AnyError => assert_closed_with_error(client).await,
    }
}

/// Sends `bytes` as the very first thing on a new connection and checks it is closed without
/// a successful CONNACK; the broker keeps serving.
async fn offend_before_connect(broker: &TestBroker, version: ProtocolVersion, bytes: &[u8]) {
    let mut offender = broker.raw(version).await;
    offender.send_raw(bytes).await;
    assert_closed_before_connack(&mut offender).await;
    assert_broker_serves(broker).await;
}

/// A PUBLISH body: topic, packet id when QoS > 0, an empty v5 property block, payload.
fn publish_body(
    version: ProtocolVersion,
    topic_bytes: &[u8],
    packet_id: Option<u16>,
    payload: &[u8],
) -> Vec<u8> {
    let mut body = field(topic_bytes);
    if let Some(id) = packet_id {
        body.extend_from_slice(&id.to_be_bytes());
    }
    if version.is_v5() {
        body.push(0x00);
    }
    body.extend_from_slice(payload);
    body
}

/// v5 [MQTT-1.5.5-1] / 3.1.1 §2.2.3: the Remaining Length is a Variable Byte Integer of
/// at most four bytes; a fifth byte makes the packet malformed and the connection is closed
/// (v5: DISCONNECT 0x81 Malformed Packet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_1_5_5_1_remaining_length_of_five_bytes_is_malformed() {
    let broker = TestBroker::start().await;
    let five_byte_length = [0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01];
    for version in VERSIONS {
        offend_after_connect(
            &broker,
            version,
            "len5",
            &five_byte_length,
            Expect::Reason(0x81),
        )
        .await;
        let mut connect_header = five_byte_length;
        connect_header[0] = 0x10;
        offend_before_connect(&broker, version, &connect_header).await;
    }
}

/// v5 [MQTT-3.2.2-15] The Client MUST NOT send packets exceeding the Maximum Packet Size the
/// Server announced; a Server receiving one uses DISCONNECT 0x95 (Packet too large). The fixed
/// header alone must be enough: the broker may not wait for (or buffer) the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_15_packet_over_maximum_packet_size_refused_from_header() {
    let broker = TestBroker::start_with(|c| c.broker.max_packet_size = 1024).await;
    for version in VERSIONS {
        // PUBLISH announcing a 1 MB remaining length; only the fixed header and a few body
        // bytes are ever sent.
        let mut header = vec![0x30, 0x80, 0x80, 0x40];
        header.extend_from_slice(&field(b"big"));
        offend_after_connect(&broker, version, "too-large", &header, Expect::Reason(0x95)).await;

        // Just over the limit: 1025 bytes in total (3-byte fixed header + 1022).
        let payload = vec![b'x'; 1022 - 5 - usize::from(version.is_v5())];
        let mut just_over = raw_packet(0x30, &publish_body(version, b"big", None, &payload));
        assert_eq!(just_over.len(), 1025);
        just_over.truncate(10);
        offend_after_connect(
            &broker,
            version,
            "just-over",
            &just_over,
            Expect::Reason(0x95),
        )
        .await;

        // A CONNECT announcing more than the limit is refused before any CONNACK.
        offend_before_connect(
            &broker,
            version,
            &[0x10, 0x80, 0x80, 0x40, 0x00, 0x04, b'M', b'Q'],
        )
        .await;

        // Exactly at the limit (1024 bytes) is accepted and delivered.
        let mut client = broker.client(version, &cid("at-limit", version)).await;
        assert_eq!(client.subscribe("big", QoS::AtMostOnce, 1).await, vec![0]);
        let payload = vec![b'x'; 1021 - 5 - usize::from(version.is_v5())];
        let at_limit = raw_packet(0x30, &publish_body(version, b"big", None, &payload));
        assert_eq!(at_limit.len(), 1024);
        client.send_raw(&at_limit).await;
        assert_eq!(
            client.recv_publish().await.payload.len(),
            payload.len(),
            "{version:?}"
        );
        disconnect(&mut client).await;
    }
}

/// v5 §4.13 / [3.1.1: MQTT-4.8.0-1]: on a protocol violation or Malformed Packet the
/// receiver MUST close the Network Connection — here, bytes that are not MQTT at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_13_1_garbage_bytes_close_connection() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        // Reserved packet type 0.
        offend_after_connect(&broker, version, "type0", &[0x00, 0x00], Expect::AnyError).await;
        // Random bytes after a good CONNECT.
        offend_after_connect(
            &broker,
            version,
            "garbage",
            &[0xDE, 0xAD, 0xBE, 0xEF, 0x13, 0x37, 0x00, 0xFF],
            Expect::AnyError,
        )
        .await;
        // An HTTP request instead of CONNECT.
        offend_before_connect(&broker, version, b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n").await;
    }
}

/// [MQTT-3.3.1-4] (same number in 3.1.1) A PUBLISH packet MUST NOT have both QoS bits set to 1;
/// a Server receiving one MUST close the Network Connection (v5: Malformed Packet, DISCONNECT
/// 0x81).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_4_publish_qos_3_is_malformed() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let packet = raw_packet(0x36, &publish_body(version, b"a/b", Some(1), b"qos3"));
        offend_after_connect(&broker, version, "qos3", &packet, Expect::Reason(0x81)).await;
    }
}

/// [MQTT-3.8.1-1] (same number in 3.1.1) Bits 3,2,1,0 of the SUBSCRIBE fixed header are
/// reserved and MUST be 0,0,1,0; the Server MUST treat any other value as malformed and close
/// the Network Connection (v5: DISCONNECT 0x81).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_8_1_1_subscribe_wrong_fixed_header_flags_is_malformed() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let props: &[u8] = if version.is_v5() { &[0x00] } else { &[] };
        let body = [&[0x00, 0x01][..], props, &field(b"a/b"), &[0x01]].concat();
        for first in [0x80u8, 0x83, 0x8A] {
            let name = format!("sub-flags-{first:02x}");
            offend_after_connect(
                &broker,
                version,
                &name,
                &raw_packet(first, &body),
                Expect::Reason(0x81),
            )
            .await;
        }
    }
}

/// v5 [MQTT-1.5.4-2] / [3.1.1: MQTT-1.5.3-2] A UTF-8 Encoded String MUST NOT include an encoding
/// of the null character U+0000; a receiver getting one MUST close the Network Connection
/// (v5: Malformed Packet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_1_5_4_2_utf8_string_with_null_character_closes_connection() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        // In a PUBLISH topic.
        let packet = raw_packet(0x30, &publish_body(version, b"a\0b", None, b"null"));
        offend_after_connect(&broker, version, "nul-topic", &packet, Expect::Reason(0x81)).await;
        // In the CONNECT client identifier.
        let connect = encode_bytes(
            &Packet::Connect(Box::new(connect_packet(version, "nul\0id", true))),
            version,
        );
        offend_before_connect(&broker, version, &connect).await;
    }
}

/// v5 section 2.2.2.2 / 3.3.2.3: it is a Protocol Error to include the same property more than
/// once (here Message Expiry Interval twice in PUBLISH): DISCONNECT 0x82 and close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_2_2_2_2_duplicate_property_is_protocol_error() {
    let broker = TestBroker::start().await;
    let mut body = field(b"a/b");
    body.extend_from_slice(&[10, 0x02, 0, 0, 0, 60, 0x02, 0, 0, 0, 30]);
    body.extend_from_slice(b"dup");
    let packet = raw_packet(0x30, &body);
    offend_after_connect(
        &broker,
        ProtocolVersion::V5,
        "dup-prop",
        &packet,
        Expect::Reason(0x82),
    )
    .await;
}

/// [MQTT-3.3.2-2] (same number in 3.1.1) The Topic Name in the PUBLISH packet MUST NOT contain
/// wildcard characters (v5: DISCONNECT 0x90 Topic Name invalid; 3.1.1: close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_2_publish_topic_with_wildcard_is_refused() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        for (i, wild) in ["a/+", "a/#", "+", "#"].iter().enumerate() {
            let packet = encode_bytes(
                &Packet::Publish(publish_packet(
                    wild,
                    b"wild",
                    QoS::AtLeastOnce,
                    false,
                    Some(1),
                )),
                version,
            );
            offend_after_connect(
                &broker,
                version,
                &format!("wild{i}"),
                &packet,
                Expect::Reason(0x90),
            )
            .await;
        }
    }
}

/// v5 §4.13.2 / [3.1.1: MQTT-4.8.0-1]: CONNACK and SUBACK are sent only by the Server; a
/// Client sending one commits a protocol violation and the connection is closed (v5:
/// DISCONNECT 0x82 Protocol Error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_13_2_server_only_packet_from_client_closes_connection() {
    let broker = TestBroker::start().await;
    let server_packets = [
        Packet::ConnAck(ConnAck {
            session_present: false,
            reason_code: ReasonCode::SUCCESS,
            properties: Properties::default(),
        }),
        Packet::SubAck(SubAck {
            packet_id: PacketId::new(1).expect("non-zero"),
            reason_codes: vec![ReasonCode::GRANTED_QOS_0],
            properties: Properties::default(),
        }),
        Packet::PingResp,
    ];
    for version in VERSIONS {
        for (i, packet) in server_packets.iter().enumerate() {
            let bytes = encode_bytes(packet, version);
            offend_after_connect(
                &broker,
                version,
                &format!("server-pkt{i}"),
                &bytes,
                Expect::Reason(0x82),
            )
            .await;
        }
    }
}

/// v5 [MQTT-4.12.0-7] If the Client does not include an Authentication Method in the CONNECT,
/// the Client MUST NOT send an AUTH packet: the Server treats it as a Protocol Error
/// (DISCONNECT 0x82). In 3.1.1 packet type 15 is reserved (section 2.2.1): the connection is
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_12_0_7_auth_without_authentication_method_is_protocol_error() {
    let broker = TestBroker::start().await;
    let auth = encode_bytes(&Packet::Auth(Auth::default()), ProtocolVersion::V5);
    offend_after_connect(
        &broker,
        ProtocolVersion::V5,
        "auth",
        &auth,
        Expect::Reason(0x82),
    )
    .await;
    let mut reauth = Auth {
        reason_code: ReasonCode::REAUTHENTICATE,
        properties: Properties::default(),
    };
    reauth.properties.authentication_method = Some("SCRAM-SHA-256".into());
    let reauth = encode_bytes(&Packet::Auth(reauth), ProtocolVersion::V5);
    offend_after_connect(
        &broker,
        ProtocolVersion::V5,
        "reauth",
        &reauth,
        Expect::Reason(0x82),
    )
    .await;
    offend_after_connect(
        &broker,
        ProtocolVersion::V311,
        "auth",
        &[0xF0, 0x00],
        Expect::AnyError,
    )
    .await;
}
