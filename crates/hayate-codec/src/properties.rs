//! MQTT 5.0 properties.
//!
//! One struct holds every property; the decoder checks that each property is allowed in the
//! packet it arrived in and appears at most once (except User Property and, in PUBLISH,
//! Subscription Identifier; §2.2.2.2 and each property's "It is a Protocol Error to include ...
//! more than once"), and the encoder writes whatever is set.

use crate::types::ByteStr;
use bytes::Bytes;

/// Property identifiers of MQTT 5.0 (section 2.2.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum PropertyId {
    PayloadFormatIndicator = 0x01,
    MessageExpiryInterval = 0x02,
    ContentType = 0x03,
    ResponseTopic = 0x08,
    CorrelationData = 0x09,
    SubscriptionIdentifier = 0x0B,
    SessionExpiryInterval = 0x11,
    AssignedClientIdentifier = 0x12,
    ServerKeepAlive = 0x13,
    AuthenticationMethod = 0x15,
    AuthenticationData = 0x16,
    RequestProblemInformation = 0x17,
    WillDelayInterval = 0x18,
    RequestResponseInformation = 0x19,
    ResponseInformation = 0x1A,
    ServerReference = 0x1C,
    ReasonString = 0x1F,
    ReceiveMaximum = 0x21,
    TopicAliasMaximum = 0x22,
    TopicAlias = 0x23,
    MaximumQos = 0x24,
    RetainAvailable = 0x25,
    UserProperty = 0x26,
    MaximumPacketSize = 0x27,
    WildcardSubscriptionAvailable = 0x28,
    SubscriptionIdentifierAvailable = 0x29,
    SharedSubscriptionAvailable = 0x2A,
}

impl PropertyId {
    /// Maps an identifier byte to a known property.
    pub fn from_u8(id: u8) -> Option<PropertyId> {
        use PropertyId::*;
        Some(match id {
            0x01 => PayloadFormatIndicator,
            0x02 => MessageExpiryInterval,
            0x03 => ContentType,
            0x08 => ResponseTopic,
            0x09 => CorrelationData,
            0x0B => SubscriptionIdentifier,
            0x11 => SessionExpiryInterval,
            0x12 => AssignedClientIdentifier,
            0x13 => ServerKeepAlive,
            0x15 => AuthenticationMethod,
            0x16 => AuthenticationData,
            0x17 => RequestProblemInformation,
            0x18 => WillDelayInterval,
            0x19 => RequestResponseInformation,
            0x1A => ResponseInformation,
            0x1C => ServerReference,
            0x1F => ReasonString,
            0x21 => ReceiveMaximum,
            0x22 => TopicAliasMaximum,
            0x23 => TopicAlias,
            0x24 => MaximumQos,
            0x25 => RetainAvailable,
            0x26 => UserProperty,
            0x27 => MaximumPacketSize,
            0x28 => WildcardSubscriptionAvailable,
            0x29 => SubscriptionIdentifierAvailable,
            0x2A => SharedSubscriptionAvailable,
            _ => return None,
        })
    }
}

/// Every MQTT 5.0 property; `None`/empty means absent.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct Properties {
    pub payload_format_indicator: Option<u8>,
    pub message_expiry_interval: Option<u32>,
    pub content_type: Option<ByteStr>,
    pub response_topic: Option<ByteStr>,
    pub correlation_data: Option<Bytes>,
    /// Several are allowed in PUBLISH (server to client), one in SUBSCRIBE. Values 1..=268,435,455.
    pub subscription_identifiers: Vec<u32>,
    pub session_expiry_interval: Option<u32>,
    pub assigned_client_identifier: Option<ByteStr>,
    pub server_keep_alive: Option<u16>,
    pub authentication_method: Option<ByteStr>,
    pub authentication_data: Option<Bytes>,
    pub request_problem_information: Option<u8>,
    pub will_delay_interval: Option<u32>,
    pub request_response_information: Option<u8>,
    pub response_information: Option<ByteStr>,
    pub server_reference: Option<ByteStr>,
    pub reason_string: Option<ByteStr>,
    pub receive_maximum: Option<u16>,
    pub topic_alias_maximum: Option<u16>,
    pub topic_alias: Option<u16>,
    pub maximum_qos: Option<u8>,
    pub retain_available: Option<u8>,
    /// Name/value pairs, in the order they appeared; order must be preserved [MQTT-3.3.2-18].
    pub user_properties: Vec<(ByteStr, ByteStr)>,
    pub maximum_packet_size: Option<u32>,
    pub wildcard_subscription_available: Option<u8>,
    pub subscription_identifier_available: Option<u8>,
    pub shared_subscription_available: Option<u8>,
}

impl Properties {
    /// True when no property is set (an empty property block on the wire).
    pub fn is_empty(&self) -> bool {
        *self == Properties::default()
    }
}
