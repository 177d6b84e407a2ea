//! MQTT 5.0 property block: the table of where each property may appear, and the decoder and
//! encoder of a property block.
//!
//! The table below is the one place that says which property is allowed in which packet (MQTT
//! 5.0 section 2.2.2.2) and which may repeat; the decoder consults it for every property it
//! reads and the tests use it to generate valid packets.

use crate::decode::Reader;
use crate::encode::{put_binary, write_variable_int};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyId};
use crate::types::ByteStr;
use crate::MAX_VARIABLE_INT;
use bytes::{BufMut, BytesMut};

/// Where a property block sits: a packet type, or the will properties of CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PropCtx {
    Connect,
    ConnAck,
    Publish,
    Will,
    PubAck,
    PubRec,
    PubRel,
    PubComp,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
}

impl PropCtx {
    const fn bit(self) -> u16 {
        1 << (self as u16)
    }

    #[cfg(test)]
    pub(crate) const ALL: [PropCtx; 14] = [
        PropCtx::Connect,
        PropCtx::ConnAck,
        PropCtx::Publish,
        PropCtx::Will,
        PropCtx::PubAck,
        PropCtx::PubRec,
        PropCtx::PubRel,
        PropCtx::PubComp,
        PropCtx::Subscribe,
        PropCtx::SubAck,
        PropCtx::Unsubscribe,
        PropCtx::UnsubAck,
        PropCtx::Disconnect,
        PropCtx::Auth,
    ];
}

const fn mask(ctxs: &[PropCtx]) -> u16 {
    let mut m = 0;
    let mut i = 0;
    while i < ctxs.len() {
        m |= ctxs[i].bit();
        i += 1;
    }
    m
}

/// One row of the MQTT 5.0 section 2.2.2.2 table.
#[derive(Debug, Clone, Copy)]
struct PropRule {
    id: PropertyId,
    /// Contexts the property may appear in.
    allowed: u16,
    /// Contexts in which it may appear more than once (§2.2.2.2: User Property everywhere,
    /// Subscription Identifier in PUBLISH [MQTT-3.3.4-4]).
    repeatable: u16,
}

const fn rule(id: PropertyId, allowed: &[PropCtx]) -> PropRule {
    PropRule {
        id,
        allowed: mask(allowed),
        repeatable: 0,
    }
}

use PropCtx as C;
use PropertyId as P;

/// Where each property is allowed (MQTT 5.0 section 2.2.2.2, and the property lists of each
/// packet's variable header, 3.1.2.11 to 3.15.2.2).
const RULES: [PropRule; 27] = [
    rule(P::PayloadFormatIndicator, &[C::Publish, C::Will]),
    rule(P::MessageExpiryInterval, &[C::Publish, C::Will]),
    rule(P::ContentType, &[C::Publish, C::Will]),
    rule(P::ResponseTopic, &[C::Publish, C::Will]),
    rule(P::CorrelationData, &[C::Publish, C::Will]),
    PropRule {
        id: P::SubscriptionIdentifier,
        allowed: mask(&[C::Publish, C::Subscribe]),
        // Several in PUBLISH [MQTT-3.3.4-4]; at most one in SUBSCRIBE (§3.8.2.1.2).
        repeatable: mask(&[C::Publish]),
    },
    rule(
        P::SessionExpiryInterval,
        &[C::Connect, C::ConnAck, C::Disconnect],
    ),
    rule(P::AssignedClientIdentifier, &[C::ConnAck]),
    rule(P::ServerKeepAlive, &[C::ConnAck]),
    rule(P::AuthenticationMethod, &[C::Connect, C::ConnAck, C::Auth]),
    rule(P::AuthenticationData, &[C::Connect, C::ConnAck, C::Auth]),
    rule(P::RequestProblemInformation, &[C::Connect]),
    rule(P::WillDelayInterval, &[C::Will]),
    rule(P::RequestResponseInformation, &[C::Connect]),
    rule(P::ResponseInformation, &[C::ConnAck]),
    rule(P::ServerReference, &[C::ConnAck, C::Disconnect]),
    rule(
        P::ReasonString,
        &[
            C::ConnAck,
            C::PubAck,
            C::PubRec,
            C::PubRel,
            C::PubComp,
            C::SubAck,
            C::UnsubAck,
            C::Disconnect,
            C::Auth,
        ],
    ),
    rule(P::ReceiveMaximum, &[C::Connect, C::ConnAck]),
    rule(P::TopicAliasMaximum, &[C::Connect, C::ConnAck]),
    rule(P::TopicAlias, &[C::Publish]),
    rule(P::MaximumQos, &[C::ConnAck]),
    rule(P::RetainAvailable, &[C::ConnAck]),
    PropRule {
        id: P::UserProperty,
        allowed: u16::MAX,
        // "The User Property is allowed to appear multiple times" (3.1.2.11.8 and every packet).
        repeatable: u16::MAX,
    },
    rule(P::MaximumPacketSize, &[C::Connect, C::ConnAck]),
    rule(P::WildcardSubscriptionAvailable, &[C::ConnAck]),
    rule(P::SubscriptionIdentifierAvailable, &[C::ConnAck]),
    rule(P::SharedSubscriptionAvailable, &[C::ConnAck]),
];

/// Largest property identifier, for the lookup array.
const MAX_ID: usize = 0x2A;

/// `RULES` indexed by identifier byte; `None` for unknown identifiers.
const LOOKUP: [Option<PropRule>; MAX_ID + 1] = {
    let mut table = [None; MAX_ID + 1];
    let mut i = 0;
    while i < RULES.len() {
        table[RULES[i].id as usize] = Some(RULES[i]);
        i += 1;
    }
    table
};

fn lookup(id: u8) -> Option<PropRule> {
    LOOKUP.get(usize::from(id)).copied().flatten()
}

/// True when `id` may appear in `ctx`.
#[cfg(test)]
pub(crate) fn allowed_in(id: PropertyId, ctx: PropCtx) -> bool {
    lookup(id as u8).is_some_and(|r| r.allowed & ctx.bit() != 0)
}

/// True when `id` may appear more than once in `ctx`.
#[cfg(test)]
pub(crate) fn repeatable_in(id: PropertyId, ctx: PropCtx) -> bool {
    lookup(id as u8).is_some_and(|r| r.repeatable & ctx.bit() != 0)
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

fn set_once<T>(slot: &mut Option<T>, value: T, id: u8) -> Result<(), DecodeError> {
    if slot.is_some() {
        // §2.2.2.2 and each property's "It is a Protocol Error to include X more than once".
        return Err(DecodeError::DuplicateProperty(id));
    }
    *slot = Some(value);
    Ok(())
}

/// A byte property whose only values are 0 and 1 (payload format indicator, request problem /
/// response information, retain available, the *_available flags, maximum QoS).
fn read_flag_byte(r: &mut Reader, id: u8) -> Result<u8, DecodeError> {
    let v = r.read_u8()?;
    if v > 1 {
        return Err(DecodeError::InvalidPropertyValue(id));
    }
    Ok(v)
}

/// A two-byte property that must not be 0 (receive maximum, topic alias).
fn read_nonzero_u16(r: &mut Reader, id: u8) -> Result<u16, DecodeError> {
    let v = r.read_u16()?;
    if v == 0 {
        return Err(DecodeError::InvalidPropertyValue(id));
    }
    Ok(v)
}

/// Reads a property length and the property block it announces, for a block in `ctx`.
pub(crate) fn decode_properties(r: &mut Reader, ctx: PropCtx) -> Result<Properties, DecodeError> {
    let len = r.read_variable_int()?;
    let mut block = r.take(len as usize)?;
    let mut p = Properties::default();
    while !block.is_empty() {
        // Identifiers are variable byte integers, but every defined one is a single byte
        // (2.2.2.2); a byte with the continuation bit is simply unknown.
        let id = block.read_u8()?;
        let rule = lookup(id).ok_or(DecodeError::UnknownProperty(id))?;
        if rule.allowed & ctx.bit() == 0 {
            return Err(DecodeError::PropertyNotAllowed(id));
        }
        let r = &mut block;
        match rule.id {
            // 3.3.2.3.2: 0 (unspecified bytes) or 1 (UTF-8).
            P::PayloadFormatIndicator => {
                set_once(&mut p.payload_format_indicator, read_flag_byte(r, id)?, id)?
            }
            P::MessageExpiryInterval => {
                set_once(&mut p.message_expiry_interval, r.read_u32()?, id)?
            }
            P::ContentType => set_once(&mut p.content_type, r.read_string()?, id)?,
            P::ResponseTopic => set_once(&mut p.response_topic, r.read_string()?, id)?,
            P::CorrelationData => set_once(&mut p.correlation_data, r.read_binary()?, id)?,
            P::SubscriptionIdentifier => {
                let v = r.read_variable_int()?;
                // 3.3.2.3.8 / 3.8.2.1.2: "It is a Protocol Error if the Subscription
                // Identifier has a value of 0".
                if v == 0 {
                    return Err(DecodeError::InvalidPropertyValue(id));
                }
                if rule.repeatable & ctx.bit() == 0 && !p.subscription_identifiers.is_empty() {
                    return Err(DecodeError::DuplicateProperty(id));
                }
                p.subscription_identifiers.push(v);
            }
            P::SessionExpiryInterval => {
                set_once(&mut p.session_expiry_interval, r.read_u32()?, id)?
            }
            P::AssignedClientIdentifier => {
                set_once(&mut p.assigned_client_identifier, r.read_string()?, id)?
            }
            P::ServerKeepAlive => set_once(&mut p.server_keep_alive, r.read_u16()?, id)?,
            P::AuthenticationMethod => {
                set_once(&mut p.authentication_method, r.read_string()?, id)?
            }
            P::AuthenticationData => set_once(&mut p.authentication_data, r.read_binary()?, id)?,
            // 3.1.2.11.7: "a Protocol Error ... to have a value other than 0 or 1".
            P::RequestProblemInformation => set_once(
                &mut p.request_problem_information,
                read_flag_byte(r, id)?,
                id,
            )?,
            P::WillDelayInterval => set_once(&mut p.will_delay_interval, r.read_u32()?, id)?,
            // 3.1.2.11.6: "a Protocol Error ... to have a value other than 0 or 1".
            P::RequestResponseInformation => set_once(
                &mut p.request_response_information,
                read_flag_byte(r, id)?,
                id,
            )?,
            P::ResponseInformation => set_once(&mut p.response_information, r.read_string()?, id)?,
            P::ServerReference => set_once(&mut p.server_reference, r.read_string()?, id)?,
            P::ReasonString => set_once(&mut p.reason_string, r.read_string()?, id)?,
            // 3.1.2.11.3 / 3.2.2.3.3: "a Protocol Error ... to have the value 0".
            P::ReceiveMaximum => set_once(&mut p.receive_maximum, read_nonzero_u16(r, id)?, id)?,
            P::TopicAliasMaximum => set_once(&mut p.topic_alias_maximum, r.read_u16()?, id)?,
            // §3.3.2.3.4: "A Topic Alias of 0 is not permitted" [MQTT-3.3.2-8].
            P::TopicAlias => set_once(&mut p.topic_alias, read_nonzero_u16(r, id)?, id)?,
            // 3.2.2.3.4: "a Protocol Error ... to have a value other than 0 or 1".
            P::MaximumQos => set_once(&mut p.maximum_qos, read_flag_byte(r, id)?, id)?,
            // 3.2.2.3.5: "a Protocol Error ... to have a value other than 0 or 1".
            P::RetainAvailable => set_once(&mut p.retain_available, read_flag_byte(r, id)?, id)?,
            P::UserProperty => {
                let name = r.read_string()?;
                let value = r.read_string()?;
                p.user_properties.push((name, value));
            }
            P::MaximumPacketSize => {
                let v = r.read_u32()?;
                // 3.1.2.11.4 / 3.2.2.3.6: "a Protocol Error ... to have the value 0".
                if v == 0 {
                    return Err(DecodeError::InvalidPropertyValue(id));
                }
                set_once(&mut p.maximum_packet_size, v, id)?
            }
            // 3.2.2.3.11-13: "a Protocol Error ... to have a value other than 0 or 1".
            P::WildcardSubscriptionAvailable => set_once(
                &mut p.wildcard_subscription_available,
                read_flag_byte(r, id)?,
                id,
            )?,
            P::SubscriptionIdentifierAvailable => set_once(
                &mut p.subscription_identifier_available,
                read_flag_byte(r, id)?,
                id,
            )?,
            P::SharedSubscriptionAvailable => set_once(
                &mut p.shared_subscription_available,
                read_flag_byte(r, id)?,
                id,
            )?,
        }
    }
    if ctx == PropCtx::Connect
        && p.authentication_data.is_some()
        && p.authentication_method.is_none()
    {
        // 3.1.2.11.10: "It is a Protocol Error to include Authentication Data if there is no
        // Authentication Method".
        return Err(DecodeError::PropertyNotAllowed(
            PropertyId::AuthenticationData as u8,
        ));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// A property value as it goes on the wire.
enum Value<'a> {
    Byte(u8),
    U16(u16),
    U32(u32),
    VarInt(u32),
    /// UTF-8 string or binary data: two-byte length then the bytes.
    Bytes(&'a [u8]),
    /// UTF-8 string pair (user property).
    Pair(&'a [u8], &'a [u8]),
}

impl Value<'_> {
    /// Encoded size, identifier byte included.
    fn len(&self) -> usize {
        1 + match self {
            Value::Byte(_) => 1,
            Value::U16(_) => 2,
            Value::U32(_) => 4,
            Value::VarInt(v) => crate::encode::variable_int_len(*v),
            Value::Bytes(b) => 2usize.saturating_add(b.len()),
            Value::Pair(a, b) => 4usize.saturating_add(a.len()).saturating_add(b.len()),
        }
    }

    fn check(&self) -> Result<(), EncodeError> {
        match self {
            Value::VarInt(v) if *v > MAX_VARIABLE_INT => Err(EncodeError::InvalidValue),
            Value::Bytes(b) if b.len() > usize::from(u16::MAX) => Err(EncodeError::FieldTooLong),
            Value::Pair(a, b)
                if a.len() > usize::from(u16::MAX) || b.len() > usize::from(u16::MAX) =>
            {
                Err(EncodeError::FieldTooLong)
            }
            _ => Ok(()),
        }
    }

    fn write(&self, id: u8, buf: &mut BytesMut) {
        buf.put_u8(id);
        match self {
            Value::Byte(v) => buf.put_u8(*v),
            Value::U16(v) => buf.put_u16(*v),
            Value::U32(v) => buf.put_u32(*v),
            Value::VarInt(v) => write_variable_int(*v, buf),
            Value::Bytes(b) => put_binary(b, buf),
            Value::Pair(a, b) => {
                put_binary(a, buf);
                put_binary(b, buf);
            }
        }
    }
}

fn s(v: &Option<ByteStr>) -> Option<&[u8]> {
    v.as_ref().map(|s| s.as_bytes().as_ref())
}

/// Calls `f` for every property that is set, in ascending identifier order (user properties
/// in their own order). This fixed order is the encoder's only order.
fn visit<'a>(p: &'a Properties, mut f: impl FnMut(u8, Value<'a>)) {
    let byte = |v: Option<u8>| v.map(Value::Byte);
    let u16v = |v: Option<u16>| v.map(Value::U16);
    let u32v = |v: Option<u32>| v.map(Value::U32);
    let mut one = |id: PropertyId, v: Option<Value<'a>>| {
        if let Some(v) = v {
            f(id as u8, v)
        }
    };
    one(P::PayloadFormatIndicator, byte(p.payload_format_indicator));
    one(P::MessageExpiryInterval, u32v(p.message_expiry_interval));
    one(P::ContentType, s(&p.content_type).map(Value::Bytes));
    one(P::ResponseTopic, s(&p.response_topic).map(Value::Bytes));
    one(
        P::CorrelationData,
        p.correlation_data.as_deref().map(Value::Bytes),
    );
    for &v in &p.subscription_identifiers {
        one(P::SubscriptionIdentifier, Some(Value::VarInt(v)));
    }
    one(P::SessionExpiryInterval, u32v(p.session_expiry_interval));
    one(
        P::AssignedClientIdentifier,
        s(&p.assigned_client_identifier).map(Value::Bytes),
    );
    one(P::ServerKeepAlive, u16v(p.server_keep_alive));
    one(
        P::AuthenticationMethod,
        s(&p.authentication_method).map(Value::Bytes),
    );
    one(
        P::AuthenticationData,
        p.authentication_data.as_deref().map(Value::Bytes),
    );
    one(
        P::RequestProblemInformation,
        byte(p.request_problem_information),
    );
    one(P::WillDelayInterval, u32v(p.will_delay_interval));
    one(
        P::RequestResponseInformation,
        byte(p.request_response_information),
    );
    one(
        P::ResponseInformation,
        s(&p.response_information).map(Value::Bytes),
    );
    one(P::ServerReference, s(&p.server_reference).map(Value::Bytes));
    one(P::ReasonString, s(&p.reason_string).map(Value::Bytes));
    one(P::ReceiveMaximum, u16v(p.receive_maximum));
    one(P::TopicAliasMaximum, u16v(p.topic_alias_maximum));
    one(P::TopicAlias, u16v(p.topic_alias));
    one(P::MaximumQos, byte(p.maximum_qos));
    one(P::RetainAvailable, byte(p.retain_available));
    for (name, value) in &p.user_properties {
        one(
            P::UserProperty,
            Some(Value::Pair(name.as_bytes(), value.as_bytes())),
        );
    }
    one(P::MaximumPacketSize, u32v(p.maximum_packet_size));
    one(
        P::WildcardSubscriptionAvailable,
        byte(p.wildcard_subscription_available),
    );
    one(
        P::SubscriptionIdentifierAvailable,
        byte(p.subscription_identifier_available),
    );
    one(
        P::SharedSubscriptionAvailable,
        byte(p.shared_subscription_available),
    );
}

/// Size of the properties without their length prefix, no checks (saturating).
pub(crate) fn properties_len(p: &Properties) -> usize {
    let mut len = 0usize;
    visit(p, |_, v| len = len.saturating_add(v.len()));
    len
}

/// Size of the whole property block (length prefix included), no checks.
pub(crate) fn property_block_len(p: &Properties) -> usize {
    let len = properties_len(p);
    crate::encode::variable_int_len(u32::try_from(len).unwrap_or(u32::MAX)).saturating_add(len)
}

/// Size of the whole property block, after checking every value can be encoded.
pub(crate) fn checked_property_block_len(p: &Properties) -> Result<usize, EncodeError> {
    let mut err = Ok(());
    let mut len = 0usize;
    visit(p, |_, v| {
        if err.is_ok() {
            err = v.check();
        }
        len = len.saturating_add(v.len());
    });
    err?;
    let len32 = u32::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_VARIABLE_INT)
        .ok_or(EncodeError::PacketTooLarge)?;
    Ok(crate::encode::variable_int_len(len32) + len)
}

/// Writes the property block (length prefix included). Call only after
/// [`checked_property_block_len`] succeeded.
pub(crate) fn write_properties(p: &Properties, buf: &mut BytesMut) {
    let len = properties_len(p);
    write_variable_int(u32::try_from(len).unwrap_or(MAX_VARIABLE_INT), buf);
    visit(p, |id, v| v.write(id, buf));
}
