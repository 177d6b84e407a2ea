//! Codec errors. Cheap `Copy` enums: they are hit on hostile input and must not allocate.

use thiserror::Error;

/// Why bytes could not be decoded into a packet. Every variant is a Malformed Packet or
/// Protocol Error in the v5 sense; [`DecodeError::reason_code`] tells which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The remaining length's variable byte integer uses more than 4 bytes [MQTT-1.5.5-1].
    #[error("malformed remaining length")]
    MalformedRemainingLength,
    /// The packet is larger than the maximum packet size the receiver allows [MQTT-3.2.2-15]
    /// (§3.1.2.11.4 for a client).
    #[error("packet of {size} bytes exceeds maximum packet size {max}")]
    PacketTooLarge {
        /// Total packet size in bytes.
        size: u32,
        /// The limit in force.
        max: u32,
    },
    /// Packet type 0 (reserved), or AUTH outside v5.
    #[error("reserved or unknown packet type {0}")]
    InvalidPacketType(u8),
    /// Fixed-header flags that the specification reserves [MQTT-2.1.3-1], or a QoS 0 PUBLISH
    /// with DUP set [MQTT-3.3.1-2].
    #[error("invalid fixed header flags 0x{0:02X}")]
    InvalidFlags(u8),
    /// The protocol name is not `MQTT` / `MQIsdp` [MQTT-3.1.2-1].
    #[error("invalid protocol name")]
    InvalidProtocolName,
    /// The protocol level is not 3, 4 or 5 [MQTT-3.1.2-2]. Carries the level.
    #[error("unsupported protocol level {0}")]
    UnsupportedProtocolLevel(u8),
    /// CONNECT reserved flag set [MQTT-3.1.2-3], inconsistent will/user/password flags, or
    /// reserved CONNACK acknowledge flags set [MQTT-3.2.2-1].
    #[error("invalid connect flags")]
    InvalidConnectFlags,
    /// QoS 3 [MQTT-3.3.1-4].
    #[error("invalid QoS")]
    InvalidQoS,
    /// A string is not valid UTF-8 or contains U+0000 [MQTT-1.5.4-1] [MQTT-1.5.4-2].
    #[error("invalid UTF-8 string")]
    InvalidUtf8,
    /// Packet identifier 0 [MQTT-2.2.1-3].
    #[error("packet identifier 0")]
    ZeroPacketId,
    /// The body ended before a field it announced.
    #[error("packet body shorter than its fields")]
    UnexpectedEof,
    /// Bytes left over after the last field of a packet that has no payload to absorb them.
    #[error("trailing bytes in packet")]
    TrailingBytes,
    /// Unknown v5 property identifier.
    #[error("unknown property 0x{0:02X}")]
    UnknownProperty(u8),
    /// A property that is not allowed in this packet type.
    #[error("property 0x{0:02X} not allowed in this packet")]
    PropertyNotAllowed(u8),
    /// A property given twice that may appear only once (§2.2.2.2 and each property's section:
    /// "It is a Protocol Error to include ... more than once").
    #[error("duplicate property 0x{0:02X}")]
    DuplicateProperty(u8),
    /// A property value outside its allowed range (e.g. receive maximum 0, a subscription
    /// identifier of 0, a payload format indicator other than 0/1).
    #[error("invalid value for property 0x{0:02X}")]
    InvalidPropertyValue(u8),
    /// SUBSCRIBE or UNSUBSCRIBE without any topic filter [MQTT-3.8.3-2] [MQTT-3.10.3-2].
    #[error("no topic filters")]
    NoTopicFilters,
    /// Reserved bits of the subscription options set, or retain handling 3 [MQTT-3.8.3-5].
    #[error("invalid subscription options")]
    InvalidSubscriptionOptions,
}

impl DecodeError {
    /// The v5 DISCONNECT reason code this error should be answered with.
    pub fn reason_code(self) -> crate::ReasonCode {
        use crate::ReasonCode as R;
        match self {
            DecodeError::PacketTooLarge { .. } => R::PACKET_TOO_LARGE,
            DecodeError::UnsupportedProtocolLevel(_) => R::UNSUPPORTED_PROTOCOL_VERSION,
            // The specification calls these Protocol Errors: duplicate or misplaced properties
            // (2.2.2.2), out-of-range property values ("It is a Protocol Error ... to have the
            // value 0", 3.1.2.11 / 3.2.2.3), and a SUBSCRIBE/UNSUBSCRIBE without payload
            // (3.8.3, 3.10.3).
            DecodeError::InvalidPacketType(_)
            | DecodeError::DuplicateProperty(_)
            | DecodeError::PropertyNotAllowed(_)
            | DecodeError::InvalidPropertyValue(_)
            | DecodeError::NoTopicFilters => R::PROTOCOL_ERROR,
            _ => R::MALFORMED_PACKET,
        }
    }
}

/// Why a packet could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The packet would need a remaining length above 268,435,455.
    #[error("packet too large to encode")]
    PacketTooLarge,
    /// A string or binary field longer than 65,535 bytes.
    #[error("field longer than 65535 bytes")]
    FieldTooLong,
    /// The packet type does not exist at this protocol level (AUTH before v5).
    #[error("packet not valid for this protocol version")]
    WrongVersion,
    /// A PUBLISH with QoS > 0 but no packet identifier, or QoS 0 with one.
    #[error("packet identifier presence does not match QoS")]
    PacketIdMismatch,
    /// A value the wire format cannot carry: a subscription identifier above 268,435,455, or
    /// a retain handling that does not fit in its two bits.
    #[error("value cannot be encoded")]
    InvalidValue,
}
