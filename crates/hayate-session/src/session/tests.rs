// Tests pick an arbitrary starting instant; the code under test never reads the clock itself.
#![allow(clippy::disallowed_methods)]

use super::*;
use crate::message::Message;
use bytes::{Bytes, BytesMut};
use hayate_codec::decode;
use std::sync::Arc;

pub(super) fn params(version: ProtocolVersion, receive_maximum: u16) -> ConnectionParams {
    ConnectionParams {
        version,
        client_receive_maximum: receive_maximum,
        client_maximum_packet_size: u32::MAX,
        client_topic_alias_maximum: 0,
        server_receive_maximum: 10,
        server_topic_alias_maximum: 10,
        assign_outbound_aliases: false,
    }
}

pub(super) fn delivery(topic: &str, qos: QoS) -> Delivery {
    let message = Message::new(
        ByteStr::from(topic),
        Bytes::from_static(b"payload"),
        qos,
        false,
        Properties::default(),
        None,
        None,
    );
    Delivery {
        message: Arc::new(message),
        qos,
        retain: false,
        subscription_ids: Vec::new(),
        shared_group: None,
        seq: 0,
        sent_as: None,
    }
}

pub(super) fn drain(session: &mut Session, version: ProtocolVersion, now: Instant) -> Vec<Packet> {
    let mut out = OutBuf::new();
    session.poll_transmit(now, &mut out);
    let mut bytes = BytesMut::from(&out.take_all()[..]);
    let mut packets = Vec::new();
    while let Some(p) = decode(&mut bytes, version, u32::MAX).expect("valid output") {
        packets.push(p);
    }
    assert!(bytes.is_empty());
    packets
}

pub(super) fn publish_ids(packets: &[Packet]) -> Vec<(u16, bool)> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some((p.packet_id.map_or(0, |id| id.get()), p.dup)),
            _ => None,
        })
        .collect()
}

/// [MQTT-3.3.4-9] never more unacknowledged QoS 1/2 PUBLISHes than the client's Receive Maximum.
#[test]
fn mqtt_3_3_4_9_outbound_window_respects_receive_maximum() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 2));
    for _ in 0..5 {
        session.enqueue(delivery("a", QoS::AtLeastOnce));
    }
    let sent = drain(&mut session, ProtocolVersion::V5, now);
    assert_eq!(publish_ids(&sent), vec![(1, false), (2, false)]);
    assert!(drain(&mut session, ProtocolVersion::V5, now).is_empty());
    assert!(session.handle_puback(PacketId::new(1).unwrap()));
    let sent = drain(&mut session, ProtocolVersion::V5, now);
    assert_eq!(publish_ids(&sent), vec![(3, false)]);
}

/// [MQTT-4.4.0-1] unacknowledged messages are sent again, with DUP, on the next connection.
#[test]
fn mqtt_4_4_0_1_resend_with_dup_after_reconnect() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V311, 10));
    session.enqueue(delivery("a", QoS::AtLeastOnce));
    session.enqueue(delivery("b", QoS::ExactlyOnce));
    assert_eq!(drain(&mut session, ProtocolVersion::V311, now).len(), 2);
    session.detach();
    session.attach(params(ProtocolVersion::V311, 10));
    let sent = drain(&mut session, ProtocolVersion::V311, now);
    assert_eq!(publish_ids(&sent), vec![(1, true), (2, true)]);
}

/// [MQTT-4.3.3-10] a QoS 2 retransmission is acknowledged but not routed twice.
#[test]
fn mqtt_4_3_3_10_qos2_duplicate_not_routed_twice() {
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 10));
    let mut publish = Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        retain: false,
        topic: ByteStr::from("t"),
        packet_id: PacketId::new(7),
        properties: Properties::default(),
        payload: Bytes::new(),
    };
    assert_eq!(
        session.handle_inbound_publish(&mut publish.clone()),
        Ok(InboundPublish::Route)
    );
    publish.dup = true;
    assert_eq!(
        session.handle_inbound_publish(&mut publish),
        Ok(InboundPublish::DuplicateQos2)
    );
    assert!(session.handle_pubrel(PacketId::new(7).unwrap()));
    assert!(!session.handle_pubrel(PacketId::new(7).unwrap()));
}

/// [MQTT-3.3.4-7] inbound: more QoS 2 in flight than the server's Receive Maximum is an error.
#[test]
fn mqtt_3_3_4_7_inbound_receive_maximum_exceeded() {
    let mut session = Session::new(SessionLimits::default());
    let mut p = params(ProtocolVersion::V5, 10);
    p.server_receive_maximum = 2;
    session.attach(p);
    for id in 1..=3u16 {
        let mut publish = Publish {
            dup: false,
            qos: QoS::ExactlyOnce,
            retain: false,
            topic: ByteStr::from("t"),
            packet_id: PacketId::new(id),
            properties: Properties::default(),
            payload: Bytes::new(),
        };
        let result = session.handle_inbound_publish(&mut publish);
        if id <= 2 {
            assert_eq!(result, Ok(InboundPublish::Route));
        } else {
            assert_eq!(result, Err(SessionError::ReceiveMaximumExceeded));
        }
    }
}

/// [MQTT-3.3.2-9] [MQTT-3.3.2-8] inbound topic aliases: mapping, zero, and out of range.
#[test]
fn mqtt_3_3_2_9_topic_alias_rules() {
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 10));
    let mut publish = Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: ByteStr::from("long/topic"),
        packet_id: None,
        properties: Properties {
            topic_alias: Some(3),
            ..Properties::default()
        },
        payload: Bytes::new(),
    };
    assert_eq!(
        session.handle_inbound_publish(&mut publish),
        Ok(InboundPublish::Route)
    );
    let mut aliased = Publish {
        topic: ByteStr::default(),
        ..publish.clone()
    };
    aliased.properties.topic_alias = Some(3);
    assert_eq!(
        session.handle_inbound_publish(&mut aliased),
        Ok(InboundPublish::Route)
    );
    assert_eq!(aliased.topic.as_str(), "long/topic");
    let mut unknown = Publish {
        topic: ByteStr::default(),
        ..publish.clone()
    };
    unknown.properties.topic_alias = Some(4);
    assert_eq!(
        session.handle_inbound_publish(&mut unknown),
        Err(SessionError::UnknownTopicAlias)
    );
    let mut too_big = publish.clone();
    too_big.properties.topic_alias = Some(11);
    assert_eq!(
        session.handle_inbound_publish(&mut too_big),
        Err(SessionError::TopicAliasInvalid)
    );
}

#[test]
fn queue_limit_drops_and_offline_qos0_is_not_queued() {
    let limits = SessionLimits {
        max_queued_messages: 2,
        ..SessionLimits::default()
    };
    let mut session = Session::new(limits);
    assert_eq!(
        session.enqueue(delivery("a", QoS::AtMostOnce)),
        EnqueueOutcome::DroppedOffline
    );
    assert_eq!(
        session.enqueue(delivery("a", QoS::AtLeastOnce)),
        EnqueueOutcome::Queued { wake: false }
    );
    session.enqueue(delivery("a", QoS::AtLeastOnce));
    assert_eq!(
        session.enqueue(delivery("a", QoS::AtLeastOnce)),
        EnqueueOutcome::DroppedQueueFull
    );
}

/// [MQTT-3.1.2-25] a message larger than the client's Maximum Packet Size is dropped for it.
#[test]
fn mqtt_3_1_2_25_too_large_for_client_is_dropped() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    let mut p = params(ProtocolVersion::V5, 10);
    p.client_maximum_packet_size = 10;
    session.attach(p);
    session.enqueue(delivery("a/long/topic", QoS::AtLeastOnce));
    let mut out = OutBuf::new();
    let report = session.poll_transmit(now, &mut out);
    assert_eq!(report.too_large, 1);
    assert!(out.is_empty());
    assert_eq!(session.inflight_len(), 0);
}

/// QoS 2 outbound: PUBREC settles the message and PUBREL follows; PUBCOMP frees the slot.
#[test]
fn qos2_outbound_flow() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 10));
    session.enqueue(delivery("a", QoS::ExactlyOnce));
    drain(&mut session, ProtocolVersion::V5, now);
    let id = PacketId::new(1).unwrap();
    assert!(session.handle_pubrec(id, ReasonCode::SUCCESS));
    let sent = drain(&mut session, ProtocolVersion::V5, now);
    assert!(matches!(&sent[..], [Packet::PubRel(r)] if r.packet_id == id));
    assert!(session.handle_pubcomp(id));
    assert_eq!(session.inflight_len(), 0);
}

/// The broker-wide budget: sessions sharing it are refused once the sum is used up, get their
/// charge back as messages are delivered and acknowledged, and return everything when dropped.
#[test]
fn shared_budget_is_charged_released_and_enforced_across_sessions() {
    let now = Instant::now();
    let per_delivery = "a".len() + b"payload".len() + DELIVERY_OVERHEAD_BYTES;
    let budget = Arc::new(MemoryBudget::new(per_delivery * 3));
    let limits = SessionLimits {
        budget: Some(budget.clone()),
        ..SessionLimits::default()
    };
    let mut first = Session::new(limits.clone());
    let mut second = Session::new(limits);
    first.attach(params(ProtocolVersion::V5, 10));
    second.attach(params(ProtocolVersion::V5, 10));
    assert!(matches!(
        first.enqueue(delivery("a", QoS::AtLeastOnce)),
        EnqueueOutcome::Queued { .. }
    ));
    assert!(matches!(
        first.enqueue(delivery("a", QoS::AtMostOnce)),
        EnqueueOutcome::Queued { .. }
    ));
    assert!(matches!(
        second.enqueue(delivery("a", QoS::AtLeastOnce)),
        EnqueueOutcome::Queued { .. }
    ));
    assert_eq!(budget.held(), per_delivery * 3);
    assert_eq!(
        second.enqueue(delivery("a", QoS::AtMostOnce)),
        EnqueueOutcome::DroppedBudget
    );
    assert_eq!(budget.refused(), 1);

    // QoS 0 leaves the queue when written; QoS 1 stays charged until PUBACK.
    let packets = drain(&mut first, ProtocolVersion::V5, now);
    assert_eq!(publish_ids(&packets).len(), 2);
    assert_eq!(budget.held(), per_delivery * 2);
    let id = publish_ids(&packets)
        .into_iter()
        .find(|(id, _)| *id != 0)
        .expect("one QoS 1 publish")
        .0;
    assert!(first.handle_puback(PacketId::new(id).expect("non-zero")));
    assert_eq!(budget.held(), per_delivery);
    assert!(matches!(
        first.enqueue(delivery("a", QoS::AtMostOnce)),
        EnqueueOutcome::Queued { .. }
    ));

    drop(second);
    drop(first);
    assert_eq!(budget.held(), 0);
}

/// Past half of the broker-wide budget, a session holding 64 KiB or more counts as congested
/// (its publishers pause), even though its own limits are far away.
#[test]
fn budget_pressure_makes_large_holders_congested() {
    let budget = Arc::new(MemoryBudget::new(200 * 1024));
    let mut session = Session::new(SessionLimits {
        budget: Some(budget.clone()),
        ..SessionLimits::default()
    });
    session.attach(params(ProtocolVersion::V5, 10));
    let big = |len: usize| {
        let message = Message::new(
            ByteStr::from("t"),
            Bytes::from(vec![0u8; len]),
            QoS::AtMostOnce,
            false,
            Properties::default(),
            None,
            None,
        );
        Delivery {
            message: Arc::new(message),
            qos: QoS::AtMostOnce,
            retain: false,
            subscription_ids: Vec::new(),
            shared_group: None,
            seq: 0,
            sent_as: None,
        }
    };
    session.enqueue(big(60 * 1024));
    assert!(!session.is_congested(), "below half of the budget");
    session.enqueue(big(50 * 1024));
    assert!(budget.is_under_pressure());
    assert!(session.is_congested());
}

fn message_with(topic: &str, payload: &[u8], qos: QoS, expires_at: Option<Instant>) -> Delivery {
    let message = Message::new(
        ByteStr::from(topic),
        Bytes::copy_from_slice(payload),
        qos,
        false,
        Default::default(),
        expires_at,
        None,
    );
    Delivery {
        message: Arc::new(message),
        qos,
        retain: false,
        subscription_ids: Vec::new(),
        shared_group: None,
        seq: 0,
        sent_as: None,
    }
}

/// Fuzz finding 1 (`session_model`, fuzz/artifacts/session_model/known1-*): a QoS 0 message
/// at the front of the queue needs no in-flight slot, so a full window must not hide it.
#[test]
fn fuzz_1_qos0_behind_a_full_window_still_wants_transmit() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 1));
    session.enqueue(delivery("a", QoS::AtLeastOnce));
    assert_eq!(
        publish_ids(&drain(&mut session, ProtocolVersion::V5, now)).len(),
        1
    );
    session.enqueue(delivery("b", QoS::AtMostOnce));
    assert!(session.wants_transmit(), "the QoS 0 message can go out now");
    let packets = drain(&mut session, ProtocolVersion::V5, now);
    assert_eq!(publish_ids(&packets), vec![(0, false)]);
}

/// Fuzz finding 2 (`known2-*`): a message that fits the client's Maximum Packet Size with its
/// full topic is sent that way when a topic alias would make it too large.
#[test]
fn fuzz_2_alias_that_would_overflow_the_maximum_packet_size_is_left_out() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    let mut p = params(ProtocolVersion::V5, 10);
    p.client_topic_alias_maximum = 10;
    p.assign_outbound_aliases = true;
    // QoS 0, topic "abcd", 10-byte payload: 19 bytes without an alias, 22 with a new one.
    p.client_maximum_packet_size = 19;
    session.attach(p);
    session.enqueue(message_with("abcd", &[7; 10], QoS::AtMostOnce, None));
    let mut out = OutBuf::new();
    let report = session.poll_transmit(now, &mut out);
    assert_eq!((report.published, report.too_large), (1, 0));
    let mut bytes = BytesMut::from(&out.take_all()[..]);
    assert_eq!(bytes.len(), 19);
    match decode(&mut bytes, ProtocolVersion::V5, u32::MAX).expect("valid") {
        Some(Packet::Publish(publish)) => {
            assert_eq!(&publish.topic[..], "abcd");
            assert_eq!(publish.properties.topic_alias, None);
        }
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

/// Fuzz finding 3 (`known3-*`): a message given up while resending after a re-attach (too
/// large for the new connection's Maximum Packet Size) is counted.
#[test]
fn fuzz_3_resend_dropped_as_too_large_is_counted() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.attach(params(ProtocolVersion::V5, 10));
    session.enqueue(message_with("t", &[1; 100], QoS::AtLeastOnce, None));
    assert_eq!(
        publish_ids(&drain(&mut session, ProtocolVersion::V5, now)).len(),
        1
    );
    session.detach();
    let mut small = params(ProtocolVersion::V5, 10);
    small.client_maximum_packet_size = 20;
    session.attach(small);
    let mut out = OutBuf::new();
    let report = session.poll_transmit(now, &mut out);
    assert_eq!((report.published, report.too_large), (0, 1));
    assert_eq!(session.inflight_len(), 0);
}

/// Fuzz finding 4 (`known4-*`): a QoS 1/2 message sent but not acknowledged is sent again
/// (DUP) after a re-attach even if it expired meanwhile: its delivery had started
/// [MQTT-3.3.2-5] [MQTT-4.4.0-1].
#[test]
fn fuzz_4_started_delivery_is_resent_even_after_expiry() {
    let now = Instant::now();
    for qos in [QoS::AtLeastOnce, QoS::ExactlyOnce] {
        let mut session = Session::new(SessionLimits::default());
        session.attach(params(ProtocolVersion::V5, 10));
        let expires = now + std::time::Duration::from_secs(1);
        session.enqueue(message_with("t", b"x", qos, Some(expires)));
        let first = publish_ids(&drain(&mut session, ProtocolVersion::V5, now));
        assert_eq!(first.len(), 1);
        session.detach();
        session.attach(params(ProtocolVersion::V5, 10));
        let later = now + std::time::Duration::from_secs(5);
        let mut out = OutBuf::new();
        let report = session.poll_transmit(later, &mut out);
        assert_eq!((report.published, report.expired), (1, 0), "{qos:?}");
        assert_eq!(
            session.inflight_len(),
            1,
            "still awaiting its acknowledgement"
        );
    }
}

/// A session handed over between nodes of a cluster: what was in flight goes with the packet
/// ids it went out under, and the next node sends it again under them, with DUP
/// [MQTT-4.4.0-1]; an id already in flight there (a merged session) is not reused.
#[test]
fn mqtt_4_4_0_1_messages_in_flight_move_with_their_packet_ids() {
    let now = Instant::now();
    let mut old = Session::new(SessionLimits::default());
    old.attach(params(ProtocolVersion::V5, 10));
    for n in 0..4 {
        old.enqueue(delivery(&format!("t/{n}"), QoS::ExactlyOnce));
    }
    let sent = publish_ids(&drain(&mut old, ProtocolVersion::V5, now));
    assert_eq!(sent, vec![(1, false), (2, false), (3, false), (4, false)]);
    assert!(old.handle_pubrec(PacketId::new(1).unwrap(), ReasonCode::SUCCESS));
    assert!(old.handle_pubcomp(PacketId::new(1).unwrap()));
    old.enqueue(delivery("t/queued", QoS::ExactlyOnce));
    let handed = old.take_all_deliveries();
    let ids: Vec<Option<u16>> = handed
        .iter()
        .map(|d| d.sent_as.map(|id| id.get()))
        .collect();
    assert_eq!(ids, vec![Some(2), Some(3), Some(4), None]);

    // The next node's session has id 3 in flight for a message of its own already.
    let mut new = Session::new(SessionLimits::default());
    new.attach(params(ProtocolVersion::V5, 10));
    for _ in 0..3 {
        new.enqueue(delivery("t/own", QoS::AtMostOnce));
    }
    let mut own = delivery("t/own", QoS::AtLeastOnce);
    own.sent_as = PacketId::new(3);
    new.enqueue(own);
    assert_eq!(
        publish_ids(&drain(&mut new, ProtocolVersion::V5, now)),
        vec![(0, false), (0, false), (0, false), (3, true)]
    );
    for delivery in handed {
        new.enqueue(delivery);
    }
    let resent = publish_ids(&drain(&mut new, ProtocolVersion::V5, now));
    assert_eq!(resent[0], (2, true));
    assert_ne!(resent[1].0, 3, "3 is in flight: another id");
    assert!(resent[1].1, "still DUP");
    assert_eq!(resent[2], (4, true));
    assert!(!resent[3].1, "the queued one was never sent");
    assert!(![2, 3, 4].contains(&resent[3].0));
}
