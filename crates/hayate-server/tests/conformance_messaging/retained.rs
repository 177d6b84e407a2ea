//! Retained messages (MQTT 5.0 §3.3.1.3, §3.8.3.1; 3.1.1 §3.3.1.3).

use crate::common::*;
use hayate_codec::{Properties, ProtocolVersion, Publish, QoS, SubscriptionOptions};
use hayate_testkit::{RawClient, TestBroker};
use std::time::Duration;

both_versions!(
    mqtt_3_3_1_5_retained_message_stored_and_sent_on_subscribe,
    mqtt_3_3_1_5_retained_message_replaced,
    mqtt_3_3_1_6_empty_retained_payload_clears_retained_message,
    mqtt_3_3_1_8_non_retained_publish_leaves_retained_message,
    mqtt_3_3_1_12_live_delivery_has_retain_0,
    mqtt_3_8_4_4_resubscribe_resends_retained_messages,
);

fn topics_and_payloads(received: &[Publish]) -> Vec<(String, Vec<u8>)> {
    let mut pairs: Vec<(String, Vec<u8>)> = received
        .iter()
        .map(|p| (p.topic.to_string(), p.payload.to_vec()))
        .collect();
    pairs.sort();
    pairs
}

fn pair(topic: &str, payload: &[u8]) -> (String, Vec<u8>) {
    (topic.to_string(), payload.to_vec())
}

/// Subscribes a new client and returns the retained messages it is sent.
async fn retained_for(
    broker: &TestBroker,
    version: ProtocolVersion,
    client_id: &str,
    filter: &str,
    qos: QoS,
) -> Vec<Publish> {
    let mut sub = client(broker, version, client_id).await;
    assert_eq!(sub.subscribe(filter, qos, 1).await, vec![qos as u8]);
    receive_until_quiet(&mut sub, QUIET).await
}

/// [MQTT-3.3.1-5] "If the RETAIN flag is set to 1 in a PUBLISH packet sent by a Client to a
/// Server, the Server MUST replace any existing retained message for this topic and store the
/// Application Message"; on a new subscription it is sent with RETAIN 1 (§3.3.1.3;
/// [3.1.1: MQTT-3.3.1-5], [3.1.1: MQTT-3.3.1-6], [3.1.1: MQTT-3.3.1-8]) at the minimum of its
/// QoS and the granted QoS [MQTT-3.8.4-8].
async fn mqtt_3_3_1_5_retained_message_stored_and_sent_on_subscribe(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "ret/q0", b"zero", QoS::AtMostOnce, true, 1).await;
    publish(&mut publisher, "ret/q1", b"one", QoS::AtLeastOnce, true, 2).await;
    publish(&mut publisher, "ret/q2", b"two", QoS::ExactlyOnce, true, 3).await;

    let got = retained_for(&broker, version, "sub", "ret/#", QoS::AtLeastOnce).await;
    assert_eq!(
        topics_and_payloads(&got),
        [
            pair("ret/q0", b"zero"),
            pair("ret/q1", b"one"),
            pair("ret/q2", b"two")
        ]
    );
    for message in &got {
        assert!(
            message.retain,
            "§3.3.1.3 / [3.1.1: MQTT-3.3.1-8] RETAIN 1 on subscribe: {message:?}"
        );
        let published = match message.topic.as_str() {
            "ret/q0" => QoS::AtMostOnce,
            "ret/q1" => QoS::AtLeastOnce,
            _ => QoS::ExactlyOnce,
        };
        assert_eq!(message.qos, published.min(QoS::AtLeastOnce));
    }
    let got = retained_for(&broker, version, "exact", "ret/q2", QoS::ExactlyOnce).await;
    assert_eq!(topics_and_payloads(&got), [pair("ret/q2", b"two")]);
    assert_eq!(got[0].qos, QoS::ExactlyOnce);
}

/// [MQTT-3.3.1-5] the Server "MUST replace any existing retained message for this topic"
/// ([3.1.1: MQTT-3.3.1-5]; a QoS 0 retained message replaces it too, [3.1.1: MQTT-3.3.1-7]).
async fn mqtt_3_3_1_5_retained_message_replaced(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "rep/t", b"v1", QoS::ExactlyOnce, true, 1).await;
    publish(&mut publisher, "rep/t", b"v2", QoS::AtLeastOnce, true, 2).await;
    let got = retained_for(&broker, version, "s1", "rep/t", QoS::ExactlyOnce).await;
    assert_eq!(topics_and_payloads(&got), [pair("rep/t", b"v2")]);
    assert_eq!(got[0].qos, QoS::AtLeastOnce, "the replacement's QoS");

    publish(&mut publisher, "rep/t", b"v3", QoS::AtMostOnce, true, 3).await;
    let got = retained_for(&broker, version, "s2", "rep/+", QoS::ExactlyOnce).await;
    assert_eq!(topics_and_payloads(&got), [pair("rep/t", b"v3")]);
    assert_eq!(got[0].qos, QoS::AtMostOnce);
}

/// [MQTT-3.3.1-6] "If the Payload contains zero bytes it is processed normally by the Server
/// but any retained message with the same topic name MUST be removed and any future
/// subscribers for the topic will not receive a retained message"; [MQTT-3.3.1-7] "A retained
/// message with a Payload containing zero bytes MUST NOT be stored" ([3.1.1: MQTT-3.3.1-10],
/// [3.1.1: MQTT-3.3.1-11]).
async fn mqtt_3_3_1_6_empty_retained_payload_clears_retained_message(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "clr/t", b"old", QoS::AtLeastOnce, true, 1).await;
    publish(
        &mut publisher,
        "clr/other",
        b"stays",
        QoS::AtLeastOnce,
        true,
        2,
    )
    .await;
    let mut live = client(&broker, version, "live").await;
    live.subscribe("clr/t", QoS::AtLeastOnce, 1).await;
    assert_eq!(receive_n(&mut live, 1).await[0].payload, &b"old"[..]);

    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        publish(&mut publisher, "clr/t", b"", qos, true, 10).await;
        // Processed normally: the live subscriber gets the empty message, RETAIN 0.
        let got = receive_n(&mut live, 1).await;
        assert!(got[0].payload.is_empty());
        assert!(!got[0].retain, "live delivery with RETAIN 1: {:?}", got[0]);

        let got = retained_for(
            &broker,
            version,
            &format!("new{}", qos as u8),
            "clr/#",
            QoS::AtLeastOnce,
        )
        .await;
        assert_eq!(
            topics_and_payloads(&got),
            [pair("clr/other", b"stays")],
            "the cleared topic has no retained message, and no empty one is sent"
        );
    }
}

/// [MQTT-3.3.1-8] "If the RETAIN flag is 0 in a PUBLISH packet sent by a Client to a Server,
/// the Server MUST NOT store the message as a retained message and MUST NOT remove or replace
/// any existing retained message" ([3.1.1: MQTT-3.3.1-12]).
async fn mqtt_3_3_1_8_non_retained_publish_leaves_retained_message(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "keep/t", b"kept", QoS::AtLeastOnce, true, 1).await;
    publish(
        &mut publisher,
        "keep/t",
        b"live only",
        QoS::AtLeastOnce,
        false,
        2,
    )
    .await;
    publish(&mut publisher, "keep/t", b"", QoS::AtLeastOnce, false, 3).await;
    publish(
        &mut publisher,
        "keep/u",
        b"never retained",
        QoS::AtLeastOnce,
        false,
        4,
    )
    .await;
    let got = retained_for(&broker, version, "sub", "keep/#", QoS::AtLeastOnce).await;
    assert_eq!(topics_and_payloads(&got), [pair("keep/t", b"kept")]);
}

/// [MQTT-3.3.1-12] "If the value of Retain As Published subscription option is set to 0, the
/// Server MUST set the RETAIN flag to 0 when forwarding an Application Message regardless of
/// how the RETAIN flag was set in the received PUBLISH packet" ([3.1.1: MQTT-3.3.1-9]: "It MUST
/// set the RETAIN flag to 0 when a PUBLISH Packet is sent to a Client because it matches an
/// established subscription").
async fn mqtt_3_3_1_12_live_delivery_has_retain_0(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, version, "sub").await;
    sub.subscribe("live/#", QoS::ExactlyOnce, 1).await;
    let mut publisher = client(&broker, version, "pub").await;
    for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        publish(&mut publisher, "live/t", b"r", qos, true, i as u16 + 1).await;
        let got = receive_n(&mut sub, 1).await;
        assert!(
            !got[0].retain,
            "established subscription got RETAIN 1: {:?}",
            got[0]
        );
    }
}

/// [MQTT-3.8.4-4] "If the Retain Handling option is 0, any existing retained messages matching
/// the Topic Filter MUST be re-sent, but Application Messages MUST NOT be lost due to
/// replacing the Subscription" ([3.1.1: MQTT-3.8.4-3]).
async fn mqtt_3_8_4_4_resubscribe_resends_retained_messages(version: ProtocolVersion) {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, version, "pub").await;
    publish(&mut publisher, "again/t", b"r", QoS::AtLeastOnce, true, 1).await;
    let mut sub = client(&broker, version, "sub").await;
    for packet_id in 1..=3 {
        sub.subscribe("again/#", QoS::AtLeastOnce, packet_id).await;
        let got = receive_until_quiet(&mut sub, QUIET).await;
        assert_eq!(
            topics_and_payloads(&got),
            [pair("again/t", b"r")],
            "subscribe #{packet_id}"
        );
        assert!(got[0].retain);
    }
}

/// Subscribes with v5 options.
async fn subscribe_v5(client: &mut RawClient, filter: &str, options: SubscriptionOptions, id: u16) {
    let codes = client
        .subscribe_with(filter, options, Properties::default(), id)
        .await;
    assert_eq!(codes, vec![options.qos as u8]);
}

/// [MQTT-3.3.1-13] "If the value of Retain As Published subscription option is set to 1, the
/// Server MUST set the RETAIN flag equal to the RETAIN flag in the received PUBLISH packet".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_13_retain_as_published() {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    let rap = SubscriptionOptions {
        retain_as_published: true,
        ..opts(QoS::AtLeastOnce)
    };
    subscribe_v5(&mut sub, "rap/t", rap, 1).await;
    let mut plain = client(&broker, V5, "plain").await;
    subscribe_v5(&mut plain, "rap/t", opts(QoS::AtLeastOnce), 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(
        &mut publisher,
        "rap/t",
        b"retained",
        QoS::AtLeastOnce,
        true,
        1,
    )
    .await;
    publish(
        &mut publisher,
        "rap/t",
        b"normal",
        QoS::AtLeastOnce,
        false,
        2,
    )
    .await;
    let got: Vec<(Vec<u8>, bool)> = receive_n(&mut sub, 2)
        .await
        .iter()
        .map(|p| (p.payload.to_vec(), p.retain))
        .collect();
    assert_eq!(
        got,
        [(b"retained".to_vec(), true), (b"normal".to_vec(), false)]
    );
    let got: Vec<(Vec<u8>, bool)> = receive_n(&mut plain, 2)
        .await
        .iter()
        .map(|p| (p.payload.to_vec(), p.retain))
        .collect();
    assert_eq!(
        got,
        [(b"retained".to_vec(), false), (b"normal".to_vec(), false)],
        "[MQTT-3.3.1-12]"
    );
}

/// [MQTT-3.3.1-9] "If Retain Handling is set to 0 the Server MUST send the retained messages
/// matching the Topic Filter of the subscription to the Client" — on every SUBSCRIBE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_9_retain_handling_0_sends_on_every_subscribe() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "rh0/t", b"r", QoS::AtLeastOnce, true, 1).await;
    let mut sub = client(&broker, V5, "sub").await;
    let options = SubscriptionOptions {
        retain_handling: 0,
        ..opts(QoS::AtLeastOnce)
    };
    for id in 1..=2 {
        subscribe_v5(&mut sub, "rh0/#", options, id).await;
        let got = receive_until_quiet(&mut sub, QUIET).await;
        assert_eq!(
            topics_and_payloads(&got),
            [pair("rh0/t", b"r")],
            "subscribe #{id}"
        );
        assert!(got[0].retain);
    }
}

/// [MQTT-3.3.1-10] "If Retain Handling is set to 1 then if the subscription did not already
/// exist, the Server MUST send all retained message matching the Topic Filter of the
/// subscription to the Client, and if the subscription did exist the Server MUST NOT send the
/// retained messages."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_10_retain_handling_1_only_for_new_subscription() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "rh1/t", b"r", QoS::AtLeastOnce, true, 1).await;
    let mut sub = client(&broker, V5, "sub").await;
    let options = SubscriptionOptions {
        retain_handling: 1,
        ..opts(QoS::AtLeastOnce)
    };
    subscribe_v5(&mut sub, "rh1/#", options, 1).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(
        topics_and_payloads(&got),
        [pair("rh1/t", b"r")],
        "new subscription"
    );
    subscribe_v5(&mut sub, "rh1/#", options, 2).await;
    expect_no_publish(&mut sub, "subscription already existed").await;
    // After UNSUBSCRIBE it is new again.
    unsubscribe_many(&mut sub, &["rh1/#"], 3).await;
    subscribe_v5(&mut sub, "rh1/#", options, 4).await;
    let got = receive_until_quiet(&mut sub, QUIET).await;
    assert_eq!(
        topics_and_payloads(&got),
        [pair("rh1/t", b"r")],
        "new again after UNSUBSCRIBE"
    );
}

/// [MQTT-3.3.1-11] "If Retain Handling is set to 2, the Server MUST NOT send the retained
/// messages"; live messages still flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_11_retain_handling_2_never_sends_retained() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "rh2/t", b"r", QoS::AtLeastOnce, true, 1).await;
    let mut sub = client(&broker, V5, "sub").await;
    let options = SubscriptionOptions {
        retain_handling: 2,
        ..opts(QoS::AtLeastOnce)
    };
    subscribe_v5(&mut sub, "rh2/#", options, 1).await;
    expect_no_publish(&mut sub, "Retain Handling 2").await;
    publish(&mut publisher, "rh2/t", b"live", QoS::AtLeastOnce, true, 2).await;
    let got = receive_n(&mut sub, 1).await;
    assert_eq!(&got[0].payload[..], b"live");
    assert!(!got[0].retain);
}

/// [MQTT-3.3.2-5] "If the Message Expiry Interval has passed and the Server has not managed to
/// start onward delivery to a matching subscriber, then it MUST delete the copy of the message
/// for that subscriber" — retained messages included (§3.3.2.3.3); a retained message that has
/// not expired is sent with its remaining interval [MQTT-3.3.2-6].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_5_expired_retained_message_not_delivered() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    let expiring = Properties {
        message_expiry_interval: Some(1),
        ..Properties::default()
    };
    let lasting = Properties {
        message_expiry_interval: Some(60),
        ..Properties::default()
    };
    let short = publish_with(
        "exp/short",
        b"short",
        QoS::AtLeastOnce,
        true,
        Some(1),
        expiring,
    );
    publish_full(&mut publisher, short).await;
    let long = publish_with(
        "exp/long",
        b"long",
        QoS::AtLeastOnce,
        true,
        Some(2),
        lasting,
    );
    publish_full(&mut publisher, long).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;

    for version in [V5, V3] {
        let got = retained_for(
            &broker,
            version,
            &format!("sub{version:?}"),
            "exp/#",
            QoS::AtLeastOnce,
        )
        .await;
        assert_eq!(
            topics_and_payloads(&got),
            [pair("exp/long", b"long")],
            "{version:?}"
        );
        if version.is_v5() {
            let left = got[0]
                .properties
                .message_expiry_interval
                .expect("expiry forwarded");
            assert!(
                left <= 58,
                "[MQTT-3.3.2-6] interval {left} not reduced by the 2 s waited"
            );
        }
    }
}

/// §3.3.1.3: "When a new Non-shared Subscription is made, the last retained message, if any,
/// on each matching topic name is sent to the Client" — a Shared Subscription is not sent
/// retained messages when it is made (§4.8.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_1_3_retained_messages_not_sent_for_shared_subscription() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(&mut publisher, "shret/t", b"r", QoS::AtLeastOnce, true, 1).await;
    let mut member = client(&broker, V5, "member").await;
    subscribe_v5(&mut member, "$share/g/shret/#", opts(QoS::AtLeastOnce), 1).await;
    expect_no_publish(
        &mut member,
        "retained message sent for a shared subscription",
    )
    .await;
    // The same client subscribing without $share gets it.
    subscribe_v5(&mut member, "shret/#", opts(QoS::AtLeastOnce), 2).await;
    let got = receive_until_quiet(&mut member, QUIET).await;
    assert_eq!(topics_and_payloads(&got), [pair("shret/t", b"r")]);
}

/// [MQTT-3.2.2-14] "A Client receiving Retain Available set to 0 from the Server MUST NOT send
/// a PUBLISH packet with the RETAIN flag set to 1": the server closes with DISCONNECT 0x9A
/// Retain not supported (§3.2.2.3.5) and does not store or deliver the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_14_retain_not_supported_disconnect_0x9a() {
    let broker = TestBroker::start_with(|c| c.broker.retain_available = false).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("noret/t", QoS::AtLeastOnce, 1).await;
    let (mut publisher, connack) =
        connect_with(&broker, V5, "pub", true, Properties::default()).await;
    assert_eq!(connack.properties.retain_available, Some(0));
    let packet = hayate_testkit::publish_packet("noret/t", b"r", QoS::AtLeastOnce, true, Some(1));
    send_publish(&mut publisher, packet).await;
    expect_server_disconnect(
        &mut publisher,
        hayate_codec::ReasonCode::RETAIN_NOT_SUPPORTED,
    )
    .await;
    expect_no_publish(&mut sub, "refused retained PUBLISH delivered").await;
    let got = retained_for(&broker, V5, "late", "noret/#", QoS::AtLeastOnce).await;
    assert!(got.is_empty(), "stored: {got:?}");
}
