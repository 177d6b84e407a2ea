//! Bytes -> packets.
//!
//! Citations follow docs/ARCHITECTURE.md, "Spec citations": `[MQTT-x.y.z-n]` is MQTT 5.0,
//! `[3.1.1: MQTT-x.y.z-n]` is 3.1.1; where both versions have the rule under different numbers,
//! both are given.

use crate::error::DecodeError;
use crate::packet::{
    Auth, ConnAck, Connect, Disconnect, Packet, PacketType, PubResp, Publish, SubAck, Subscribe,
    SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};
use crate::properties::Properties;
use crate::props::{decode_properties, PropCtx};
use crate::types::{ByteStr, PacketId, ProtocolVersion, QoS, ReasonCode};
use bytes::{Buf, Bytes, BytesMut};

/// Reads a variable byte integer from the start of `buf`.
///
/// Returns `Ok(None)` when `buf` ends before the integer does, `Ok(Some((value, bytes_used)))`
/// otherwise; more than four bytes is malformed [MQTT-1.5.5-1], and so is an encoding that
/// does not use the minimum number of bytes (a last byte of 0 after continuation bytes).
pub fn read_variable_int(buf: &[u8]) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value: u32 = 0;
    for (i, &byte) in buf.iter().take(4).enumerate() {
        value |= u32::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            // [MQTT-1.5.5-1] "The encoded value MUST use the minimum number of bytes necessary
            // to represent the value".
            if i > 0 && byte == 0 {
                return Err(DecodeError::MalformedRemainingLength);
            }
            return Ok(Some((value, i + 1)));
        }
    }
    if buf.len() >= 4 {
        // Four bytes, all with the continuation bit: a fifth would be needed [MQTT-1.5.5-1].
        Err(DecodeError::MalformedRemainingLength)
    } else {
        Ok(None)
    }
}

/// Looks at the fixed header at the start of `buf` and returns the total length of the packet
/// (fixed header + remaining length) once the fixed header is complete, without needing the body.
///
/// Fails with [`DecodeError::PacketTooLarge`] when that total exceeds `max_packet_size`, so a
/// caller never buffers more than the limit.
pub fn peek_packet_len(buf: &[u8], max_packet_size: u32) -> Result<Option<usize>, DecodeError> {
    Ok(fixed_header_len(buf, max_packet_size)?.map(|(total, _)| total))
}

/// `(total packet length, fixed header length)` once the fixed header is complete.
fn fixed_header_len(
    buf: &[u8],
    max_packet_size: u32,
) -> Result<Option<(usize, usize)>, DecodeError> {
    let Some(rest) = buf.get(1..) else {
        return Ok(None);
    };
    let Some((remaining, used)) = read_variable_int(rest)? else {
        return Ok(None);
    };
    // remaining <= 268,435,455 and used <= 4, so this cannot overflow.
    let header_len = 1 + used;
    let total = remaining + header_len as u32;
    if total > max_packet_size {
        // [MQTT-3.2.2-15] (§3.2.2.3.6; §3.1.2.11.4 for a client): a packet above the Maximum
        // Packet Size the receiver announced is a Protocol Error, rejected before reading the body.
        return Err(DecodeError::PacketTooLarge {
            size: total,
            max: max_packet_size,
        });
    }
    Ok(Some((total as usize, header_len)))
}

/// Decodes one packet from the front of `buf`, removing its bytes on success.
///
/// `version` is the protocol level negotiated by CONNECT and decides how every packet but
/// CONNECT is read (CONNECT carries its own level). Returns `Ok(None)` while the packet is
/// incomplete; the packet's size is checked against `max_packet_size` before anything else.
///
/// Errors found in the first byte or the remaining length leave `buf` untouched; errors found
/// in the body of a fully received packet are reported after its bytes were taken off `buf`.
pub fn decode(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    max_packet_size: u32,
) -> Result<Option<Packet>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let (ptype, flags) = check_fixed_header(first, version)?;
    let Some((total, header_len)) = fixed_header_len(buf, max_packet_size)? else {
        return Ok(None);
    };
    if buf.len() < total {
        return Ok(None);
    }
    let packet = buf.split_to(total).freeze();
    let body = Reader(packet.slice(header_len..));
    decode_body(ptype, flags, body, version).map(Some)
}

/// Checks the packet type and its fixed-header flags; returns both.
fn check_fixed_header(
    first: u8,
    version: ProtocolVersion,
) -> Result<(PacketType, u8), DecodeError> {
    let flags = first & 0x0F;
    let ptype = match first >> 4 {
        1 => PacketType::Connect,
        2 => PacketType::ConnAck,
        3 => PacketType::Publish,
        4 => PacketType::PubAck,
        5 => PacketType::PubRec,
        6 => PacketType::PubRel,
        7 => PacketType::PubComp,
        8 => PacketType::Subscribe,
        9 => PacketType::SubAck,
        10 => PacketType::Unsubscribe,
        11 => PacketType::UnsubAck,
        12 => PacketType::PingReq,
        13 => PacketType::PingResp,
        14 => PacketType::Disconnect,
        // AUTH exists only in v5 (2.1.2); 0 is reserved.
        15 if version.is_v5() => PacketType::Auth,
        other => return Err(DecodeError::InvalidPacketType(other)),
    };
    let valid = match ptype {
        PacketType::Publish => {
            // [MQTT-3.3.1-4] A PUBLISH packet MUST NOT have both QoS bits set to 1.
            if (flags >> 1) & 0x03 == 3 {
                return Err(DecodeError::InvalidQoS);
            }
            // [MQTT-3.3.1-2] The DUP flag MUST be set to 0 for all QoS 0 messages.
            !(flags & 0x08 != 0 && (flags >> 1) & 0x03 == 0)
        }
        // [MQTT-2.1.3-1] [MQTT-3.6.1-1] [MQTT-3.8.1-1] [MQTT-3.10.1-1] (same numbers in 3.1.1)
        // reserved flags 0010. MQTT 3.1 sent these with QoS 1 and set DUP when re-sending them,
        // so a v3.1 session also accepts 1010.
        PacketType::PubRel | PacketType::Subscribe | PacketType::Unsubscribe => {
            flags == 0x02 || (version == ProtocolVersion::V31 && flags == 0x0A)
        }
        // [MQTT-2.1.3-1] every other packet type has reserved flags 0000.
        _ => flags == 0,
    };
    if valid {
        Ok((ptype, flags))
    } else {
        Err(DecodeError::InvalidFlags(flags))
    }
}

fn decode_body(
    ptype: PacketType,
    flags: u8,
    mut r: Reader,
    version: ProtocolVersion,
) -> Result<Packet, DecodeError> {
    let v5 = version.is_v5();
    let packet = match ptype {
        PacketType::Connect => Packet::Connect(Box::new(decode_connect(&mut r)?)),
        PacketType::ConnAck => Packet::ConnAck(decode_connack(&mut r, version)?),
        PacketType::Publish => Packet::Publish(decode_publish(flags, &mut r, v5)?),
        PacketType::PubAck => Packet::PubAck(decode_pub_resp(&mut r, v5, PropCtx::PubAck)?),
        PacketType::PubRec => Packet::PubRec(decode_pub_resp(&mut r, v5, PropCtx::PubRec)?),
        PacketType::PubRel => Packet::PubRel(decode_pub_resp(&mut r, v5, PropCtx::PubRel)?),
        PacketType::PubComp => Packet::PubComp(decode_pub_resp(&mut r, v5, PropCtx::PubComp)?),
        PacketType::Subscribe => Packet::Subscribe(decode_subscribe(&mut r, v5)?),
        PacketType::SubAck => {
            let packet_id = r.read_packet_id()?;
            let properties = props_if(v5, &mut r, PropCtx::SubAck)?;
            let reason_codes = r.rest().iter().map(|&b| ReasonCode(b)).collect();
            Packet::SubAck(SubAck {
                packet_id,
                reason_codes,
                properties,
            })
        }
        PacketType::Unsubscribe => {
            let packet_id = r.read_packet_id()?;
            let properties = props_if(v5, &mut r, PropCtx::Unsubscribe)?;
            let mut filters = Vec::new();
            while !r.is_empty() {
                filters.push(r.read_string()?);
            }
            // [MQTT-3.10.3-2] ([3.1.1: MQTT-3.10.3-2]) at least one topic filter.
            if filters.is_empty() {
                return Err(DecodeError::NoTopicFilters);
            }
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                filters,
                properties,
            })
        }
        PacketType::UnsubAck => {
            let packet_id = r.read_packet_id()?;
            let (properties, reason_codes) = if v5 {
                let properties = decode_properties(&mut r, PropCtx::UnsubAck)?;
                (
                    properties,
                    r.rest().iter().map(|&b| ReasonCode(b)).collect(),
                )
            } else {
                // 3.1.1 §3.11.3: the UNSUBACK packet has no payload.
                (Properties::default(), Vec::new())
            };
            Packet::UnsubAck(UnsubAck {
                packet_id,
                reason_codes,
                properties,
            })
        }
        PacketType::PingReq => Packet::PingReq,
        PacketType::PingResp => Packet::PingResp,
        PacketType::Disconnect => {
            let mut d = Disconnect::default();
            // 3.14.2.1: reason code omitted (0x00) when the remaining length is 0; 3.14.2.2.1:
            // property length omitted (0) when the remaining length is less than 2.
            if v5 && !r.is_empty() {
                d.reason_code = ReasonCode(r.read_u8()?);
                if !r.is_empty() {
                    d.properties = decode_properties(&mut r, PropCtx::Disconnect)?;
                }
            }
            Packet::Disconnect(d)
        }
        PacketType::Auth => {
            let mut a = Auth::default();
            // 3.15.2.1: reason code and property length may be omitted together (remaining
            // length 0); otherwise both are present.
            if !r.is_empty() {
                a.reason_code = ReasonCode(r.read_u8()?);
                a.properties = decode_properties(&mut r, PropCtx::Auth)?;
            }
            Packet::Auth(a)
        }
    };
    // Whatever the packet's layout did not absorb is malformed (e.g. PINGREQ with a remaining
    // length other than 0, 3.12.1; v3 PUBACK longer than 2, 3.4.1).
    r.expect_end()?;
    Ok(packet)
}

fn props_if(v5: bool, r: &mut Reader, ctx: PropCtx) -> Result<Properties, DecodeError> {
    if v5 {
        decode_properties(r, ctx)
    } else {
        Ok(Properties::default())
    }
}

fn decode_connect(r: &mut Reader) -> Result<Connect, DecodeError> {
    // [MQTT-3.1.2-1] The protocol name must be "MQTT" (3.1: "MQIsdp").
    let name = r.read_binary()?;
    if name.as_ref() != b"MQTT" && name.as_ref() != b"MQIsdp" {
        return Err(DecodeError::InvalidProtocolName);
    }
    let raw_level = r.read_u8()?;
    // Mosquitto's bridge bit on a v3 level (`try_private`).
    let bridge = matches!(raw_level, 0x83 | 0x84);
    let level = if bridge { raw_level & 0x7F } else { raw_level };
    let protocol = match (name.as_ref(), level) {
        (b"MQIsdp", 3) => ProtocolVersion::V31,
        (b"MQTT", 4) => ProtocolVersion::V311,
        (b"MQTT", 5) => ProtocolVersion::V5,
        // A known level announced under the other version's name.
        (b"MQTT", 3) | (b"MQIsdp", 4 | 5) => return Err(DecodeError::InvalidProtocolName),
        // [MQTT-3.1.2-2] ([3.1.1: MQTT-3.1.2-2]): unsupported level, answered with CONNACK
        // 0x84 (v5) / 0x01 (v3).
        (_, level) => return Err(DecodeError::UnsupportedProtocolLevel(level)),
    };
    let v5 = protocol.is_v5();

    let flags = r.read_u8()?;
    // [MQTT-3.1.2-3] The reserved flag in the CONNECT packet MUST be 0.
    if flags & 0x01 != 0 {
        return Err(DecodeError::InvalidConnectFlags);
    }
    let clean_start = flags & 0x02 != 0;
    let will_flag = flags & 0x04 != 0;
    let will_qos = (flags >> 3) & 0x03;
    let will_retain = flags & 0x20 != 0;
    let password_flag = flags & 0x40 != 0;
    let username_flag = flags & 0x80 != 0;
    if !will_flag && (will_qos != 0 || will_retain) {
        // [MQTT-3.1.2-11] Will Flag 0 => Will QoS 0; [MQTT-3.1.2-13] Will Flag 0 => Will Retain
        // 0 ([3.1.1: MQTT-3.1.2-11] [3.1.1: MQTT-3.1.2-13] [3.1.1: MQTT-3.1.2-15]).
        return Err(DecodeError::InvalidConnectFlags);
    }
    // [MQTT-3.1.2-12] ([3.1.1: MQTT-3.1.2-14]) Will QoS 3 is malformed.
    let will_qos = QoS::from_u8(will_qos).ok_or(DecodeError::InvalidQoS)?;
    // [3.1.1: MQTT-3.1.2-22] User Name Flag 0 => Password Flag 0 (MQTT 5.0 allows a password
    // without a user name, §3.1.2.9).
    if !v5 && password_flag && !username_flag {
        return Err(DecodeError::InvalidConnectFlags);
    }
    let keep_alive = r.read_u16()?;
    let properties = props_if(v5, r, PropCtx::Connect)?;

    // [MQTT-3.1.3-1] payload fields in order: client id, will properties, will topic, will
    // payload, user name, password — each present exactly when its flag says so.
    let client_id = r.read_string()?;
    let will = if will_flag {
        let properties = props_if(v5, r, PropCtx::Will)?;
        let topic = r.read_string()?;
        let payload = r.read_binary()?;
        Some(Will {
            topic,
            payload,
            qos: will_qos,
            retain: will_retain,
            properties,
        })
    } else {
        None
    };
    let username = if username_flag {
        Some(r.read_string()?)
    } else {
        None
    };
    let password = if password_flag {
        Some(r.read_binary()?)
    } else {
        None
    };
    Ok(Connect {
        protocol,
        clean_start,
        keep_alive,
        client_id,
        will,
        username,
        password,
        properties,
        bridge,
    })
}

fn decode_connack(r: &mut Reader, version: ProtocolVersion) -> Result<ConnAck, DecodeError> {
    let ack_flags = r.read_u8()?;
    let reason_code = ReasonCode(r.read_u8()?);
    let session_present = match version {
        // MQTT 3.1 has no session present flag: the first byte is reserved and unused.
        ProtocolVersion::V31 => false,
        _ => {
            // [MQTT-3.2.2-1] (3.1.1 §3.2.2.1) bits 7-1 are reserved and MUST be 0.
            if ack_flags & 0xFE != 0 {
                return Err(DecodeError::InvalidConnectFlags);
            }
            ack_flags & 0x01 != 0
        }
    };
    let properties = props_if(version.is_v5(), r, PropCtx::ConnAck)?;
    Ok(ConnAck {
        session_present,
        reason_code,
        properties,
    })
}

fn decode_publish(flags: u8, r: &mut Reader, v5: bool) -> Result<Publish, DecodeError> {
    // The fixed header check already rejected QoS 3 and DUP with QoS 0.
    let qos = QoS::from_u8((flags >> 1) & 0x03).ok_or(DecodeError::InvalidQoS)?;
    let dup = flags & 0x08 != 0;
    let retain = flags & 0x01 != 0;
    // [MQTT-3.3.2-1] the topic name is a UTF-8 encoded string.
    let topic = r.read_string()?;
    // [MQTT-2.2.1-2]: a packet identifier exactly when QoS > 0.
    let packet_id = if qos == QoS::AtMostOnce {
        None
    } else {
        Some(r.read_packet_id()?)
    };
    let properties = props_if(v5, r, PropCtx::Publish)?;
    let payload = r.rest();
    Ok(Publish {
        dup,
        qos,
        retain,
        topic,
        packet_id,
        properties,
        payload,
    })
}

fn decode_pub_resp(r: &mut Reader, v5: bool, ctx: PropCtx) -> Result<PubResp, DecodeError> {
    let mut resp = PubResp::new(r.read_packet_id()?);
    // 3.4.2.1: remaining length 2 means reason code 0x00 and no properties; 3.4.2.2.1:
    // remaining length less than 4 means no property length (same for PUBREC 3.5.2,
    // PUBREL 3.6.2, PUBCOMP 3.7.2).
    if v5 && !r.is_empty() {
        resp.reason_code = ReasonCode(r.read_u8()?);
        if !r.is_empty() {
            resp.properties = decode_properties(r, ctx)?;
        }
    }
    Ok(resp)
}

fn decode_subscribe(r: &mut Reader, v5: bool) -> Result<Subscribe, DecodeError> {
    let packet_id = r.read_packet_id()?;
    let properties = props_if(v5, r, PropCtx::Subscribe)?;
    let mut filters = Vec::new();
    while !r.is_empty() {
        let filter = r.read_string()?;
        let options = r.read_u8()?;
        filters.push((filter, subscription_options(options, v5)?));
    }
    // [MQTT-3.8.3-2] ([3.1.1: MQTT-3.8.3-3]) at least one topic filter / options pair.
    if filters.is_empty() {
        return Err(DecodeError::NoTopicFilters);
    }
    Ok(Subscribe {
        packet_id,
        filters,
        properties,
    })
}

fn subscription_options(options: u8, v5: bool) -> Result<SubscriptionOptions, DecodeError> {
    if v5 {
        // [MQTT-3.8.3-5] reserved bits 6-7 MUST be 0; §3.8.3.1: retain handling 3 is a
        // protocol error.
        if options & 0xC0 != 0 || (options >> 4) & 0x03 == 3 {
            return Err(DecodeError::InvalidSubscriptionOptions);
        }
    } else if options & 0xFC != 0 {
        // [3.1.1: MQTT-3-8.3-4] the upper 6 bits of the requested QoS byte MUST be 0.
        return Err(DecodeError::InvalidSubscriptionOptions);
    }
    // §3.8.3.1: maximum QoS 3 is a protocol error ([3.1.1: MQTT-3-8.3-4] malformed).
    let qos = QoS::from_u8(options & 0x03).ok_or(DecodeError::InvalidQoS)?;
    Ok(SubscriptionOptions {
        qos,
        no_local: options & 0x04 != 0,
        retain_as_published: options & 0x08 != 0,
        retain_handling: (options >> 4) & 0x03,
    })
}

/// A cursor over a packet body that hands out zero-copy slices of it. Every read checks the
/// length first; nothing here can panic or read out of bounds.
pub(crate) struct Reader(pub(crate) Bytes);

impl Reader {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn read_u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.0.first().ok_or(DecodeError::UnexpectedEof)?;
        self.0.advance(1);
        Ok(b)
    }

    pub(crate) fn read_u16(&mut self) -> Result<u16, DecodeError> {
        let b: [u8; 2] = self
            .0
            .get(..2)
            .and_then(|b| b.try_into().ok())
            .ok_or(DecodeError::UnexpectedEof)?;
        let v = u16::from_be_bytes(b);
        self.0.advance(2);
        Ok(v)
    }

    pub(crate) fn read_u32(&mut self) -> Result<u32, DecodeError> {
        let b: [u8; 4] = self
            .0
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or(DecodeError::UnexpectedEof)?;
        let v = u32::from_be_bytes(b);
        self.0.advance(4);
        Ok(v)
    }

    pub(crate) fn read_variable_int(&mut self) -> Result<u32, DecodeError> {
        let (v, used) = read_variable_int(&self.0)?.ok_or(DecodeError::UnexpectedEof)?;
        self.0.advance(used);
        Ok(v)
    }

    /// The next `n` bytes as a reader of their own.
    pub(crate) fn take(&mut self, n: usize) -> Result<Reader, DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::UnexpectedEof);
        }
        Ok(Reader(self.0.split_to(n)))
    }

    /// Binary data: a two-byte length and that many bytes (1.5.6).
    pub(crate) fn read_binary(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.read_u16()?;
        Ok(self.take(usize::from(len))?.0)
    }

    /// A UTF-8 encoded string (1.5.4).
    pub(crate) fn read_string(&mut self) -> Result<ByteStr, DecodeError> {
        let bytes = self.read_binary()?;
        // [MQTT-1.5.4-2] ([3.1.1: MQTT-1.5.3-2]) MUST NOT include U+0000.
        if bytes.contains(&0) {
            return Err(DecodeError::InvalidUtf8);
        }
        // [MQTT-1.5.4-1] ([3.1.1: MQTT-1.5.3-1]) well-formed UTF-8, no surrogates.
        ByteStr::from_utf8(bytes).ok_or(DecodeError::InvalidUtf8)
    }

    /// A packet identifier; 0 is not one [MQTT-2.2.1-3] ([3.1.1: MQTT-2.3.1-1]).
    pub(crate) fn read_packet_id(&mut self) -> Result<PacketId, DecodeError> {
        PacketId::new(self.read_u16()?).ok_or(DecodeError::ZeroPacketId)
    }

    /// Everything left.
    pub(crate) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.0)
    }

    pub(crate) fn expect_end(&self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}
