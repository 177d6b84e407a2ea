//! The per-client session state machine.

use crate::budget::{MemoryBudget, DELIVERY_OVERHEAD_BYTES};
use crate::limits::SharedLimits;
use crate::message::{Delivery, WireForm};
use crate::outbuf::OutBuf;
use hayate_codec::{
    encode, encode_publish_header, publish_header_len, ByteStr, Packet, PacketId, Properties,
    ProtocolVersion, PubResp, Publish, QoS, ReasonCode,
};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

/// Stop filling the output buffer past this many bytes in one `poll_transmit`; the caller
/// writes and polls again, so one subscriber's backlog never becomes one giant buffer.
const TRANSMIT_BUDGET_BYTES: usize = 256 * 1024;
/// While the broker-wide budget is under pressure, a session charged at least this much counts
/// as congested (its publishers pause while it drains).
const PRESSURE_CONGESTION_BYTES: usize = 64 * 1024;

/// Limits that bound one session's memory; from the broker's configuration.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Most messages held for the client (waiting plus in flight). Further messages are dropped
    /// and counted.
    pub max_queued_messages: usize,
    /// Most payload + topic bytes held for the client (waiting plus in flight).
    pub max_queued_bytes: usize,
    /// Most outbound QoS 1/2 messages in flight; the window is the smaller of this and the
    /// client's Receive Maximum (v5). For v3 clients this is the window.
    pub max_inflight: u16,
    /// Whether QoS 0 messages are queued for a persistent session while its client is offline.
    pub queue_qos0_offline: bool,
    /// The broker-wide account every session's queued bytes are charged to (none: no global
    /// limit).
    pub budget: Option<Arc<MemoryBudget>>,
    /// What a full queue drops: the new message (clients) or the oldest queued ones (bridges).
    pub queue_full: QueueFull,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_queued_messages: 100_000,
            max_queued_bytes: 64 * 1024 * 1024,
            max_inflight: 1024,
            queue_qos0_offline: false,
            budget: None,
            queue_full: QueueFull::DropNewest,
        }
    }
}

/// What was negotiated for the current network connection.
#[derive(Debug, Clone)]
pub struct ConnectionParams {
    /// Protocol level of the connection.
    pub version: ProtocolVersion,
    /// The client's Receive Maximum (65,535 when absent, §3.1.2.11.3) [MQTT-3.3.4-9].
    pub client_receive_maximum: u16,
    /// The client's Maximum Packet Size (`u32::MAX` when absent) [MQTT-3.1.2-24].
    pub client_maximum_packet_size: u32,
    /// The client's Topic Alias Maximum (0 when absent) [MQTT-3.1.2-26].
    pub client_topic_alias_maximum: u16,
    /// The Receive Maximum the server announced in CONNACK.
    pub server_receive_maximum: u16,
    /// The Topic Alias Maximum the server announced in CONNACK.
    pub server_topic_alias_maximum: u16,
    /// Whether the server assigns topic aliases on outbound PUBLISH packets.
    pub assign_outbound_aliases: bool,
}

/// Why a client's packet breaks the protocol; each maps to a v5 reason code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SessionError {
    /// More QoS 2 publishes awaiting PUBREL than the server's Receive Maximum [MQTT-3.3.4-7].
    #[error("[MQTT-3.3.4-7] receive maximum exceeded")]
    ReceiveMaximumExceeded,
    /// Topic alias 0 or above the announced maximum [MQTT-3.3.2-8] [MQTT-3.3.2-9].
    #[error("[MQTT-3.3.2-9] topic alias out of range")]
    TopicAliasInvalid,
    /// Empty topic with an alias that has no mapping, or an empty topic without an alias.
    #[error("[§3.3.2.1, §3.3.4] empty topic name without a known topic alias")]
    UnknownTopicAlias,
}

impl SessionError {
    /// The v5 DISCONNECT reason code for this error.
    pub fn reason_code(self) -> ReasonCode {
        match self {
            SessionError::ReceiveMaximumExceeded => ReasonCode::RECEIVE_MAXIMUM_EXCEEDED,
            SessionError::TopicAliasInvalid => ReasonCode::TOPIC_ALIAS_INVALID,
            SessionError::UnknownTopicAlias => ReasonCode::PROTOCOL_ERROR,
        }
    }
}

/// What to do with an inbound PUBLISH the session accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundPublish {
    /// New message: route it, then acknowledge it according to its QoS.
    Route,
    /// A QoS 2 message whose packet id is already awaiting PUBREL: acknowledge again with
    /// PUBREC but do not route it a second time (exactly once) [MQTT-4.3.3-10].
    DuplicateQos2,
}

/// Result of offering a delivery to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// Queued. `wake` is true when the connection should be woken to send it (it is attached
    /// and had nothing waiting before).
    Queued {
        /// Whether the owner should be woken.
        wake: bool,
    },
    /// Dropped because the queue is at its message or byte limit.
    DroppedQueueFull,
    /// Dropped because the broker-wide queued-bytes budget is used up.
    DroppedBudget,
    /// Dropped: QoS 0 for a client that is offline.
    DroppedOffline,
}

/// Where an outbound QoS 1/2 message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutflightState {
    /// QoS 1 PUBLISH sent, waiting for PUBACK.
    AwaitPubAck,
    /// QoS 2 PUBLISH sent, waiting for PUBREC.
    AwaitPubRec,
    /// PUBREL sent, waiting for PUBCOMP.
    AwaitPubComp,
}

#[derive(Debug)]
struct Outflight {
    /// The message; dropped once PUBREC arrives (only the id matters after that).
    delivery: Option<Delivery>,
    state: OutflightState,
    /// Send order, so resends after reconnect keep the original order [MQTT-4.6.0-1].
    seq: u64,
    /// The entry's seq in a stored session's queue (0: not stored).
    stored: u64,
}

/// Session state that only some clients use: inbound QoS 2 ids, topic aliases, resends after
/// a reconnect and outbound PUBRELs.
#[derive(Debug, Default)]
struct RareState {
    /// Inbound QoS 2 packet ids for which PUBREC was sent and PUBREL is awaited.
    inbound_qos2: HashSet<u16>,
    inbound_aliases: HashMap<u16, ByteStr>,
    outbound_aliases: HashMap<ByteStr, u16>,
    /// Packet ids to send again, in order: filled when a connection attaches.
    resend: VecDeque<u16>,
    /// PUBREL packets to send (from PUBREC handling).
    pubrel_out: VecDeque<PubResp>,
    /// A stored session's journal (`journal.rs`).
    journal: Option<journal::Journal>,
    /// Direct copies (own and forwarded) held back after a cluster take-over: how many, at the back of `pending`
    /// (`hold.rs`); `None`: no hold.
    direct_held: Option<usize>,
}

/// Hashes the packet ids of the outbound in-flight window. The server assigns them (a client
/// cannot pick keys that collide), so one multiplication spreads them well enough, and the map
/// needs no random state of its own (16 bytes in every session).
#[derive(Debug, Default, Clone, Copy)]
struct PacketIdHasher(u64);

impl Hasher for PacketIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u16(&mut self, id: u16) {
        self.0 = (self.0 ^ u64::from(id)).wrapping_mul(FIBONACCI);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// 2^64 / φ, odd: multiplying by it mixes the low bits of a key into the high ones.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// What a `poll_transmit` call did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransmitReport {
    /// PUBLISH packets written.
    pub published: usize,
    /// Of those, by the QoS they were written with (index 0, 1, 2).
    pub published_by_qos: [usize; 3],
    /// Their payload bytes, by QoS.
    pub payload_bytes_by_qos: [u64; 3],
    /// Messages dropped because they expired while queued [MQTT-3.3.2-5].
    pub expired: usize,
    /// Messages dropped because they exceed the client's Maximum Packet Size [MQTT-3.1.2-25].
    pub too_large: usize,
    /// The byte budget ran out with more that could be sent now: call again after writing.
    pub more: bool,
}

impl TransmitReport {
    /// Counts one PUBLISH written with `qos`, carrying `payload_bytes`.
    fn count_published(&mut self, qos: QoS, payload_bytes: usize) {
        self.published += 1;
        self.published_by_qos[qos as usize] += 1;
        self.payload_bytes_by_qos[qos as usize] += payload_bytes as u64;
    }
}

/// One client's session state. See the crate docs.
#[derive(Debug)]
pub struct Session {
    /// Shared by every session of a broker (they all have the same limits, changeable while
    /// the broker runs).
    limits: Arc<SharedLimits>,
    connection: Option<ConnectionParams>,
    /// Deliveries waiting for an in-flight slot (or for the client to come back).
    pending: VecDeque<Delivery>,
    /// Payload + topic bytes held in `pending` and `inflight`.
    held_bytes: usize,
    /// What this session has charged to the broker-wide budget (its held bytes plus a fixed
    /// overhead per held delivery); returned as deliveries leave and when the session drops.
    charged: usize,
    inflight: HashMap<u16, Outflight, BuildHasherDefault<PacketIdHasher>>,
    next_packet_id: u16,
    next_seq: u64,
    /// State only some clients need; allocated on first use so an idle session stays small.
    rare: Option<Box<RareState>>,
    /// Deliveries that have left the session so far (QoS 0 written, QoS 1/2 acknowledged,
    /// expired); publishers waiting on this session watch it move.
    completed: u64,
    /// PUBLISH packets written so far.
    transmitted: u64,
}

impl Session {
    /// A new, empty session.
    pub fn new(limits: SessionLimits) -> Session {
        Session::with_shared_limits(Arc::new(SharedLimits::new(limits)))
    }

    /// A new, empty session whose limits are shared with others (saves memory per session).
    pub fn with_shared_limits(limits: Arc<SharedLimits>) -> Session {
        Session {
            limits,
            connection: None,
            pending: VecDeque::new(),
            held_bytes: 0,
            charged: 0,
            inflight: HashMap::default(),
            next_packet_id: 1,
            next_seq: 0,
            rare: None,
            completed: 0,
            transmitted: 0,
        }
    }

    /// Starts a network connection on this session. Topic aliases start empty (they belong to
    /// a connection [MQTT-3.3.2-7]); every unacknowledged outbound QoS 1/2 message is queued to
    /// be sent again with DUP set, and every PUBREL again, in the original order
    /// [MQTT-4.4.0-1] [MQTT-4.4.0-2].
    pub fn attach(&mut self, params: ConnectionParams) {
        self.connection = Some(params);
        if let Some(rare) = &mut self.rare {
            rare.inbound_aliases.clear();
            rare.outbound_aliases.clear();
            rare.pubrel_out.clear();
            rare.resend.clear();
        }
        self.journal_attach();
        if !self.inflight.is_empty() {
            let mut ids: Vec<(u64, u16)> =
                self.inflight.iter().map(|(id, f)| (f.seq, *id)).collect();
            ids.sort_unstable();
            self.rare().resend = ids.into_iter().map(|(_, id)| id).collect();
        }
    }

    /// Ends the current network connection; the state stays for the next one.
    pub fn detach(&mut self) {
        self.connection = None;
        if let Some(rare) = &mut self.rare {
            rare.resend.clear();
            rare.pubrel_out.clear();
        }
        self.spill_resident();
    }

    /// True while a network connection is attached.
    pub fn is_attached(&self) -> bool {
        self.connection.is_some()
    }

    /// The current connection's parameters.
    pub fn connection(&self) -> Option<&ConnectionParams> {
        self.connection.as_ref()
    }

    /// Messages held (waiting plus in flight).
    pub fn held_messages(&self) -> usize {
        self.pending.len() + self.inflight.len()
    }

    /// Outbound QoS 1/2 messages in flight.
    pub fn inflight_len(&self) -> usize {
        self.inflight.len()
    }

    /// True when the session holds at least half of its message or byte limit. Publishers that
    /// feed an attached, congested session pause reading (back-pressure) while it drains, so
    /// that messages wait in their TCP buffers instead of being dropped here.
    /// The broker-wide budget counts too: once it is half used, a session holding a noticeable
    /// share of it is congested as well.
    pub fn is_congested(&self) -> bool {
        self.is_over(2)
    }

    /// True once the session holds no more than a quarter of its limits (and the broker-wide
    /// budget is below a quarter too, or this session holds little of it): publishers paused on
    /// it are resumed only then, so each pause lets a good share of the queue drain and a crowd
    /// of paused publishers is not woken for every few messages.
    pub fn is_drained(&self) -> bool {
        !self.is_over(4)
    }

    fn is_over(&self, divisor: usize) -> bool {
        self.held_messages() >= self.limits.max_queued_messages() / divisor
            || self.held_bytes >= self.limits.max_queued_bytes() / divisor
            || (self.charged >= PRESSURE_CONGESTION_BYTES
                && self
                    .limits
                    .budget()
                    .is_some_and(|budget| budget.held() >= budget.limit() / divisor))
    }

    /// Charges a delivery of `weight` bytes to the broker-wide budget; false if it is used up.
    fn charge(&mut self, weight: usize) -> bool {
        let charge = weight + DELIVERY_OVERHEAD_BYTES;
        if let Some(budget) = self.limits.budget() {
            if !budget.try_charge(charge) {
                return false;
            }
        }
        self.charged += charge;
        true
    }

    /// Removes a delivery of `weight` bytes from the held count and returns its charge.
    fn free(&mut self, weight: usize) {
        self.completed += 1;
        self.unhold(weight);
    }

    /// Returns a delivery's bytes and charge without counting it as completed (it went to
    /// disk).
    fn unhold(&mut self, weight: usize) {
        self.held_bytes = self.held_bytes.saturating_sub(weight);
        let charge = (weight + DELIVERY_OVERHEAD_BYTES).min(self.charged);
        self.charged -= charge;
        if let Some(budget) = self.limits.budget() {
            budget.release(charge);
        }
    }

    /// Deliveries that have left the session since it was created: QoS 0 messages written to
    /// the connection's output, QoS 1/2 messages acknowledged, expired ones. A waiting
    /// publisher checks that this moves, to tell a slow subscriber (wait for it) from a stalled
    /// one (do not). Sending a QoS 1/2 message is not progress until it is acknowledged: a
    /// client that reads but never acknowledges fills its window and stops here.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// PUBLISH packets written since the session was created.
    pub fn transmitted(&self) -> u64 {
        self.transmitted
    }

    /// True when `poll_transmit` may have something to write.
    pub fn wants_transmit(&self) -> bool {
        self.connection.is_some()
            && (self
                .rare
                .as_ref()
                .is_some_and(|rare| !rare.resend.is_empty() || !rare.pubrel_out.is_empty())
                // QoS 0 needs no in-flight slot: it goes out even with the window full. Own
                // copies held back (`hold.rs`) wait.
                || (self.pending.len() > self.direct_held()
                    && self.pending.front().is_some_and(|front| {
                    front.qos == QoS::AtMostOnce
                        || (self.inflight.len() < usize::from(self.window())
                            && !self.journal_blocks(front))
                })))
            && !self.journal_barrier()
    }

    fn window(&self) -> u16 {
        let client = self
            .connection
            .as_ref()
            .map_or(u16::MAX, |c| c.client_receive_maximum);
        client.min(self.limits.max_inflight()).max(1)
    }

    /// Offers a delivery. Enforces the queue limits; see [`EnqueueOutcome`].
    pub fn enqueue(&mut self, mut delivery: Delivery) -> EnqueueOutcome {
        if self.connection.is_none()
            && delivery.qos == QoS::AtMostOnce
            && !self.limits.queue_qos0_offline()
        {
            return EnqueueOutcome::DroppedOffline;
        }
        let weight = delivery.weight();
        let spills = self.spills(&delivery);
        if self.drops_oldest() {
            self.make_room(weight, spills);
        }
        if self.is_full(spills) {
            return EnqueueOutcome::DroppedQueueFull;
        }
        if spills {
            self.drop_direct_hold();
            self.spill(delivery);
            return EnqueueOutcome::Queued {
                wake: self.connection.is_some(),
            };
        }
        if self.held_bytes + weight > self.limits.max_queued_bytes() {
            return EnqueueOutcome::DroppedQueueFull;
        }
        if !self.charge(weight) {
            return EnqueueOutcome::DroppedBudget;
        }
        self.journal_enqueue(&mut delivery);
        self.held_bytes += weight;
        let was_idle = self.push_pending(delivery);
        EnqueueOutcome::Queued {
            wake: was_idle && self.connection.is_some(),
        }
    }

    /// Takes the deliveries that came through a shared subscription and may go to another
    /// member of the group when this client goes away: QoS 1/2 messages not yet sent, and QoS 1
    /// messages sent but not acknowledged (§4.8.2). A QoS 2 message already sent stays:
    /// its delivery must be completed to this client and never sent to another
    /// [MQTT-4.8.2-4] [MQTT-4.8.2-5].
    pub fn take_shared_deliveries(&mut self) -> Vec<Delivery> {
        self.drop_direct_hold();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.pending.len());
        for delivery in self.pending.drain(..) {
            if delivery.shared_group.is_some() && delivery.qos != QoS::AtMostOnce {
                taken.push(delivery);
            } else {
                kept.push_back(delivery);
            }
        }
        self.pending = kept;
        let ids: Vec<u16> = self
            .inflight
            .iter()
            .filter(|(_, f)| {
                f.state == OutflightState::AwaitPubAck
                    && f.delivery
                        .as_ref()
                        .is_some_and(|d| d.shared_group.is_some())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(delivery) = self.inflight.remove(&id).and_then(|f| f.delivery) {
                taken.push(delivery);
            }
        }
        for delivery in &taken {
            self.free(delivery.weight());
            if delivery.seq != 0 {
                let seq = delivery.seq;
                self.record(|| JournalEvent::Removed {
                    seq,
                    released: false,
                });
            }
        }
        taken
    }

    /// Takes every message the session still owes its client, in send order: those in
    /// flight whose PUBLISH may not have been received (waiting for PUBACK or PUBREC; each
    /// with the packet id it went out under, `Delivery::sent_as`, for the next node to send
    /// it again under [MQTT-4.4.0-1]), then those queued. A QoS 2 message whose PUBREL is out was received
    /// and is not taken. Used when the session moves to another node of a cluster; the
    /// session is discarded afterwards.
    pub fn take_all_deliveries(&mut self) -> Vec<Delivery> {
        self.drop_direct_hold();
        let mut inflight: Vec<(u64, Delivery)> = self
            .inflight
            .drain()
            .filter(|(_, f)| f.state != OutflightState::AwaitPubComp)
            .filter_map(|(id, f)| {
                f.delivery.map(|mut d| {
                    d.sent_as = PacketId::new(id);
                    (f.seq, d)
                })
            })
            .collect();
        inflight.sort_unstable_by_key(|(seq, _)| *seq);
        let mut taken: Vec<Delivery> = inflight.into_iter().map(|(_, d)| d).collect();
        taken.extend(self.pending.drain(..));
        taken
    }

    /// The packet ids of outbound QoS 2 messages whose PUBREC came and whose PUBCOMP has not,
    /// in send order, for a session moving to another node of a cluster: that node sends
    /// their PUBREL again [MQTT-4.4.0-1]. A client that hands a QoS 2 message to its
    /// application at PUBREL (paho does) has not delivered it yet.
    pub fn released_ids(&self) -> Vec<u16> {
        let mut ids: Vec<(u64, u16)> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.state == OutflightState::AwaitPubComp)
            .map(|(id, f)| (f.seq, *id))
            .collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The packet ids of inbound QoS 2 messages routed and waiting for their PUBREL (so that
    /// a retransmission is not routed again), for a session moving to another node of a
    /// cluster.
    pub fn inbound_qos2_ids(&self) -> Vec<u16> {
        let mut ids: Vec<u16> = self
            .rare
            .as_ref()
            .map(|rare| rare.inbound_qos2.iter().copied().collect())
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Whether inbound QoS 2 packet id `id` is routed and awaits its PUBREL here.
    pub fn knows_inbound_qos2(&self, id: PacketId) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|rare| rare.inbound_qos2.contains(&id.get()))
    }

    /// Drops every held message (used when a session is discarded).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.inflight.clear();
        self.rare = None;
        self.held_bytes = 0;
        self.release_charge();
    }

    fn release_charge(&mut self) {
        if let Some(budget) = self.limits.budget() {
            budget.release(self.charged);
        }
        self.charged = 0;
    }

    // ----- inbound -------------------------------------------------------------------------

    /// Checks an inbound PUBLISH against session state: resolves and records topic aliases
    /// (v5), enforces the server's Receive Maximum, and recognises QoS 2 retransmissions.
    /// On `Ok(Route)` the publish's `topic` holds the real topic name.
    pub fn handle_inbound_publish(
        &mut self,
        publish: &mut Publish,
    ) -> Result<InboundPublish, SessionError> {
        if let Some(alias) = publish.properties.topic_alias {
            let max = self
                .connection
                .as_ref()
                .map_or(0, |c| c.server_topic_alias_maximum);
            // [MQTT-3.3.2-8] alias 0 is invalid; [MQTT-3.3.2-9] above our maximum is invalid.
            if alias == 0 || alias > max {
                return Err(SessionError::TopicAliasInvalid);
            }
            if publish.topic.is_empty() {
                match self
                    .rare
                    .as_ref()
                    .and_then(|r| r.inbound_aliases.get(&alias))
                {
                    Some(topic) => publish.topic = topic.clone(),
                    None => return Err(SessionError::UnknownTopicAlias),
                }
            } else {
                self.rare()
                    .inbound_aliases
                    .insert(alias, publish.topic.clone());
            }
            publish.properties.topic_alias = None;
        } else if publish.topic.is_empty() {
            return Err(SessionError::UnknownTopicAlias);
        }
        if publish.qos == QoS::ExactlyOnce {
            let Some(id) = publish.packet_id else {
                return Ok(InboundPublish::Route);
            };
            let max = self
                .connection
                .as_ref()
                .map_or(u16::MAX, |c| c.server_receive_maximum);
            let inbound_qos2 = &mut self.rare().inbound_qos2;
            if inbound_qos2.contains(&id.get()) {
                return Ok(InboundPublish::DuplicateQos2);
            }
            if inbound_qos2.len() >= usize::from(max) {
                return Err(SessionError::ReceiveMaximumExceeded);
            }
            inbound_qos2.insert(id.get());
        }
        Ok(InboundPublish::Route)
    }

    /// A new inbound QoS 2 message was routed: its packet id is recorded as awaiting PUBREL
    /// only now, after every queue entry routing made, so that a store that has the id has
    /// the entries too (a PUBLISH sent again after a restart is then rightly not routed again).
    pub fn inbound_qos2_routed(&mut self, id: PacketId) {
        self.record(|| JournalEvent::InboundQos2 {
            packet_id: id.get(),
            awaiting: true,
        });
    }

    /// Forgets an inbound QoS 2 message whose PUBREC was refused (v5 error reason), so the id
    /// can be reused.
    pub fn forget_inbound_qos2(&mut self, id: PacketId) {
        self.handle_pubrel(id);
    }

    /// PUBREL from the client: returns whether the packet id was awaiting release. The caller
    /// answers PUBCOMP either way (v5 with 0x92 when unknown) [MQTT-4.3.3-11].
    pub fn handle_pubrel(&mut self, id: PacketId) -> bool {
        let known = self
            .rare
            .as_mut()
            .is_some_and(|rare| rare.inbound_qos2.remove(&id.get()));
        if known {
            self.record(|| JournalEvent::InboundQos2 {
                packet_id: id.get(),
                awaiting: false,
            });
        }
        known
    }

    fn rare(&mut self) -> &mut RareState {
        self.rare.get_or_insert_with(Default::default)
    }

    /// PUBACK from the client: frees the in-flight slot. Returns false for an unknown id.
    pub fn handle_puback(&mut self, id: PacketId) -> bool {
        self.release_if(id, OutflightState::AwaitPubAck)
    }

    /// PUBREC from the client. On success the message is settled and PUBREL queued; with an
    /// error reason (v5) the flow ends here [MQTT-4.3.3-4]. For an unknown id a PUBREL with
    /// reason 0x92 is queued. Returns false for an unknown id.
    pub fn handle_pubrec(&mut self, id: PacketId, reason: ReasonCode) -> bool {
        let known = match self.inflight.get_mut(&id.get()) {
            Some(f) if f.state == OutflightState::AwaitPubRec => {
                if reason.is_error() {
                    self.release(id.get());
                } else {
                    f.state = OutflightState::AwaitPubComp;
                    let seq = f.stored;
                    if let Some(d) = f.delivery.take() {
                        self.free(d.weight());
                    }
                    if seq != 0 {
                        self.record(|| JournalEvent::Released { seq });
                    }
                    self.queue_pubrel(PubResp::new(id));
                }
                true
            }
            Some(f) if f.state == OutflightState::AwaitPubComp => {
                // A repeated PUBREC: answer with PUBREL again.
                self.queue_pubrel(PubResp::new(id));
                true
            }
            _ => false,
        };
        if !known && !reason.is_error() {
            self.queue_pubrel(PubResp {
                packet_id: id,
                reason_code: ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
                properties: Properties::default(),
            });
        }
        known
    }

    /// PUBCOMP from the client: the QoS 2 flow is finished. Returns false for an unknown id.
    pub fn handle_pubcomp(&mut self, id: PacketId) -> bool {
        self.release_if(id, OutflightState::AwaitPubComp)
    }

    /// Releases `id` if it is in flight in `state` (one lookup in the window); false otherwise.
    fn release_if(&mut self, id: PacketId, state: OutflightState) -> bool {
        match self.inflight.entry(id.get()) {
            Entry::Occupied(entry) if entry.get().state == state => {
                let flight = entry.remove();
                self.released(flight);
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, id: u16) {
        if let Some(flight) = self.inflight.remove(&id) {
            self.released(flight);
        }
    }

    /// Settles an entry taken out of the in-flight window: its journal record and its charge.
    fn released(&mut self, f: Outflight) {
        if f.stored != 0 {
            let released = f.state == OutflightState::AwaitPubComp;
            self.record(|| JournalEvent::Removed {
                seq: f.stored,
                released,
            });
        }
        if let Some(d) = f.delivery {
            self.free(d.weight());
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.release_charge();
    }
}

mod diag;
mod hold;
mod journal;
mod outbound;
mod overflow;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_journal;
#[cfg(test)]
mod tests_overflow;

pub use diag::OutputState;
pub use journal::JournalEvent;
pub use overflow::QueueFull;
