//! The fuzz seed corpus under `fuzz/corpus/<target>/`: valid packet streams written by
//! `cargo test -p hayate-codec -- --ignored write_fuzz_seed_corpus`, and checked by every test
//! run to still decode cleanly.

use super::*;
use std::path::PathBuf;
use ProtocolVersion::{V31, V311, V5};

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn stream(packets: &[Packet], version: ProtocolVersion) -> Vec<u8> {
    let mut buf = BytesMut::new();
    for p in packets {
        encode(p, version, &mut buf).expect("seed packet encodes");
    }
    buf.to_vec()
}

fn publish(qos: QoS, pid: Option<u16>, properties: Properties) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: qos == QoS::AtLeastOnce,
        topic: s("sensors/1/temp"),
        packet_id: pid.map(id),
        properties,
        payload: Bytes::from_static(b"21.5"),
    })
}

fn connect(
    protocol: ProtocolVersion,
    properties: Properties,
    will_properties: Properties,
) -> Packet {
    Packet::Connect(Box::new(Connect {
        protocol,
        clean_start: true,
        keep_alive: 60,
        client_id: s("client-1"),
        will: Some(Will {
            topic: s("clients/1/status"),
            payload: Bytes::from_static(b"offline"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: will_properties,
        }),
        username: Some(s("user")),
        password: Some(Bytes::from_static(b"secret")),
        properties,
        bridge: false,
    }))
}

fn client_session(p: &Properties) -> Vec<Packet> {
    let ack = |pid| PubResp {
        packet_id: id(pid),
        reason_code: ReasonCode::SUCCESS,
        properties: Properties::default(),
    };
    vec![
        Packet::Subscribe(Subscribe {
            packet_id: id(1),
            filters: vec![
                (
                    s("sensors/+/temp"),
                    SubscriptionOptions::with_qos(QoS::AtLeastOnce),
                ),
                (
                    s("alerts/#"),
                    SubscriptionOptions::with_qos(QoS::ExactlyOnce),
                ),
            ],
            properties: Properties::default(),
        }),
        publish(QoS::AtMostOnce, None, p.clone()),
        publish(QoS::AtLeastOnce, Some(2), p.clone()),
        publish(QoS::ExactlyOnce, Some(3), p.clone()),
        Packet::PubAck(ack(4)),
        Packet::PubRec(ack(5)),
        Packet::PubRel(ack(3)),
        Packet::PubComp(ack(5)),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: id(6),
            filters: vec![s("alerts/#")],
            properties: Properties::default(),
        }),
        Packet::PingReq,
        Packet::Disconnect(Disconnect::default()),
    ]
}

fn server_session(version: ProtocolVersion) -> Vec<Packet> {
    let v5 = version.is_v5();
    let mut connack_props = Properties::default();
    let mut reason = Properties::default();
    if v5 {
        connack_props = Properties {
            session_expiry_interval: Some(300),
            receive_maximum: Some(100),
            maximum_qos: Some(1),
            retain_available: Some(1),
            maximum_packet_size: Some(65_536),
            assigned_client_identifier: Some(s("auto-1")),
            topic_alias_maximum: Some(10),
            wildcard_subscription_available: Some(1),
            subscription_identifier_available: Some(1),
            shared_subscription_available: Some(0),
            server_keep_alive: Some(30),
            ..Properties::default()
        };
        reason.reason_string = Some(s("because"));
    }
    vec![
        Packet::ConnAck(ConnAck {
            session_present: version != V31,
            reason_code: ReasonCode::SUCCESS,
            properties: connack_props,
        }),
        Packet::SubAck(SubAck {
            packet_id: id(1),
            reason_codes: vec![ReasonCode::GRANTED_QOS_1, ReasonCode(0x80)],
            properties: reason.clone(),
        }),
        publish(QoS::AtLeastOnce, Some(9), Properties::default()),
        Packet::UnsubAck(UnsubAck {
            packet_id: id(6),
            reason_codes: if v5 {
                vec![ReasonCode::NO_SUBSCRIPTION_EXISTED]
            } else {
                vec![]
            },
            properties: reason,
        }),
        Packet::PingResp,
    ]
}

/// `(target, file name, bytes)` for every seed.
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let none = Properties::default;
    let mut out = Vec::new();
    for (name, version) in [("v311", V311), ("v31", V31)] {
        let mut client = stream(&[connect(version, none(), none())], version);
        client.extend(stream(&client_session(&none()), version));
        out.push((
            "decode_v3",
            if name == "v311" {
                "client_v311"
            } else {
                "client_v31"
            },
            client,
        ));
        let server = stream(&server_session(version), version);
        out.push((
            "decode_v3",
            if name == "v311" {
                "server_v311"
            } else {
                "server_v31"
            },
            server,
        ));
    }
    out.push(("decode_v3", "pingreq", vec![0xC0, 0x00]));

    let connect_props = Properties {
        session_expiry_interval: Some(3600),
        receive_maximum: Some(20),
        maximum_packet_size: Some(1 << 20),
        topic_alias_maximum: Some(5),
        request_response_information: Some(1),
        request_problem_information: Some(0),
        authentication_method: Some(s("SCRAM-SHA-1")),
        authentication_data: Some(Bytes::from_static(b"n,,n=user")),
        user_properties: vec![(s("region"), s("eu")), (s("region"), s("us"))],
        ..Properties::default()
    };
    let will_props = Properties {
        will_delay_interval: Some(10),
        payload_format_indicator: Some(1),
        message_expiry_interval: Some(60),
        content_type: Some(s("text/plain")),
        response_topic: Some(s("replies/1")),
        correlation_data: Some(Bytes::from_static(&[1, 2, 3])),
        ..Properties::default()
    };
    let publish_props = Properties {
        payload_format_indicator: Some(1),
        topic_alias: Some(1),
        subscription_identifiers: vec![7, 300],
        user_properties: vec![(s("k"), s("v"))],
        ..Properties::default()
    };
    let mut client = stream(&[connect(V5, connect_props, will_props)], V5);
    client.extend(stream(&client_session(&publish_props), V5));
    out.push(("decode_v5", "client_v5", client));
    out.push(("decode_v5", "server_v5", stream(&server_session(V5), V5)));
    let reasons = [
        Packet::PubAck(PubResp {
            packet_id: id(2),
            reason_code: ReasonCode::NO_MATCHING_SUBSCRIBERS,
            properties: none(),
        }),
        Packet::PubRec(PubResp {
            packet_id: id(3),
            reason_code: ReasonCode::QUOTA_EXCEEDED,
            properties: Properties {
                reason_string: Some(s("full")),
                ..none()
            },
        }),
        Packet::Subscribe(Subscribe {
            packet_id: id(8),
            filters: vec![(
                s("$share/g/a/+"),
                SubscriptionOptions {
                    qos: QoS::ExactlyOnce,
                    no_local: false,
                    retain_as_published: true,
                    retain_handling: 2,
                },
            )],
            properties: Properties {
                subscription_identifiers: vec![42],
                ..none()
            },
        }),
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::SERVER_MOVED,
            properties: Properties {
                server_reference: Some(s("other:1883")),
                session_expiry_interval: Some(0),
                ..none()
            },
        }),
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::DISCONNECT_WITH_WILL,
            properties: none(),
        }),
        Packet::Auth(Auth {
            reason_code: ReasonCode::CONTINUE_AUTHENTICATION,
            properties: Properties {
                authentication_method: Some(s("SCRAM-SHA-1")),
                authentication_data: Some(Bytes::from_static(b"r=nonce")),
                ..none()
            },
        }),
        Packet::Auth(Auth::default()),
    ];
    out.push(("decode_v5", "reasons_v5", stream(&reasons, V5)));
    out.push(("decode_v5", "pingreq", vec![0xC0, 0x00]));
    out
}

fn decode_stream(bytes: &[u8], mut version: ProtocolVersion) -> usize {
    let mut buf = BytesMut::from(bytes);
    let mut count = 0;
    while let Some(packet) = decode(&mut buf, version, MAX).expect("seed decodes") {
        if let Packet::Connect(c) = &packet {
            version = c.protocol;
        }
        count += 1;
    }
    assert!(buf.is_empty(), "seed decodes completely");
    count
}

#[test]
fn seeds_decode_cleanly() {
    for (target, name, bytes) in seeds() {
        let version = if target == "decode_v5" { V5 } else { V311 };
        assert!(decode_stream(&bytes, version) > 0, "{target}/{name}");
    }
}

#[test]
fn committed_seed_corpus_is_up_to_date() {
    for (target, name, bytes) in seeds() {
        let path = corpus_dir(target).join(name);
        if let Ok(on_disk) = std::fs::read(&path) {
            assert_eq!(
                on_disk,
                bytes,
                "{} is stale: run write_fuzz_seed_corpus",
                path.display()
            );
        }
    }
}

#[test]
#[ignore = "writes fuzz/corpus; run by hand after changing the seeds"]
fn write_fuzz_seed_corpus() {
    for (target, name, bytes) in seeds() {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
