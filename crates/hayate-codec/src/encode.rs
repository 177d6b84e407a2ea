//! Packets -> bytes.
//!
//! Every packet's exact size is computed (and every field checked) before the first byte is
//! written, so a failed encode leaves `buf` unchanged and a successful one reserves once.
//!
//! The encoder writes what it is given whenever the wire format can carry it; it does not
//! second-guess values (a v3 SUBACK carries the reason codes as return codes, a v3 CONNACK the
//! given return code). At v3 levels, properties and v5-only reason codes are dropped.

use crate::error::EncodeError;
use crate::packet::{Connect, Packet, PacketType, PubResp, SubscriptionOptions};
use crate::properties::Properties;
use crate::props::{checked_property_block_len, property_block_len, write_properties};
use crate::types::{PacketId, ProtocolVersion, QoS, ReasonCode};
use crate::MAX_VARIABLE_INT;
use bytes::{BufMut, BytesMut};

/// Number of bytes `value` takes as a variable byte integer (1..=4).
///
/// Values above [`MAX_VARIABLE_INT`](crate::MAX_VARIABLE_INT) cannot be encoded; they are
/// counted as 4 bytes, matching [`write_variable_int`].
pub fn variable_int_len(value: u32) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Appends `value` as a variable byte integer.
///
/// Values above [`MAX_VARIABLE_INT`](crate::MAX_VARIABLE_INT) cannot be encoded and are
/// written as that maximum; [`encode`] refuses such values before writing anything.
pub fn write_variable_int(value: u32, buf: &mut BytesMut) {
    // [MQTT-1.5.5-1] minimum number of bytes, at most four.
    let mut value = value.min(MAX_VARIABLE_INT);
    loop {
        let byte = (value & 0x7F) as u8;
        value >>= 7;
        if value == 0 {
            buf.put_u8(byte);
            return;
        }
        buf.put_u8(byte | 0x80);
    }
}

/// Two-byte length then the bytes (UTF-8 string 1.5.4, binary data 1.5.6). Callers check the
/// length first; longer input is cut at 65,535 bytes rather than written inconsistently.
pub(crate) fn put_binary(bytes: &[u8], buf: &mut BytesMut) {
    let len = bytes.len().min(usize::from(u16::MAX));
    buf.put_u16(len as u16);
    buf.put_slice(bytes.get(..len).unwrap_or_default());
}

fn field_len(len: usize) -> Result<usize, EncodeError> {
    if len > usize::from(u16::MAX) {
        return Err(EncodeError::FieldTooLong);
    }
    Ok(2 + len)
}

fn check_remaining(remaining: usize) -> Result<u32, EncodeError> {
    u32::try_from(remaining)
        .ok()
        .filter(|&r| r <= MAX_VARIABLE_INT)
        .ok_or(EncodeError::PacketTooLarge)
}

/// Appends the encoding of `packet` for protocol level `version`.
///
/// CONNECT is written at its own `protocol` level (`version` is not used for it). AUTH below
/// v5 is [`EncodeError::WrongVersion`]. Nothing is appended when an error is returned.
pub fn encode(
    packet: &Packet,
    version: ProtocolVersion,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    if let Packet::Publish(p) = packet {
        let layout = PublishLayout::new(
            version,
            p.qos,
            p.topic.len(),
            p.packet_id,
            &p.properties,
            p.payload.len(),
        )?;
        buf.reserve(layout.header_len + p.payload.len());
        write_publish_header(
            &layout,
            version,
            p.dup,
            p.qos,
            p.retain,
            p.topic.as_bytes(),
            p.packet_id,
            &p.properties,
            buf,
        );
        buf.put_slice(&p.payload);
        return Ok(());
    }
    let (first, remaining) = fixed_header(packet, version)?;
    let remaining32 = check_remaining(remaining)?;
    buf.reserve(1 + variable_int_len(remaining32) + remaining);
    buf.put_u8(first);
    write_variable_int(remaining32, buf);
    write_body(packet, version, buf);
    Ok(())
}

/// The first byte and the remaining length of every packet but PUBLISH, with all checks.
fn fixed_header(packet: &Packet, version: ProtocolVersion) -> Result<(u8, usize), EncodeError> {
    let v5 = version.is_v5();
    let props = |p: &Properties| {
        if v5 {
            checked_property_block_len(p)
        } else {
            Ok(0)
        }
    };
    Ok(match packet {
        Packet::Connect(c) => (0x10, connect_len(c)?),
        Packet::ConnAck(c) => (0x20, 2 + props(&c.properties)?),
        // `encode` handles PUBLISH itself and never gets here.
        Packet::Publish(_) => return Err(EncodeError::WrongVersion),
        Packet::PubAck(r) => (0x40, pub_resp_len(r, v5)?),
        Packet::PubRec(r) => (0x50, pub_resp_len(r, v5)?),
        // [MQTT-3.6.1-1] PUBREL fixed header flags 0010.
        Packet::PubRel(r) => (0x62, pub_resp_len(r, v5)?),
        Packet::PubComp(r) => (0x70, pub_resp_len(r, v5)?),
        Packet::Subscribe(s) => {
            // [MQTT-3.8.1-1] SUBSCRIBE fixed header flags 0010.
            let mut len = 2 + props(&s.properties)?;
            for (filter, options) in &s.filters {
                // Retain handling has two bits; larger values cannot be written.
                if v5 && options.retain_handling > 3 {
                    return Err(EncodeError::InvalidValue);
                }
                len += field_len(filter.len())? + 1;
            }
            (0x82, len)
        }
        Packet::SubAck(s) => (0x90, 2 + props(&s.properties)? + s.reason_codes.len()),
        Packet::Unsubscribe(u) => {
            // [MQTT-3.10.1-1] UNSUBSCRIBE fixed header flags 0010.
            let mut len = 2 + props(&u.properties)?;
            for filter in &u.filters {
                len += field_len(filter.len())?;
            }
            (0xA2, len)
        }
        Packet::UnsubAck(u) => {
            // 3.1.1 3.11: no payload, remaining length 2.
            let len = if v5 {
                2 + props(&u.properties)? + u.reason_codes.len()
            } else {
                2
            };
            (0xB0, len)
        }
        Packet::PingReq => (0xC0, 0),
        Packet::PingResp => (0xD0, 0),
        Packet::Disconnect(d) => {
            let len = if !v5 || (d.reason_code == ReasonCode::SUCCESS && d.properties.is_empty()) {
                // v3 DISCONNECT is empty; v5 3.14.2.1: reason omitted when 0 and no properties.
                0
            } else if d.properties.is_empty() {
                // 3.14.2.2.1: property length omitted when the remaining length is below 2.
                1
            } else {
                1 + checked_property_block_len(&d.properties)?
            };
            (0xE0, len)
        }
        Packet::Auth(a) => {
            if !v5 {
                return Err(EncodeError::WrongVersion);
            }
            let len = if a.reason_code == ReasonCode::SUCCESS && a.properties.is_empty() {
                // 3.15.2.1: both omitted, remaining length 0.
                0
            } else {
                1 + checked_property_block_len(&a.properties)?
            };
            (0xF0, len)
        }
    })
}

/// Appends a PUBACK, PUBREC, PUBREL or PUBCOMP without properties: the same bytes as
/// [`encode`] of that packet with `Properties::default()`, without building the packet (the
/// broker writes one of these for nearly every QoS 1/2 message). Any other `packet_type` is
/// [`EncodeError::InvalidValue`] and appends nothing.
pub fn encode_pub_resp(
    packet_type: PacketType,
    packet_id: PacketId,
    reason_code: ReasonCode,
    version: ProtocolVersion,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let first = match packet_type {
        PacketType::PubAck => 0x40,
        PacketType::PubRec => 0x50,
        // [MQTT-3.6.1-1] PUBREL fixed header flags 0010.
        PacketType::PubRel => 0x62,
        PacketType::PubComp => 0x70,
        _ => return Err(EncodeError::InvalidValue),
    };
    let [high, low] = packet_id.get().to_be_bytes();
    // 3.4.2.1: the reason code is omitted (remaining length 2) when it is 0x00 and there are
    // no properties; v3 has none. 3.4.2.2.1: no property length below remaining length 4.
    if version.is_v5() && reason_code != ReasonCode::SUCCESS {
        buf.put_slice(&[first, 3, high, low, reason_code.0]);
    } else {
        buf.put_slice(&[first, 2, high, low]);
    }
    Ok(())
}

fn pub_resp_len(r: &PubResp, v5: bool) -> Result<usize, EncodeError> {
    Ok(
        if !v5 || (r.reason_code == ReasonCode::SUCCESS && r.properties.is_empty()) {
            // 3.4.2.1: remaining length 2 when reason 0x00 and no properties.
            2
        } else if r.properties.is_empty() {
            // 3.4.2.2.1: no property length when the remaining length is below 4.
            3
        } else {
            3 + checked_property_block_len(&r.properties)?
        },
    )
}

fn protocol_name(version: ProtocolVersion) -> &'static [u8] {
    match version {
        ProtocolVersion::V31 => b"MQIsdp",
        ProtocolVersion::V311 | ProtocolVersion::V5 => b"MQTT",
    }
}

fn connect_len(c: &Connect) -> Result<usize, EncodeError> {
    let v5 = c.protocol.is_v5();
    let props = |p: &Properties| {
        if v5 {
            checked_property_block_len(p)
        } else {
            Ok(0)
        }
    };
    // Protocol name, level, flags, keep alive.
    let mut len = 2 + protocol_name(c.protocol).len() + 1 + 1 + 2;
    len += props(&c.properties)?;
    len += field_len(c.client_id.len())?;
    if let Some(w) = &c.will {
        len += props(&w.properties)?;
        len += field_len(w.topic.len())?;
        len += field_len(w.payload.len())?;
    }
    if let Some(u) = &c.username {
        len += field_len(u.len())?;
    }
    if let Some(p) = &c.password {
        len += field_len(p.len())?;
    }
    Ok(len)
}

fn connect_flags(c: &Connect) -> u8 {
    let mut flags = 0u8;
    if c.clean_start {
        flags |= 0x02;
    }
    if let Some(w) = &c.will {
        flags |= 0x04 | ((w.qos as u8) << 3);
        if w.retain {
            flags |= 0x20;
        }
    }
    if c.password.is_some() {
        flags |= 0x40;
    }
    if c.username.is_some() {
        flags |= 0x80;
    }
    flags
}

fn subscription_options_byte(o: &SubscriptionOptions, v5: bool) -> u8 {
    let mut b = o.qos as u8;
    if v5 {
        if o.no_local {
            b |= 0x04;
        }
        if o.retain_as_published {
            b |= 0x08;
        }
        b |= (o.retain_handling & 0x03) << 4;
    }
    b
}

fn put_reason_codes(codes: &[ReasonCode], buf: &mut BytesMut) {
    for c in codes {
        buf.put_u8(c.0);
    }
}

/// Writes the variable header and payload of every packet but PUBLISH. Call only after
/// [`fixed_header`] succeeded for the same packet and version: it did every check, and the
/// sizes it computed are exactly what this writes.
fn write_body(packet: &Packet, version: ProtocolVersion, buf: &mut BytesMut) {
    let v5 = version.is_v5();
    let props = |p: &Properties, buf: &mut BytesMut| {
        if v5 {
            write_properties(p, buf);
        }
    };
    match packet {
        Packet::Connect(c) => {
            let v5 = c.protocol.is_v5();
            put_binary(protocol_name(c.protocol), buf);
            let bridge_bit = if c.bridge && !c.protocol.is_v5() {
                0x80
            } else {
                0
            };
            buf.put_u8(c.protocol.level() | bridge_bit);
            buf.put_u8(connect_flags(c));
            buf.put_u16(c.keep_alive);
            if v5 {
                write_properties(&c.properties, buf);
            }
            put_binary(c.client_id.as_bytes(), buf);
            if let Some(w) = &c.will {
                if v5 {
                    write_properties(&w.properties, buf);
                }
                put_binary(w.topic.as_bytes(), buf);
                put_binary(&w.payload, buf);
            }
            if let Some(u) = &c.username {
                put_binary(u.as_bytes(), buf);
            }
            if let Some(p) = &c.password {
                put_binary(p, buf);
            }
        }
        Packet::ConnAck(c) => {
            // MQTT 3.1 has no session present flag; its first byte is reserved.
            let session_present = c.session_present && version != ProtocolVersion::V31;
            buf.put_u8(u8::from(session_present));
            buf.put_u8(c.reason_code.0);
            props(&c.properties, buf);
        }
        Packet::Publish(_) => {}
        Packet::PubAck(r) | Packet::PubRec(r) | Packet::PubRel(r) | Packet::PubComp(r) => {
            buf.put_u16(r.packet_id.get());
            if v5 && !(r.reason_code == ReasonCode::SUCCESS && r.properties.is_empty()) {
                buf.put_u8(r.reason_code.0);
                if !r.properties.is_empty() {
                    write_properties(&r.properties, buf);
                }
            }
        }
        Packet::Subscribe(s) => {
            buf.put_u16(s.packet_id.get());
            props(&s.properties, buf);
            for (filter, options) in &s.filters {
                put_binary(filter.as_bytes(), buf);
                buf.put_u8(subscription_options_byte(options, v5));
            }
        }
        Packet::SubAck(s) => {
            buf.put_u16(s.packet_id.get());
            props(&s.properties, buf);
            put_reason_codes(&s.reason_codes, buf);
        }
        Packet::Unsubscribe(u) => {
            buf.put_u16(u.packet_id.get());
            props(&u.properties, buf);
            for filter in &u.filters {
                put_binary(filter.as_bytes(), buf);
            }
        }
        Packet::UnsubAck(u) => {
            buf.put_u16(u.packet_id.get());
            if v5 {
                write_properties(&u.properties, buf);
                put_reason_codes(&u.reason_codes, buf);
            }
        }
        Packet::PingReq | Packet::PingResp => {}
        Packet::Disconnect(d) => {
            if v5 && !(d.reason_code == ReasonCode::SUCCESS && d.properties.is_empty()) {
                buf.put_u8(d.reason_code.0);
                if !d.properties.is_empty() {
                    write_properties(&d.properties, buf);
                }
            }
        }
        Packet::Auth(a) => {
            if !(a.reason_code == ReasonCode::SUCCESS && a.properties.is_empty()) {
                buf.put_u8(a.reason_code.0);
                write_properties(&a.properties, buf);
            }
        }
    }
}

/// Sizes of a PUBLISH, computed and checked once.
struct PublishLayout {
    /// Fixed header + variable header.
    header_len: usize,
    remaining: u32,
}

impl PublishLayout {
    fn new(
        version: ProtocolVersion,
        qos: QoS,
        topic_len: usize,
        packet_id: Option<PacketId>,
        properties: &Properties,
        payload_len: usize,
    ) -> Result<PublishLayout, EncodeError> {
        // [MQTT-2.2.1-2] ([3.1.1: MQTT-2.3.1-5]) a packet identifier exactly when QoS > 0.
        if packet_id.is_some() != (qos != QoS::AtMostOnce) {
            return Err(EncodeError::PacketIdMismatch);
        }
        let mut var = field_len(topic_len)?;
        if packet_id.is_some() {
            var += 2;
        }
        if version.is_v5() {
            var += checked_property_block_len(properties)?;
        }
        let remaining = check_remaining(var.saturating_add(payload_len))?;
        Ok(PublishLayout {
            header_len: 1 + variable_int_len(remaining) + var,
            remaining,
        })
    }
}

/// Length in bytes of a PUBLISH's fixed header plus variable header (topic, packet id,
/// properties) when its payload is `payload_len` bytes. The whole packet is this plus
/// `payload_len`.
pub fn publish_header_len(
    version: ProtocolVersion,
    topic_len: usize,
    has_packet_id: bool,
    properties: &Properties,
    payload_len: usize,
) -> usize {
    let mut var = 2usize.saturating_add(topic_len);
    if has_packet_id {
        var = var.saturating_add(2);
    }
    if version.is_v5() {
        var = var.saturating_add(property_block_len(properties));
    }
    let remaining = u32::try_from(var.saturating_add(payload_len)).unwrap_or(u32::MAX);
    (1 + variable_int_len(remaining)).saturating_add(var)
}

/// Appends the fixed header and variable header of a PUBLISH whose payload (of `payload_len`
/// bytes) the caller appends next. This is what lets the broker encode a message once and
/// share its payload bytes among all subscribers.
///
/// The flags are written as given (the caller keeps DUP at 0 for QoS 0 [MQTT-3.3.1-2]).
/// Nothing is appended when an error is returned.
#[allow(clippy::too_many_arguments)]
pub fn encode_publish_header(
    version: ProtocolVersion,
    dup: bool,
    qos: QoS,
    retain: bool,
    topic: &[u8],
    packet_id: Option<PacketId>,
    properties: &Properties,
    payload_len: usize,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let layout = PublishLayout::new(
        version,
        qos,
        topic.len(),
        packet_id,
        properties,
        payload_len,
    )?;
    buf.reserve(layout.header_len);
    write_publish_header(
        &layout, version, dup, qos, retain, topic, packet_id, properties, buf,
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_publish_header(
    layout: &PublishLayout,
    version: ProtocolVersion,
    dup: bool,
    qos: QoS,
    retain: bool,
    topic: &[u8],
    packet_id: Option<PacketId>,
    properties: &Properties,
    buf: &mut BytesMut,
) {
    let mut first = 0x30 | ((qos as u8) << 1);
    if dup {
        first |= 0x08;
    }
    if retain {
        first |= 0x01;
    }
    buf.put_u8(first);
    write_variable_int(layout.remaining, buf);
    put_binary(topic, buf);
    if let Some(id) = packet_id {
        buf.put_u16(id.get());
    }
    if version.is_v5() {
        write_properties(properties, buf);
    }
}
