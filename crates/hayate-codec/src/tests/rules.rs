//! One failure test per decoding rule, named after the clause it checks (MQTT 5.0 numbering
//! unless the name says v311).

use super::*;
use DecodeError as E;
use ProtocolVersion::{V31, V311, V5};

// ------------------------------------------------------------------------- fixed header

#[test]
fn mqtt_2_1_3_1_subscribe_flags_must_be_0010() {
    let good = [0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x00];
    assert!(dec(&good, V311).is_ok());
    for first in [0x80, 0x83, 0x8A, 0x8F] {
        let mut bad = good;
        bad[0] = first;
        rejects(&bad, V311, E::InvalidFlags(first & 0x0F));
        rejects(&bad, V5, E::InvalidFlags(first & 0x0F));
    }
}

#[test]
fn mqtt_2_1_3_1_unsubscribe_flags_must_be_0010() {
    rejects(
        &[0xA0, 0x05, 0x00, 0x01, 0x00, 0x01, b'a'],
        V311,
        E::InvalidFlags(0),
    );
    rejects(
        &[0xA3, 0x05, 0x00, 0x01, 0x00, 0x01, b'a'],
        V5,
        E::InvalidFlags(3),
    );
}

#[test]
fn mqtt_2_1_3_1_pubrel_flags_must_be_0010() {
    rejects(&[0x60, 0x02, 0x00, 0x01], V311, E::InvalidFlags(0));
    rejects(&[0x6A, 0x02, 0x00, 0x01], V5, E::InvalidFlags(0x0A));
}

#[test]
fn mqtt_2_1_3_1_other_packets_have_zero_flags() {
    for (bytes, v) in [
        (&[0x11, 0x00][..], V311),
        (&[0x21, 0x02, 0x00, 0x00][..], V311),
        (&[0x42, 0x02, 0x00, 0x01][..], V311),
        (&[0x58, 0x02, 0x00, 0x01][..], V5),
        (&[0x72, 0x02, 0x00, 0x01][..], V5),
        (&[0x92, 0x03, 0x00, 0x01, 0x00][..], V311),
        (&[0xB2, 0x02, 0x00, 0x01][..], V311),
        (&[0xC1, 0x00][..], V311),
        (&[0xD4, 0x00][..], V5),
        (&[0xE8, 0x00][..], V311),
        (&[0xF1, 0x00][..], V5),
    ] {
        rejects(bytes, v, E::InvalidFlags(bytes[0] & 0x0F));
    }
}

#[test]
fn mqtt_2_1_3_1_flags_are_checked_before_the_body_arrives() {
    rejects(&[0xC1], V311, E::InvalidFlags(1));
}

#[test]
fn v31_accepts_dup_on_pubrel_subscribe_unsubscribe() {
    // MQTT 3.1 set DUP when re-sending these QoS 1 packets.
    assert_eq!(
        dec(&[0x6A, 0x02, 0x00, 0x01], V31),
        Ok(Packet::PubRel(PubResp::new(id(1))))
    );
    assert!(dec(&[0x8A, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x00], V31).is_ok());
    assert!(dec(&[0xAA, 0x05, 0x00, 0x01, 0x00, 0x01, b'a'], V31).is_ok());
    rejects(&[0x6A, 0x02, 0x00, 0x01], V311, E::InvalidFlags(0x0A));
}

#[test]
fn mqtt_2_1_2_reserved_packet_type_0() {
    rejects(&[0x00, 0x00], V311, E::InvalidPacketType(0));
    rejects(&[0x00, 0x00], V5, E::InvalidPacketType(0));
}

#[test]
fn mqtt_2_1_2_auth_is_v5_only() {
    rejects(&[0xF0, 0x00], V311, E::InvalidPacketType(15));
    rejects(&[0xF0, 0x00], V31, E::InvalidPacketType(15));
}

#[test]
fn mqtt_1_5_5_1_remaining_length_of_five_bytes_is_malformed() {
    rejects(
        &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
        V311,
        E::MalformedRemainingLength,
    );
    rejects(
        &[0x30, 0x80, 0x80, 0x80, 0x80],
        V5,
        E::MalformedRemainingLength,
    );
    assert_eq!(
        read_variable_int(&[0x80, 0x80, 0x80, 0x80]),
        Err(E::MalformedRemainingLength)
    );
}

#[test]
fn mqtt_1_5_5_1_overlong_variable_int_is_malformed() {
    // 0 written in two bytes instead of one.
    rejects(&[0xC0, 0x80, 0x00], V311, E::MalformedRemainingLength);
    assert_eq!(
        read_variable_int(&[0xFF, 0x80, 0x00]),
        Err(E::MalformedRemainingLength)
    );
}

#[test]
fn mqtt_3_2_2_15_too_large_rejected_before_the_body_arrives() {
    // Fixed header only: 2 + 200 bytes announced.
    let mut buf = BytesMut::from(&[0x30, 0xC8, 0x01][..]);
    assert_eq!(
        decode(&mut buf, V311, 100),
        Err(E::PacketTooLarge {
            size: 203,
            max: 100
        })
    );
    assert_eq!(buf.len(), 3, "buffer untouched");
    assert_eq!(
        peek_packet_len(&buf, 100),
        Err(E::PacketTooLarge {
            size: 203,
            max: 100
        })
    );
    assert_eq!(peek_packet_len(&buf, 203), Ok(Some(203)));
    assert_eq!(decode(&mut buf, V311, 203), Ok(None));
}

#[test]
fn incomplete_packets_leave_the_buffer_untouched() {
    let full = [
        0x33, 9, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'i',
    ];
    for cut in 0..full.len() {
        let mut buf = BytesMut::from(&full[..cut]);
        assert_eq!(decode(&mut buf, V311, MAX), Ok(None), "cut at {cut}");
        assert_eq!(&buf[..], &full[..cut]);
    }
}

// ---------------------------------------------------------------------------------- PUBLISH

#[test]
fn mqtt_3_3_1_4_publish_qos_3_is_malformed() {
    rejects(
        &[0x36, 0x05, 0x00, 0x01, b't', 0x00, 0x01],
        V311,
        E::InvalidQoS,
    );
    rejects(
        &[0x37, 0x05, 0x00, 0x01, b't', 0x00, 0x01],
        V5,
        E::InvalidQoS,
    );
}

#[test]
fn mqtt_3_3_1_2_dup_with_qos_0_is_malformed() {
    rejects(&[0x38, 0x03, 0x00, 0x01, b't'], V311, E::InvalidFlags(0x08));
    rejects(
        &[0x39, 0x04, 0x00, 0x01, b't', 0x00],
        V5,
        E::InvalidFlags(0x09),
    );
}

#[test]
fn mqtt_2_2_1_3_packet_id_zero_is_malformed() {
    rejects(
        &[0x32, 0x05, 0x00, 0x01, b't', 0x00, 0x00],
        V311,
        E::ZeroPacketId,
    );
    rejects(&[0x40, 0x02, 0x00, 0x00], V311, E::ZeroPacketId);
    rejects(&[0x50, 0x02, 0x00, 0x00], V5, E::ZeroPacketId);
    rejects(&[0x62, 0x02, 0x00, 0x00], V5, E::ZeroPacketId);
    rejects(&[0x70, 0x02, 0x00, 0x00], V5, E::ZeroPacketId);
    rejects(
        &[0x82, 0x06, 0x00, 0x00, 0x00, 0x01, b'a', 0x00],
        V311,
        E::ZeroPacketId,
    );
    rejects(&[0x90, 0x03, 0x00, 0x00, 0x00], V311, E::ZeroPacketId);
    rejects(
        &[0xA2, 0x05, 0x00, 0x00, 0x00, 0x01, b'a'],
        V311,
        E::ZeroPacketId,
    );
    rejects(&[0xB0, 0x02, 0x00, 0x00], V311, E::ZeroPacketId);
}

#[test]
fn publish_missing_packet_id_is_unexpected_eof() {
    rejects(
        &[0x32, 0x04, 0x00, 0x01, b't', 0x00],
        V311,
        E::UnexpectedEof,
    );
}

// ---------------------------------------------------------------------------------- strings

#[test]
fn mqtt_1_5_4_1_invalid_utf8_is_malformed() {
    rejects(&[0x30, 0x03, 0x00, 0x01, 0xFF], V311, E::InvalidUtf8);
    // A UTF-16 surrogate (U+D800) encoded in UTF-8 is not well-formed.
    rejects(
        &[0x30, 0x05, 0x00, 0x03, 0xED, 0xA0, 0x80],
        V5,
        E::InvalidUtf8,
    );
    // Also in a subscription filter and a user property.
    rejects(
        &[0x82, 0x06, 0x00, 0x01, 0x00, 0x01, 0xC3, 0x00],
        V311,
        E::InvalidUtf8,
    );
    rejects(
        &with_props(0x40, &[0x26, 0x00, 0x01, 0xFE, 0x00, 0x00]),
        V5,
        E::InvalidUtf8,
    );
}

#[test]
fn mqtt_1_5_4_2_nul_character_is_malformed() {
    rejects(&[0x30, 0x04, 0x00, 0x02, b'a', 0x00], V311, E::InvalidUtf8);
    rejects(
        &[0xA2, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00],
        V5,
        E::InvalidUtf8,
    );
}

#[test]
fn string_longer_than_the_packet_is_unexpected_eof() {
    rejects(&[0x30, 0x03, 0x00, 0x05, b'a'], V311, E::UnexpectedEof);
}

// ---------------------------------------------------------------------------------- CONNECT

fn connect(name: &[u8], level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    let mut body = vec![0x00, name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(&[level, flags, 0x00, 0x3C]);
    body.extend_from_slice(rest);
    let mut out = vec![0x10, body.len() as u8];
    out.extend_from_slice(&body);
    out
}

const CLIENT_ID: &[u8] = &[0x00, 0x01, b'c'];

#[test]
fn mqtt_3_1_2_1_invalid_protocol_name() {
    rejects(
        &connect(b"MQTX", 4, 0x02, CLIENT_ID),
        V311,
        E::InvalidProtocolName,
    );
    rejects(
        &connect(b"mqtt", 4, 0x02, CLIENT_ID),
        V311,
        E::InvalidProtocolName,
    );
    // The name is checked before the level is even read.
    rejects(
        &[0x10, 0x06, 0x00, 0x04, b'H', b'T', b'T', b'P'],
        V311,
        E::InvalidProtocolName,
    );
}

#[test]
fn mqtt_3_1_2_1_name_and_level_must_agree() {
    rejects(
        &connect(b"MQTT", 3, 0x02, CLIENT_ID),
        V311,
        E::InvalidProtocolName,
    );
    rejects(
        &connect(b"MQIsdp", 4, 0x02, CLIENT_ID),
        V311,
        E::InvalidProtocolName,
    );
    rejects(
        &connect(b"MQIsdp", 5, 0x02, &[0x00, 0x00, 0x01, b'c']),
        V5,
        E::InvalidProtocolName,
    );
}

#[test]
fn mqtt_3_1_2_2_unsupported_protocol_level() {
    rejects(
        &connect(b"MQTT", 6, 0x02, CLIENT_ID),
        V311,
        E::UnsupportedProtocolLevel(6),
    );
    rejects(
        &connect(b"MQTT", 0, 0x02, CLIENT_ID),
        V5,
        E::UnsupportedProtocolLevel(0),
    );
    rejects(
        &connect(b"MQIsdp", 2, 0x02, CLIENT_ID),
        V311,
        E::UnsupportedProtocolLevel(2),
    );
    assert_eq!(
        E::UnsupportedProtocolLevel(6).reason_code(),
        ReasonCode::UNSUPPORTED_PROTOCOL_VERSION
    );
}

#[test]
fn mqtt_3_1_2_3_connect_reserved_flag_must_be_zero() {
    rejects(
        &connect(b"MQTT", 4, 0x03, CLIENT_ID),
        V311,
        E::InvalidConnectFlags,
    );
    rejects(
        &connect(b"MQTT", 5, 0x01, &[0x00, 0x00, 0x01, b'c']),
        V5,
        E::InvalidConnectFlags,
    );
    rejects(
        &connect(b"MQIsdp", 3, 0x01, CLIENT_ID),
        V31,
        E::InvalidConnectFlags,
    );
}

#[test]
fn mqtt_3_1_2_11_will_qos_must_be_zero_without_will_flag() {
    rejects(
        &connect(b"MQTT", 4, 0x08, CLIENT_ID),
        V311,
        E::InvalidConnectFlags,
    );
    rejects(
        &connect(b"MQTT", 5, 0x10, &[0x00, 0x00, 0x01, b'c']),
        V5,
        E::InvalidConnectFlags,
    );
}

#[test]
fn mqtt_3_1_2_13_v5_will_retain_must_be_zero_without_will_flag() {
    rejects(
        &connect(b"MQTT", 5, 0x20, &[0x00, 0x00, 0x01, b'c']),
        V5,
        E::InvalidConnectFlags,
    );
}

#[test]
fn mqtt_3_1_2_15_v311_will_retain_must_be_zero_without_will_flag() {
    rejects(
        &connect(b"MQTT", 4, 0x20, CLIENT_ID),
        V311,
        E::InvalidConnectFlags,
    );
}

#[test]
fn mqtt_3_1_2_12_will_qos_3_is_malformed() {
    let will = [0x00, 0x01, b'c', 0x00, 0x01, b'w', 0x00, 0x00];
    rejects(&connect(b"MQTT", 4, 0x1C, &will), V311, E::InvalidQoS);
    let will5 = [0x00, 0x00, 0x01, b'c', 0x00, 0x00, 0x01, b'w', 0x00, 0x00];
    rejects(&connect(b"MQTT", 5, 0x1C, &will5), V5, E::InvalidQoS);
}

#[test]
fn mqtt_3_1_2_22_v311_password_without_user_name_is_malformed() {
    let rest = [0x00, 0x01, b'c', 0x00, 0x01, b'p'];
    rejects(
        &connect(b"MQTT", 4, 0x40, &rest),
        V311,
        E::InvalidConnectFlags,
    );
    rejects(
        &connect(b"MQIsdp", 3, 0x40, &rest),
        V31,
        E::InvalidConnectFlags,
    );
    // Allowed in MQTT 5.0 (§3.1.2.9).
    let rest5 = [0x00, 0x00, 0x01, b'c', 0x00, 0x01, b'p'];
    assert!(dec(&connect(b"MQTT", 5, 0x40, &rest5), V5).is_ok());
}

#[test]
fn mqtt_3_1_3_1_connect_payload_fields_must_follow_the_flags() {
    // User name flag set but no user name.
    rejects(
        &connect(b"MQTT", 4, 0x80, CLIENT_ID),
        V311,
        E::UnexpectedEof,
    );
    // Bytes after the last field the flags announce.
    let extra = [0x00, 0x01, b'c', 0x00, 0x01, b'u'];
    rejects(&connect(b"MQTT", 4, 0x00, &extra), V311, E::TrailingBytes);
}

#[test]
fn mqtt_3_1_2_11_will_properties_only_in_the_will() {
    // Will Delay Interval in the CONNECT properties instead of the will properties.
    let rest = [0x05, 0x18, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, b'c'];
    rejects(
        &connect(b"MQTT", 5, 0x00, &rest),
        V5,
        E::PropertyNotAllowed(0x18),
    );
    // Payload Format Indicator belongs to the will, not to CONNECT.
    let rest = [0x02, 0x01, 0x01, 0x00, 0x01, b'c'];
    rejects(
        &connect(b"MQTT", 5, 0x00, &rest),
        V5,
        E::PropertyNotAllowed(0x01),
    );
    // Session Expiry Interval in the will properties.
    #[rustfmt::skip]
    let rest = [
        0x00, 0x00, 0x01, b'c',
        0x05, 0x11, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x01, b'w', 0x00, 0x00,
    ];
    rejects(
        &connect(b"MQTT", 5, 0x04, &rest),
        V5,
        E::PropertyNotAllowed(0x11),
    );
    // ...while the will properties accept every will property.
    #[rustfmt::skip]
    let rest = [
        0x00, 0x00, 0x01, b'c',
        29,
        0x01, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x01,
        0x03, 0x00, 0x01, b't',
        0x08, 0x00, 0x01, b'r',
        0x09, 0x00, 0x01, 0x07,
        0x18, 0x00, 0x00, 0x00, 0x01,
        0x26, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, b'w', 0x00, 0x00,
    ];
    assert!(dec(&connect(b"MQTT", 5, 0x04, &rest), V5).is_ok());
}

#[test]
fn mqtt_3_1_2_11_10_authentication_data_needs_a_method() {
    let rest = [0x04, 0x16, 0x00, 0x01, 0x01, 0x00, 0x01, b'c'];
    rejects(
        &connect(b"MQTT", 5, 0x00, &rest),
        V5,
        E::PropertyNotAllowed(0x16),
    );
}

// ---------------------------------------------------------------------------------- CONNACK

#[test]
fn mqtt_3_2_2_1_connack_reserved_flags_must_be_zero() {
    rejects(&[0x20, 0x02, 0x02, 0x00], V311, E::InvalidConnectFlags);
    rejects(&[0x20, 0x03, 0x80, 0x00, 0x00], V5, E::InvalidConnectFlags);
}

#[test]
fn mqtt_3_2_2_connack_v311_is_exactly_two_bytes() {
    rejects(&[0x20, 0x03, 0x00, 0x00, 0x00], V311, E::TrailingBytes);
    rejects(&[0x20, 0x01, 0x00], V311, E::UnexpectedEof);
    // v5 CONNACK always has a property length.
    rejects(&[0x20, 0x02, 0x00, 0x00], V5, E::UnexpectedEof);
}

// ------------------------------------------------------------------------ SUBSCRIBE family

#[test]
fn mqtt_3_8_3_2_subscribe_without_filters_is_an_error() {
    rejects(&[0x82, 0x02, 0x00, 0x01], V311, E::NoTopicFilters);
    rejects(&[0x82, 0x03, 0x00, 0x01, 0x00], V5, E::NoTopicFilters);
    assert_eq!(E::NoTopicFilters.reason_code(), ReasonCode::PROTOCOL_ERROR);
}

#[test]
fn mqtt_3_10_3_2_unsubscribe_without_filters_is_an_error() {
    rejects(&[0xA2, 0x02, 0x00, 0x01], V311, E::NoTopicFilters);
    rejects(&[0xA2, 0x03, 0x00, 0x01, 0x00], V5, E::NoTopicFilters);
}

#[test]
fn subscribe_filter_without_options_byte_is_unexpected_eof() {
    rejects(
        &[0x82, 0x05, 0x00, 0x01, 0x00, 0x01, b'a'],
        V311,
        E::UnexpectedEof,
    );
}

fn subscribe5(options: u8) -> [u8; 9] {
    [0x82, 0x07, 0x00, 0x01, 0x00, 0x00, 0x01, b'a', options]
}

#[test]
fn mqtt_3_8_3_5_reserved_option_bits_must_be_zero() {
    rejects(&subscribe5(0x40), V5, E::InvalidSubscriptionOptions);
    rejects(&subscribe5(0x81), V5, E::InvalidSubscriptionOptions);
}

#[test]
fn mqtt_3_8_3_5_retain_handling_3_is_malformed() {
    rejects(&subscribe5(0x30), V5, E::InvalidSubscriptionOptions);
    assert!(dec(&subscribe5(0x20), V5).is_ok());
}

#[test]
fn mqtt_3_8_3_1_subscription_qos_3_is_an_error() {
    rejects(&subscribe5(0x03), V5, E::InvalidQoS);
    rejects(
        &[0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x03],
        V311,
        E::InvalidQoS,
    );
}

#[test]
fn mqtt_3_8_3_4_v311_requested_qos_upper_bits_must_be_zero() {
    // Bits that are v5 options (no local, retain handling) are reserved in v3.
    for options in [0x04, 0x08, 0x20, 0x80] {
        let bytes = [0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', options];
        rejects(&bytes, V311, E::InvalidSubscriptionOptions);
        rejects(&bytes, V31, E::InvalidSubscriptionOptions);
    }
}

// --------------------------------------------------------------------------- trailing bytes

#[test]
fn mqtt_3_12_1_pingreq_with_payload_is_malformed() {
    rejects(&[0xC0, 0x01, 0x00], V311, E::TrailingBytes);
    rejects(&[0xD0, 0x01, 0x00], V5, E::TrailingBytes);
}

#[test]
fn mqtt_3_14_1_v311_disconnect_with_payload_is_malformed() {
    rejects(&[0xE0, 0x01, 0x00], V311, E::TrailingBytes);
}

#[test]
fn mqtt_3_4_1_v311_puback_longer_than_two_is_malformed() {
    rejects(&[0x40, 0x03, 0x00, 0x01, 0x00], V311, E::TrailingBytes);
    rejects(&[0x40, 0x01, 0x00], V311, E::UnexpectedEof);
    rejects(&[0xB0, 0x03, 0x00, 0x01, 0x00], V311, E::TrailingBytes);
}

#[test]
fn v5_puback_bytes_after_properties_are_malformed() {
    rejects(
        &[0x40, 0x05, 0x00, 0x01, 0x00, 0x00, 0xFF],
        V5,
        E::TrailingBytes,
    );
    rejects(&[0xE0, 0x03, 0x00, 0x00, 0xFF], V5, E::TrailingBytes);
    rejects(&[0xF0, 0x03, 0x00, 0x00, 0xFF], V5, E::TrailingBytes);
}

#[test]
fn v5_auth_with_reason_needs_property_length() {
    // 3.15.2.1: only both reason code and property length may be omitted.
    rejects(&[0xF0, 0x01, 0x18], V5, E::UnexpectedEof);
}

// ------------------------------------------------------------------------------- properties

#[test]
fn mqtt_2_2_2_property_length_beyond_the_packet_is_malformed() {
    rejects(
        &[0x40, 0x05, 0x00, 0x01, 0x00, 0x09, 0x1F],
        V5,
        E::UnexpectedEof,
    );
    // A property value cut by the end of the property block.
    rejects(
        &with_props(0x40, &[0x1F, 0x00, 0x05, b'a']),
        V5,
        E::UnexpectedEof,
    );
}

#[test]
fn mqtt_2_2_2_2_unknown_property_is_malformed() {
    rejects(
        &with_props(0x40, &[0x05, 0x00]),
        V5,
        E::UnknownProperty(0x05),
    );
    rejects(
        &with_props(0x40, &[0x80, 0x01]),
        V5,
        E::UnknownProperty(0x80),
    );
    rejects(&with_props(0x40, &[0x00]), V5, E::UnknownProperty(0x00));
}

#[test]
fn mqtt_2_2_2_2_property_not_allowed_in_packet() {
    // Topic Alias only in PUBLISH.
    rejects(
        &with_props(0x40, &[0x23, 0x00, 0x01]),
        V5,
        E::PropertyNotAllowed(0x23),
    );
    // Session Expiry Interval only in CONNECT, CONNACK, DISCONNECT.
    let publish = [
        0x30, 0x09, 0x00, 0x01, b't', 0x05, 0x11, 0x00, 0x00, 0x00, 0x01,
    ];
    rejects(&publish, V5, E::PropertyNotAllowed(0x11));
    // Content Type in PUBACK.
    rejects(
        &with_props(0x40, &[0x03, 0x00, 0x00]),
        V5,
        E::PropertyNotAllowed(0x03),
    );
    // Reason String not in UNSUBSCRIBE.
    let unsub = [0xA2, 0x08, 0x00, 0x01, 0x03, 0x1F, 0x00, 0x00, 0x00, 0x00];
    rejects(&unsub, V5, E::PropertyNotAllowed(0x1F));
    assert_eq!(
        E::PropertyNotAllowed(0x1F).reason_code(),
        ReasonCode::PROTOCOL_ERROR
    );
}

#[test]
fn mqtt_2_2_2_2_duplicate_property_is_a_protocol_error() {
    let twice = [0x1F, 0x00, 0x00, 0x1F, 0x00, 0x00];
    rejects(&with_props(0x40, &twice), V5, E::DuplicateProperty(0x1F));
    // Subscription Identifier at most once in SUBSCRIBE.
    let sub = [
        0x82, 11, 0x00, 0x01, 0x04, 0x0B, 0x01, 0x0B, 0x02, 0x00, 0x01, b'a', 0x00,
    ];
    rejects(&sub, V5, E::DuplicateProperty(0x0B));
}

#[test]
fn mqtt_2_2_2_2_user_property_and_publish_subscription_ids_may_repeat() {
    let props = [
        0x26, 0x00, 0x01, b'a', 0x00, 0x00, 0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'x',
    ];
    let Packet::PubAck(p) = dec(&with_props(0x40, &props), V5).unwrap() else {
        panic!()
    };
    assert_eq!(
        p.properties.user_properties,
        vec![(s("a"), s("")), (s("a"), s("x"))]
    );
    let publish = [0x30, 0x08, 0x00, 0x01, b't', 0x04, 0x0B, 0x02, 0x0B, 0x01];
    let Packet::Publish(p) = dec(&publish, V5).unwrap() else {
        panic!()
    };
    assert_eq!(p.properties.subscription_identifiers, vec![2, 1]);
}

fn connack_props(props: &[u8]) -> Vec<u8> {
    let mut out = vec![0x20, (props.len() + 3) as u8, 0x00, 0x00, props.len() as u8];
    out.extend_from_slice(props);
    out
}

#[test]
fn mqtt_3_3_2_3_2_payload_format_indicator_must_be_0_or_1() {
    let publish = [0x30, 0x06, 0x00, 0x01, b't', 0x02, 0x01, 0x02];
    rejects(&publish, V5, E::InvalidPropertyValue(0x01));
}

#[test]
fn mqtt_3_1_2_11_request_information_must_be_0_or_1() {
    let rest = [0x02, 0x17, 0x02, 0x00, 0x01, b'c'];
    rejects(
        &connect(b"MQTT", 5, 0x00, &rest),
        V5,
        E::InvalidPropertyValue(0x17),
    );
    let rest = [0x02, 0x19, 0x05, 0x00, 0x01, b'c'];
    rejects(
        &connect(b"MQTT", 5, 0x00, &rest),
        V5,
        E::InvalidPropertyValue(0x19),
    );
}

#[test]
fn mqtt_3_2_2_3_connack_flag_properties_must_be_0_or_1() {
    for prop in [0x24, 0x25, 0x28, 0x29, 0x2A] {
        rejects(
            &connack_props(&[prop, 0x02]),
            V5,
            E::InvalidPropertyValue(prop),
        );
        assert!(dec(&connack_props(&[prop, 0x01]), V5).is_ok());
    }
}

#[test]
fn mqtt_3_1_2_11_3_receive_maximum_0_is_a_protocol_error() {
    rejects(
        &connack_props(&[0x21, 0x00, 0x00]),
        V5,
        E::InvalidPropertyValue(0x21),
    );
    assert_eq!(
        E::InvalidPropertyValue(0x21).reason_code(),
        ReasonCode::PROTOCOL_ERROR
    );
}

#[test]
fn mqtt_3_1_2_11_4_maximum_packet_size_0_is_a_protocol_error() {
    rejects(
        &connack_props(&[0x27, 0x00, 0x00, 0x00, 0x00]),
        V5,
        E::InvalidPropertyValue(0x27),
    );
}

#[test]
fn mqtt_3_3_2_3_8_subscription_identifier_0_is_a_protocol_error() {
    let publish = [0x30, 0x06, 0x00, 0x01, b't', 0x02, 0x0B, 0x00];
    rejects(&publish, V5, E::InvalidPropertyValue(0x0B));
    rejects(
        &subscribe_with_sub_id(0x00),
        V5,
        E::InvalidPropertyValue(0x0B),
    );
}

fn subscribe_with_sub_id(v: u8) -> [u8; 11] {
    [
        0x82, 0x09, 0x00, 0x01, 0x02, 0x0B, v, 0x00, 0x01, b'a', 0x00,
    ]
}

#[test]
fn mqtt_3_3_2_8_topic_alias_0_is_not_permitted() {
    let publish = [0x30, 0x06, 0x00, 0x00, 0x03, 0x23, 0x00, 0x00];
    rejects(&publish, V5, E::InvalidPropertyValue(0x23));
}

#[test]
fn mqtt_1_5_5_1_subscription_identifier_overlong_is_malformed() {
    let publish = [0x30, 0x07, 0x00, 0x01, b't', 0x03, 0x0B, 0x81, 0x00];
    rejects(&publish, V5, E::MalformedRemainingLength);
}

#[test]
fn v3_packets_have_no_properties() {
    // The same bytes that are a v5 PUBACK with a property block are malformed in v3.1.1.
    rejects(
        &[0x40, 0x04, 0x00, 0x01, 0x00, 0x00],
        V311,
        E::TrailingBytes,
    );
    // A v3 PUBLISH's "property length" is just payload.
    let Packet::Publish(p) = dec(&[0x30, 0x04, 0x00, 0x01, b't', 0x00], V311).unwrap() else {
        panic!()
    };
    assert_eq!(&p.payload[..], &[0x00]);
}
