//! Encodings of the control messages.

use super::*;
use hayate_codec::SubscriptionOptions;

fn as_publish(message: &Message) -> Publish {
    Publish {
        dup: false,
        qos: message.qos,
        retain: false,
        topic: message.topic.clone(),
        packet_id: PacketId::new(1),
        properties: message.properties.clone(),
        payload: message.payload.clone(),
    }
}

#[test]
fn no_session_is_told_apart_from_an_empty_one() {
    let now = Instant::now();
    let claim = Claim {
        client_id: "c".into(),
        clean_start: false,
        at: 77,
    };
    let none = decode_answer(&as_publish(&session_message(&claim, None, &[], now)), now).unwrap();
    assert!(none.handed.is_none());
    assert_eq!((none.client_id.as_str(), none.at), ("c", 77));
    let empty = session_message(&claim, Some(&HandedOver::default()), &[], now);
    let got = decode_answer(&as_publish(&empty), now).unwrap();
    let got = got.handed.expect("present");
    assert!(got.is_empty());
    assert!(
        !got.published,
        "a client that published nothing is not announced"
    );
    // A session made only to wait for a claim is answered as none.
    let waiting = HandedOver {
        unconfirmed: true,
        ..HandedOver::default()
    };
    let message = session_message(&claim, Some(&waiting), &[], now);
    let got = decode_answer(&as_publish(&message), now).unwrap();
    assert!(got.handed.is_none(), "not present");
}

#[test]
fn a_mark_and_a_relay_round_trip() {
    let mark = Mark {
        client_id: "c/+#".into(),
        old: "n1".into(),
        new: "n2".into(),
        at: 1_795_000_000_000_000_000,
    };
    let publish = mark.to_publish(PacketId::new(3).unwrap());
    assert_eq!(publish.qos, QoS::ExactlyOnce);
    assert_eq!(Mark::from_publish(&publish), Some(mark.clone()));
    assert_eq!(
        Mark::from_publish(&as_publish(&mark.to_message())),
        Some(mark)
    );

    let now = Instant::now();
    let message = Message::new(
        "o/1".into(),
        Bytes::from_static(b"p"),
        QoS::ExactlyOnce,
        false,
        Properties::default(),
        Some(now + Duration::from_secs(60)),
        None,
    );
    let delivery = Delivery {
        subscription_ids: vec![4],
        ..Delivery::new(Arc::new(message), QoS::AtLeastOnce, false)
    };
    let relay = as_publish(&relay_message("c/+#", &delivery, now));
    assert_eq!(relay.topic.as_str(), RELAY_TOPIC);
    let (client_id, deliveries) = decode_relay(&relay, now).unwrap();
    assert_eq!(client_id, "c/+#");
    assert_eq!(deliveries.len(), 1);
    let got = &deliveries[0];
    assert_eq!(
        got.qos,
        QoS::AtLeastOnce,
        "the subscriber's QoS, not the publisher's"
    );
    assert_eq!(got.subscription_ids, vec![4]);
    assert_eq!(got.message.payload.as_ref(), b"p");
    assert!(got.message.expires_at.is_some());
}

#[test]
fn a_claim_round_trips() {
    let claim = Claim {
        client_id: "a/+/#".into(),
        clean_start: false,
        at: 1_234_567,
    };
    assert_eq!(Claim::from_publish(&claim.to_publish()), Some(claim));
}

#[test]
fn a_session_round_trips_with_options_ids_and_expiry() {
    let now = Instant::now();
    let options = SubscriptionOptions {
        qos: QoS::ExactlyOnce,
        no_local: true,
        retain_as_published: true,
        retain_handling: 2,
    };
    let message = Message::new(
        "t/1".into(),
        Bytes::from_static(b"p"),
        QoS::AtLeastOnce,
        false,
        Properties::default(),
        Some(now + Duration::from_secs(30)),
        Some(7),
    );
    let delivery = Delivery {
        subscription_ids: vec![9],
        sent_as: PacketId::new(4_321),
        ..Delivery::new(Arc::new(message), QoS::AtLeastOnce, false)
    };
    let fresh = Delivery::new(
        Arc::new(Message::new(
            "t/2".into(),
            Bytes::from_static(b"q"),
            QoS::AtLeastOnce,
            false,
            Properties::default(),
            None,
            Some(7),
        )),
        QoS::AtLeastOnce,
        false,
    );
    let handed = HandedOver {
        subscriptions: vec![(
            "t/+".into(),
            SubscriptionRecord {
                options,
                subscription_id: Some(9),
            },
        )],
        deliveries: vec![delivery, fresh],
        inbound_qos2: vec![3, 9],
        released: vec![12, 4],
        relaying_for: vec![Arc::from("n3"), Arc::from("n2")],
        published: true,
        unconfirmed: false,
    };
    let claim = Claim {
        client_id: "c1".into(),
        clean_start: false,
        at: 5,
    };
    let upstream = [
        (Arc::from("n 1"), 1_795_000_000_000_000_001),
        (Arc::from("n4"), 8),
    ];
    let message = session_message(&claim, Some(&handed), &upstream, now);
    assert_eq!(message.topic.as_str(), SESSION_TOPIC);
    let answer = decode_answer(&as_publish(&message), now).expect("decodes");
    assert_eq!(answer.client_id, "c1");
    assert_eq!(answer.upstream_marks, upstream);
    let back = answer.handed.expect("present");
    assert_eq!(back.subscriptions.len(), 1);
    assert_eq!(&*back.subscriptions[0].0, "t/+");
    assert_eq!(back.subscriptions[0].1.options, options);
    assert_eq!(back.subscriptions[0].1.subscription_id, Some(9));
    let d = &back.deliveries[0];
    assert_eq!(d.message.topic.as_str(), "t/1");
    assert_eq!(d.qos, QoS::AtLeastOnce);
    assert_eq!(d.sent_as, PacketId::new(4_321), "sent again under its id");
    assert_eq!(d.subscription_ids, vec![9]);
    assert_eq!(back.deliveries[1].message.topic.as_str(), "t/2");
    assert_eq!(
        back.deliveries[1].sent_as, None,
        "never sent: no DUP, no id"
    );
    assert_eq!(back.inbound_qos2, vec![3, 9]);
    assert_eq!(back.released, vec![12, 4], "in send order");
    assert_eq!(
        back.relaying_for,
        vec![Arc::<str>::from("n3"), Arc::from("n2")]
    );
    assert!(
        back.published,
        "the client published through the answering node"
    );
    let left = d.message.expires_at.unwrap().duration_since(now);
    assert!(left <= Duration::from_secs(30) && left >= Duration::from_secs(28));
}

#[test]
fn a_relay_end_names_its_client_node_and_claim() {
    let message = relay_end_message("c/+#", "n3", 42);
    assert_eq!(message.topic.as_str(), RELAY_END_TOPIC);
    assert_eq!(
        message.qos,
        QoS::AtLeastOnce,
        "as the relayed copies it follows"
    );
    let back = decode_relay_end(&as_publish(&message)).expect("decodes");
    assert_eq!(back, (Arc::from("c/+#"), Arc::from("n3"), 42));
}

#[test]
fn a_take_over_notice_names_its_take_over() {
    let mark = Mark {
        client_id: "c".into(),
        old: "n2".into(),
        new: "n3".into(),
        at: 42,
    };
    for (topic, qos) in [
        (HANDED_OVER_TOPIC, QoS::ExactlyOnce),
        (TAKEN_OVER_TOPIC, QoS::AtLeastOnce),
    ] {
        let message = mark.to_notice(topic, qos);
        assert_eq!(message.topic.as_str(), topic);
        assert_eq!(message.qos, qos);
        assert_eq!(
            Mark::from_publish(&as_publish(&message)),
            Some(mark.clone())
        );
    }
}
