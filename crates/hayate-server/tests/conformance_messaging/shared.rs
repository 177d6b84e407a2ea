//! Shared subscriptions `$share/{ShareName}/{filter}` (MQTT 5.0 §4.8.2).

use crate::common::*;
use hayate_codec::{Packet, Properties, Publish, QoS, ReasonCode, SubscriptionOptions};
use hayate_testkit::{RawClient, Received, TestBroker};
use std::time::Duration;

/// Connects a v5 member and subscribes it to `filter` at `qos`.
async fn member(broker: &TestBroker, id: &str, filter: &str, qos: QoS, expiry: u32) -> RawClient {
    let props = Properties {
        session_expiry_interval: Some(expiry),
        ..Properties::default()
    };
    let (mut client, _) = connect_with(broker, V5, id, true, props).await;
    assert_eq!(
        client.subscribe(filter, qos, 1).await,
        vec![qos as u8],
        "{filter}"
    );
    client
}

fn payloads(received: &[Publish]) -> Vec<u16> {
    received
        .iter()
        .map(|p| u16::from_be_bytes([p.payload[0], p.payload[1]]))
        .collect()
}

/// §4.8.2: "each message is sent to only one of the subscribing sessions" of a Shared
/// Subscription; with the round-robin strategy (`broker.shared_subscription_strategy`, the
/// default) the members take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_shared_subscription_each_message_to_one_member_in_turn() {
    let broker = TestBroker::start().await;
    let mut a = member(&broker, "a", "$share/g/sh/t", QoS::AtLeastOnce, 0).await;
    let mut b = member(&broker, "b", "$share/g/sh/t", QoS::AtLeastOnce, 0).await;
    let mut publisher = client(&broker, V5, "pub").await;
    let n = 20u16;
    for i in 0..n {
        publish(
            &mut publisher,
            "sh/t",
            &i.to_be_bytes(),
            QoS::AtLeastOnce,
            false,
            i + 1,
        )
        .await;
    }
    let got_a = payloads(&receive_until_quiet(&mut a, QUIET).await);
    let got_b = payloads(&receive_until_quiet(&mut b, QUIET).await);
    let mut all: Vec<u16> = got_a.iter().chain(&got_b).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..n).collect::<Vec<_>>(),
        "each message exactly once: a {got_a:?}, b {got_b:?}"
    );
    // Round robin: the members alternate.
    let (even, odd): (Vec<u16>, Vec<u16>) = (0..n).partition(|i| i % 2 == 0);
    assert!(
        (got_a == even && got_b == odd) || (got_a == odd && got_b == even),
        "not alternating: a {got_a:?}, b {got_b:?}"
    );
}

/// §4.8.2: a message matching Shared Subscriptions of several groups is sent to one member of
/// each group, and to every matching non-shared subscription as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_each_shared_group_gets_a_copy() {
    let broker = TestBroker::start().await;
    let mut g1 = vec![
        member(&broker, "g1a", "$share/g1/grp/+", QoS::AtLeastOnce, 0).await,
        member(&broker, "g1b", "$share/g1/grp/+", QoS::AtLeastOnce, 0).await,
    ];
    let mut g2 = vec![
        member(&broker, "g2a", "$share/g2/grp/#", QoS::ExactlyOnce, 0).await,
        member(&broker, "g2b", "$share/g2/grp/#", QoS::ExactlyOnce, 0).await,
        member(&broker, "g2c", "$share/g2/grp/#", QoS::ExactlyOnce, 0).await,
    ];
    let mut plain = member(&broker, "plain", "grp/t", QoS::AtLeastOnce, 0).await;
    let mut publisher = client(&broker, V5, "pub").await;
    let n = 12u16;
    for i in 0..n {
        publish(
            &mut publisher,
            "grp/t",
            &i.to_be_bytes(),
            QoS::ExactlyOnce,
            false,
            i + 1,
        )
        .await;
    }
    for (name, group) in [("g1", &mut g1), ("g2", &mut g2)] {
        let mut all = Vec::new();
        for member in group.iter_mut() {
            let got = receive_until_quiet(member, QUIET).await;
            assert!(
                !got.is_empty(),
                "{name}: a member got nothing (round robin)"
            );
            all.extend(payloads(&got));
        }
        all.sort_unstable();
        assert_eq!(
            all,
            (0..n).collect::<Vec<_>>(),
            "{name}: each message once per group"
        );
    }
    let got = payloads(&receive_until_quiet(&mut plain, QUIET).await);
    assert_eq!(
        got,
        (0..n).collect::<Vec<_>>(),
        "non-shared subscriber gets every message"
    );
}

/// §4.8.2 (QoS 1): "If the Server is in the process of sending a QoS 1 message to its chosen
/// subscribing Client and the connection to that Client breaks before the Server has received
/// an acknowledgement from the Client ... If the Client's Session terminates before the Client
/// reconnects, the Server SHOULD send the Application Message to another Client that is
/// subscribed to the same Shared Subscription."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_shared_qos1_unacknowledged_redelivered_to_other_member() {
    let broker = TestBroker::start().await;
    let mut a = member(&broker, "a", "$share/g/re/t", QoS::AtLeastOnce, 0).await;
    let mut b = member(&broker, "b", "$share/g/re/t", QoS::AtLeastOnce, 0).await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(
        &mut publisher,
        "re/t",
        b"hot potato",
        QoS::AtLeastOnce,
        false,
        1,
    )
    .await;
    // Whoever got it drops the connection without PUBACK.
    let (holder, mut other) = match a.recv_timeout(QUIET).await {
        Received::Packet(Packet::Publish(p)) => {
            assert_eq!(&p.payload[..], b"hot potato");
            (a, b)
        }
        Received::Timeout => {
            assert_eq!(&expect_publish(&mut b).await.payload[..], b"hot potato");
            (b, a)
        }
        other => panic!("unexpected {other:?}"),
    };
    holder.drop_connection().await;
    let got = receive_n(&mut other, 1).await;
    assert_eq!(
        &got[0].payload[..],
        b"hot potato",
        "the other member gets the message"
    );
    expect_no_publish(&mut other, "one message").await;
}

/// [MQTT-4.8.2-5] "If the Client's Session terminates before the Client reconnects, the Server
/// MUST NOT send the Application Message to any other subscribed Client" — for a QoS 2 message
/// whose delivery to the chosen member had started ([MQTT-4.8.2-4]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_5_shared_qos2_in_flight_not_sent_to_other_member() {
    let broker = TestBroker::start().await;
    let mut a = member(&broker, "a", "$share/g/q2/t", QoS::ExactlyOnce, 0).await;
    let mut b = member(&broker, "b", "$share/g/q2/t", QoS::ExactlyOnce, 0).await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(
        &mut publisher,
        "q2/t",
        b"exactly once",
        QoS::ExactlyOnce,
        false,
        1,
    )
    .await;
    let (holder, mut other) = match a.recv_timeout(QUIET).await {
        Received::Packet(Packet::Publish(_)) => (a, b),
        Received::Timeout => {
            expect_publish(&mut b).await;
            (b, a)
        }
        other => panic!("unexpected {other:?}"),
    };
    holder.drop_connection().await; // session expiry 0: the session ends now
    expect_no_publish(
        &mut other,
        "QoS 2 message whose delivery had started sent to another member",
    )
    .await;
}

/// [MQTT-4.8.2-4] "If the Server is in the process of sending a QoS 2 message to its chosen
/// subscribing Client and the connection to the Client breaks before delivery is complete,
/// the Server MUST complete the delivery of the message to that Client when it reconnects"
/// (resent with DUP 1 [MQTT-4.4.0-1]); no other member gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_4_shared_qos2_delivery_completed_to_same_client_on_reconnect() {
    let broker = TestBroker::start().await;
    let mut a = member(&broker, "a", "$share/g/q2r/t", QoS::ExactlyOnce, 300).await;
    let mut b = member(&broker, "b", "$share/g/q2r/t", QoS::ExactlyOnce, 300).await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "q2r/t", b"mine", QoS::ExactlyOnce, false, 1).await;
    let (holder, holder_id, mut other) = match a.recv_timeout(QUIET).await {
        Received::Packet(Packet::Publish(_)) => (a, "a", b),
        Received::Timeout => {
            expect_publish(&mut b).await;
            (b, "b", a)
        }
        other => panic!("unexpected {other:?}"),
    };
    holder.drop_connection().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let persistent = Properties {
        session_expiry_interval: Some(300),
        ..Properties::default()
    };
    let (mut back, connack) = connect_with(&broker, V5, holder_id, false, persistent).await;
    assert!(connack.session_present);
    expect_no_publish(
        &mut other,
        "QoS 2 message of a disconnected member sent to another member",
    )
    .await;
    let resent = expect_publish(&mut back).await;
    assert_eq!(&resent.payload[..], b"mine");
    assert!(resent.dup, "[MQTT-4.4.0-1] resent with DUP 1");
}

/// [MQTT-3.8.3-4] "It is a Protocol Error to set the No Local bit to 1 on a Shared
/// Subscription": DISCONNECT 0x82.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_8_3_4_no_local_on_shared_subscription_protocol_error() {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    let options = SubscriptionOptions {
        no_local: true,
        ..opts(QoS::AtLeastOnce)
    };
    let subscribe = hayate_codec::Subscribe {
        packet_id: pid(1),
        filters: vec![("$share/g/nl/t".into(), options)],
        properties: Properties::default(),
    };
    sub.send(Packet::Subscribe(subscribe)).await;
    expect_server_disconnect(&mut sub, ReasonCode::PROTOCOL_ERROR).await;
}

/// [MQTT-4.8.2-1] "A Shared Subscription's Topic Filter MUST start with $share/ and MUST
/// contain a ShareName that is at least one character long"; [MQTT-4.8.2-2] "The ShareName
/// MUST NOT contain the characters "/", "+" or "#", but MUST be followed by a "/" character.
/// This "/" character MUST be followed by a Topic Filter": otherwise 0x8F.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_2_malformed_share_name_refused() {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    let filters = [
        ("$share//t", opts(QoS::AtLeastOnce)),
        ("$share/g", opts(QoS::AtLeastOnce)),
        ("$share/g/", opts(QoS::AtLeastOnce)),
        ("$share/g+/t", opts(QoS::AtLeastOnce)),
        ("$share/#/t", opts(QoS::AtLeastOnce)),
        ("$share/g/a/#/b", opts(QoS::AtLeastOnce)),
        ("$share/g/ok/#", opts(QoS::AtLeastOnce)),
    ];
    let codes = subscribe_many(&mut sub, &filters, Properties::default(), 1).await;
    assert_eq!(codes, vec![0x8F, 0x8F, 0x8F, 0x8F, 0x8F, 0x8F, 1]);
}

/// [MQTT-4.8.2-3] "The Server MUST respect the granted QoS for the Client's subscription":
/// each member receives at the minimum of the published QoS and its own granted QoS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_3_shared_member_granted_qos_respected() {
    let broker = TestBroker::start().await;
    let mut low = member(&broker, "low", "$share/g/gq/t", QoS::AtMostOnce, 0).await;
    let mut high = member(&broker, "high", "$share/g/gq/t", QoS::ExactlyOnce, 0).await;
    let mut publisher = client(&broker, V5, "pub").await;
    for i in 0..4u16 {
        publish(
            &mut publisher,
            "gq/t",
            &i.to_be_bytes(),
            QoS::ExactlyOnce,
            false,
            i + 1,
        )
        .await;
    }
    let got_low = receive_until_quiet(&mut low, QUIET).await;
    let got_high = receive_until_quiet(&mut high, QUIET).await;
    assert_eq!(got_low.len() + got_high.len(), 4);
    assert!(
        got_low.iter().all(|p| p.qos == QoS::AtMostOnce),
        "{got_low:?}"
    );
    assert!(
        got_high.iter().all(|p| p.qos == QoS::ExactlyOnce),
        "{got_high:?}"
    );
}

/// §4.8.2: a member that unsubscribes leaves the group; the rest of the group receives every
/// message [MQTT-3.10.4-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_8_2_unsubscribed_member_leaves_group() {
    let broker = TestBroker::start().await;
    let mut a = member(&broker, "a", "$share/g/lv/t", QoS::AtLeastOnce, 0).await;
    let mut b = member(&broker, "b", "$share/g/lv/t", QoS::AtLeastOnce, 0).await;
    let unsuback = unsubscribe_many(&mut a, &["$share/g/lv/t"], 2).await;
    assert_eq!(unsuback.reason_codes, vec![ReasonCode::SUCCESS]);
    let mut publisher = client(&broker, V5, "pub").await;
    for i in 0..6u16 {
        publish(
            &mut publisher,
            "lv/t",
            &i.to_be_bytes(),
            QoS::AtLeastOnce,
            false,
            i + 1,
        )
        .await;
    }
    assert_eq!(
        payloads(&receive_until_quiet(&mut b, QUIET).await),
        (0..6).collect::<Vec<_>>()
    );
    expect_no_publish(&mut a, "unsubscribed member").await;
}

/// [MQTT-3.3.4-3] Subscription Identifiers are sent with messages delivered through a Shared
/// Subscription too: each member's own identifier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_3_subscription_identifier_of_shared_subscription() {
    let broker = TestBroker::start().await;
    let mut a = client(&broker, V5, "a").await;
    subscribe_with_id(&mut a, "$share/g/sid/t", opts(QoS::AtLeastOnce), 11, 1).await;
    let mut b = client(&broker, V5, "b").await;
    subscribe_with_id(&mut b, "$share/g/sid/t", opts(QoS::AtLeastOnce), 22, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    for i in 0..4u16 {
        publish(
            &mut publisher,
            "sid/t",
            &i.to_be_bytes(),
            QoS::AtLeastOnce,
            false,
            i + 1,
        )
        .await;
    }
    for (member, id) in [(&mut a, 11), (&mut b, 22)] {
        let got = receive_until_quiet(member, QUIET).await;
        assert!(!got.is_empty());
        for message in got {
            assert_eq!(message.properties.subscription_identifiers, vec![id]);
        }
    }
}
