//! MQTT 5.0 PUBLISH properties and subscription options (§3.3.2.3, §3.8.2–3.8.3), PUBACK
//! reason codes (§3.4.2.1), topic aliases (§3.3.2.3.4).

use crate::common::*;
use bytes::Bytes;
use hayate_codec::{Packet, Properties, Publish, QoS, ReasonCode, SubscriptionOptions};
use hayate_testkit::{connect_packet, publish_packet, RawClient, TestBroker};
use std::time::Duration;

/// Publishes `properties` on `topic` at QoS 1 from a v5 client and returns what a v5
/// subscriber receives.
async fn forwarded(topic: &str, properties: Properties) -> Publish {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe(topic, QoS::AtLeastOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    let packet = publish_with(
        topic,
        b"payload",
        QoS::AtLeastOnce,
        false,
        Some(1),
        properties,
    );
    assert_eq!(
        publish_full(&mut publisher, packet).await,
        ReasonCode::SUCCESS
    );
    let got = receive_n(&mut sub, 1).await.remove(0);
    expect_no_publish(&mut sub, "one message").await;
    got
}

/// [MQTT-3.3.2-4] "A Server MUST send the Payload Format Indicator unaltered to all
/// subscribers receiving the Application Message."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_4_payload_format_indicator_forwarded() {
    for indicator in [0u8, 1] {
        let props = Properties {
            payload_format_indicator: Some(indicator),
            ..Properties::default()
        };
        let got = forwarded("pfi/t", props).await;
        assert_eq!(got.properties.payload_format_indicator, Some(indicator));
    }
    let got = forwarded("pfi/none", Properties::default()).await;
    assert_eq!(
        got.properties.payload_format_indicator, None,
        "absent stays absent"
    );
}

/// [MQTT-3.3.2-20] "A Server MUST send the Content Type unaltered to all subscribers receiving
/// the Application Message."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_20_content_type_forwarded() {
    let props = Properties {
        content_type: Some("application/json; charset=\u{e9}".into()),
        ..Properties::default()
    };
    let got = forwarded("ct/t", props).await;
    assert_eq!(
        got.properties.content_type.as_deref(),
        Some("application/json; charset=\u{e9}")
    );
}

/// [MQTT-3.3.2-15] "The Server MUST send the Response Topic unaltered to all subscribers
/// receiving the Application Message"; [MQTT-3.3.2-16] "The Server MUST send the Correlation
/// Data unaltered to all subscribers receiving the Application Message."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_15_response_topic_and_correlation_data_forwarded() {
    let correlation = Bytes::from_static(&[0, 1, 2, 0xFF, 0xFE, 0]);
    let props = Properties {
        response_topic: Some("reply/to/me".into()),
        correlation_data: Some(correlation.clone()),
        ..Properties::default()
    };
    let got = forwarded("rr/t", props).await;
    assert_eq!(
        got.properties.response_topic.as_deref(),
        Some("reply/to/me")
    );
    assert_eq!(got.properties.correlation_data, Some(correlation));
}

/// [MQTT-3.3.2-17] "The Server MUST send all User Properties unaltered in a PUBLISH packet when
/// forwarding the Application Message to a Client"; [MQTT-3.3.2-18] "The Server MUST maintain
/// the order of User Properties when forwarding the Application Message" (names may repeat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_17_user_properties_forwarded_in_order() {
    let pairs = [
        ("z", "1"),
        ("a", "2"),
        ("z", "3"),
        ("k", ""),
        ("", "empty name"),
        ("a", "2"),
    ];
    let props = Properties {
        user_properties: pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        ..Properties::default()
    };
    let got = forwarded("up/t", props.clone()).await;
    assert_eq!(got.properties.user_properties, props.user_properties);
}

/// All forwarded properties together, with a 3.1.1 subscriber too: the v5 subscriber gets
/// them unaltered ([MQTT-3.3.2-4], -15, -16, -17, -18, -20); the 3.1.1 subscriber gets the
/// message (which has no properties on the wire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_17_properties_forwarded_together_and_to_v3_subscribers() {
    let broker = TestBroker::start().await;
    let mut v5 = client(&broker, V5, "v5").await;
    v5.subscribe("all/t", QoS::ExactlyOnce, 1).await;
    let mut v3 = client(&broker, V3, "v3").await;
    v3.subscribe("all/t", QoS::ExactlyOnce, 1).await;
    let props = Properties {
        payload_format_indicator: Some(1),
        content_type: Some("text/plain".into()),
        response_topic: Some("all/reply".into()),
        correlation_data: Some(Bytes::from_static(b"corr")),
        user_properties: vec![("b".into(), "1".into()), ("a".into(), "2".into())],
        ..Properties::default()
    };
    let mut publisher = client(&broker, V5, "pub").await;
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        let id = (qos != QoS::AtMostOnce).then_some(qos as u16);
        let packet = publish_with(
            "all/t",
            "h\u{e9}llo".as_bytes(),
            qos,
            false,
            id,
            props.clone(),
        );
        publish_full(&mut publisher, packet).await;
        let got = receive_n(&mut v5, 1).await.remove(0);
        assert_eq!(got.properties, props, "at {qos:?}");
        let got = receive_n(&mut v3, 1).await.remove(0);
        assert_eq!(&got.payload[..], "h\u{e9}llo".as_bytes());
        assert_eq!(got.qos, qos);
    }
}

/// [MQTT-3.3.2-6] "The PUBLISH packet sent to a Client by the Server MUST contain a Message
/// Expiry Interval set to the received value minus the time that the Application Message has
/// been waiting in the Server": a message queued for an offline session for 2 s arrives with a
/// smaller interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_6_message_expiry_interval_reduced_by_time_waited() {
    let broker = TestBroker::start().await;
    let persistent = Properties {
        session_expiry_interval: Some(300),
        ..Properties::default()
    };
    let (mut sub, _) = connect_with(&broker, V5, "sleeper", true, persistent.clone()).await;
    sub.subscribe("exp/t", QoS::AtLeastOnce, 1).await;
    disconnect(sub).await;

    let mut publisher = client(&broker, V5, "pub").await;
    let props = Properties {
        message_expiry_interval: Some(60),
        ..Properties::default()
    };
    publish_full(
        &mut publisher,
        publish_with("exp/t", b"aging", QoS::AtLeastOnce, false, Some(1), props),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let (mut sub, connack) = connect_with(&broker, V5, "sleeper", false, persistent).await;
    assert!(connack.session_present);
    let got = receive_n(&mut sub, 1).await.remove(0);
    assert_eq!(&got.payload[..], b"aging");
    let left = got
        .properties
        .message_expiry_interval
        .expect("Message Expiry Interval forwarded");
    assert!(
        left <= 58,
        "interval {left} not reduced by the 2 s the message waited"
    );
    assert!(
        left >= 50,
        "interval {left} reduced by far more than the time waited"
    );

    // A live delivery carries the interval too (at most the published value).
    let props = Properties {
        message_expiry_interval: Some(30),
        ..Properties::default()
    };
    publish_full(
        &mut publisher,
        publish_with("exp/t", b"fresh", QoS::AtLeastOnce, false, Some(2), props),
    )
    .await;
    let got = receive_n(&mut sub, 1).await.remove(0);
    let left = got
        .properties
        .message_expiry_interval
        .expect("Message Expiry Interval forwarded");
    assert!((1..=30).contains(&left), "interval {left}");
}

/// [MQTT-3.3.2-5] "If the Message Expiry Interval has passed and the Server has not managed to
/// start onward delivery to a matching subscriber, then it MUST delete the copy of the message
/// for that subscriber."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_5_expired_message_not_delivered() {
    let broker = TestBroker::start().await;
    let persistent = Properties {
        session_expiry_interval: Some(300),
        ..Properties::default()
    };
    let (mut sub, _) = connect_with(&broker, V5, "sleeper", true, persistent.clone()).await;
    sub.subscribe("gone/t", QoS::ExactlyOnce, 1).await;
    disconnect(sub).await;

    let mut publisher = client(&broker, V5, "pub").await;
    let short = Properties {
        message_expiry_interval: Some(1),
        ..Properties::default()
    };
    for (i, qos) in [QoS::AtLeastOnce, QoS::ExactlyOnce].into_iter().enumerate() {
        let packet = publish_with(
            "gone/t",
            b"expires",
            qos,
            false,
            Some(i as u16 + 1),
            short.clone(),
        );
        publish_full(&mut publisher, packet).await;
    }
    publish(
        &mut publisher,
        "gone/t",
        b"marker",
        QoS::AtLeastOnce,
        false,
        9,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let (mut sub, connack) = connect_with(&broker, V5, "sleeper", false, persistent).await;
    assert!(connack.session_present);
    let got = receive_until_quiet(&mut sub, QUIET).await;
    let payloads: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    assert_eq!(
        payloads,
        [&b"marker"[..]],
        "expired messages were delivered"
    );
}

/// [MQTT-3.3.4-3] "If the Client specified a Subscription Identifier for any of the overlapping
/// subscriptions the Server MUST send those Subscription Identifiers in the message which is
/// published as the result of the subscriptions"; none when the subscription had none
/// (§3.8.2.1.2); retained messages sent on subscribe carry it as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_3_subscription_identifier_sent_with_publish() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    publish(
        &mut publisher,
        "sid/retained",
        b"r",
        QoS::AtLeastOnce,
        true,
        1,
    )
    .await;
    let mut with_id = client(&broker, V5, "with").await;
    subscribe_with_id(
        &mut with_id,
        "sid/#",
        opts(QoS::AtLeastOnce),
        268_435_455,
        1,
    )
    .await;
    let got = receive_n(&mut with_id, 1).await.remove(0);
    assert!(got.retain);
    assert_eq!(
        got.properties.subscription_identifiers,
        vec![268_435_455],
        "retained message"
    );

    let mut without = client(&broker, V5, "without").await;
    without.subscribe("sid/#", QoS::AtLeastOnce, 1).await;
    receive_n(&mut without, 1).await;

    publish(&mut publisher, "sid/live", b"l", QoS::AtLeastOnce, false, 2).await;
    let got = receive_n(&mut with_id, 1).await.remove(0);
    assert_eq!(got.properties.subscription_identifiers, vec![268_435_455]);
    let got = receive_n(&mut without, 1).await.remove(0);
    assert!(
        got.properties.subscription_identifiers.is_empty(),
        "{got:?}"
    );

    // Re-subscribing replaces the identifier (the subscription is replaced [MQTT-3.8.4-3]).
    subscribe_with_id(&mut with_id, "sid/#", opts(QoS::AtLeastOnce), 7, 2).await;
    receive_n(&mut with_id, 1).await; // the retained message again
    publish(&mut publisher, "sid/live", b"l", QoS::AtLeastOnce, false, 3).await;
    let got = receive_n(&mut with_id, 1).await.remove(0);
    assert_eq!(got.properties.subscription_identifiers, vec![7]);
}

/// [MQTT-3.8.3-3] "If the value [of No Local] is 1, Application Messages MUST NOT be forwarded
/// to a connection with a ClientID equal to the ClientID of the publishing connection."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_8_3_3_no_local_own_publishes_not_echoed() {
    let broker = TestBroker::start().await;
    let mut me = client(&broker, V5, "me").await;
    let no_local = SubscriptionOptions {
        no_local: true,
        ..opts(QoS::AtLeastOnce)
    };
    me.subscribe_with("nl/t", no_local, Properties::default(), 1)
        .await;
    let mut other = client(&broker, V5, "other").await;
    other.subscribe("nl/t", QoS::AtLeastOnce, 1).await;

    publish(&mut me, "nl/t", b"mine", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(receive_n(&mut other, 1).await[0].payload, &b"mine"[..]);
    expect_no_publish(&mut me, "No Local echoed the client's own message").await;

    publish(&mut other, "nl/t", b"theirs", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(receive_n(&mut me, 1).await[0].payload, &b"theirs"[..]);
    receive_n(&mut other, 1).await;

    // Without No Local the client's own messages come back.
    let mut echo = client(&broker, V5, "echo").await;
    echo.subscribe("nl/t", QoS::AtLeastOnce, 1).await;
    publish(&mut echo, "nl/t", b"echo", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(receive_n(&mut echo, 1).await[0].payload, &b"echo"[..]);
}

/// §3.3.2.3.4: a PUBLISH with a Topic Name and a Topic Alias sets the mapping; a later PUBLISH
/// with an empty Topic Name and that alias uses it; [MQTT-3.3.2-12] "A Server MUST accept all
/// Topic Alias values greater than 0 and less than or equal to the Topic Alias Maximum value
/// that it returned in the CONNACK packet"; a mapping can be changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_12_inbound_topic_alias_mapping_used() {
    let broker = TestBroker::start_with(|c| c.broker.topic_alias_maximum = 5).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("alias/#", QoS::AtLeastOnce, 1).await;
    let (mut publisher, connack) =
        connect_with(&broker, V5, "pub", true, Properties::default()).await;
    assert_eq!(connack.properties.topic_alias_maximum, Some(5));

    let with_alias = |topic: &str, alias: u16, payload: &[u8], id: u16| {
        let props = Properties {
            topic_alias: Some(alias),
            ..Properties::default()
        };
        publish_with(topic, payload, QoS::AtLeastOnce, false, Some(id), props)
    };
    publish_full(&mut publisher, with_alias("alias/one", 1, b"1", 1)).await;
    publish_full(&mut publisher, with_alias("", 1, b"2", 2)).await;
    publish_full(&mut publisher, with_alias("alias/five", 5, b"3", 3)).await;
    publish_full(&mut publisher, with_alias("", 5, b"4", 4)).await;
    publish_full(&mut publisher, with_alias("alias/remapped", 1, b"5", 5)).await;
    publish_full(&mut publisher, with_alias("", 1, b"6", 6)).await;
    // QoS 0 uses the mapping too.
    let props = Properties {
        topic_alias: Some(5),
        ..Properties::default()
    };
    send_publish(
        &mut publisher,
        publish_with("", b"7", QoS::AtMostOnce, false, None, props),
    )
    .await;
    sync(&mut publisher).await;

    let got: Vec<(String, Vec<u8>)> = receive_n(&mut sub, 7)
        .await
        .into_iter()
        .map(|p| {
            assert_eq!(
                p.properties.topic_alias, None,
                "no outbound aliases configured"
            );
            (p.topic.to_string(), p.payload.to_vec())
        })
        .collect();
    let expected = [
        ("alias/one", "1"),
        ("alias/one", "2"),
        ("alias/five", "3"),
        ("alias/five", "4"),
        ("alias/remapped", "5"),
        ("alias/remapped", "6"),
        ("alias/five", "7"),
    ];
    let expected: Vec<(String, Vec<u8>)> = expected
        .iter()
        .map(|(t, p)| (t.to_string(), p.as_bytes().to_vec()))
        .collect();
    assert_eq!(got, expected);
}

/// [MQTT-3.3.2-9] "A Client MUST NOT send a PUBLISH packet with a Topic Alias greater than the
/// Topic Alias Maximum value returned by the Server in the CONNACK packet" and [MQTT-3.3.2-8]
/// alias 0 is not allowed: the server closes with DISCONNECT 0x94 Topic Alias invalid (§4.13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_9_topic_alias_above_maximum_disconnect_0x94() {
    let broker = TestBroker::start_with(|c| c.broker.topic_alias_maximum = 5).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("bad/#", QoS::AtLeastOnce, 1).await;
    for (i, alias) in [6u16, u16::MAX, 0].into_iter().enumerate() {
        let mut publisher = client(&broker, V5, &format!("pub{i}")).await;
        let props = Properties {
            topic_alias: Some(alias),
            ..Properties::default()
        };
        let packet = publish_with("bad/alias", b"x", QoS::AtLeastOnce, false, Some(1), props);
        send_publish(&mut publisher, packet).await;
        if alias == 0 {
            // 0x94 is defined for aliases above the maximum; alias 0 may also be answered as a
            // plain Protocol Error.
            let reasons = [ReasonCode::TOPIC_ALIAS_INVALID, ReasonCode::PROTOCOL_ERROR];
            expect_server_disconnect_one_of(&mut publisher, &reasons).await;
        } else {
            expect_server_disconnect(&mut publisher, ReasonCode::TOPIC_ALIAS_INVALID).await;
        }
    }
    // With Topic Alias Maximum 0 announced, every alias is invalid [MQTT-3.2.2-18].
    let broker0 = TestBroker::start_with(|c| c.broker.topic_alias_maximum = 0).await;
    let (mut publisher, connack) =
        connect_with(&broker0, V5, "pub", true, Properties::default()).await;
    assert!(matches!(
        connack.properties.topic_alias_maximum,
        None | Some(0)
    ));
    let props = Properties {
        topic_alias: Some(1),
        ..Properties::default()
    };
    send_publish(
        &mut publisher,
        publish_with("bad/alias", b"x", QoS::AtMostOnce, false, None, props),
    )
    .await;
    expect_server_disconnect(&mut publisher, ReasonCode::TOPIC_ALIAS_INVALID).await;

    expect_no_publish(&mut sub, "a PUBLISH with an invalid alias was routed").await;
}

/// §3.3.2.3.4: "It is a Protocol Error if the Topic Name is zero length and there is no Topic
/// Alias", and an alias without a mapping on this connection cannot be used; mappings do not
/// carry over to a new connection [MQTT-3.3.2-7]. DISCONNECT 0x82 Protocol Error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_7_unknown_topic_alias_protocol_error() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    send_publish(
        &mut publisher,
        publish_packet("", b"x", QoS::AtLeastOnce, false, Some(1)),
    )
    .await;
    expect_server_disconnect(&mut publisher, ReasonCode::PROTOCOL_ERROR).await;

    let persistent = Properties {
        session_expiry_interval: Some(60),
        ..Properties::default()
    };
    let (mut publisher, _) = connect_with(&broker, V5, "pub2", true, persistent.clone()).await;
    let props = Properties {
        topic_alias: Some(1),
        ..Properties::default()
    };
    publish_full(
        &mut publisher,
        publish_with(
            "mapped/t",
            b"x",
            QoS::AtLeastOnce,
            false,
            Some(1),
            props.clone(),
        ),
    )
    .await;
    disconnect(publisher).await;
    let (mut publisher, _) = connect_with(&broker, V5, "pub2", false, persistent).await;
    send_publish(
        &mut publisher,
        publish_with("", b"x", QoS::AtLeastOnce, false, Some(2), props),
    )
    .await;
    expect_server_disconnect(&mut publisher, ReasonCode::PROTOCOL_ERROR).await;
}

/// §3.3.2.3.4 outbound: with `broker.assign_outbound_topic_aliases` and a client Topic Alias
/// Maximum > 0 the server may send a Topic Alias; the second message on the topic has an empty
/// Topic Name and that alias; [MQTT-3.3.2-11] "A Server MUST NOT send a PUBLISH packet with a
/// Topic Alias greater than the Topic Alias Maximum value sent by the Client in the CONNECT
/// packet"; [MQTT-3.1.2-27] none at all when the client sent none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_11_outbound_topic_aliases_within_client_maximum() {
    let broker = TestBroker::start_with(|c| c.broker.assign_outbound_topic_aliases = true).await;
    let accepts = Properties {
        topic_alias_maximum: Some(2),
        ..Properties::default()
    };
    let mut sub = client_v5(&broker, "sub", accepts).await;
    sub.subscribe("oa/#", QoS::AtLeastOnce, 1).await;
    let mut refuses = client(&broker, V5, "refuses").await;
    refuses.subscribe("oa/#", QoS::AtLeastOnce, 1).await;
    let mut v3 = client(&broker, V3, "v3").await;
    v3.subscribe("oa/#", QoS::AtLeastOnce, 1).await;

    let mut publisher = client(&broker, V5, "pub").await;
    let topics = ["oa/a", "oa/a", "oa/b", "oa/b", "oa/c", "oa/c", "oa/a"];
    for (i, topic) in topics.iter().enumerate() {
        publish(
            &mut publisher,
            topic,
            topic.as_bytes(),
            QoS::AtLeastOnce,
            false,
            i as u16 + 1,
        )
        .await;
    }

    let got = receive_n(&mut sub, topics.len()).await;
    let mut known: std::collections::HashMap<u16, String> = std::collections::HashMap::new();
    for (message, topic) in got.iter().zip(topics) {
        assert_eq!(&message.payload[..], topic.as_bytes());
        match message.properties.topic_alias {
            Some(alias) => {
                assert!(
                    (1..=2).contains(&alias),
                    "[MQTT-3.3.2-11] alias {alias} above 2"
                );
                if message.topic.is_empty() {
                    assert_eq!(
                        known.get(&alias).map(String::as_str),
                        Some(topic),
                        "alias {alias}"
                    );
                } else {
                    assert_eq!(message.topic.as_str(), topic);
                    known.insert(alias, topic.to_string());
                }
            }
            None => assert_eq!(message.topic.as_str(), topic, "no alias: full topic"),
        }
    }
    assert!(
        got[1].topic.is_empty() && got[1].properties.topic_alias == got[0].properties.topic_alias,
        "second message on oa/a not sent as empty topic + alias: {:?}",
        &got[..2]
    );
    for client in [&mut refuses, &mut v3] {
        for (message, topic) in receive_n(client, topics.len()).await.iter().zip(topics) {
            assert_eq!(message.topic.as_str(), topic);
            assert_eq!(message.properties.topic_alias, None, "[MQTT-3.1.2-27]");
        }
    }

    // With `assign_outbound_topic_aliases = false` the full topic is always sent.
    let broker = TestBroker::start_with(|c| c.broker.assign_outbound_topic_aliases = false).await;
    let accepts = Properties {
        topic_alias_maximum: Some(2),
        ..Properties::default()
    };
    let mut sub = client_v5(&broker, "sub", accepts).await;
    sub.subscribe("oa/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    for id in 1..=2 {
        publish(&mut publisher, "oa/a", b"x", QoS::AtLeastOnce, false, id).await;
    }
    for message in receive_n(&mut sub, 2).await {
        assert_eq!(message.topic.as_str(), "oa/a");
        assert_eq!(message.properties.topic_alias, None);
    }
}

/// Connects a v5 subscriber with CONNECT properties and subscribes it to `filter`.
async fn subscriber_with(
    broker: &TestBroker,
    id: &str,
    properties: Properties,
    filter: &str,
    qos: QoS,
) -> RawClient {
    let mut sub = client_v5(broker, id, properties).await;
    sub.subscribe(filter, qos, 1).await;
    sub
}

/// [MQTT-3.1.2-25] "Where a Packet is too large to send, the Server MUST discard it without
/// sending it and then behave as if it had completed sending that Application Message": a
/// message larger than the client's Maximum Packet Size is not sent to it, other subscribers
/// get it, and later messages still reach the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_25_message_over_client_maximum_packet_size_not_sent() {
    let broker = TestBroker::start().await;
    let small = Properties {
        maximum_packet_size: Some(128),
        ..Properties::default()
    };
    let mut limited = subscriber_with(&broker, "limited", small, "big/#", QoS::AtLeastOnce).await;
    let mut unlimited = client(&broker, V5, "unlimited").await;
    unlimited.subscribe("big/#", QoS::AtLeastOnce, 1).await;
    let mut v3 = client(&broker, V3, "v3").await;
    v3.subscribe("big/#", QoS::AtLeastOnce, 1).await;

    let mut publisher = client(&broker, V5, "pub").await;
    let big = payload_of(200);
    for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        publish(&mut publisher, "big/t", &big, qos, false, i as u16 + 1).await;
    }
    // Fits in 128 bytes on its own, but not with the user properties it carries.
    let props = Properties {
        user_properties: vec![("pad".into(), "p".repeat(100).into())],
        ..Properties::default()
    };
    let packet = publish_with(
        "big/props",
        b"small",
        QoS::AtLeastOnce,
        false,
        Some(7),
        props,
    );
    publish_full(&mut publisher, packet).await;
    publish(&mut publisher, "big/t", b"fits", QoS::AtLeastOnce, false, 8).await;

    let got = receive_until_quiet(&mut limited, QUIET).await;
    let payloads: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    assert_eq!(
        payloads,
        [&b"fits"[..]],
        "only the message that fits is sent"
    );
    for other in [&mut unlimited, &mut v3] {
        let got = receive_until_quiet(other, QUIET).await;
        assert_eq!(
            got.len(),
            5,
            "the other subscribers get every message: {got:?}"
        );
    }
}

/// [MQTT-3.4.2-1] the PUBACK Reason Code: 0x10 No matching subscribers when the message was
/// accepted but nobody subscribes (§3.4.2.1; PUBREC likewise §3.5.2.1), 0x00 otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_4_2_1_puback_no_matching_subscribers() {
    let broker = TestBroker::start().await;
    let mut publisher = client(&broker, V5, "pub").await;
    let code = publish(&mut publisher, "nobody/t", b"x", QoS::AtLeastOnce, false, 1).await;
    assert_eq!(code, ReasonCode::NO_MATCHING_SUBSCRIBERS);
    let code = publish(&mut publisher, "nobody/t", b"x", QoS::ExactlyOnce, false, 2).await;
    assert_eq!(code, ReasonCode::NO_MATCHING_SUBSCRIBERS, "PUBREC");

    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("nobody/#", QoS::AtMostOnce, 1).await;
    let code = publish(&mut publisher, "nobody/t", b"x", QoS::AtLeastOnce, false, 3).await;
    assert_eq!(code, ReasonCode::SUCCESS);
    let code = publish(&mut publisher, "nobody/t", b"x", QoS::ExactlyOnce, false, 4).await;
    assert_eq!(code, ReasonCode::SUCCESS);
}

/// Publish authorisation: v5 PUBACK/PUBREC 0x87 Not authorized (§3.4.2.1) and the message is
/// not delivered; [3.1.1: MQTT-3.3.5-2] "It MUST either make a positive acknowledgement,
/// according to the normal QoS rules, or close the Network Connection" — and not deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_4_2_1_unauthorised_publish_acknowledged_not_delivered() {
    let broker =
        TestBroker::start_with(|c| c.auth.deny_publish = vec!["test/nopublish".into()]).await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("test/#", QoS::ExactlyOnce, 1).await;

    let mut v5 = client(&broker, V5, "v5").await;
    assert_eq!(
        publish(&mut v5, "test/nopublish", b"x", QoS::AtLeastOnce, false, 1).await,
        ReasonCode::NOT_AUTHORIZED
    );
    assert_eq!(
        publish(&mut v5, "test/nopublish", b"x", QoS::ExactlyOnce, false, 2).await,
        ReasonCode::NOT_AUTHORIZED
    );
    // After a refused PUBREC the packet id is free: the same id carries a new message.
    assert_eq!(
        publish(&mut v5, "test/ok", b"v5 ok", QoS::ExactlyOnce, false, 2).await,
        ReasonCode::SUCCESS
    );
    publish(&mut v5, "test/nopublish", b"x", QoS::AtMostOnce, false, 0).await;

    let mut v3 = client(&broker, V3, "v3").await;
    for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        // `publish` completes the normal flow: PUBACK, or PUBREC/PUBREL/PUBCOMP.
        let code = publish(&mut v3, "test/nopublish", b"x", qos, false, i as u16 + 1).await;
        assert_eq!(code, ReasonCode::SUCCESS);
    }
    publish(&mut v3, "test/ok", b"v3 ok", QoS::AtLeastOnce, false, 9).await;

    let got = receive_until_quiet(&mut sub, QUIET).await;
    let topics: Vec<&str> = got.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["test/ok", "test/ok"],
        "denied publishes were delivered: {got:?}"
    );
}

/// §3.3.2.3.2: a receiver may check a payload declared UTF-8 (Payload Format Indicator 1) and
/// answer an invalid one with 0x99 Payload format invalid; the message is not delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_2_3_2_invalid_utf8_payload_refused_0x99() {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("pf/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = client(&broker, V5, "pub").await;
    let utf8 = Properties {
        payload_format_indicator: Some(1),
        ..Properties::default()
    };
    let bad: &[u8] = &[b'o', b'k', 0xFF, 0xFE, 0xC0, 0x80];
    for (i, qos) in [QoS::AtLeastOnce, QoS::ExactlyOnce].into_iter().enumerate() {
        let packet = publish_with("pf/t", bad, qos, false, Some(i as u16 + 1), utf8.clone());
        assert_eq!(
            publish_full(&mut publisher, packet).await,
            ReasonCode::PAYLOAD_FORMAT_INVALID
        );
    }
    // The same bytes without the indicator are fine, as is valid UTF-8 with it.
    let unspecified = publish_with(
        "pf/t",
        bad,
        QoS::AtLeastOnce,
        false,
        Some(3),
        Properties::default(),
    );
    assert_eq!(
        publish_full(&mut publisher, unspecified).await,
        ReasonCode::SUCCESS
    );
    let good = publish_with(
        "pf/t",
        "gr\u{fc}n".as_bytes(),
        QoS::AtLeastOnce,
        false,
        Some(4),
        utf8,
    );
    assert_eq!(
        publish_full(&mut publisher, good).await,
        ReasonCode::SUCCESS
    );

    let got = receive_until_quiet(&mut sub, QUIET).await;
    let payloads: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    assert_eq!(payloads, [bad, "gr\u{fc}n".as_bytes()]);
}

/// [MQTT-3.3.4-6] "A PUBLISH packet sent from a Client to a Server MUST NOT contain a
/// Subscription Identifier": the server treats it as a protocol error (DISCONNECT 0x82 or
/// 0x81) and does not forward the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_3_4_6_subscription_identifier_from_client_rejected() {
    let broker = TestBroker::start().await;
    let mut sub = client(&broker, V5, "sub").await;
    sub.subscribe("sidc/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = broker.raw(V5).await;
    publisher.connect(connect_packet(V5, "pub", true)).await;
    let props = Properties {
        subscription_identifiers: vec![5],
        ..Properties::default()
    };
    let packet = publish_with("sidc/t", b"x", QoS::AtLeastOnce, false, Some(1), props);
    publisher.send(Packet::Publish(packet)).await;
    let before = publisher.expect_closed().await;
    match before.as_slice() {
        [Packet::Disconnect(d)] => assert!(
            d.reason_code == ReasonCode::PROTOCOL_ERROR
                || d.reason_code == ReasonCode::MALFORMED_PACKET,
            "{d:?}"
        ),
        other => panic!("expected DISCONNECT then close, got {other:?}"),
    }
    expect_no_publish(
        &mut sub,
        "PUBLISH with a Subscription Identifier was routed",
    )
    .await;
}
