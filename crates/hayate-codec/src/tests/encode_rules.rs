//! Encoder rules: errors, short forms, version downgrades and the PUBLISH header path.

use super::*;
use ProtocolVersion::{V31, V311, V5};

fn publish(qos: QoS, packet_id: Option<PacketId>) -> Publish {
    Publish {
        dup: false,
        qos,
        retain: false,
        topic: s("a/b"),
        packet_id,
        properties: Properties::default(),
        payload: Bytes::from_static(b"payload"),
    }
}

#[test]
fn variable_int_boundaries() {
    for (value, len) in [
        (0, 1),
        (127, 1),
        (128, 2),
        (16_383, 2),
        (16_384, 3),
        (2_097_151, 3),
        (2_097_152, 4),
        (MAX_VARIABLE_INT, 4),
    ] {
        assert_eq!(variable_int_len(value), len, "{value}");
        let mut buf = BytesMut::new();
        write_variable_int(value, &mut buf);
        assert_eq!(buf.len(), len);
        assert_eq!(read_variable_int(&buf), Ok(Some((value, len))));
        assert_eq!(read_variable_int(&buf[..len - 1]), Ok(None));
    }
    // The examples of 1.5.5.
    let mut buf = BytesMut::new();
    write_variable_int(321, &mut buf);
    assert_eq!(&buf[..], &[0xC1, 0x02]);
    assert_eq!(
        read_variable_int(&[0xFF, 0xFF, 0xFF, 0x7F]),
        Ok(Some((MAX_VARIABLE_INT, 4)))
    );
    assert_eq!(read_variable_int(&[]), Ok(None));
}

#[test]
fn write_variable_int_clamps_unencodable_values() {
    let mut buf = BytesMut::new();
    write_variable_int(u32::MAX, &mut buf);
    assert_eq!(&buf[..], &[0xFF, 0xFF, 0xFF, 0x7F]);
    assert_eq!(variable_int_len(u32::MAX), 4);
}

#[test]
fn auth_before_v5_is_wrong_version() {
    let mut buf = BytesMut::new();
    for v in [V31, V311] {
        assert_eq!(
            encode(&Packet::Auth(Auth::default()), v, &mut buf),
            Err(EncodeError::WrongVersion)
        );
    }
    assert!(buf.is_empty());
}

#[test]
fn publish_packet_id_must_match_qos() {
    let mut buf = BytesMut::new();
    let bad = [
        publish(QoS::AtMostOnce, Some(id(1))),
        publish(QoS::AtLeastOnce, None),
    ];
    for p in bad {
        assert_eq!(
            encode(&Packet::Publish(p), V311, &mut buf),
            Err(EncodeError::PacketIdMismatch)
        );
    }
    assert!(buf.is_empty());
}

#[test]
fn fields_longer_than_65535_are_refused() {
    let long = "x".repeat(65_536);
    let mut buf = BytesMut::new();
    let mut p = publish(QoS::AtMostOnce, None);
    p.topic = ByteStr::from(long.as_str());
    assert_eq!(
        encode(&Packet::Publish(p), V311, &mut buf),
        Err(EncodeError::FieldTooLong)
    );
    let mut p = publish(QoS::AtMostOnce, None);
    p.properties
        .user_properties
        .push((s("k"), ByteStr::from(long.as_str())));
    assert_eq!(
        encode(&Packet::Publish(p.clone()), V5, &mut buf),
        Err(EncodeError::FieldTooLong)
    );
    // v3 ignores properties entirely.
    assert!(encode(&Packet::Publish(p), V311, &mut buf).is_ok());
    buf.clear();
    let sub = Subscribe {
        packet_id: id(1),
        filters: vec![(
            ByteStr::from(long),
            SubscriptionOptions::with_qos(QoS::AtMostOnce),
        )],
        properties: Properties::default(),
    };
    assert_eq!(
        encode(&Packet::Subscribe(sub), V5, &mut buf),
        Err(EncodeError::FieldTooLong)
    );
    assert!(buf.is_empty());
    // Exactly 65,535 is fine.
    let mut p = publish(QoS::AtMostOnce, None);
    p.topic = ByteStr::from("y".repeat(65_535));
    assert!(encode(&Packet::Publish(p), V311, &mut buf).is_ok());
}

#[test]
fn remaining_length_above_the_maximum_is_refused() {
    let mut buf = BytesMut::new();
    let props = Properties::default();
    let r = encode_publish_header(
        V311,
        false,
        QoS::AtMostOnce,
        false,
        b"t",
        None,
        &props,
        268_435_453,
        &mut buf,
    );
    assert_eq!(r, Err(EncodeError::PacketTooLarge));
    assert!(buf.is_empty());
    let r = encode_publish_header(
        V311,
        false,
        QoS::AtMostOnce,
        false,
        b"t",
        None,
        &props,
        268_435_452,
        &mut buf,
    );
    assert_eq!(r, Ok(()));
    assert_eq!(&buf[..], &[0x30, 0xFF, 0xFF, 0xFF, 0x7F, 0x00, 0x01, b't']);
}

#[test]
fn unencodable_values_are_refused() {
    let mut buf = BytesMut::new();
    let mut p = publish(QoS::AtMostOnce, None);
    p.properties.subscription_identifiers = vec![MAX_VARIABLE_INT + 1];
    assert_eq!(
        encode(&Packet::Publish(p), V5, &mut buf),
        Err(EncodeError::InvalidValue)
    );
    let options = SubscriptionOptions {
        retain_handling: 4,
        ..SubscriptionOptions::with_qos(QoS::AtMostOnce)
    };
    let sub = Subscribe {
        packet_id: id(1),
        filters: vec![(s("a"), options)],
        properties: Properties::default(),
    };
    assert_eq!(
        encode(&Packet::Subscribe(sub), V5, &mut buf),
        Err(EncodeError::InvalidValue)
    );
    assert!(buf.is_empty());
}

#[test]
fn v5_short_forms_are_emitted() {
    for p in [
        Packet::PubAck(PubResp::new(id(5))),
        Packet::PubRec(PubResp::new(id(5))),
        Packet::PubRel(PubResp::new(id(5))),
        Packet::PubComp(PubResp::new(id(5))),
    ] {
        assert_eq!(enc(&p, V5).len(), 4, "{p:?}");
    }
    assert_eq!(
        enc(&Packet::Disconnect(Disconnect::default()), V5),
        [0xE0, 0x00]
    );
    assert_eq!(enc(&Packet::Auth(Auth::default()), V5), [0xF0, 0x00]);
}

#[test]
fn v3_drops_properties_and_v5_reason_codes() {
    let props = Properties {
        reason_string: Some(s("why")),
        ..Properties::default()
    };
    let ack = PubResp {
        packet_id: id(5),
        reason_code: ReasonCode::QUOTA_EXCEEDED,
        properties: props.clone(),
    };
    assert_eq!(enc(&Packet::PubAck(ack), V311), [0x40, 0x02, 0x00, 0x05]);
    let d = Disconnect {
        reason_code: ReasonCode::SERVER_SHUTTING_DOWN,
        properties: props.clone(),
    };
    assert_eq!(enc(&Packet::Disconnect(d), V311), [0xE0, 0x00]);
    let u = UnsubAck {
        packet_id: id(5),
        reason_codes: vec![ReasonCode::SUCCESS],
        properties: props.clone(),
    };
    assert_eq!(enc(&Packet::UnsubAck(u), V311), [0xB0, 0x02, 0x00, 0x05]);
    let c = ConnAck {
        session_present: true,
        reason_code: ReasonCode(0),
        properties: props.clone(),
    };
    assert_eq!(
        enc(&Packet::ConnAck(c.clone()), V311),
        [0x20, 0x02, 0x01, 0x00]
    );
    assert_eq!(enc(&Packet::ConnAck(c), V31), [0x20, 0x02, 0x00, 0x00]);
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        no_local: true,
        retain_as_published: true,
        retain_handling: 2,
    };
    let sub = Subscribe {
        packet_id: id(5),
        filters: vec![(s("a"), options)],
        properties: props,
    };
    assert_eq!(
        enc(&Packet::Subscribe(sub), V311),
        [0x82, 0x06, 0x00, 0x05, 0x00, 0x01, b'a', 0x01]
    );
}

#[test]
fn connect_is_written_at_its_own_level() {
    let c = Connect {
        protocol: V31,
        clean_start: false,
        keep_alive: 0,
        client_id: s("c"),
        will: None,
        username: None,
        password: None,
        properties: Properties {
            session_expiry_interval: Some(1),
            ..Properties::default()
        },
        bridge: false,
    };
    let bytes = enc(&Packet::Connect(Box::new(c)), V5);
    assert_eq!(&bytes[2..11], b"\x00\x06MQIsdp\x03");
    assert_eq!(bytes.len(), 2 + 8 + 1 + 1 + 2 + 3);
}

#[test]
fn properties_are_written_in_a_fixed_order() {
    let props = Properties {
        user_properties: vec![(s("z"), s("1")), (s("a"), s("2"))],
        reason_string: Some(s("r")),
        ..Properties::default()
    };
    let ack = PubResp {
        packet_id: id(1),
        reason_code: ReasonCode(0x80),
        properties: props,
    };
    #[rustfmt::skip]
    let expected = [
        0x40, 22, 0x00, 0x01, 0x80, 18,
        0x1F, 0x00, 0x01, b'r',
        0x26, 0x00, 0x01, b'z', 0x00, 0x01, b'1',
        0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'2',
    ];
    let bytes = enc(&Packet::PubAck(ack.clone()), V5);
    assert_eq!(bytes, expected);
    assert_eq!(dec(&bytes, V5), Ok(Packet::PubAck(ack)));
}

#[test]
fn publish_header_then_shared_payload_equals_encode() {
    for v in [V31, V311, V5] {
        let mut p = publish(QoS::ExactlyOnce, Some(id(300)));
        p.dup = true;
        p.retain = true;
        if v.is_v5() {
            p.properties.subscription_identifiers = vec![1, 200_000];
            p.properties.content_type = Some(s("text/plain"));
        }
        let whole = enc(&Packet::Publish(p.clone()), v);
        let header_len = publish_header_len(v, p.topic.len(), true, &p.properties, p.payload.len());
        let mut buf = BytesMut::new();
        encode_publish_header(
            v,
            p.dup,
            p.qos,
            p.retain,
            p.topic.as_bytes(),
            p.packet_id,
            &p.properties,
            p.payload.len(),
            &mut buf,
        )
        .unwrap();
        assert_eq!(buf.len(), header_len);
        assert_eq!(header_len + p.payload.len(), whole.len());
        buf.extend_from_slice(&p.payload);
        assert_eq!(&buf[..], &whole[..]);
        assert_eq!(dec(&whole, v), Ok(Packet::Publish(p)));
    }
}

#[test]
fn encode_reserves_once() {
    let mut p = publish(QoS::AtLeastOnce, Some(id(1)));
    p.payload = Bytes::from(vec![7u8; 100_000]);
    let mut buf = BytesMut::new();
    encode(&Packet::Publish(p), V5, &mut buf).unwrap();
    let total = buf.len();
    assert!(buf.capacity() >= total);
    let sub = Subscribe {
        packet_id: id(1),
        filters: (0..1000)
            .map(|i| {
                (
                    ByteStr::from(format!("t/{i}")),
                    SubscriptionOptions::with_qos(QoS::AtMostOnce),
                )
            })
            .collect(),
        properties: Properties::default(),
    };
    let mut buf = BytesMut::new();
    encode(&Packet::Subscribe(sub), V5, &mut buf).unwrap();
    assert_eq!(
        buf.capacity(),
        buf.len(),
        "exactly the computed size was reserved"
    );
}

/// Mosquitto's bridge bit (`try_private`): 0x80 on a v3 level, written and read back; never on
/// v5, and 0x85 is not a level.
#[test]
fn the_bridge_bit_round_trips_on_v3_levels_only() {
    for (protocol, level) in [(V31, 0x83u8), (V311, 0x84)] {
        let c = Connect {
            protocol,
            clean_start: true,
            keep_alive: 0,
            client_id: s("bridge"),
            will: None,
            username: None,
            password: None,
            properties: Properties::default(),
            bridge: true,
        };
        let bytes = enc(&Packet::Connect(Box::new(c.clone())), protocol);
        let name_len = usize::from(bytes[3]);
        assert_eq!(bytes[4 + name_len], level);
        let mut buf = BytesMut::from(&bytes[..]);
        match decode(&mut buf, protocol, MAX) {
            Ok(Some(Packet::Connect(decoded))) => assert_eq!(*decoded, c),
            other => panic!("{other:?}"),
        }
    }
    let v5 = Connect {
        protocol: V5,
        clean_start: true,
        keep_alive: 0,
        client_id: s("bridge"),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
        bridge: true,
    };
    let bytes = enc(&Packet::Connect(Box::new(v5)), V5);
    assert_eq!(bytes[8], 5);
    let mut raw = bytes.to_vec();
    raw[8] = 0x85;
    let mut buf = BytesMut::from(&raw[..]);
    assert_eq!(
        decode(&mut buf, V5, MAX),
        Err(DecodeError::UnsupportedProtocolLevel(0x85))
    );
}

/// `encode_pub_resp` writes what `encode` writes for the same acknowledgement without
/// properties, at every level, for success and error reasons, and refuses other packet types.
#[test]
fn encode_pub_resp_matches_encode() {
    let id = PacketId::new(0x1234).unwrap();
    for version in [V31, V311, V5] {
        for reason in [
            ReasonCode::SUCCESS,
            ReasonCode::NO_MATCHING_SUBSCRIBERS,
            ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
        ] {
            let response = PubResp {
                packet_id: id,
                reason_code: reason,
                properties: Properties::default(),
            };
            for (packet_type, packet) in [
                (PacketType::PubAck, Packet::PubAck(response.clone())),
                (PacketType::PubRec, Packet::PubRec(response.clone())),
                (PacketType::PubRel, Packet::PubRel(response.clone())),
                (PacketType::PubComp, Packet::PubComp(response.clone())),
            ] {
                let mut expected = BytesMut::new();
                encode(&packet, version, &mut expected).unwrap();
                let mut direct = BytesMut::new();
                encode_pub_resp(packet_type, id, reason, version, &mut direct).unwrap();
                assert_eq!(direct, expected, "{packet_type:?} {reason:?} {version:?}");
            }
        }
    }
    let mut buf = BytesMut::new();
    assert_eq!(
        encode_pub_resp(PacketType::SubAck, id, ReasonCode::SUCCESS, V5, &mut buf),
        Err(EncodeError::InvalidValue)
    );
    assert!(buf.is_empty());
}
