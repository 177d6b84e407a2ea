//! Flow control (MQTT 5.0 §4.9, §3.3.4) and delivery of queued messages.

use crate::common::*;
use hayate_codec::{Packet, Properties, PubResp, QoS, ReasonCode};
use hayate_testkit::{publish_packet, TestBroker};
use std::collections::VecDeque;
use std::time::Duration;

/// [MQTT-3.3.4-9] "The Server MUST NOT send more than Receive Maximum QoS 1 and QoS 2 PUBLISH
/// packets for which it has not received PUBACK, PUBCOMP, or PUBREC with a Reason Code of 128
/// or greater from the Client"; [MQTT-4.9.0-2] once the quota is used up no more QoS > 0
/// PUBLISH packets are sent, and each PUBACK frees one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_9_server_respects_client_receive_maximum_qos1() {
    let broker = TestBroker::start().await;
    let props = Properties {
        receive_maximum: Some(2),
        ..Properties::default()
    };
    let mut sub = client_v5(&broker, "sub", props).await;
    sub.subscribe("rm/t", QoS::AtLeastOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    for i in 0..6u16 {
        publish(
            &mut publisher,
            "rm/t",
            &[i as u8],
            QoS::AtLeastOnce,
            false,
            i + 1,
        )
        .await;
    }
    let mut window = VecDeque::from([
        expect_publish(&mut sub).await,
        expect_publish(&mut sub).await,
    ]);
    sub.expect_nothing(QUIET).await;
    let mut order = Vec::new();
    while let Some(oldest) = window.pop_front() {
        order.push(oldest.payload[0]);
        sub.send(Packet::PubAck(PubResp::new(oldest.packet_id.unwrap())))
            .await;
        if order.len() + window.len() < 6 {
            window.push_back(expect_publish(&mut sub).await);
            assert_eq!(window.len(), 2);
            sub.expect_nothing(Duration::from_millis(150)).await;
        }
    }
    assert_eq!(order, [0, 1, 2, 3, 4, 5]);
    sub.expect_nothing(QUIET).await;
}

/// [MQTT-3.3.4-9] for QoS 2: the slot stays taken after PUBREC (reason < 0x80) until PUBCOMP
/// (§4.9); a PUBREC with a reason of 0x80 or more frees it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_9_server_respects_client_receive_maximum_qos2() {
    let broker = TestBroker::start().await;
    let props = Properties {
        receive_maximum: Some(1),
        ..Properties::default()
    };
    let mut sub = client_v5(&broker, "sub", props).await;
    sub.subscribe("rm2/t", QoS::ExactlyOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    for i in 0..3u16 {
        publish(
            &mut publisher,
            "rm2/t",
            &[i as u8],
            QoS::ExactlyOnce,
            false,
            i + 1,
        )
        .await;
    }
    let first = expect_publish(&mut sub).await;
    assert_eq!(first.payload[0], 0);
    sub.expect_nothing(QUIET).await;
    let id = first.packet_id.unwrap();
    sub.send(Packet::PubRec(PubResp::new(id))).await;
    assert_eq!(expect_pubrel(&mut sub).await.packet_id, id);
    sub.expect_nothing(QUIET).await; // still in flight until PUBCOMP
    sub.send(Packet::PubComp(PubResp::new(id))).await;

    let second = expect_publish(&mut sub).await;
    assert_eq!(second.payload[0], 1);
    sub.expect_nothing(QUIET).await;
    // Refusing with PUBREC 0x80 ends that flow and frees the slot [MQTT-4.3.3-4].
    let refuse = PubResp {
        packet_id: second.packet_id.unwrap(),
        reason_code: ReasonCode::UNSPECIFIED_ERROR,
        properties: Properties::default(),
    };
    sub.send(Packet::PubRec(refuse)).await;
    let third = expect_publish(&mut sub).await;
    assert_eq!(
        third.payload[0], 2,
        "no PUBREL for the refused one; the next message is sent"
    );
    let id = third.packet_id.unwrap();
    sub.send(Packet::PubRec(PubResp::new(id))).await;
    assert_eq!(expect_pubrel(&mut sub).await.packet_id, id);
    sub.send(Packet::PubComp(PubResp::new(id))).await;
    sub.expect_nothing(QUIET).await;
}

/// [MQTT-4.9.0-3] "The Client and Server MUST continue to process and respond to all other MQTT
/// Control Packets even if the quota is zero"; [MQTT-3.3.4-10] "The Server MUST NOT delay the
/// sending of any packets other than PUBLISH packets due to having sent Receive Maximum
/// PUBLISH packets without receiving acknowledgements for them."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_10_other_packets_not_delayed_by_full_window() {
    let broker = TestBroker::start().await;
    let props = Properties {
        receive_maximum: Some(1),
        ..Properties::default()
    };
    let mut sub = client_v5(&broker, "sub", props).await;
    sub.subscribe("full/t", QoS::AtLeastOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "full/t", b"1", QoS::AtLeastOnce, false, 1).await;
    publish(&mut publisher, "full/t", b"2", QoS::AtLeastOnce, false, 2).await;
    let first = expect_publish(&mut sub).await;
    // Window full: PINGREQ, SUBSCRIBE, UNSUBSCRIBE and the subscriber's own PUBLISH are answered.
    sync(&mut sub).await;
    assert_eq!(
        sub.subscribe("full/other", QoS::AtLeastOnce, 2).await,
        vec![1]
    );
    unsubscribe_many(&mut sub, &["full/other"], 3).await;
    publish(&mut sub, "elsewhere", b"x", QoS::AtLeastOnce, false, 4).await;
    sub.send(Packet::PubAck(PubResp::new(first.packet_id.unwrap())))
        .await;
    assert_eq!(&receive_n(&mut sub, 1).await[0].payload[..], b"2");
}

/// §3.3.4: "If it receives more than Receive Maximum QoS 1 and QoS 2 PUBLISH packets where it
/// has not sent a PUBACK or PUBCOMP in response, the Server uses a DISCONNECT packet with Reason
/// Code 0x93 (Receive Maximum exceeded)" — the client broke [MQTT-3.3.4-7]. The CONNACK
/// announces the configured Receive Maximum (§3.2.2.3.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_7_receive_maximum_exceeded_disconnect_0x93() {
    let broker = TestBroker::start_with(|c| c.broker.receive_maximum = 2).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("rx/#", QoS::ExactlyOnce, 1).await;
    let (mut publisher, connack) =
        connect_with(&broker, V5, "pub", true, Properties::default()).await;
    assert_eq!(connack.properties.receive_maximum, Some(2));
    for id in 1..=2u16 {
        send_publish(
            &mut publisher,
            publish_packet("rx/t", b"x", QoS::ExactlyOnce, false, Some(id)),
        )
        .await;
        assert_eq!(expect_pubrec(&mut publisher).await.packet_id, pid(id));
    }
    send_publish(
        &mut publisher,
        publish_packet("rx/t", b"x", QoS::ExactlyOnce, false, Some(3)),
    )
    .await;
    expect_server_disconnect(&mut publisher, ReasonCode::RECEIVE_MAXIMUM_EXCEEDED).await;

    // Within the limit is fine: PUBREL/PUBCOMP frees the quota.
    let mut ok = client(&broker, V5, "ok").await;
    for id in 1..=5u16 {
        publish(&mut ok, "rx/ok", b"y", QoS::ExactlyOnce, false, id).await;
    }
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(
        got.iter().filter(|p| p.topic.as_str() == "rx/ok").count(),
        5
    );
}

/// [MQTT-4.5.0-1] "When a Server takes ownership of an incoming Application Message it MUST add
/// it to the Session State for those Clients that have matching Subscriptions" and queued
/// messages are sent when the client is back (§4.1; [3.1.1: MQTT-3.1.2-5]): a backlog larger
/// than what the broker writes in one go (~256 KiB) is delivered in full, with no further
/// packet from the client needed to move it along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_5_0_1_large_queued_backlog_delivered_in_full_on_reconnect() {
    let broker = TestBroker::start_with(|c| c.broker.queue_qos0_offline = true).await;
    for (qos, id) in [(QoS::AtMostOnce, "q0"), (QoS::AtLeastOnce, "q1")] {
        let persistent = Properties {
            session_expiry_interval: Some(300),
            ..Properties::default()
        };
        let (mut sub, _) = connect_with(&broker, V5, id, true, persistent.clone()).await;
        sub.subscribe(&format!("backlog/{id}"), qos, 1).await;
        disconnect(sub).await;

        let mut publisher = client(&broker, V5, &format!("pub-{id}")).await;
        let n = 60u16;
        let chunk = payload_of(10 * 1024);
        for i in 0..n {
            publish(
                &mut publisher,
                &format!("backlog/{id}"),
                &chunk,
                qos,
                false,
                i + 1,
            )
            .await;
        }
        let (mut sub, connack) = connect_with(&broker, V5, id, false, persistent).await;
        assert!(connack.session_present);
        // Receive without acknowledging (QoS 1 window is 65,535): all 600 KiB must arrive.
        let mut received = 0;
        while received < n {
            match sub.recv_timeout(Duration::from_secs(2)).await {
                hayate_testkit::Received::Packet(Packet::Publish(_)) => received += 1,
                other => {
                    panic!("{qos:?}: {received} of {n} queued messages arrived, then {other:?}")
                }
            }
        }
    }
}
