//! The packet types of MQTT 3.1, 3.1.1 and 5.0.
//!
//! One set of structs serves all three protocol levels: fields that only exist in v5
//! (properties, most reason codes) are simply left at their defaults for v3.

use crate::properties::Properties;
use crate::types::{ByteStr, PacketId, ProtocolVersion, QoS, ReasonCode};
use bytes::Bytes;

/// The control packet type, the high nibble of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum PacketType {
    Connect = 1,
    ConnAck = 2,
    Publish = 3,
    PubAck = 4,
    PubRec = 5,
    PubRel = 6,
    PubComp = 7,
    Subscribe = 8,
    SubAck = 9,
    Unsubscribe = 10,
    UnsubAck = 11,
    PingReq = 12,
    PingResp = 13,
    Disconnect = 14,
    Auth = 15,
}

/// A decoded (or to-be-encoded) MQTT control packet.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Packet {
    Connect(Box<Connect>),
    ConnAck(ConnAck),
    Publish(Publish),
    /// QoS 1 acknowledgement.
    PubAck(PubResp),
    /// QoS 2 delivery part 1: publish received.
    PubRec(PubResp),
    /// QoS 2 delivery part 2: publish release.
    PubRel(PubResp),
    /// QoS 2 delivery part 3: publish complete.
    PubComp(PubResp),
    Subscribe(Subscribe),
    SubAck(SubAck),
    Unsubscribe(Unsubscribe),
    UnsubAck(UnsubAck),
    PingReq,
    PingResp,
    Disconnect(Disconnect),
    /// v5 only.
    Auth(Auth),
}

impl Packet {
    /// The packet's control packet type.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::ConnAck(_) => PacketType::ConnAck,
            Packet::Publish(_) => PacketType::Publish,
            Packet::PubAck(_) => PacketType::PubAck,
            Packet::PubRec(_) => PacketType::PubRec,
            Packet::PubRel(_) => PacketType::PubRel,
            Packet::PubComp(_) => PacketType::PubComp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::SubAck(_) => PacketType::SubAck,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::UnsubAck(_) => PacketType::UnsubAck,
            Packet::PingReq => PacketType::PingReq,
            Packet::PingResp => PacketType::PingResp,
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
        }
    }
}

/// CONNECT: the first packet a client sends [MQTT-3.1.0-1].
#[derive(Debug, Clone, PartialEq)]
pub struct Connect {
    /// Protocol name and level: `MQIsdp`/3, `MQTT`/4 or `MQTT`/5.
    pub protocol: ProtocolVersion,
    /// Clean Session (v3) / Clean Start (v5) flag.
    pub clean_start: bool,
    /// Keep alive in seconds; 0 disables it.
    pub keep_alive: u16,
    /// Client identifier; may be empty (rules differ by version, enforced by the broker).
    pub client_id: ByteStr,
    /// The will message, if the Will Flag is set.
    pub will: Option<Will>,
    /// User name, if the flag is set.
    pub username: Option<ByteStr>,
    /// Password, if the flag is set (binary data).
    pub password: Option<Bytes>,
    /// v5 CONNECT properties.
    pub properties: Properties,
    /// Mosquitto's bridge bit: the client is a bridge and said so with 0x80 on the protocol
    /// level (0x83 / 0x84; v3 only).
    pub bridge: bool,
}

/// The will message carried in CONNECT.
#[derive(Debug, Clone, PartialEq)]
pub struct Will {
    /// Will topic.
    pub topic: ByteStr,
    /// Will payload.
    pub payload: Bytes,
    /// Will QoS.
    pub qos: QoS,
    /// Will retain flag.
    pub retain: bool,
    /// v5 will properties (will delay interval, message expiry, content type...).
    pub properties: Properties,
}

/// CONNACK.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnAck {
    /// Session present flag.
    pub session_present: bool,
    /// v5 reason code, or v3 connect return code.
    pub reason_code: ReasonCode,
    /// v5 CONNACK properties.
    pub properties: Properties,
}

/// PUBLISH.
#[derive(Debug, Clone, PartialEq)]
pub struct Publish {
    /// DUP flag.
    pub dup: bool,
    /// QoS level.
    pub qos: QoS,
    /// RETAIN flag.
    pub retain: bool,
    /// Topic name; may be empty in v5 when a topic alias is used.
    pub topic: ByteStr,
    /// Present exactly when `qos` > 0 [MQTT-2.2.1-2].
    pub packet_id: Option<PacketId>,
    /// v5 PUBLISH properties.
    pub properties: Properties,
    /// Application payload.
    pub payload: Bytes,
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP share this shape.
#[derive(Debug, Clone, PartialEq)]
pub struct PubResp {
    /// Packet identifier being acknowledged.
    pub packet_id: PacketId,
    /// v5 reason code (0 when absent on the wire).
    pub reason_code: ReasonCode,
    /// v5 properties (reason string, user properties).
    pub properties: Properties,
}

impl PubResp {
    /// A plain success response for `packet_id`.
    pub fn new(packet_id: PacketId) -> PubResp {
        PubResp {
            packet_id,
            reason_code: ReasonCode::SUCCESS,
            properties: Properties::default(),
        }
    }
}

/// Subscription options byte of a SUBSCRIBE entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionOptions {
    /// Maximum QoS the client accepts on this subscription.
    pub qos: QoS,
    /// v5 No Local.
    pub no_local: bool,
    /// v5 Retain As Published.
    pub retain_as_published: bool,
    /// v5 Retain Handling (0, 1 or 2).
    pub retain_handling: u8,
}

impl SubscriptionOptions {
    /// Options with the given QoS and all v5 flags at their defaults.
    pub fn with_qos(qos: QoS) -> SubscriptionOptions {
        SubscriptionOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: 0,
        }
    }
}

/// SUBSCRIBE.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscribe {
    /// Packet identifier.
    pub packet_id: PacketId,
    /// Topic filters with their options, in order; never empty [MQTT-3.8.3-2].
    pub filters: Vec<(ByteStr, SubscriptionOptions)>,
    /// v5 properties (subscription identifier, user properties).
    pub properties: Properties,
}

/// SUBACK.
#[derive(Debug, Clone, PartialEq)]
pub struct SubAck {
    /// Packet identifier of the SUBSCRIBE.
    pub packet_id: PacketId,
    /// One code per filter, in order [MQTT-3.9.3-1].
    pub reason_codes: Vec<ReasonCode>,
    /// v5 properties.
    pub properties: Properties,
}

/// UNSUBSCRIBE.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsubscribe {
    /// Packet identifier.
    pub packet_id: PacketId,
    /// Topic filters, never empty [MQTT-3.10.3-2].
    pub filters: Vec<ByteStr>,
    /// v5 properties.
    pub properties: Properties,
}

/// UNSUBACK.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsubAck {
    /// Packet identifier of the UNSUBSCRIBE.
    pub packet_id: PacketId,
    /// v5: one code per filter. Empty for v3 (the v3 packet has no payload).
    pub reason_codes: Vec<ReasonCode>,
    /// v5 properties.
    pub properties: Properties,
}

/// DISCONNECT.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Disconnect {
    /// v5 reason code (0 when absent).
    pub reason_code: ReasonCode,
    /// v5 properties (session expiry, reason string, server reference...).
    pub properties: Properties,
}

impl Default for ReasonCode {
    fn default() -> Self {
        ReasonCode::SUCCESS
    }
}

/// AUTH (v5 only).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Auth {
    /// Reason code (0 when absent).
    pub reason_code: ReasonCode,
    /// Properties (authentication method and data, reason string...).
    pub properties: Properties,
}
