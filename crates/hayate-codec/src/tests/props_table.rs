//! The property table against the specification's section 2.2.2.2, and the decoder against
//! the table: every property, in every packet, is accepted exactly where the table allows it.

use super::*;
use crate::props::{allowed_in, repeatable_in, PropCtx};
use PropCtx as C;
use PropertyId as P;

/// A valid encoding of one property of each kind (identifier included).
fn sample(id: PropertyId) -> Vec<u8> {
    let mut v = vec![id as u8];
    v.extend_from_slice(match id {
        P::PayloadFormatIndicator
        | P::RequestProblemInformation
        | P::RequestResponseInformation
        | P::MaximumQos
        | P::RetainAvailable
        | P::WildcardSubscriptionAvailable
        | P::SubscriptionIdentifierAvailable
        | P::SharedSubscriptionAvailable => &[0x01],
        P::MessageExpiryInterval
        | P::SessionExpiryInterval
        | P::WillDelayInterval
        | P::MaximumPacketSize => &[0x00, 0x00, 0x00, 0x09],
        P::ServerKeepAlive | P::ReceiveMaximum | P::TopicAliasMaximum | P::TopicAlias => {
            &[0x00, 0x09]
        }
        P::SubscriptionIdentifier => &[0x09],
        P::ContentType
        | P::ResponseTopic
        | P::CorrelationData
        | P::AssignedClientIdentifier
        | P::AuthenticationMethod
        | P::AuthenticationData
        | P::ResponseInformation
        | P::ServerReference
        | P::ReasonString => &[0x00, 0x01, b'x'],
        P::UserProperty => &[0x00, 0x01, b'k', 0x00, 0x01, b'v'],
    });
    v
}

const ALL_IDS: [PropertyId; 27] = [
    P::PayloadFormatIndicator,
    P::MessageExpiryInterval,
    P::ContentType,
    P::ResponseTopic,
    P::CorrelationData,
    P::SubscriptionIdentifier,
    P::SessionExpiryInterval,
    P::AssignedClientIdentifier,
    P::ServerKeepAlive,
    P::AuthenticationMethod,
    P::AuthenticationData,
    P::RequestProblemInformation,
    P::WillDelayInterval,
    P::RequestResponseInformation,
    P::ResponseInformation,
    P::ServerReference,
    P::ReasonString,
    P::ReceiveMaximum,
    P::TopicAliasMaximum,
    P::TopicAlias,
    P::MaximumQos,
    P::RetainAvailable,
    P::UserProperty,
    P::MaximumPacketSize,
    P::WildcardSubscriptionAvailable,
    P::SubscriptionIdentifierAvailable,
    P::SharedSubscriptionAvailable,
];

/// A v5 packet whose only property block (for `ctx`) is `block`.
fn packet_with(ctx: PropCtx, block: &[u8]) -> Vec<u8> {
    let mut props = vec![block.len() as u8];
    props.extend_from_slice(block);
    let (first, body): (u8, Vec<u8>) = match ctx {
        C::Connect => {
            let mut b = b"\x00\x04MQTT\x05\x00\x00\x00".to_vec();
            b.extend_from_slice(&props);
            b.extend_from_slice(&[0x00, 0x01, b'c']);
            (0x10, b)
        }
        C::Will => {
            let mut b = b"\x00\x04MQTT\x05\x04\x00\x00\x00\x00\x01c".to_vec();
            b.extend_from_slice(&props);
            b.extend_from_slice(&[0x00, 0x01, b'w', 0x00, 0x00]);
            (0x10, b)
        }
        C::ConnAck => (0x20, [&[0x00, 0x00][..], &props].concat()),
        C::Publish => (0x30, [&[0x00, 0x01, b't'][..], &props].concat()),
        C::PubAck => (0x40, [&[0x00, 0x01, 0x00][..], &props].concat()),
        C::PubRec => (0x50, [&[0x00, 0x01, 0x00][..], &props].concat()),
        C::PubRel => (0x62, [&[0x00, 0x01, 0x00][..], &props].concat()),
        C::PubComp => (0x70, [&[0x00, 0x01, 0x00][..], &props].concat()),
        C::Subscribe => (
            0x82,
            [&[0x00, 0x01][..], &props, &[0x00, 0x01, b'a', 0x00]].concat(),
        ),
        C::SubAck => (0x90, [&[0x00, 0x01][..], &props, &[0x00]].concat()),
        C::Unsubscribe => (
            0xA2,
            [&[0x00, 0x01][..], &props, &[0x00, 0x01, b'a']].concat(),
        ),
        C::UnsubAck => (0xB0, [&[0x00, 0x01][..], &props, &[0x00]].concat()),
        C::Disconnect => (0xE0, [&[0x00][..], &props].concat()),
        C::Auth => (0xF0, [&[0x18][..], &props].concat()),
    };
    let mut out = vec![first, body.len() as u8];
    out.extend_from_slice(&body);
    out
}

#[test]
fn every_property_is_accepted_exactly_where_the_table_allows_it() {
    for ctx in C::ALL {
        // The empty block is fine everywhere.
        assert!(
            dec(&packet_with(ctx, &[]), ProtocolVersion::V5).is_ok(),
            "{ctx:?}"
        );
        for id in ALL_IDS {
            let mut block = sample(id);
            if ctx == C::Connect && id == P::AuthenticationData {
                block.extend_from_slice(&sample(P::AuthenticationMethod));
            }
            let result = dec(&packet_with(ctx, &block), ProtocolVersion::V5);
            if allowed_in(id, ctx) {
                assert!(result.is_ok(), "{id:?} in {ctx:?}: {result:?}");
                // Twice: allowed only where repeatable.
                let twice = [sample(id), block.clone()].concat();
                let result = dec(&packet_with(ctx, &twice), ProtocolVersion::V5);
                if repeatable_in(id, ctx) {
                    assert!(result.is_ok(), "{id:?} twice in {ctx:?}: {result:?}");
                } else {
                    assert_eq!(
                        result,
                        Err(DecodeError::DuplicateProperty(id as u8)),
                        "{ctx:?}"
                    );
                }
            } else {
                assert_eq!(
                    result,
                    Err(DecodeError::PropertyNotAllowed(id as u8)),
                    "{ctx:?}"
                );
            }
        }
    }
}

#[test]
fn table_matches_section_2_2_2_2() {
    // Spot checks straight from the specification's table.
    let expect: &[(PropertyId, &[PropCtx])] = &[
        (P::PayloadFormatIndicator, &[C::Publish, C::Will]),
        (P::SubscriptionIdentifier, &[C::Publish, C::Subscribe]),
        (
            P::SessionExpiryInterval,
            &[C::Connect, C::ConnAck, C::Disconnect],
        ),
        (P::WillDelayInterval, &[C::Will]),
        (P::TopicAlias, &[C::Publish]),
        (P::ServerReference, &[C::ConnAck, C::Disconnect]),
        (P::AuthenticationMethod, &[C::Connect, C::ConnAck, C::Auth]),
        (P::ReceiveMaximum, &[C::Connect, C::ConnAck]),
        (P::MaximumPacketSize, &[C::Connect, C::ConnAck]),
        (P::UserProperty, &C::ALL),
    ];
    for (id, ctxs) in expect {
        for ctx in C::ALL {
            assert_eq!(
                allowed_in(*id, ctx),
                ctxs.contains(&ctx),
                "{id:?} in {ctx:?}"
            );
        }
    }
    assert!(!allowed_in(P::ReasonString, C::Publish));
    for ctx in C::ALL {
        assert_eq!(
            repeatable_in(P::SubscriptionIdentifier, ctx),
            ctx == C::Publish
        );
        assert!(repeatable_in(P::UserProperty, ctx));
    }
}

#[test]
fn every_property_id_round_trips_through_from_u8() {
    for id in ALL_IDS {
        assert_eq!(PropertyId::from_u8(id as u8), Some(id));
    }
    let known = (0u8..=255)
        .filter(|&b| PropertyId::from_u8(b).is_some())
        .count();
    assert_eq!(known, ALL_IDS.len());
}
