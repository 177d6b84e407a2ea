//! Helpers shared by the connection conformance tests.

use bytes::BytesMut;
use hayate_codec::{
    encode, ConnAck, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, ReasonCode,
};
use hayate_testkit::{connect_packet, RawClient, Received, TestBroker};
use std::time::Duration;

/// The protocol levels every applicable case runs against.
pub const VERSIONS: [ProtocolVersion; 2] = [ProtocolVersion::V311, ProtocolVersion::V5];

/// A short wait used to check that something does *not* happen.
pub const QUIET: Duration = Duration::from_millis(400);

/// A client id that is distinct per version (and per `name`).
pub fn cid(name: &str, version: ProtocolVersion) -> String {
    format!("{name}-v{}", version.level())
}

/// A topic that is distinct per version, so one broker can host both runs.
pub fn topic(name: &str, version: ProtocolVersion) -> String {
    format!("conf/{name}/v{}", version.level())
}

/// A CONNECT asking for a session that outlives the connection: v3 Clean Session 0, v5 Clean
/// Start 0 with a Session Expiry Interval of 300 s.
pub fn persistent_connect(version: ProtocolVersion, client_id: &str) -> Connect {
    let mut connect = connect_packet(version, client_id, false);
    if version.is_v5() {
        connect.properties.session_expiry_interval = Some(300);
    }
    connect
}

/// Opens a TCP connection, sends `connect` and asserts a successful CONNACK.
pub async fn connect_ok(broker: &TestBroker, connect: Connect) -> (RawClient, ConnAck) {
    let version = connect.protocol;
    let mut client = broker.raw(version).await;
    let connack = client.connect(connect).await;
    assert_eq!(
        connack.reason_code,
        ReasonCode::SUCCESS,
        "{version:?}: CONNACK refused: {connack:?}"
    );
    (client, connack)
}

/// Opens a TCP connection, sends `connect` and asserts that the broker answers with a CONNACK
/// carrying `v5_code` (v5) or `v3_code` (3.1/3.1.1), Session Present 0, and then closes the
/// connection without sending anything else.
pub async fn assert_connect_refused(
    broker: &TestBroker,
    connect: Connect,
    v5_code: u8,
    v3_code: u8,
) {
    let version = connect.protocol;
    let mut client = broker.raw(version).await;
    let connack = client.connect(connect).await;
    let expected = if version.is_v5() { v5_code } else { v3_code };
    assert_eq!(
        connack.reason_code.0, expected,
        "{version:?}: wrong CONNACK code: {connack:?}"
    );
    assert!(
        !connack.session_present,
        "{version:?}: refused CONNACK must have Session Present 0"
    );
    let after = client.expect_closed().await;
    assert!(
        after.is_empty(),
        "{version:?}: packets after a refusing CONNACK: {after:?}"
    );
}

/// Encodes `packet` at `version` into bytes.
pub fn encode_bytes(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(packet, version, &mut out).expect("test packet encodes");
    out.to_vec()
}

/// A packet with the given first byte and body, with the remaining length computed.
pub fn raw_packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut len = body.len();
    loop {
        let mut byte = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

/// A two-byte-length-prefixed string or binary field.
pub fn field(bytes: &[u8]) -> Vec<u8> {
    let len = u16::try_from(bytes.len()).expect("short field");
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// Waits for the broker to close `client` and checks what it sent first: for v5, exactly one
/// DISCONNECT with `v5_reason` when one is given; for v3 (which has no server DISCONNECT),
/// nothing.
pub async fn assert_closed_with(client: &mut RawClient, v5_reason: Option<u8>) {
    let version = client.version();
    let before = client.expect_closed().await;
    match (version.is_v5(), v5_reason) {
        (true, Some(code)) => match before.as_slice() {
            [Packet::Disconnect(d)] => {
                assert_eq!(
                    d.reason_code.0, code,
                    "{version:?}: wrong DISCONNECT reason: {d:?}"
                )
            }
            other => {
                panic!("{version:?}: expected DISCONNECT 0x{code:02X} then close, got {other:?}")
            }
        },
        _ => assert!(
            before.is_empty(),
            "{version:?}: expected a plain close, got {before:?}"
        ),
    }
}

/// Waits for the broker to close `client` after a protocol violation; v5 clients may get one
/// DISCONNECT, which must carry an error reason code (≥ 0x80). v3 clients get nothing.
pub async fn assert_closed_with_error(client: &mut RawClient) {
    let version = client.version();
    let before = client.expect_closed().await;
    if version.is_v5() {
        match before.as_slice() {
            [] => {}
            [Packet::Disconnect(d)] => {
                assert!(
                    d.reason_code.is_error(),
                    "{version:?}: DISCONNECT must carry an error code: {d:?}"
                )
            }
            other => {
                panic!("{version:?}: expected at most a DISCONNECT before close, got {other:?}")
            }
        }
    } else {
        assert!(
            before.is_empty(),
            "{version:?}: expected a plain close, got {before:?}"
        );
    }
}

/// Waits for the broker to close a connection that never completed CONNECT: nothing but a
/// refusing CONNACK may come first.
pub async fn assert_closed_before_connack(client: &mut RawClient) {
    let version = client.version();
    let before = client.expect_closed().await;
    for packet in &before {
        match packet {
            Packet::ConnAck(ack) if ack.reason_code.0 != 0 => {}
            other => panic!("{version:?}: unexpected packet before close: {other:?}"),
        }
    }
}

/// Sends a normal DISCONNECT (reason 0x00) and waits for the broker to close.
pub async fn disconnect(client: &mut RawClient) {
    client.send(Packet::Disconnect(Disconnect::default())).await;
    let after = client.expect_closed().await;
    assert!(after.is_empty(), "packets after DISCONNECT: {after:?}");
}

/// PINGREQ → PINGRESP.
pub async fn ping(client: &mut RawClient) {
    client.send(Packet::PingReq).await;
    match client.recv().await {
        Packet::PingResp => {}
        other => panic!("expected PINGRESP, got {other:?}"),
    }
}

/// Asserts that nothing at all arrives within [`QUIET`], or that it is not a PUBLISH (the
/// connection stays open either way).
pub async fn expect_no_publish(client: &mut RawClient, within: Duration) {
    match client.recv_timeout(within).await {
        Received::Timeout => {}
        Received::Packet(packet) => panic!("expected no message, got {packet:?}"),
        Received::Closed => panic!("expected no message, but the connection closed"),
    }
}

/// Receives the next PUBLISH without acknowledging it.
pub async fn recv_publish_noack(client: &mut RawClient) -> Publish {
    match client.recv().await {
        Packet::Publish(publish) => publish,
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

/// A connected clean-session client subscribed to `filter` at QoS 2.
pub async fn observer(
    broker: &TestBroker,
    version: ProtocolVersion,
    client_id: &str,
    filter: &str,
) -> RawClient {
    let mut client = broker.client(version, client_id).await;
    let codes = client.subscribe(filter, QoS::ExactlyOnce, 1).await;
    assert_eq!(
        codes,
        vec![2],
        "{version:?}: SUBSCRIBE {filter} not granted at QoS 2"
    );
    client
}

/// Checks that the broker still serves clients of both versions: a fresh client subscribes,
/// publishes at QoS 1 to itself and receives the message.
pub async fn assert_broker_serves(broker: &TestBroker) {
    for version in VERSIONS {
        let id = cid("alive-check", version);
        let filter = topic("alive", version);
        let mut client = broker.client(version, &id).await;
        assert_eq!(
            client.subscribe(&filter, QoS::AtLeastOnce, 7).await,
            vec![1]
        );
        client
            .publish(&filter, b"still here", QoS::AtLeastOnce, false, 8)
            .await;
        let publish = client.recv_publish().await;
        assert_eq!(&publish.payload[..], b"still here", "{version:?}");
        disconnect(&mut client).await;
    }
}
