//! Messages between nodes on the reserved `$cluster/` topics, carried by the node links.
//!
//! - `$cluster/claim` (queued in each other node's peer session here, QoS 1): "client C
//!   connected here at T, with or without clean start". Queued behind what this node already
//!   queued for that node, so a node that was away receives the messages for C's session
//!   there first, then the claim. The node that has C's session disconnects C there and
//!   answers with its session.
//! - `$cluster/session` (queued in the claiming node's peer session, QoS 1): the session,
//!   as MQTT 5 packets in the payload: one SUBSCRIBE per subscription (its options and
//!   identifier), then one PUBLISH per message owed to the client (DUP when it may have been
//!   sent, the remaining expiry interval), then one PUBREC per inbound QoS 2 packet id
//!   waiting for its PUBREL.
//! - `$cluster/relay` (queued in the claiming node's peer session, QoS 1): a copy another
//!   node forwarded here for a session handed over, passed on (`docs/CLUSTER.md`, "Relay
//!   after a handover").
//! - `$cluster/mark` (published by a link on its node, QoS 2): the end of what that node
//!   routed to the old node for a session taken over.
//! - `$cluster/relayend` (queued in the claiming node's peer session behind the relayed
//!   copies, QoS 1): the end of what this node relays of one node's copies; the claiming node
//!   holds that node's own copies until it is there.
//!
//! The client identifier travels as the user property `client_id`, never in a topic (a
//! client identifier may hold `+`, `#` or `/`).

use bytes::{Bytes, BytesMut};
use hayate_codec::{
    decode, encode, ByteStr, Packet, PacketId, Properties, ProtocolVersion, PubResp, Publish, QoS,
    Subscribe,
};
use hayate_core::handoff::HandedOver;
use hayate_core::registry::SubscriptionRecord;
use hayate_core::{Arrival, Delivery, Message};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client connected to the sending node.
pub(crate) const CLAIM_TOPIC: &str = "$cluster/claim";
/// A session handed over to the receiving node.
pub(crate) const SESSION_TOPIC: &str = "$cluster/session";
/// A message for a session the sending node handed over to the receiving one, which another
/// node had forwarded to the sending node.
pub(crate) const RELAY_TOPIC: &str = "$cluster/relay";
/// The end of what a node forwarded to a node that handed a session over (published by the
/// claiming node on each other node, routed there into every peer session's queue).
pub(crate) const MARK_TOPIC: &str = "$cluster/mark";
/// The end of what the sending node relays of one node's copies for a session it handed over
/// to the receiving one: queued behind those relayed copies (`docs/CLUSTER.md`, "Relay after
/// a handover").
pub(crate) const RELAY_END_TOPIC: &str = "$cluster/relayend";
/// The sending node handed a session over: what its client published there is before this
/// (`crate::moved`).
pub(crate) const HANDED_OVER_TOPIC: &str = "$cluster/handedover";
/// The sending node took a session over: what its client publishes there is after this
/// (`crate::moved`).
pub(crate) const TAKEN_OVER_TOPIC: &str = "$cluster/takenover";

const CLIENT_ID: &str = "client_id";
const CLEAN_START: &str = "clean_start";
const AT: &str = "at";
const PRESENT: &str = "present";
const OLD: &str = "old";
const NEW: &str = "new";
const RELAYING_FOR: &str = "relaying_for";
/// One per take-over whose old node still relays to the answering node for the session:
/// `<at> <old node>` (`relay::take_over`).
const UPSTREAM_MARK: &str = "upstream_mark";
const NODE: &str = "node";
/// On an answer with a session: its client published through the answering node
/// (`crate::moved`).
const PUBLISHED: &str = "published";
/// On an answer or relayed copy passed on (`crate::late`): how many times.
const HOPS: &str = "hops";
/// On an answer passed on: the node that answered the claim.
const ORIGIN: &str = "origin";

/// Another node answered a claim of this node's (the link already took the session).
#[derive(Debug)]
pub(crate) struct Answer {
    /// The answering node.
    pub from: Arc<str>,
    pub client_id: String,
}

/// A decoded `$cluster/claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub client_id: String,
    pub clean_start: bool,
    pub at: u64,
}

impl Claim {
    /// The claim as a message for a peer session's queue (QoS 1: it waits there while the
    /// node is away, behind what was queued for it before).
    pub(crate) fn to_message(&self) -> Message {
        let publish = self.to_publish();
        Message::new(
            publish.topic,
            publish.payload,
            QoS::AtLeastOnce,
            false,
            publish.properties,
            None,
            None,
        )
    }

    pub(crate) fn to_publish(&self) -> Publish {
        let properties = Properties {
            user_properties: vec![
                (CLIENT_ID.into(), self.client_id.as_str().into()),
                (
                    CLEAN_START.into(),
                    if self.clean_start { "1" } else { "0" }.into(),
                ),
                (AT.into(), self.at.to_string().as_str().into()),
            ],
            ..Properties::default()
        };
        Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: CLAIM_TOPIC.into(),
            packet_id: None,
            properties,
            payload: Bytes::new(),
        }
    }

    pub(crate) fn from_publish(publish: &Publish) -> Option<Claim> {
        Some(Claim {
            client_id: user_property(publish, CLIENT_ID)?.to_string(),
            clean_start: user_property(publish, CLEAN_START)? == "1",
            at: user_property(publish, AT)?.parse().ok()?,
        })
    }

    /// When the claiming connection's CONNECT arrived.
    pub(crate) fn arrival(&self) -> Arrival {
        Arrival::from_nanos(self.at)
    }
}

/// A decoded `$cluster/session`: for which client, and the session (`None`: the sending
/// node had none). `None` when it does not decode.
pub(crate) fn decode_answer(publish: &Publish, now: Instant) -> Option<SessionAnswer> {
    let client_id = user_property(publish, CLIENT_ID)?.to_string();
    // Absent from nodes of an older version: no relay then.
    let at = user_property(publish, AT)
        .and_then(|at| at.parse().ok())
        .unwrap_or(0);
    let handed = if user_property(publish, PRESENT)? == "1" {
        let mut handed = decode_session(&publish.payload, now)?;
        handed.relaying_for = user_property(publish, RELAYING_FOR)
            .map(|nodes| {
                nodes
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(Arc::from)
                    .collect()
            })
            .unwrap_or_default();
        // Absent from nodes of an older version, which send no `$cluster/handedover` either.
        handed.published = user_property(publish, PUBLISHED) == Some("1");
        Some(handed)
    } else {
        None
    };
    let upstream_marks = publish
        .properties
        .user_properties
        .iter()
        .filter(|(k, _)| k.as_str() == UPSTREAM_MARK)
        .filter_map(|(_, v)| {
            let (at, old) = v.as_str().split_once(' ')?;
            Some((Arc::from(old), at.parse().ok()?))
        })
        .collect();
    Some(SessionAnswer {
        client_id,
        at,
        handed,
        upstream_marks,
        origin: user_property(publish, ORIGIN).map(Arc::from),
        hops: hops(publish),
    })
}

/// How many times a `$cluster/session` or `$cluster/relay` was passed on (`crate::late`).
pub(crate) fn hops(publish: &Publish) -> u8 {
    user_property(publish, HOPS)
        .and_then(|hops| hops.parse().ok())
        .unwrap_or(0)
}

/// A `$cluster/relay` as it came, passed on once more (`crate::late`).
pub(crate) fn relay_passed_on(publish: &Publish, hops: u8) -> Message {
    let mut properties = publish.properties.clone();
    properties
        .user_properties
        .retain(|(k, _)| k.as_str() != HOPS);
    properties
        .user_properties
        .push((HOPS.into(), hops.to_string().as_str().into()));
    Message::new(
        publish.topic.clone(),
        publish.payload.clone(),
        QoS::AtLeastOnce,
        false,
        properties,
        None,
        None,
    )
}

/// A decoded `$cluster/session`.
#[derive(Debug)]
pub(crate) struct SessionAnswer {
    pub client_id: String,
    /// The claim's `at` (which take-over the marks are for).
    pub at: u64,
    /// The session (`None`: the sending node had none).
    pub handed: Option<HandedOver>,
    /// The take-overs (old node, claim's `at`) whose old node still relayed to the answering
    /// node for the session when it answered.
    pub upstream_marks: Vec<(Arc<str>, u64)>,
    /// Passed on (`crate::late`): the node that answered the claim (the sending node passed
    /// it on); `at` is that claim's.
    pub origin: Option<Arc<str>>,
    /// How many times it was passed on.
    pub hops: u8,
}

/// An answer passed on (`crate::late`).
#[derive(Debug)]
pub(crate) struct Forwarded<'a> {
    /// The node that answered the claim.
    pub origin: &'a str,
    /// Passed on this many times, this one included.
    pub hops: u8,
}

fn user_property<'a>(publish: &'a Publish, key: &str) -> Option<&'a str> {
    publish
        .properties
        .user_properties
        .iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v.as_str())
}

/// The `$cluster/session` message answering `claim`: the session handed over, or `None`
/// when this node had none (the user property `present` tells them apart, as a session may be
/// present and empty).
///
/// `upstream_marks`: see [`SessionAnswer::upstream_marks`].
pub(crate) fn session_message(
    claim: &Claim,
    handed: Option<&HandedOver>,
    upstream_marks: &[(Arc<str>, u64)],
    now: Instant,
) -> Message {
    answer_message(
        &claim.client_id,
        claim.at,
        handed,
        upstream_marks,
        None,
        now,
    )
}

/// A `$cluster/session` for `client_id`'s claim made `at` ([`session_message`]); `forwarded`:
/// another node's answer, passed on (`crate::late`).
pub(crate) fn answer_message(
    client_id: &str,
    at: u64,
    handed: Option<&HandedOver>,
    upstream_marks: &[(Arc<str>, u64)],
    forwarded: Option<&Forwarded<'_>>,
    now: Instant,
) -> Message {
    let empty = HandedOver::default();
    // A session made only to wait for a claim, handed on empty, is answered as none.
    let present = handed.is_some_and(HandedOver::counts_as_present);
    let handed = handed.unwrap_or(&empty);
    let mut payload = BytesMut::new();
    let id = PacketId::new(1).expect("non-zero");
    for (filter, record) in &handed.subscriptions {
        let subscribe = Subscribe {
            packet_id: id,
            filters: vec![(ByteStr::from(&**filter), record.options)],
            properties: Properties {
                subscription_identifiers: record.subscription_id.into_iter().collect(),
                ..Properties::default()
            },
        };
        let _ = encode(
            &Packet::Subscribe(subscribe),
            ProtocolVersion::V5,
            &mut payload,
        );
    }
    for delivery in &handed.deliveries {
        encode_delivery(delivery, now, &mut payload);
    }
    for id in handed
        .inbound_qos2
        .iter()
        .filter_map(|id| PacketId::new(*id))
    {
        let _ = encode(
            &Packet::PubRec(PubResp::new(id)),
            ProtocolVersion::V5,
            &mut payload,
        );
    }
    for id in handed.released.iter().filter_map(|id| PacketId::new(*id)) {
        let _ = encode(
            &Packet::PubRel(PubResp::new(id)),
            ProtocolVersion::V5,
            &mut payload,
        );
    }
    let mut user_properties = vec![
        (CLIENT_ID.into(), client_id.into()),
        (PRESENT.into(), if present { "1" } else { "0" }.into()),
        (AT.into(), at.to_string().as_str().into()),
        (
            RELAYING_FOR.into(),
            handed.relaying_for.join(",").as_str().into(),
        ),
    ];
    for (old, at) in upstream_marks {
        user_properties.push((UPSTREAM_MARK.into(), format!("{at} {old}").as_str().into()));
    }
    if handed.published {
        user_properties.push((PUBLISHED.into(), "1".into()));
    }
    if let Some(forwarded) = forwarded {
        user_properties.push((ORIGIN.into(), forwarded.origin.into()));
        user_properties.push((HOPS.into(), forwarded.hops.to_string().as_str().into()));
    }
    Message::new(
        SESSION_TOPIC.into(),
        payload.freeze(),
        QoS::AtLeastOnce,
        false,
        Properties {
            user_properties,
            ..Properties::default()
        },
        None,
        None,
    )
}

/// One delivery as a PUBLISH (DUP and the packet id it went out under when it may have been
/// sent, the remaining expiry interval, its subscription identifiers); nothing when it
/// expired.
fn encode_delivery(delivery: &Delivery, now: Instant, payload: &mut BytesMut) {
    let message = &delivery.message;
    if message.expires_at.is_some_and(|at| at <= now) {
        return;
    }
    let remaining = message
        .expires_at
        .map(|at| at.saturating_duration_since(now).as_secs().max(1) as u32);
    let publish = Publish {
        dup: delivery.maybe_sent() && delivery.qos != QoS::AtMostOnce,
        qos: delivery.qos,
        retain: delivery.retain,
        topic: message.topic.clone(),
        // The id it went out under when it may have been sent (DUP), else a placeholder.
        packet_id: (delivery.qos != QoS::AtMostOnce).then(|| {
            delivery
                .sent_as
                .unwrap_or(PacketId::new(1).expect("non-zero"))
        }),
        properties: Properties {
            message_expiry_interval: remaining,
            subscription_identifiers: delivery.subscription_ids.clone(),
            ..message.properties.clone()
        },
        payload: message.payload.clone(),
    };
    let _ = encode(&Packet::Publish(publish), ProtocolVersion::V5, payload);
}

/// The `$cluster/relay` message passing `delivery` on for `client_id`'s session, which this
/// node handed over to the receiving one (`hayate_core::cluster::RelayEncoder`).
pub(crate) fn relay_message(client_id: &str, delivery: &Delivery, now: Instant) -> Message {
    let mut payload = BytesMut::new();
    encode_delivery(delivery, now, &mut payload);
    Message::new(
        RELAY_TOPIC.into(),
        payload.freeze(),
        QoS::AtLeastOnce,
        false,
        Properties {
            user_properties: vec![(CLIENT_ID.into(), client_id.into())],
            ..Properties::default()
        },
        None,
        None,
    )
}

/// The `$cluster/relayend` message: this node relayed, in the messages before it, everything
/// of `node`'s copies for `client_id`'s session handed over on the claim made `at` (QoS 1,
/// as the relayed messages it follows).
pub(crate) fn relay_end_message(client_id: &str, node: &str, at: u64) -> Message {
    Message::new(
        RELAY_END_TOPIC.into(),
        Bytes::new(),
        QoS::AtLeastOnce,
        false,
        Properties {
            user_properties: vec![
                (CLIENT_ID.into(), client_id.into()),
                (NODE.into(), node.into()),
                (AT.into(), at.to_string().as_str().into()),
            ],
            ..Properties::default()
        },
        None,
        None,
    )
}

/// A decoded `$cluster/relayend`: client, node, claim's `at`.
pub(crate) fn decode_relay_end(publish: &Publish) -> Option<(Arc<str>, Arc<str>, u64)> {
    Some((
        Arc::from(user_property(publish, CLIENT_ID)?),
        Arc::from(user_property(publish, NODE)?),
        user_property(publish, AT)?.parse().ok()?,
    ))
}

/// A decoded `$cluster/relay`: for which client, and what to queue in its session.
pub(crate) fn decode_relay(publish: &Publish, now: Instant) -> Option<(String, Vec<Delivery>)> {
    let client_id = user_property(publish, CLIENT_ID)?.to_string();
    Some((client_id, decode_session(&publish.payload, now)?.deliveries))
}

/// A `$cluster/mark`: node `new` took `client_id`'s session over from node `old`; whatever
/// the routing node forwarded to `old` before the mark, `old` relays to `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub client_id: Arc<str>,
    pub old: Arc<str>,
    pub new: Arc<str>,
    /// The claim's `at`: which take-over this mark is for (a mark of an earlier one may
    /// arrive late, after the old node was away).
    pub at: u64,
}

impl Mark {
    /// QoS 2, as the forwarded messages it must not overtake: a stored session sends a QoS 2
    /// message only once it is stored, while a QoS 1 one would go at once.
    pub(crate) fn to_publish(&self, packet_id: PacketId) -> Publish {
        Publish {
            dup: false,
            qos: QoS::ExactlyOnce,
            retain: false,
            topic: MARK_TOPIC.into(),
            packet_id: Some(packet_id),
            properties: self.properties(),
            payload: Bytes::new(),
        }
    }

    /// The mark as a message for a peer session's queue here (QoS 2, see `to_publish`).
    pub(crate) fn to_message(&self) -> Message {
        Message::new(
            MARK_TOPIC.into(),
            Bytes::new(),
            QoS::ExactlyOnce,
            false,
            self.properties(),
            None,
            None,
        )
    }

    /// The same take-over named in one of the notices of `crate::moved` (`HANDED_OVER_TOPIC`,
    /// `TAKEN_OVER_TOPIC`), for a peer session's queue.
    pub(crate) fn to_notice(&self, topic: &'static str, qos: QoS) -> Message {
        Message::new(
            topic.into(),
            Bytes::new(),
            qos,
            false,
            self.properties(),
            None,
            None,
        )
    }

    fn properties(&self) -> Properties {
        Properties {
            user_properties: vec![
                (CLIENT_ID.into(), (*self.client_id).into()),
                (OLD.into(), (*self.old).into()),
                (NEW.into(), (*self.new).into()),
                (AT.into(), self.at.to_string().as_str().into()),
            ],
            ..Properties::default()
        }
    }

    pub(crate) fn from_publish(publish: &Publish) -> Option<Mark> {
        Some(Mark {
            client_id: user_property(publish, CLIENT_ID)?.into(),
            old: user_property(publish, OLD)?.into(),
            new: user_property(publish, NEW)?.into(),
            at: user_property(publish, AT)?.parse().ok()?,
        })
    }
}

/// The session in a `$cluster/session` payload; `None` if it does not decode.
fn decode_session(payload: &[u8], now: Instant) -> Option<HandedOver> {
    let mut buf = BytesMut::from(payload);
    let mut handed = HandedOver::default();
    // One scope for every message of the payload.
    let from_peer = Arc::new(hayate_core::PeerScope::relayed());
    while !buf.is_empty() {
        match decode(&mut buf, ProtocolVersion::V5, u32::MAX).ok()?? {
            Packet::Subscribe(subscribe) => {
                let subscription_id = subscribe.properties.subscription_identifiers.first();
                for (filter, options) in subscribe.filters {
                    let record = SubscriptionRecord {
                        options,
                        subscription_id: subscription_id.copied(),
                    };
                    handed.subscriptions.push((filter.as_str().into(), record));
                }
            }
            Packet::Publish(publish) => handed.deliveries.push(delivery(publish, &from_peer, now)),
            Packet::PubRec(rec) => handed.inbound_qos2.push(rec.packet_id.get()),
            Packet::PubRel(rel) => handed.released.push(rel.packet_id.get()),
            _ => return None,
        }
    }
    Some(handed)
}

fn delivery(publish: Publish, from_peer: &Arc<hayate_core::PeerScope>, now: Instant) -> Delivery {
    let expires_at = publish
        .properties
        .message_expiry_interval
        .map(|secs| now + Duration::from_secs(u64::from(secs)));
    let subscription_ids = publish.properties.subscription_identifiers.clone();
    let properties = Properties {
        message_expiry_interval: None,
        subscription_identifiers: Vec::new(),
        ..publish.properties
    };
    let message = Message::new(
        publish.topic,
        publish.payload,
        publish.qos,
        publish.retain,
        properties,
        expires_at,
        // A client's message (No Local never matches it again).
        Some(0),
    )
    // Another node's: should the session it is for have been handed over from here in turn
    // a moment ago, it is relayed on to where the session is (`Router::relay` relays only
    // what came from another node).
    .forwarded_by_peer(from_peer.clone());
    Delivery {
        subscription_ids,
        sent_as: publish.dup.then_some(publish.packet_id).flatten(),
        ..Delivery::new(Arc::new(message), publish.qos, publish.retain)
    }
}

/// Queues a control message in another node's peer session `peer` here, behind what is
/// already queued for that node.
pub(crate) fn queue_for_node(
    broker: &hayate_core::Broker,
    peer: &Arc<hayate_core::registry::SessionCell>,
    message: Message,
    qos: QoS,
    now: Instant,
    wake: &mut hayate_core::WakeList,
) {
    let delivery = Delivery::new(Arc::new(message), qos, false);
    let mut outcome = hayate_core::router::RouteOutcome::default();
    broker
        .router
        .deliver(peer, delivery, now, wake, &mut outcome);
}

/// Answers `claim` from node `from` (it came down this node's link from `from`): disconnects
/// and hands over the client's session here, and queues the answer in `from`'s peer session
/// here (even without a session: `from`'s CONNACK waits for it).
///
/// `ctx.relay_ends`: what the node the session came from still relays here for it; a session
/// handed on relays until that has arrived too.
pub(crate) fn answer_claim(
    ctx: &crate::link::LinkContext,
    from: &Arc<str>,
    claim: &Claim,
    now: Instant,
) {
    let (broker, ends) = (&ctx.broker, &ctx.relay_ends);
    let mut wake = hayate_core::WakeList::new();
    // The session leaves, its relay starts, the claimant's peer session takes its filters and
    // the answer is queued ahead of anything relayed: one step for this node's routing.
    let switch = broker.router.cluster().map(|cluster| cluster.exclusive());
    let peer = broker.registry.get(&format!(
        "{}{from}",
        hayate_core::cluster::PEER_CLIENT_PREFIX
    ));
    let upstream = ends.pending(&claim.client_id, now);
    let upstream_marks = upstream.marks;
    let upstream = upstream.nodes;
    tracing::debug!(client_id = %claim.client_id, %from, ?upstream, "cluster_claim_answered");
    let handed = broker.hand_over(
        &claim.client_id,
        hayate_core::handoff::Claiming {
            clean_start: claim.clean_start,
            at: claim.arrival(),
            to: peer.as_ref(),
            upstream,
        },
        now,
        &mut wake,
    );
    if !claim.clean_start {
        if handed.is_some() {
            // An answer to a claim this node made for the session that comes late goes on
            // there (`crate::late`).
            ctx.late
                .record(&claim.client_id, from, now, now + ctx.grace);
            // What the client published here is before this, on every link from here.
            if handed.as_ref().is_some_and(|handed| handed.published) {
                crate::moved::queue_handed_over(
                    ctx,
                    &claim.client_id,
                    from,
                    claim.at,
                    now,
                    &mut wake,
                );
            }
        }
        match peer {
            Some(peer) => {
                let message = session_message(claim, handed.as_ref(), &upstream_marks, now);
                // Sent once the session's removal here is on disk (`docs/CLUSTER.md`, "A
                // handover that outlives a kill").
                let answer = Delivery::new(Arc::new(message), QoS::AtLeastOnce, false);
                broker.deliver_behind_store(&peer, answer, now, &mut wake);
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let (output, durable) = broker.output_state(&peer);
                    tracing::debug!(%from, client_id = %claim.client_id, ?output, ?durable, "cluster_answer_queued");
                }
            }
            None => tracing::warn!(%from, client_id = %claim.client_id, "cluster_session_lost"),
        }
    }
    drop(switch);
    for doorbell in wake {
        doorbell.notify_one();
    }
}

#[cfg(test)]
mod tests;
