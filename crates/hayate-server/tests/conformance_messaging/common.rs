//! Helpers shared by the messaging conformance tests: connecting with v5 properties, sending
//! PUBLISH packets with properties, receiving with the acknowledgement flows driven
//! asynchronously (so interleaved packets never confuse a test), and checking closes.

use bytes::Bytes;
use hayate_codec::{
    ConnAck, Disconnect, Packet, PacketId, Properties, ProtocolVersion, PubResp, Publish, QoS,
    ReasonCode, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe,
};
use hayate_testkit::{connect_packet, publish_packet, RawClient, Received, TestBroker};
use std::time::Duration;

pub use hayate_codec::ProtocolVersion::{V311 as V3, V5};

/// How long a test waits to be reasonably sure that nothing more is coming.
pub const QUIET: Duration = Duration::from_millis(300);

/// Expands `name` (an `async fn name(version: ProtocolVersion)` in the same module) into a
/// module `name` with one test per protocol level: `name::v3_1_1` and `name::v5`.
macro_rules! both_versions {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v3_1_1() {
                super::$name(hayate_codec::ProtocolVersion::V311).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v5() {
                super::$name(hayate_codec::ProtocolVersion::V5).await;
            }
        }
    )*};
}

/// A packet identifier from a non-zero literal.
pub fn pid(id: u16) -> PacketId {
    PacketId::new(id).expect("non-zero packet id")
}

/// Subscription options with QoS only.
pub fn opts(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions::with_qos(qos)
}

/// Connects with the given clean flag and (v5) CONNECT properties; panics unless accepted.
pub async fn connect_with(
    broker: &TestBroker,
    version: ProtocolVersion,
    client_id: &str,
    clean_start: bool,
    properties: Properties,
) -> (RawClient, ConnAck) {
    let mut client = broker.raw(version).await;
    let mut connect = connect_packet(version, client_id, clean_start);
    connect.properties = properties;
    let connack = client.connect(connect).await;
    assert_eq!(
        connack.reason_code,
        ReasonCode::SUCCESS,
        "CONNACK refused: {connack:?}"
    );
    (client, connack)
}

/// Connects a clean-session client.
pub async fn client(broker: &TestBroker, version: ProtocolVersion, client_id: &str) -> RawClient {
    broker.client(version, client_id).await
}

/// Connects a v5 client with CONNECT properties and a clean start.
pub async fn client_v5(broker: &TestBroker, client_id: &str, properties: Properties) -> RawClient {
    connect_with(broker, V5, client_id, true, properties)
        .await
        .0
}

/// A PUBLISH with v5 properties.
pub fn publish_with(
    topic: &str,
    payload: &[u8],
    qos: QoS,
    retain: bool,
    packet_id: Option<u16>,
    properties: Properties,
) -> Publish {
    let mut publish = publish_packet(topic, payload, qos, retain, packet_id);
    publish.properties = properties;
    publish
}

/// Sends a PUBLISH without waiting for anything.
pub async fn send_publish(client: &mut RawClient, publish: Publish) {
    client.send(Packet::Publish(publish)).await;
}

/// Sends a QoS 0 publish and makes sure the broker has processed it (PINGREQ round trip).
pub async fn publish_qos0(client: &mut RawClient, topic: &str, payload: &[u8], retain: bool) {
    send_publish(
        client,
        publish_packet(topic, payload, QoS::AtMostOnce, retain, None),
    )
    .await;
    sync(client).await;
}

/// Publishes at `qos` and completes the publisher side of the flow; for QoS 0 waits until
/// the broker has processed the packet. Returns the PUBACK/PUBREC reason code (0 for QoS 0).
pub async fn publish(
    client: &mut RawClient,
    topic: &str,
    payload: &[u8],
    qos: QoS,
    retain: bool,
    packet_id: u16,
) -> ReasonCode {
    let id = (qos != QoS::AtMostOnce).then_some(packet_id);
    publish_full(client, publish_packet(topic, payload, qos, retain, id)).await
}

/// Sends `publish` and completes the publisher side of its QoS flow (PUBREL is sent only for
/// a successful PUBREC). Returns the PUBACK/PUBREC reason code (0 for QoS 0).
pub async fn publish_full(client: &mut RawClient, publish: Publish) -> ReasonCode {
    let qos = publish.qos;
    let id = publish.packet_id;
    send_publish(client, publish).await;
    match qos {
        QoS::AtMostOnce => {
            sync(client).await;
            ReasonCode::SUCCESS
        }
        QoS::AtLeastOnce => {
            let ack = expect_puback(client).await;
            assert_eq!(Some(ack.packet_id), id, "PUBACK for another packet id");
            ack.reason_code
        }
        QoS::ExactlyOnce => {
            let rec = expect_pubrec(client).await;
            assert_eq!(Some(rec.packet_id), id, "PUBREC for another packet id");
            if !rec.reason_code.is_error() {
                client
                    .send(Packet::PubRel(PubResp::new(rec.packet_id)))
                    .await;
                let comp = expect_pubcomp(client).await;
                assert_eq!(
                    comp.packet_id, rec.packet_id,
                    "PUBCOMP for another packet id"
                );
                assert_eq!(comp.reason_code, ReasonCode::SUCCESS);
            }
            rec.reason_code
        }
    }
}

/// PINGREQ → PINGRESP: everything sent before was processed by the broker.
pub async fn sync(client: &mut RawClient) {
    client.send(Packet::PingReq).await;
    match client.recv().await {
        Packet::PingResp => {}
        other => panic!("expected PINGRESP, got {other:?}"),
    }
}

/// Receives the next packet, which must be a PUBACK.
pub async fn expect_puback(client: &mut RawClient) -> PubResp {
    match client.recv().await {
        Packet::PubAck(ack) => ack,
        other => panic!("expected PUBACK, got {other:?}"),
    }
}

/// Receives the next packet, which must be a PUBREC.
pub async fn expect_pubrec(client: &mut RawClient) -> PubResp {
    match client.recv().await {
        Packet::PubRec(rec) => rec,
        other => panic!("expected PUBREC, got {other:?}"),
    }
}

/// Receives the next packet, which must be a PUBREL.
pub async fn expect_pubrel(client: &mut RawClient) -> PubResp {
    match client.recv().await {
        Packet::PubRel(rel) => rel,
        other => panic!("expected PUBREL, got {other:?}"),
    }
}

/// Receives the next packet, which must be a PUBCOMP.
pub async fn expect_pubcomp(client: &mut RawClient) -> PubResp {
    match client.recv().await {
        Packet::PubComp(comp) => comp,
        other => panic!("expected PUBCOMP, got {other:?}"),
    }
}

/// Receives the next packet, which must be a PUBLISH; does not acknowledge it.
pub async fn expect_publish(client: &mut RawClient) -> Publish {
    match client.recv().await {
        Packet::Publish(publish) => publish,
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

/// Answers one received packet as a well-behaved client does: PUBACK for QoS 1, PUBREC for
/// QoS 2, PUBCOMP for PUBREL. Returns the PUBLISH, if it was one.
async fn answer(client: &mut RawClient, packet: Packet) -> Option<Publish> {
    match packet {
        Packet::Publish(publish) => {
            match (publish.qos, publish.packet_id) {
                (QoS::AtLeastOnce, Some(id)) => client.send(Packet::PubAck(PubResp::new(id))).await,
                (QoS::ExactlyOnce, Some(id)) => client.send(Packet::PubRec(PubResp::new(id))).await,
                _ => {}
            }
            Some(publish)
        }
        Packet::PubRel(rel) => {
            client
                .send(Packet::PubComp(PubResp::new(rel.packet_id)))
                .await;
            None
        }
        other => panic!("expected PUBLISH or PUBREL, got {other:?}"),
    }
}

/// Receives exactly `n` PUBLISH packets, acknowledging each (QoS 2 flows are completed as the
/// PUBRELs come in). Panics when one does not arrive within the testkit's receive timeout.
pub async fn receive_n(client: &mut RawClient, n: usize) -> Vec<Publish> {
    let mut received = Vec::with_capacity(n);
    while received.len() < n {
        let packet = client.recv().await;
        if let Some(publish) = answer(client, packet).await {
            received.push(publish);
        }
    }
    received
}

/// Receives and acknowledges PUBLISH packets until nothing arrives for `quiet`.
pub async fn receive_until_quiet(client: &mut RawClient, quiet: Duration) -> Vec<Publish> {
    let mut received = Vec::new();
    loop {
        match client.recv_timeout(quiet).await {
            Received::Packet(packet) => {
                if let Some(publish) = answer(client, packet).await {
                    received.push(publish);
                }
            }
            Received::Timeout => return received,
            Received::Closed => panic!("connection closed; received so far {received:?}"),
        }
    }
}

/// Asserts that no PUBLISH arrives within [`QUIET`] (answering stray PUBRELs).
pub async fn expect_no_publish(client: &mut RawClient, why: &str) {
    let extra = receive_until_quiet(client, QUIET).await;
    assert!(extra.is_empty(), "{why}: unexpected {extra:?}");
}

/// Subscribes to several filters in one SUBSCRIBE; checks the SUBACK packet id and returns
/// its codes.
pub async fn subscribe_many(
    client: &mut RawClient,
    filters: &[(&str, SubscriptionOptions)],
    properties: Properties,
    packet_id: u16,
) -> Vec<u8> {
    let subscribe = Subscribe {
        packet_id: pid(packet_id),
        filters: filters.iter().map(|(f, o)| ((*f).into(), *o)).collect(),
        properties,
    };
    client.send(Packet::Subscribe(subscribe)).await;
    match client.recv().await {
        Packet::SubAck(suback) => {
            assert_eq!(
                suback.packet_id,
                pid(packet_id),
                "[MQTT-3.8.4-2] SUBACK packet id"
            );
            suback.reason_codes.iter().map(|c| c.0).collect()
        }
        other => panic!("expected SUBACK, got {other:?}"),
    }
}

/// Subscribes to one filter with a Subscription Identifier (v5).
pub async fn subscribe_with_id(
    client: &mut RawClient,
    filter: &str,
    options: SubscriptionOptions,
    subscription_id: u32,
    packet_id: u16,
) -> Vec<u8> {
    let properties = Properties {
        subscription_identifiers: vec![subscription_id],
        ..Properties::default()
    };
    client
        .subscribe_with(filter, options, properties, packet_id)
        .await
}

/// Unsubscribes from several filters; checks the UNSUBACK packet id.
pub async fn unsubscribe_many(
    client: &mut RawClient,
    filters: &[&str],
    packet_id: u16,
) -> UnsubAck {
    let unsubscribe = Unsubscribe {
        packet_id: pid(packet_id),
        filters: filters.iter().map(|f| (*f).into()).collect(),
        properties: Properties::default(),
    };
    client.send(Packet::Unsubscribe(unsubscribe)).await;
    match client.recv().await {
        Packet::UnsubAck(unsuback) => {
            assert_eq!(
                unsuback.packet_id,
                pid(packet_id),
                "[MQTT-3.10.4-5] UNSUBACK packet id"
            );
            unsuback
        }
        other => panic!("expected UNSUBACK, got {other:?}"),
    }
}

/// Sends a normal DISCONNECT and waits for the broker to close the connection.
pub async fn disconnect(mut client: RawClient) {
    client.send(Packet::Disconnect(Disconnect::default())).await;
    let after = client.expect_closed().await;
    assert!(after.is_empty(), "packets after DISCONNECT: {after:?}");
}

/// Waits for the broker to close the connection: a v5 client first gets DISCONNECT with
/// `reason`; a v3 client gets nothing. Packets other than the DISCONNECT fail the test.
pub async fn expect_server_disconnect(client: &mut RawClient, reason: ReasonCode) {
    expect_server_disconnect_one_of(client, &[reason]).await;
}

/// Like [`expect_server_disconnect`], accepting any of `reasons` in the v5 DISCONNECT.
pub async fn expect_server_disconnect_one_of(client: &mut RawClient, reasons: &[ReasonCode]) {
    let before = client.expect_closed().await;
    if client.version().is_v5() {
        match before.as_slice() {
            [Packet::Disconnect(d)] => {
                assert!(
                    reasons.contains(&d.reason_code),
                    "DISCONNECT reason code, want {reasons:?}: {d:?}"
                )
            }
            other => panic!("expected DISCONNECT {reasons:?} then close, got {other:?}"),
        }
    } else {
        assert!(
            before.is_empty(),
            "v3 close expected without packets, got {before:?}"
        );
    }
}

/// A payload made of `len` bytes.
pub fn payload_of(len: usize) -> Bytes {
    Bytes::from(vec![b'x'; len])
}
