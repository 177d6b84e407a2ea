//! Property-based tests: encode -> decode round trips of valid packets at every version, and
//! decode never panicking on arbitrary or damaged bytes.

use super::*;
use crate::props::{allowed_in, PropCtx};
use proptest::collection::vec;
use proptest::option::of as opt;
use proptest::prelude::*;
use ProtocolVersion::{V31, V311, V5};

fn arb_str() -> impl Strategy<Value = ByteStr> {
    vec(any::<char>().prop_filter("no U+0000", |c| *c != '\0'), 0..6)
        .prop_map(|chars| ByteStr::from(chars.into_iter().collect::<String>()))
}

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn flag() -> impl Strategy<Value = u8> {
    0u8..=1
}

fn arb_qos() -> impl Strategy<Value = QoS> {
    prop_oneof![
        Just(QoS::AtMostOnce),
        Just(QoS::AtLeastOnce),
        Just(QoS::ExactlyOnce)
    ]
}

fn arb_id() -> impl Strategy<Value = PacketId> {
    (1u16..).prop_map(id)
}

fn arb_reason() -> impl Strategy<Value = ReasonCode> {
    any::<u8>().prop_map(ReasonCode)
}

/// Properties with valid values, restricted to what `ctx` allows.
fn arb_properties(ctx: PropCtx) -> impl Strategy<Value = Properties> {
    let a = (
        opt(flag()),
        opt(any::<u32>()),
        opt(arb_str()),
        opt(arb_str()),
        opt(arb_bytes()),
        vec(1u32..=MAX_VARIABLE_INT, 0..3),
        opt(any::<u32>()),
        opt(arb_str()),
        opt(any::<u16>()),
        opt(arb_str()),
        opt(arb_bytes()),
        opt(flag()),
    );
    let b = (
        opt(any::<u32>()),
        opt(flag()),
        opt(arb_str()),
        opt(arb_str()),
        opt(arb_str()),
        opt(1u16..),
        opt(any::<u16>()),
        opt(1u16..),
        opt(flag()),
        opt(flag()),
        vec((arb_str(), arb_str()), 0..3),
        opt(1u32..),
    );
    let c = (opt(flag()), opt(flag()), opt(flag()));
    (a, b, c).prop_map(move |(a, b, c)| {
        let mut p = Properties {
            payload_format_indicator: a.0,
            message_expiry_interval: a.1,
            content_type: a.2,
            response_topic: a.3,
            correlation_data: a.4,
            subscription_identifiers: a.5,
            session_expiry_interval: a.6,
            assigned_client_identifier: a.7,
            server_keep_alive: a.8,
            authentication_method: a.9,
            authentication_data: a.10,
            request_problem_information: a.11,
            will_delay_interval: b.0,
            request_response_information: b.1,
            response_information: b.2,
            server_reference: b.3,
            reason_string: b.4,
            receive_maximum: b.5,
            topic_alias_maximum: b.6,
            topic_alias: b.7,
            maximum_qos: b.8,
            retain_available: b.9,
            user_properties: b.10,
            maximum_packet_size: b.11,
            wildcard_subscription_available: c.0,
            subscription_identifier_available: c.1,
            shared_subscription_available: c.2,
        };
        restrict(&mut p, ctx);
        p
    })
}

/// Clears every property the table does not allow in `ctx`.
fn restrict(p: &mut Properties, ctx: PropCtx) {
    use PropertyId as P;
    macro_rules! keep {
        ($($id:ident => $field:ident),* $(,)?) => {
            $(if !allowed_in(P::$id, ctx) { p.$field = Default::default(); })*
        };
    }
    keep!(
        PayloadFormatIndicator => payload_format_indicator,
        MessageExpiryInterval => message_expiry_interval,
        ContentType => content_type,
        ResponseTopic => response_topic,
        CorrelationData => correlation_data,
        SubscriptionIdentifier => subscription_identifiers,
        SessionExpiryInterval => session_expiry_interval,
        AssignedClientIdentifier => assigned_client_identifier,
        ServerKeepAlive => server_keep_alive,
        AuthenticationMethod => authentication_method,
        AuthenticationData => authentication_data,
        RequestProblemInformation => request_problem_information,
        WillDelayInterval => will_delay_interval,
        RequestResponseInformation => request_response_information,
        ResponseInformation => response_information,
        ServerReference => server_reference,
        ReasonString => reason_string,
        ReceiveMaximum => receive_maximum,
        TopicAliasMaximum => topic_alias_maximum,
        TopicAlias => topic_alias,
        MaximumQos => maximum_qos,
        RetainAvailable => retain_available,
        UserProperty => user_properties,
        MaximumPacketSize => maximum_packet_size,
        WildcardSubscriptionAvailable => wildcard_subscription_available,
        SubscriptionIdentifierAvailable => subscription_identifier_available,
        SharedSubscriptionAvailable => shared_subscription_available,
    );
    if ctx == PropCtx::Subscribe {
        p.subscription_identifiers.truncate(1);
    }
    if ctx == PropCtx::Connect && p.authentication_data.is_some() {
        p.authentication_method.get_or_insert_with(|| s("m"));
    }
}

fn props(version: ProtocolVersion, ctx: PropCtx) -> BoxedStrategy<Properties> {
    if version.is_v5() {
        arb_properties(ctx).boxed()
    } else {
        Just(Properties::default()).boxed()
    }
}

/// A reason code for a packet that only carries one in v5.
fn v5_reason(version: ProtocolVersion) -> BoxedStrategy<ReasonCode> {
    if version.is_v5() {
        arb_reason().boxed()
    } else {
        Just(ReasonCode::SUCCESS).boxed()
    }
}

fn arb_connect(version: ProtocolVersion) -> impl Strategy<Value = Packet> {
    let will = (
        arb_str(),
        arb_bytes(),
        arb_qos(),
        any::<bool>(),
        props(version, PropCtx::Will),
    )
        .prop_map(|(topic, payload, qos, retain, properties)| Will {
            topic,
            payload,
            qos,
            retain,
            properties,
        });
    (
        any::<bool>(),
        any::<u16>(),
        arb_str(),
        opt(will),
        opt(arb_str()),
        opt(arb_bytes()),
        props(version, PropCtx::Connect),
    )
        .prop_map(
            move |(
                clean_start,
                keep_alive,
                client_id,
                will,
                mut username,
                password,
                properties,
            )| {
                // [3.1.1: MQTT-3.1.2-22]: no password without a user name.
                if !version.is_v5() && password.is_some() && username.is_none() {
                    username = Some(s("user"));
                }
                Packet::Connect(Box::new(Connect {
                    protocol: version,
                    clean_start,
                    keep_alive,
                    client_id,
                    will,
                    username,
                    password,
                    properties,
                    bridge: false,
                }))
            },
        )
}

fn arb_publish(version: ProtocolVersion) -> impl Strategy<Value = Packet> {
    (
        arb_qos(),
        any::<bool>(),
        any::<bool>(),
        arb_str(),
        arb_id(),
        props(version, PropCtx::Publish),
        arb_bytes(),
    )
        .prop_map(|(qos, dup, retain, topic, pid, properties, payload)| {
            let at_most_once = qos == QoS::AtMostOnce;
            Packet::Publish(Publish {
                dup: dup && !at_most_once,
                qos,
                retain,
                topic,
                packet_id: if at_most_once { None } else { Some(pid) },
                properties,
                payload,
            })
        })
}

fn arb_pub_resp(version: ProtocolVersion, ctx: PropCtx) -> impl Strategy<Value = PubResp> {
    (arb_id(), v5_reason(version), props(version, ctx)).prop_map(
        |(packet_id, reason_code, properties)| PubResp {
            packet_id,
            reason_code,
            properties,
        },
    )
}

fn arb_options(version: ProtocolVersion) -> BoxedStrategy<SubscriptionOptions> {
    if version.is_v5() {
        (arb_qos(), any::<bool>(), any::<bool>(), 0u8..=2)
            .prop_map(
                |(qos, no_local, retain_as_published, retain_handling)| SubscriptionOptions {
                    qos,
                    no_local,
                    retain_as_published,
                    retain_handling,
                },
            )
            .boxed()
    } else {
        arb_qos().prop_map(SubscriptionOptions::with_qos).boxed()
    }
}

/// Every packet type that exists at `version`, with contents valid at that version.
fn arb_packet(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    let v5 = version.is_v5();
    let connack = (
        any::<bool>(),
        arb_reason(),
        props(version, PropCtx::ConnAck),
    )
        .prop_map(move |(session_present, reason_code, properties)| {
            Packet::ConnAck(ConnAck {
                // MQTT 3.1 has no session present flag.
                session_present: session_present && version != V31,
                reason_code,
                properties,
            })
        });
    let subscribe = (
        arb_id(),
        vec((arb_str(), arb_options(version)), 1..4),
        props(version, PropCtx::Subscribe),
    )
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Subscribe(Subscribe {
                packet_id,
                filters,
                properties,
            })
        });
    let suback = (
        arb_id(),
        vec(arb_reason(), 0..4),
        props(version, PropCtx::SubAck),
    )
        .prop_map(|(packet_id, reason_codes, properties)| {
            Packet::SubAck(SubAck {
                packet_id,
                reason_codes,
                properties,
            })
        });
    let unsubscribe = (
        arb_id(),
        vec(arb_str(), 1..4),
        props(version, PropCtx::Unsubscribe),
    )
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                filters,
                properties,
            })
        });
    let unsuback = (
        arb_id(),
        vec(arb_reason(), 0..4),
        props(version, PropCtx::UnsubAck),
    )
        .prop_map(move |(packet_id, reason_codes, properties)| {
            // The v3 UNSUBACK has no payload.
            let reason_codes = if v5 { reason_codes } else { Vec::new() };
            Packet::UnsubAck(UnsubAck {
                packet_id,
                reason_codes,
                properties,
            })
        });
    let disconnect = (v5_reason(version), props(version, PropCtx::Disconnect)).prop_map(
        |(reason_code, properties)| {
            Packet::Disconnect(Disconnect {
                reason_code,
                properties,
            })
        },
    );
    let common = prop_oneof![
        arb_connect(version),
        connack,
        arb_publish(version),
        arb_pub_resp(version, PropCtx::PubAck).prop_map(Packet::PubAck),
        arb_pub_resp(version, PropCtx::PubRec).prop_map(Packet::PubRec),
        arb_pub_resp(version, PropCtx::PubRel).prop_map(Packet::PubRel),
        arb_pub_resp(version, PropCtx::PubComp).prop_map(Packet::PubComp),
        subscribe,
        suback,
        unsubscribe,
        unsuback,
        Just(Packet::PingReq),
        Just(Packet::PingResp),
        disconnect,
    ];
    if v5 {
        let auth =
            (arb_reason(), arb_properties(PropCtx::Auth)).prop_map(|(reason_code, properties)| {
                Packet::Auth(Auth {
                    reason_code,
                    properties,
                })
            });
        prop_oneof![14 => common, 1 => auth].boxed()
    } else {
        common.boxed()
    }
}

fn arb_version() -> impl Strategy<Value = ProtocolVersion> {
    prop_oneof![Just(V31), Just(V311), Just(V5)]
}

fn round_trip(packet: &Packet, version: ProtocolVersion) -> Result<(), TestCaseError> {
    let mut buf = BytesMut::new();
    encode(packet, version, &mut buf).map_err(|e| TestCaseError::fail(format!("{e}")))?;
    let len = buf.len();
    prop_assert_eq!(peek_packet_len(&buf, u32::MAX), Ok(Some(len)));
    if let Packet::Publish(p) = packet {
        let header = publish_header_len(
            version,
            p.topic.len(),
            p.packet_id.is_some(),
            &p.properties,
            p.payload.len(),
        );
        prop_assert_eq!(header + p.payload.len(), len);
    }
    let decoded = decode(&mut buf, version, len as u32);
    prop_assert_eq!(decoded, Ok(Some(packet.clone())));
    prop_assert!(buf.is_empty());
    Ok(())
}

/// Decodes everything it can from `bytes`, checking that whatever decodes re-encodes to a
/// packet that decodes the same.
fn decode_all(bytes: &[u8], mut version: ProtocolVersion, max: u32) -> Result<(), TestCaseError> {
    let mut buf = BytesMut::from(bytes);
    loop {
        let before = buf.len();
        match decode(&mut buf, version, max) {
            Ok(Some(packet)) => {
                prop_assert!(buf.len() < before);
                if let Packet::Connect(c) = &packet {
                    version = c.protocol;
                }
                round_trip(&packet, version)?;
            }
            Ok(None) => {
                prop_assert_eq!(buf.len(), before);
                return Ok(());
            }
            Err(_) => return Ok(()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_v31(packet in arb_packet(V31)) {
        round_trip(&packet, V31)?;
    }

    #[test]
    fn round_trip_v311(packet in arb_packet(V311)) {
        round_trip(&packet, V311)?;
    }

    #[test]
    fn round_trip_v5(packet in arb_packet(V5)) {
        round_trip(&packet, V5)?;
    }

    #[test]
    fn decode_arbitrary_bytes_never_panics(
        bytes in vec(any::<u8>(), 0..300),
        version in arb_version(),
        max in prop_oneof![Just(u32::MAX), 0u32..400],
    ) {
        decode_all(&bytes, version, max)?;
    }

    #[test]
    fn decode_damaged_packets_never_panics(
        packet in arb_version().prop_flat_map(|v| (Just(v), arb_packet(v))),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let (version, packet) = packet;
        let mut bytes = enc(&packet, version);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep.max(1));
        decode_all(&bytes, version, u32::MAX)?;
    }

    #[test]
    fn truncated_packets_are_incomplete(
        packet in arb_version().prop_flat_map(|v| (Just(v), arb_packet(v))),
        cut in any::<prop::sample::Index>(),
    ) {
        let (version, packet) = packet;
        let bytes = enc(&packet, version);
        let keep = cut.index(bytes.len());
        let mut buf = BytesMut::from(&bytes[..keep]);
        prop_assert_eq!(decode(&mut buf, version, u32::MAX), Ok(None));
        prop_assert_eq!(&buf[..], &bytes[..keep]);
    }

    #[test]
    fn too_small_max_packet_size_is_too_large(
        packet in arb_version().prop_flat_map(|v| (Just(v), arb_packet(v))),
        below in 1u32..64,
        header_only in any::<bool>(),
    ) {
        let (version, packet) = packet;
        let bytes = enc(&packet, version);
        let size = bytes.len() as u32;
        let max = size.saturating_sub(below);
        // With only the fixed header buffered, the size is already known.
        let header = 1 + read_variable_int(&bytes[1..]).unwrap().unwrap().1;
        let keep = if header_only { header } else { bytes.len() };
        let mut buf = BytesMut::from(&bytes[..keep]);
        prop_assert_eq!(decode(&mut buf, version, max), Err(DecodeError::PacketTooLarge { size, max }));
        prop_assert_eq!(buf.len(), keep);
    }
}
