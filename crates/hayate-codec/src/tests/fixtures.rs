//! One byte-literal fixture per packet type and version: decode gives the packet, encode gives
//! the bytes back.

use super::*;
use ProtocolVersion::{V31, V311, V5};

// ----------------------------------------------------------------------------------- CONNECT

#[test]
fn connect_v311_full() {
    #[rustfmt::skip]
    let bytes = [
        0x10, 29,
        0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04,
        0xEE, // user, password, will retain, will QoS 1, will, clean session
        0x00, 0x3C, // keep alive 60
        0x00, 0x03, b'c', b'i', b'd',
        0x00, 0x01, b'w', // will topic
        0x00, 0x02, b'h', b'i', // will message
        0x00, 0x01, b'u', // user name
        0x00, 0x02, 0x01, 0x02, // password
    ];
    let packet = Packet::Connect(Box::new(Connect {
        protocol: V311,
        clean_start: true,
        keep_alive: 60,
        client_id: s("cid"),
        will: Some(Will {
            topic: s("w"),
            payload: bytes_of(b"hi"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: Properties::default(),
        }),
        username: Some(s("u")),
        password: Some(bytes_of(&[1, 2])),
        properties: Properties::default(),
        bridge: false,
    }));
    // The version argument does not matter for CONNECT.
    assert_eq!(dec(&bytes, V5), Ok(packet.clone()));
    fixture(&bytes, V311, packet);
}

#[test]
fn connect_v31_mqisdp() {
    #[rustfmt::skip]
    let bytes = [
        0x10, 16,
        0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', 0x03,
        0x02, 0x00, 0x0A,
        0x00, 0x02, b'c', b'1',
    ];
    let packet = Packet::Connect(Box::new(Connect {
        protocol: V31,
        clean_start: true,
        keep_alive: 10,
        client_id: s("c1"),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
        bridge: false,
    }));
    assert_eq!(dec(&bytes, V311), Ok(packet.clone()));
    fixture(&bytes, V31, packet);
}

#[test]
fn connect_v5_with_properties_and_will_properties() {
    #[rustfmt::skip]
    let bytes = [
        0x10, 46,
        0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05,
        0x86, // user name, will (QoS 0), clean start
        0x00, 0x1E,
        15, // properties
        0x11, 0x00, 0x00, 0x00, 0x78, // session expiry 120
        0x21, 0x00, 0x14, // receive maximum 20
        0x26, 0x00, 0x01, b'k', 0x00, 0x01, b'v', // user property
        0x00, 0x00, // empty client id
        9, // will properties
        0x03, 0x00, 0x01, b't', // content type
        0x18, 0x00, 0x00, 0x00, 0x05, // will delay 5
        0x00, 0x01, b'w', // will topic
        0x00, 0x00, // will payload
        0x00, 0x01, b'u',
    ];
    let packet = Packet::Connect(Box::new(Connect {
        protocol: V5,
        clean_start: true,
        keep_alive: 30,
        client_id: s(""),
        will: Some(Will {
            topic: s("w"),
            payload: Bytes::new(),
            qos: QoS::AtMostOnce,
            retain: false,
            properties: Properties {
                content_type: Some(s("t")),
                will_delay_interval: Some(5),
                ..Properties::default()
            },
        }),
        username: Some(s("u")),
        password: None,
        properties: Properties {
            session_expiry_interval: Some(120),
            receive_maximum: Some(20),
            user_properties: vec![(s("k"), s("v"))],
            ..Properties::default()
        },
        bridge: false,
    }));
    fixture(&bytes, V5, packet);
}

#[test]
fn connect_v5_password_without_user_name_is_allowed() {
    #[rustfmt::skip]
    let bytes = [
        0x10, 17,
        0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x40, 0x00, 0x00, 0x00,
        0x00, 0x01, b'c',
        0x00, 0x01, b'p',
    ];
    let Packet::Connect(c) = dec(&bytes, V5).unwrap() else {
        panic!("not CONNECT")
    };
    assert_eq!(c.username, None);
    assert_eq!(c.password, Some(bytes_of(b"p")));
}

fn bytes_of(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}

// ----------------------------------------------------------------------------------- CONNACK

#[test]
fn connack_v311() {
    let packet = Packet::ConnAck(ConnAck {
        session_present: true,
        reason_code: ReasonCode::V3_ACCEPTED,
        properties: Properties::default(),
    });
    fixture(&[0x20, 0x02, 0x01, 0x00], V311, packet);
    let refused = Packet::ConnAck(ConnAck {
        session_present: false,
        reason_code: ReasonCode::V3_NOT_AUTHORIZED,
        properties: Properties::default(),
    });
    fixture(&[0x20, 0x02, 0x00, 0x05], V311, refused);
}

#[test]
fn connack_v31_has_no_session_present_flag() {
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        reason_code: ReasonCode::V3_UNACCEPTABLE_PROTOCOL_VERSION,
        properties: Properties::default(),
    });
    fixture(&[0x20, 0x02, 0x00, 0x01], V31, packet);
}

#[test]
fn connack_v5() {
    #[rustfmt::skip]
    let bytes = [
        0x20, 15, 0x00, 0x00,
        12,
        0x12, 0x00, 0x02, b'i', b'd', // assigned client identifier
        0x22, 0x00, 0x0A, // topic alias maximum
        0x24, 0x01, // maximum QoS 1
        0x25, 0x00, // retain not available
    ];
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        reason_code: ReasonCode::SUCCESS,
        properties: Properties {
            assigned_client_identifier: Some(s("id")),
            topic_alias_maximum: Some(10),
            maximum_qos: Some(1),
            retain_available: Some(0),
            ..Properties::default()
        },
    });
    fixture(&bytes, V5, packet);
}

// ----------------------------------------------------------------------------------- PUBLISH

#[test]
fn publish_v311_qos1_retain() {
    #[rustfmt::skip]
    let bytes = [0x33, 9, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'i'];
    let packet = Packet::Publish(Publish {
        dup: false,
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: s("a/b"),
        packet_id: Some(id(10)),
        properties: Properties::default(),
        payload: bytes_of(b"hi"),
    });
    fixture(&bytes, V311, packet.clone());
    fixture(&bytes, V31, packet);
}

#[test]
fn publish_v311_qos0_empty_payload() {
    let packet = Packet::Publish(Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: s("t"),
        packet_id: None,
        properties: Properties::default(),
        payload: Bytes::new(),
    });
    fixture(&[0x30, 0x03, 0x00, 0x01, b't'], V311, packet);
}

#[test]
fn publish_v5_qos2_dup_with_properties() {
    #[rustfmt::skip]
    let bytes = [
        0x3C, 28,
        0x00, 0x01, b't',
        0x00, 0x07,
        21,
        0x01, 0x01, // payload format indicator: UTF-8
        0x02, 0x00, 0x00, 0x00, 0x3C, // message expiry 60
        0x0B, 0x05, // subscription identifier 5
        0x0B, 0x80, 0x01, // subscription identifier 128
        0x23, 0x00, 0x02, // topic alias 2
        0x26, 0x00, 0x01, b'a', 0x00, 0x00, // user property a=""
        b'p',
    ];
    let packet = Packet::Publish(Publish {
        dup: true,
        qos: QoS::ExactlyOnce,
        retain: false,
        topic: s("t"),
        packet_id: Some(id(7)),
        properties: Properties {
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(60),
            subscription_identifiers: vec![5, 128],
            topic_alias: Some(2),
            user_properties: vec![(s("a"), s(""))],
            ..Properties::default()
        },
        payload: bytes_of(b"p"),
    });
    fixture(&bytes, V5, packet);
}

#[test]
fn publish_v5_empty_topic_with_alias() {
    let bytes = [0x30, 0x06, 0x00, 0x00, 0x03, 0x23, 0x00, 0x01];
    let packet = Packet::Publish(Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: s(""),
        packet_id: None,
        properties: Properties {
            topic_alias: Some(1),
            ..Properties::default()
        },
        payload: Bytes::new(),
    });
    fixture(&bytes, V5, packet);
}

// ------------------------------------------------------------ PUBACK / PUBREC / PUBREL / PUBCOMP

#[test]
fn pub_responses_v311() {
    fixture(
        &[0x40, 0x02, 0x00, 0x07],
        V311,
        Packet::PubAck(PubResp::new(id(7))),
    );
    fixture(
        &[0x50, 0x02, 0x00, 0x08],
        V311,
        Packet::PubRec(PubResp::new(id(8))),
    );
    fixture(
        &[0x62, 0x02, 0x00, 0x09],
        V311,
        Packet::PubRel(PubResp::new(id(9))),
    );
    fixture(
        &[0x70, 0x02, 0x01, 0x0A],
        V311,
        Packet::PubComp(PubResp::new(id(266))),
    );
}

#[test]
fn pub_responses_v5_short_forms() {
    // Remaining length 2: reason 0x00, no properties (3.4.2.1).
    fixture(
        &[0x40, 0x02, 0x00, 0x07],
        V5,
        Packet::PubAck(PubResp::new(id(7))),
    );
    fixture(
        &[0x50, 0x02, 0x00, 0x08],
        V5,
        Packet::PubRec(PubResp::new(id(8))),
    );
    fixture(
        &[0x62, 0x02, 0x00, 0x09],
        V5,
        Packet::PubRel(PubResp::new(id(9))),
    );
    fixture(
        &[0x70, 0x02, 0x00, 0x0A],
        V5,
        Packet::PubComp(PubResp::new(id(10))),
    );
    // Remaining length 3: reason code, no properties (3.4.2.2.1).
    let no_subscribers = PubResp {
        reason_code: ReasonCode::NO_MATCHING_SUBSCRIBERS,
        ..PubResp::new(id(7))
    };
    fixture(
        &[0x40, 0x03, 0x00, 0x07, 0x10],
        V5,
        Packet::PubAck(no_subscribers),
    );
    let not_found = PubResp {
        reason_code: ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
        ..PubResp::new(id(9))
    };
    fixture(
        &[0x62, 0x03, 0x00, 0x09, 0x92],
        V5,
        Packet::PubRel(not_found),
    );
    // Reason 0 with an empty property block decodes to the short form.
    assert_eq!(
        dec(&[0x40, 0x04, 0x00, 0x07, 0x00, 0x00], V5),
        Ok(Packet::PubAck(PubResp::new(id(7))))
    );
}

#[test]
fn pub_responses_v5_with_reason_string() {
    let bytes = [0x40, 9, 0x00, 0x07, 0x87, 5, 0x1F, 0x00, 0x02, b'n', b'o'];
    let packet = PubResp {
        packet_id: id(7),
        reason_code: ReasonCode::NOT_AUTHORIZED,
        properties: Properties {
            reason_string: Some(s("no")),
            ..Properties::default()
        },
    };
    fixture(&bytes, V5, Packet::PubAck(packet.clone()));
    let mut rec = bytes;
    rec[0] = 0x50;
    fixture(&rec, V5, Packet::PubRec(packet.clone()));
    let mut rel = bytes;
    rel[0] = 0x62;
    fixture(&rel, V5, Packet::PubRel(packet.clone()));
    let mut comp = bytes;
    comp[0] = 0x70;
    fixture(&comp, V5, Packet::PubComp(packet));
}

// --------------------------------------------------------------------------------- SUBSCRIBE

#[test]
fn subscribe_v311() {
    #[rustfmt::skip]
    let bytes = [
        0x82, 12, 0x00, 0x01,
        0x00, 0x03, b'a', b'/', b'#', 0x01,
        0x00, 0x01, b'b', 0x02,
    ];
    let packet = Packet::Subscribe(Subscribe {
        packet_id: id(1),
        filters: vec![
            (s("a/#"), SubscriptionOptions::with_qos(QoS::AtLeastOnce)),
            (s("b"), SubscriptionOptions::with_qos(QoS::ExactlyOnce)),
        ],
        properties: Properties::default(),
    });
    fixture(&bytes, V311, packet);
}

#[test]
fn subscribe_v5_with_options_and_identifier() {
    let bytes = [
        0x82, 9, 0x00, 0x02, 0x02, 0x0B, 0x2A, 0x00, 0x01, b'x', 0x2D,
    ];
    let packet = Packet::Subscribe(Subscribe {
        packet_id: id(2),
        filters: vec![(
            s("x"),
            SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                no_local: true,
                retain_as_published: true,
                retain_handling: 2,
            },
        )],
        properties: Properties {
            subscription_identifiers: vec![42],
            ..Properties::default()
        },
    });
    fixture(&bytes, V5, packet);
}

#[test]
fn suback_v311() {
    let packet = Packet::SubAck(SubAck {
        packet_id: id(1),
        reason_codes: vec![ReasonCode::GRANTED_QOS_1, ReasonCode::V3_SUBACK_FAILURE],
        properties: Properties::default(),
    });
    fixture(&[0x90, 0x04, 0x00, 0x01, 0x01, 0x80], V311, packet);
}

#[test]
fn suback_v5() {
    let bytes = [0x90, 9, 0x00, 0x02, 4, 0x1F, 0x00, 0x01, b'r', 0x00, 0x87];
    let packet = Packet::SubAck(SubAck {
        packet_id: id(2),
        reason_codes: vec![ReasonCode::GRANTED_QOS_0, ReasonCode::NOT_AUTHORIZED],
        properties: Properties {
            reason_string: Some(s("r")),
            ..Properties::default()
        },
    });
    fixture(&bytes, V5, packet);
}

// ------------------------------------------------------------------------------- UNSUBSCRIBE

#[test]
fn unsubscribe_v311() {
    let bytes = [0xA2, 8, 0x00, 0x03, 0x00, 0x01, b'a', 0x00, 0x01, b'b'];
    let packet = Packet::Unsubscribe(Unsubscribe {
        packet_id: id(3),
        filters: vec![s("a"), s("b")],
        properties: Properties::default(),
    });
    fixture(&bytes, V311, packet);
}

#[test]
fn unsubscribe_v5() {
    let bytes = [0xA2, 6, 0x00, 0x03, 0x00, 0x00, 0x01, b'a'];
    let packet = Packet::Unsubscribe(Unsubscribe {
        packet_id: id(3),
        filters: vec![s("a")],
        properties: Properties::default(),
    });
    fixture(&bytes, V5, packet);
}

#[test]
fn unsuback_v311_has_no_payload() {
    let packet = Packet::UnsubAck(UnsubAck {
        packet_id: id(3),
        reason_codes: vec![],
        properties: Properties::default(),
    });
    fixture(&[0xB0, 0x02, 0x00, 0x03], V311, packet);
}

#[test]
fn unsuback_v5() {
    let packet = Packet::UnsubAck(UnsubAck {
        packet_id: id(3),
        reason_codes: vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED],
        properties: Properties::default(),
    });
    fixture(&[0xB0, 0x05, 0x00, 0x03, 0x00, 0x00, 0x11], V5, packet);
}

// ----------------------------------------------------------------- PINGREQ / PINGRESP / DISCONNECT

#[test]
fn ping_v311_and_v5() {
    for v in [V31, V311, V5] {
        fixture(&[0xC0, 0x00], v, Packet::PingReq);
        fixture(&[0xD0, 0x00], v, Packet::PingResp);
    }
}

#[test]
fn disconnect_v311() {
    fixture(
        &[0xE0, 0x00],
        V311,
        Packet::Disconnect(Disconnect::default()),
    );
}

#[test]
fn disconnect_v5() {
    fixture(&[0xE0, 0x00], V5, Packet::Disconnect(Disconnect::default()));
    // Remaining length 1: reason code only (3.14.2.2.1).
    let with_will = Disconnect {
        reason_code: ReasonCode::DISCONNECT_WITH_WILL,
        ..Disconnect::default()
    };
    fixture(&[0xE0, 0x01, 0x04], V5, Packet::Disconnect(with_will));
    let bytes = [0xE0, 7, 0x8E, 5, 0x11, 0x00, 0x00, 0x00, 0x00];
    let taken_over = Disconnect {
        reason_code: ReasonCode::SESSION_TAKEN_OVER,
        properties: Properties {
            session_expiry_interval: Some(0),
            ..Properties::default()
        },
    };
    fixture(&bytes, V5, Packet::Disconnect(taken_over));
    // Reason 0 with an empty property block is the short form.
    assert_eq!(
        dec(&[0xE0, 0x02, 0x00, 0x00], V5),
        Ok(Packet::Disconnect(Disconnect::default()))
    );
}

// -------------------------------------------------------------------------------------- AUTH

#[test]
fn auth_v5() {
    fixture(&[0xF0, 0x00], V5, Packet::Auth(Auth::default()));
    #[rustfmt::skip]
    let bytes = [
        0xF0, 13, 0x18, 11,
        0x15, 0x00, 0x04, b'S', b'C', b'R', b'M', // authentication method
        0x16, 0x00, 0x01, 0x01, // authentication data
    ];
    let packet = Auth {
        reason_code: ReasonCode::CONTINUE_AUTHENTICATION,
        properties: Properties {
            authentication_method: Some(s("SCRM")),
            authentication_data: Some(bytes_of(&[1])),
            ..Properties::default()
        },
    };
    fixture(&bytes, V5, Packet::Auth(packet));
}

// ------------------------------------------------------------------------------ stream / zero-copy

#[test]
fn decodes_a_stream_packet_by_packet_and_waits_for_more() {
    let mut stream = BytesMut::new();
    stream.extend_from_slice(&[0xC0, 0x00, 0x40, 0x02, 0x00, 0x07, 0x30, 0x03, 0x00]);
    assert_eq!(decode(&mut stream, V311, MAX), Ok(Some(Packet::PingReq)));
    assert_eq!(
        decode(&mut stream, V311, MAX),
        Ok(Some(Packet::PubAck(PubResp::new(id(7)))))
    );
    assert_eq!(decode(&mut stream, V311, MAX), Ok(None));
    assert_eq!(
        &stream[..],
        &[0x30, 0x03, 0x00],
        "incomplete packet left untouched"
    );
    stream.extend_from_slice(&[0x01, b't']);
    assert!(matches!(
        decode(&mut stream, V311, MAX),
        Ok(Some(Packet::Publish(_)))
    ));
    assert!(stream.is_empty());
    assert_eq!(decode(&mut stream, V311, MAX), Ok(None));
}

#[test]
fn decoded_fields_share_the_read_buffer() {
    let mut buf = BytesMut::from(&[0x31, 0x07, 0x00, 0x02, b'a', b'b', b'x', b'y', b'z'][..]);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let Some(Packet::Publish(p)) = decode(&mut buf, V311, MAX).unwrap() else {
        panic!()
    };
    assert!(range.contains(&(p.topic.as_bytes().as_ptr() as usize)));
    assert!(range.contains(&(p.payload.as_ptr() as usize)));
    assert_eq!(&p.payload[..], b"xyz");
}
