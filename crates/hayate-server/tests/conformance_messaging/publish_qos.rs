//! QoS 0, 1 and 2 in both directions (MQTT 5.0 §4.3, §3.3–3.7; 3.1.1 §4.3).

use crate::common::*;
use hayate_codec::{Packet, ProtocolVersion, PubResp, QoS, ReasonCode};
use hayate_testkit::{publish_packet, TestBroker};
use std::collections::HashSet;

both_versions!(
    mqtt_4_3_1_1_qos0_delivered_without_packet_id_and_dup_0,
    mqtt_4_3_2_4_puback_carries_publish_packet_id,
    mqtt_4_3_3_8_pubrec_and_pubcomp_carry_publish_packet_id,
    mqtt_4_3_3_10_qos2_retransmission_before_pubrel_delivered_once,
    mqtt_4_3_3_11_pubrel_for_unknown_packet_id_answered_with_pubcomp,
    mqtt_4_3_3_12_packet_id_reused_after_pubcomp_is_new_message,
    mqtt_4_3_3_4_outbound_qos2_flow_uses_one_packet_id,
    mqtt_3_8_4_8_delivery_qos_is_minimum_of_published_and_granted,
    mqtt_2_2_1_4_outbound_packet_ids_non_zero_and_unique_while_in_flight,
    mqtt_4_6_0_5_messages_from_one_client_delivered_in_order,
);

/// [MQTT-4.3.1-1] "In the QoS 0 delivery protocol, the sender MUST send a PUBLISH packet with
/// QoS 0 and DUP flag set to 0" (and [MQTT-2.2.1-2]: no Packet Identifier at QoS 0).
async fn mqtt_4_3_1_1_qos0_delivered_without_packet_id_and_dup_0(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("q0/t", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut publisher = client(&broker, version, "pub").await;
    publish_qos0(&mut publisher, "q0/t", b"zero", false).await;
    let got = expect_publish(&mut sub).await;
    assert_eq!(
        (got.topic.as_str(), &got.payload[..]),
        ("q0/t", &b"zero"[..])
    );
    assert_eq!(got.qos, QoS::AtMostOnce);
    assert_eq!(got.packet_id, None);
    assert!(!got.dup, "QoS 0 PUBLISH with DUP set");
    expect_no_publish(&mut sub, "one QoS 0 message published").await;
}

/// [MQTT-4.3.2-4] "In the QoS 1 delivery protocol, the receiver MUST respond with a PUBACK
/// packet containing the Packet Identifier from the incoming PUBLISH packet"
/// ([3.1.1: MQTT-4.3.2-2]); as sender the server forwards a QoS 1 PUBLISH with a Packet
/// Identifier and DUP 0 (v5 [MQTT-4.3.2-2]).
async fn mqtt_4_3_2_4_puback_carries_publish_packet_id(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("q1/t", QoS::AtLeastOnce, 1).await, vec![1]);
    let mut publisher = client(&broker, version, "pub").await;
    for id in [0x1234u16, 1, u16::MAX] {
        send_publish(
            &mut publisher,
            publish_packet("q1/t", b"one", QoS::AtLeastOnce, false, Some(id)),
        )
        .await;
        let ack = expect_puback(&mut publisher).await;
        assert_eq!(ack.packet_id, pid(id));
        assert_eq!(ack.reason_code, ReasonCode::SUCCESS);

        let got = expect_publish(&mut sub).await;
        assert_eq!(got.qos, QoS::AtLeastOnce);
        assert!(got.packet_id.is_some());
        assert!(!got.dup, "first delivery with DUP set");
        assert_eq!(&got.payload[..], b"one");
        sub.send(Packet::PubAck(PubResp::new(got.packet_id.unwrap())))
            .await;
    }
    expect_no_publish(&mut sub, "three QoS 1 messages, each acknowledged").await;
}

/// [MQTT-4.3.3-8] "the receiver MUST respond with a PUBREC containing the Packet Identifier
/// from the incoming PUBLISH packet"; [MQTT-4.3.3-11] "MUST respond to a PUBREL packet by
/// sending a PUBCOMP packet containing the same Packet Identifier as the PUBREL"
/// ([3.1.1: MQTT-4.3.3-2]).
async fn mqtt_4_3_3_8_pubrec_and_pubcomp_carry_publish_packet_id(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("q2/t", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut publisher = client(&broker, version, "pub").await;
    send_publish(
        &mut publisher,
        publish_packet("q2/t", b"two", QoS::ExactlyOnce, false, Some(777)),
    )
    .await;
    let rec = expect_pubrec(&mut publisher).await;
    assert_eq!(rec.packet_id, pid(777));
    assert_eq!(rec.reason_code, ReasonCode::SUCCESS);
    publisher.send(Packet::PubRel(PubResp::new(pid(777)))).await;
    let comp = expect_pubcomp(&mut publisher).await;
    assert_eq!(comp.packet_id, pid(777));
    assert_eq!(comp.reason_code, ReasonCode::SUCCESS);

    let got = receive_n(&mut sub, 1).await;
    assert_eq!(got[0].qos, QoS::ExactlyOnce);
    assert_eq!(&got[0].payload[..], b"two");
    expect_no_publish(&mut sub, "one QoS 2 message").await;
}

/// [MQTT-4.3.3-10] "Until it has received the corresponding PUBREL packet, the receiver MUST
/// acknowledge any subsequent PUBLISH packet with the same Packet Identifier by sending a
/// PUBREC. It MUST NOT cause duplicate messages to be delivered to any onward recipients in
/// this case" ([3.1.1: MQTT-4.3.3-2], §4.3.3 method B).
async fn mqtt_4_3_3_10_qos2_retransmission_before_pubrel_delivered_once(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub1 = client(&broker, version, "sub1").await;
    assert_eq!(sub1.subscribe("once/t", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut sub2 = client(&broker, version, "sub2").await;
    assert_eq!(sub2.subscribe("once/#", QoS::AtLeastOnce, 1).await, vec![1]);
    let mut publisher = client(&broker, version, "pub").await;

    let first = publish_packet("once/t", b"exactly once", QoS::ExactlyOnce, false, Some(5));
    send_publish(&mut publisher, first.clone()).await;
    assert_eq!(expect_pubrec(&mut publisher).await.packet_id, pid(5));
    for _ in 0..3 {
        let mut again = first.clone();
        again.dup = true;
        send_publish(&mut publisher, again).await;
        let rec = expect_pubrec(&mut publisher).await;
        assert_eq!(
            rec.packet_id,
            pid(5),
            "retransmission answered with PUBREC for its id"
        );
        assert!(
            !rec.reason_code.is_error(),
            "retransmission refused: {rec:?}"
        );
    }
    publisher.send(Packet::PubRel(PubResp::new(pid(5)))).await;
    assert_eq!(expect_pubcomp(&mut publisher).await.packet_id, pid(5));

    for sub in [&mut sub1, &mut sub2] {
        let got = receive_until_quiet(sub, QUIET).await;
        assert_eq!(got.len(), 1, "exactly one copy per subscriber, got {got:?}");
        assert_eq!(&got[0].payload[..], b"exactly once");
    }
}

/// [MQTT-4.3.3-11] "the receiver MUST respond to a PUBREL packet by sending a PUBCOMP packet
/// containing the same Packet Identifier as the PUBREL"; v5 reason 0x92 (Packet Identifier
/// not found) when the id is unknown (§3.7.2.1). [3.1.1: MQTT-4.3.3-2] / §3.7 PUBCOMP.
async fn mqtt_4_3_3_11_pubrel_for_unknown_packet_id_answered_with_pubcomp(
    version: ProtocolVersion,
) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publisher
        .send(Packet::PubRel(PubResp::new(pid(4242))))
        .await;
    let comp = expect_pubcomp(&mut publisher).await;
    assert_eq!(comp.packet_id, pid(4242));
    if version.is_v5() {
        assert_eq!(comp.reason_code, ReasonCode::PACKET_IDENTIFIER_NOT_FOUND);
    }
    // A PUBREL repeated after the flow completed is answered the same way; the connection
    // stays usable.
    publish(&mut publisher, "rel/t", b"x", QoS::ExactlyOnce, false, 9).await;
    publisher.send(Packet::PubRel(PubResp::new(pid(9)))).await;
    let comp = expect_pubcomp(&mut publisher).await;
    assert_eq!(comp.packet_id, pid(9));
    if version.is_v5() {
        assert_eq!(comp.reason_code, ReasonCode::PACKET_IDENTIFIER_NOT_FOUND);
    }
    sync(&mut publisher).await;
}

/// [MQTT-4.3.3-12] "After it has sent a PUBCOMP, the receiver MUST treat any subsequent
/// PUBLISH packet that contains that Packet Identifier as being a new Application Message"
/// ([3.1.1: MQTT-4.3.3-2] method B); likewise after PUBACK at QoS 1 [MQTT-4.3.2-5].
async fn mqtt_4_3_3_12_packet_id_reused_after_pubcomp_is_new_message(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("reuse/t", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut publisher = client(&broker, version, "pub").await;
    publish(
        &mut publisher,
        "reuse/t",
        b"first",
        QoS::ExactlyOnce,
        false,
        3,
    )
    .await;
    publish(
        &mut publisher,
        "reuse/t",
        b"second",
        QoS::ExactlyOnce,
        false,
        3,
    )
    .await;
    publish(
        &mut publisher,
        "reuse/t",
        b"third",
        QoS::AtLeastOnce,
        false,
        3,
    )
    .await;
    publish(
        &mut publisher,
        "reuse/t",
        b"fourth",
        QoS::AtLeastOnce,
        false,
        3,
    )
    .await;
    let got = receive_n(&mut sub, 4).await;
    let payloads: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    assert_eq!(payloads, [&b"first"[..], b"second", b"third", b"fourth"]);
    expect_no_publish(&mut sub, "four messages").await;
}

/// [MQTT-4.3.3-4] "the sender MUST send a PUBREL packet when it receives a PUBREC packet from
/// the receiver ... This PUBREL packet MUST contain the same Packet Identifier as the original
/// PUBLISH packet" ([3.1.1: MQTT-4.3.3-1]); the broker is the sender towards subscribers.
async fn mqtt_4_3_3_4_outbound_qos2_flow_uses_one_packet_id(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("out2/t", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "out2/t", b"a", QoS::ExactlyOnce, false, 1).await;
    let got = expect_publish(&mut sub).await;
    assert_eq!(got.qos, QoS::ExactlyOnce);
    assert!(!got.dup);
    let id = got.packet_id.expect("QoS 2 PUBLISH has a packet id");
    sub.send(Packet::PubRec(PubResp::new(id))).await;
    let rel = expect_pubrel(&mut sub).await;
    assert_eq!(rel.packet_id, id);
    sub.send(Packet::PubComp(PubResp::new(id))).await;
    // [MQTT-4.3.3-6] no PUBLISH again once PUBREL was sent.
    sub.expect_nothing(QUIET).await;
}

/// [MQTT-3.8.4-8] "The QoS of Application Messages sent in response to a Subscription MUST
/// be the minimum of the QoS of the originally published message and the Maximum QoS granted
/// by the Server" ([3.1.1: MQTT-3.8.4-6] / §3.8.4).
async fn mqtt_3_8_4_8_delivery_qos_is_minimum_of_published_and_granted(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let qos_levels = [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce];
    let mut subs = Vec::new();
    for granted in qos_levels {
        let mut sub = client(&broker, version, &format!("sub{}", granted as u8)).await;
        assert_eq!(
            sub.subscribe("min/t", granted, 1).await,
            vec![granted as u8]
        );
        subs.push((granted, sub));
    }
    let mut publisher = client(&broker, version, "pub").await;
    for (i, published) in qos_levels.into_iter().enumerate() {
        let payload = [published as u8];
        publish(
            &mut publisher,
            "min/t",
            &payload,
            published,
            false,
            10 + i as u16,
        )
        .await;
        for (granted, sub) in &mut subs {
            let got = receive_n(sub, 1).await.remove(0);
            assert_eq!(&got.payload[..], &payload[..]);
            assert_eq!(
                got.qos,
                published.min(*granted),
                "published at {published:?}, granted {granted:?}"
            );
            assert_eq!(got.packet_id.is_some(), got.qos != QoS::AtMostOnce);
        }
    }
    for (_, sub) in &mut subs {
        expect_no_publish(sub, "one copy per message").await;
    }
}

/// [MQTT-2.2.1-4] "Each time a Server sends a new PUBLISH (with QoS > 0) MQTT Control Packet
/// it MUST assign it a non zero Packet Identifier that is currently unused" ([MQTT-4.3.2-1],
/// [MQTT-4.3.3-1]: "assign an unused Packet Identifier"; [3.1.1: MQTT-2.3.1-4]).
async fn mqtt_2_2_1_4_outbound_packet_ids_non_zero_and_unique_while_in_flight(
    version: ProtocolVersion,
) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    assert_eq!(sub.subscribe("ids/#", QoS::ExactlyOnce, 1).await, vec![2]);
    let mut publisher = client(&broker, version, "pub").await;
    let n = 60u16;
    for i in 0..n {
        let qos = if i % 2 == 0 {
            QoS::AtLeastOnce
        } else {
            QoS::ExactlyOnce
        };
        publish(
            &mut publisher,
            &format!("ids/{i}"),
            &i.to_be_bytes(),
            qos,
            false,
            i + 1,
        )
        .await;
    }
    // Hold every acknowledgement: all n are in flight at once.
    let mut in_flight = Vec::new();
    let mut ids = HashSet::new();
    for _ in 0..n {
        let got = expect_publish(&mut sub).await;
        let id = got
            .packet_id
            .expect("QoS > 0 PUBLISH has a packet id")
            .get();
        assert_ne!(id, 0);
        assert!(ids.insert(id), "packet id {id} reused while in flight");
        in_flight.push(got);
    }
    // Complete half of the QoS 2 flows only up to PUBREC: those ids stay in use.
    for got in &in_flight {
        let id = got.packet_id.unwrap();
        match got.qos {
            QoS::AtLeastOnce => sub.send(Packet::PubAck(PubResp::new(id))).await,
            _ => sub.send(Packet::PubRec(PubResp::new(id))).await,
        }
    }
    let mut awaiting_comp = HashSet::new();
    for _ in 0..n / 2 {
        let rel = expect_pubrel(&mut sub).await;
        assert!(awaiting_comp.insert(rel.packet_id.get()));
    }
    // New messages while the PUBRELs are unanswered must not reuse those ids.
    for i in 0..20u16 {
        publish(
            &mut publisher,
            "ids/more",
            &i.to_be_bytes(),
            QoS::AtLeastOnce,
            false,
            500 + i,
        )
        .await;
        let got = expect_publish(&mut sub).await;
        let id = got.packet_id.unwrap();
        assert!(
            !awaiting_comp.contains(&id.get()),
            "packet id {id} of an open QoS 2 flow reused"
        );
        sub.send(Packet::PubAck(PubResp::new(id))).await;
    }
    for id in awaiting_comp {
        sub.send(Packet::PubComp(PubResp::new(pid(id)))).await;
    }
    expect_no_publish(&mut sub, "all acknowledged").await;
}

/// [MQTT-4.6.0-5] "When a Server processes a message that has been published to an Ordered
/// Topic, it MUST send PUBLISH packets to consumers (for the same Topic and QoS) in the order
/// that they were received from any given Client"; [MQTT-4.6.0-6] every topic is ordered by
/// default ([3.1.1: MQTT-4.6.0-5], [3.1.1: MQTT-4.6.0-6]).
async fn mqtt_4_6_0_5_messages_from_one_client_delivered_in_order(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut subs = Vec::new();
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        let mut sub = client(&broker, version, &format!("sub{}", qos as u8)).await;
        sub.subscribe("order/t", qos, 1).await;
        subs.push(sub);
    }
    let mut publisher = client(&broker, version, "pub").await;
    let n = 200u16;
    for qos in [QoS::AtLeastOnce, QoS::ExactlyOnce] {
        // Pipelined: every PUBLISH is sent before any acknowledgement is read.
        for i in 0..n {
            let packet = publish_packet("order/t", &i.to_be_bytes(), qos, false, Some(i + 1));
            send_publish(&mut publisher, packet).await;
        }
        for _ in 0..n {
            match publisher.recv().await {
                Packet::PubAck(_) => {}
                Packet::PubRec(rec) => {
                    publisher
                        .send(Packet::PubRel(PubResp::new(rec.packet_id)))
                        .await
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if qos == QoS::ExactlyOnce {
            for _ in 0..n {
                expect_pubcomp(&mut publisher).await;
            }
        }
        for sub in &mut subs {
            let got = receive_n(sub, usize::from(n)).await;
            let order: Vec<u16> = got
                .iter()
                .map(|p| u16::from_be_bytes([p.payload[0], p.payload[1]]))
                .collect();
            let expected: Vec<u16> = (0..n).collect();
            assert_eq!(order, expected, "out of order at {qos:?}");
        }
    }
}

/// [MQTT-3.2.2-11] "The Client MUST NOT send PUBLISH packets at a QoS level exceeding Maximum
/// QoS level specified" in CONNACK; the server treats it as a protocol error and closes with
/// DISCONNECT 0x9B QoS not supported (§3.2.2.3.4); the message is not delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_11_publish_above_maximum_qos_disconnect_0x9b() {
    let broker = TestBroker::start_with(|c| c.broker.max_qos = 1).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("maxq/t", QoS::AtLeastOnce, 1).await;
    let (mut publisher, connack) = connect_with(
        &broker,
        V5,
        "pub",
        true,
        hayate_codec::Properties::default(),
    )
    .await;
    assert_eq!(connack.properties.maximum_qos, Some(1));
    publish(&mut publisher, "maxq/t", b"ok", QoS::AtLeastOnce, false, 1).await;
    let packet = publish_packet("maxq/t", b"too high", QoS::ExactlyOnce, false, Some(2));
    send_publish(&mut publisher, packet).await;
    expect_server_disconnect(&mut publisher, ReasonCode::QOS_NOT_SUPPORTED).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    let payloads: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    assert_eq!(payloads, [&b"ok"[..]]);
}
