//! Application messages and their delivery to one subscriber.

use bytes::{Bytes, BytesMut};
use hayate_codec::{encode_publish_header, ByteStr, PacketId, Properties, ProtocolVersion, QoS};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The v5 properties a message carries from its publisher to its subscribers: payload format
/// indicator, content type, response topic, correlation data and user properties
/// [MQTT-3.3.2-4] [MQTT-3.3.2-20] [MQTT-3.3.2-17]. Message expiry is kept as
/// [`Message::expires_at`] and recomputed per delivery; topic alias and subscription
/// identifiers are per connection and never forwarded.
pub type MessageProperties = Properties;

/// An application message after it has been accepted from a publisher (or a will, or a
/// retained message). Shared by `Arc` across every subscriber it is delivered to.
#[derive(Debug)]
pub struct Message {
    /// Topic name (never an alias; aliases are resolved on the way in).
    pub topic: ByteStr,
    /// Payload, shared with every delivery.
    pub payload: Bytes,
    /// QoS it was published with.
    pub qos: QoS,
    /// Retain flag it was published with.
    pub retain: bool,
    /// Forwarded v5 properties (see [`MessageProperties`]).
    pub properties: MessageProperties,
    /// When the message expires, from its Message Expiry Interval [MQTT-3.3.2-5].
    pub expires_at: Option<Instant>,
    /// Session that published it, for No Local [MQTT-3.8.3-3]; `None` for broker-made messages.
    pub publisher: Option<u64>,
    /// A stable hash of the publishing client's identifier (0 for broker-made messages): the
    /// same client maps to the same value across sessions and connections, which
    /// `hash_client_id` shared subscriptions rely on.
    pub publisher_key: u64,
    /// When the bytes carrying it reached the broker ([`Arrival::UNKNOWN`] for broker-made
    /// messages).
    pub arrival: Arrival,
    /// It came from another node of a cluster, which forwarded it to every node that wanted
    /// it: it goes to this node's own clients only, and only to those the scope says.
    pub from_peer: Option<Arc<PeerScope>>,
    /// Encoded PUBLISH headers, one per distinct wire form, kept from a form's second use on
    /// and then shared by every further subscriber that receives that form. The first use
    /// encodes straight into its output: most messages go out once, in one form, and caching
    /// would cost them three allocations.
    encoded: Mutex<Vec<(u8, EncodedHeader)>>,
    /// Forms used at least once (bit per form key, see [`form_key`]).
    forms_used: AtomicU16,
    /// The id its body is stored under, once a stored session queued it (the body is written
    /// once however many sessions queue it).
    pub store_id: std::sync::OnceLock<u64>,
}

/// Why another node of a cluster forwarded a message here: which of this node's
/// subscriptions it is for. A node forwards one copy for its plain subscriptions and one per
/// shared group that picked a member here; each copy goes only where it was meant to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerScope {
    /// For this node's non-shared subscriptions.
    pub plain: bool,
    /// For one member of each of these shared groups (full `$share/GROUP/FILTER` text).
    pub groups: Vec<Arc<str>>,
    /// Sessions of this node it must not reach, by session id (`SessionCell::id` in
    /// `hayate-core`): sessions just taken over from another node, which relays what the
    /// forwarding node sent it before, or handed over and relaying, when the forwarding node
    /// marked already (`docs/CLUSTER.md`). By session, not client identifier: a client's
    /// relaying session and its live one may both be on a node.
    pub except: Vec<u64>,
    /// Not forwarded for a subscription here but relayed, or handed over with a session, by
    /// the node that had the session: older than anything a session holds back after a
    /// take-over, so it goes ahead of that (`Session::hold_direct`).
    pub relayed: bool,
}

impl PeerScope {
    /// The scope of a copy relayed or handed over with a session (`relayed`).
    pub fn relayed() -> PeerScope {
        PeerScope {
            relayed: true,
            ..PeerScope::default()
        }
    }
}

/// When the bytes of a packet reached the broker: nanoseconds since the Unix epoch, from the
/// kernel's receive timestamp of the socket where the transport has one, else from the clock
/// when the transport read them. Orders packets of different connections by arrival (see
/// `docs/design/arrival-order.md`); only differences between arrivals mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Arrival(u64);

impl Arrival {
    /// Not known (broker-made messages, or a transport that does not tell).
    pub const UNKNOWN: Arrival = Arrival(0);

    /// An arrival `nanos` after the Unix epoch (0 is [`Arrival::UNKNOWN`]).
    pub const fn from_nanos(nanos: u64) -> Arrival {
        Arrival(nanos)
    }

    /// Nanoseconds since the Unix epoch (0 when unknown).
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// True unless [`Arrival::UNKNOWN`].
    pub const fn is_known(self) -> bool {
        self.0 != 0
    }
}

/// What makes two deliveries of one message differ on the wire when no per-subscriber
/// property is involved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WireForm {
    pub version: ProtocolVersion,
    pub qos: QoS,
    pub retain: bool,
}

/// A PUBLISH fixed + variable header encoded once, with the place of its packet identifier.
#[derive(Debug, Clone)]
struct EncodedHeader {
    bytes: Bytes,
    packet_id_offset: Option<usize>,
}

impl Message {
    /// Builds a message. `properties` should hold only forwardable properties.
    pub fn new(
        topic: ByteStr,
        payload: Bytes,
        qos: QoS,
        retain: bool,
        properties: MessageProperties,
        expires_at: Option<Instant>,
        publisher: Option<u64>,
    ) -> Message {
        Message {
            topic,
            payload,
            qos,
            retain,
            properties,
            expires_at,
            publisher,
            publisher_key: 0,
            arrival: Arrival::UNKNOWN,
            from_peer: None,
            encoded: Mutex::new(Vec::new()),
            forms_used: AtomicU16::new(0),
            store_id: std::sync::OnceLock::new(),
        }
    }

    /// Marks the message as forwarded by another node of a cluster ([`Message::from_peer`]).
    pub fn forwarded_by_peer(mut self, scope: Arc<PeerScope>) -> Message {
        self.from_peer = Some(scope);
        self
    }

    /// Sets [`Message::publisher_key`] (see [`publisher_key`] to compute it).
    pub fn with_publisher_key(mut self, key: u64) -> Message {
        self.publisher_key = key;
        self
    }

    /// Sets [`Message::arrival`].
    pub fn with_arrival(mut self, arrival: Arrival) -> Message {
        self.arrival = arrival;
        self
    }

    /// True once the message's expiry interval has passed.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }

    /// The remaining Message Expiry Interval in whole seconds (rounded up) to send on, or `None`
    /// when the message does not expire [MQTT-3.3.2-6].
    pub fn remaining_expiry(&self, now: Instant) -> Option<u32> {
        self.expires_at.map(|at| {
            let left = at.saturating_duration_since(now);
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            u32::try_from(secs).unwrap_or(u32::MAX)
        })
    }

    /// Appends this message as a PUBLISH in the given common wire form (no per-subscriber
    /// properties) to `out`, reusing the cached header bytes; only packet id and DUP differ.
    /// Returns the total packet length, or `None` when it exceeds `max_packet_size`.
    pub(crate) fn write_shared_form(
        &self,
        form: WireForm,
        packet_id: Option<u16>,
        dup: bool,
        max_packet_size: u32,
        out: &mut crate::OutBuf,
    ) -> Option<usize> {
        let max = max_packet_size as usize;
        let bit = 1u16 << form_key(form);
        let start = out.tail_len();
        // A plain load first: a form already used (every delivery of a broadcast after the
        // first) takes no read-modify-write on the message's shared cache line.
        let first_use = self.forms_used.load(Ordering::Relaxed) & bit == 0
            && self.forms_used.fetch_or(bit, Ordering::Relaxed) & bit == 0;
        let packet_id_offset = if first_use {
            // First use of this form: encode into the output, cache nothing.
            if self.encoded_header_len(form)? + self.payload.len() > max {
                return None;
            }
            self.encode_header(form, out.tail_mut())?
        } else {
            let header = self.cached_header(form)?;
            if header.bytes.len() + self.payload.len() > max {
                return None;
            }
            out.put_slice(&header.bytes);
            header.packet_id_offset
        };
        let total = out.tail_len() - start + self.payload.len();
        let WireForm { qos, retain, .. } = form;
        if dup {
            out.patch_tail(start, 0x30 | 0x08 | ((qos as u8) << 1) | u8::from(retain));
        }
        if let (Some(offset), Some(id)) = (packet_id_offset, packet_id) {
            let id = id.to_be_bytes();
            out.patch_tail(start + offset, id[0]);
            out.patch_tail(start + offset + 1, id[1]);
        }
        out.put_bytes(self.payload.clone());
        Some(total)
    }

    /// The length of the PUBLISH header (fixed header, topic, packet id, properties) in `form`.
    fn encoded_header_len(&self, form: WireForm) -> Option<usize> {
        let WireForm { version, qos, .. } = form;
        Some(hayate_codec::publish_header_len(
            version,
            self.topic.len(),
            qos != QoS::AtMostOnce,
            &self.properties,
            self.payload.len(),
        ))
    }

    /// Appends the header of `form` to `buf` (packet id 1 as a placeholder) and returns the
    /// offset of the packet id from the header's start, if it has one.
    fn encode_header(&self, form: WireForm, buf: &mut BytesMut) -> Option<Option<usize>> {
        let WireForm {
            version,
            qos,
            retain,
        } = form;
        let start = buf.len();
        let placeholder = if qos == QoS::AtMostOnce {
            None
        } else {
            std::num::NonZeroU16::new(1)
        };
        let empty = Properties::default();
        let properties = if version.is_v5() {
            &self.properties
        } else {
            &empty
        };
        if encode_publish_header(
            version,
            false,
            qos,
            retain,
            self.topic.as_bytes(),
            placeholder,
            properties,
            self.payload.len(),
            buf,
        )
        .is_err()
        {
            buf.truncate(start);
            return None;
        }
        // Fixed header (type byte + remaining length) + topic length prefix + topic.
        Some(match placeholder {
            None => None,
            Some(_) => {
                let (_, remaining_len_bytes) =
                    hayate_codec::read_variable_int(&buf[start + 1..]).ok()??;
                Some(1 + remaining_len_bytes + 2 + self.topic.len())
            }
        })
    }

    /// The cached header of `form`, encoded and cached now if it is not yet.
    fn cached_header(&self, form: WireForm) -> Option<EncodedHeader> {
        let key = form_key(form);
        let mut cache = self
            .encoded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, header)) = cache.iter().find(|(f, _)| *f == key) {
            return Some(header.clone());
        }
        let mut buf = BytesMut::new();
        let packet_id_offset = self.encode_header(form, &mut buf)?;
        let header = EncodedHeader {
            bytes: buf.freeze(),
            packet_id_offset,
        };
        cache.push((key, header.clone()));
        Some(header)
    }
}

/// A small number naming a [`WireForm`] (below 16).
fn form_key(form: WireForm) -> u8 {
    (u8::from(form.version.is_v5()) << 3) | ((form.qos as u8) << 1) | u8::from(form.retain)
}

/// One message on its way to one subscriber session, with what the subscription decided.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The shared message.
    pub message: Arc<Message>,
    /// QoS to deliver at: the minimum of the published QoS and the granted QoS [MQTT-3.8.4-8].
    pub qos: QoS,
    /// Retain flag to send: set for retained messages sent on subscribe (§3.3.1.3;
    /// [3.1.1: MQTT-3.3.1-8]), or the published flag under Retain As Published [MQTT-3.3.1-13],
    /// otherwise clear [MQTT-3.3.1-12] ([3.1.1: MQTT-3.3.1-9]).
    pub retain: bool,
    /// Identifiers of every matching subscription that carried one [MQTT-3.3.4-3].
    pub subscription_ids: Vec<u32>,
    /// For deliveries through a shared subscription: the group's key, so the message can be
    /// handed to another member if this one goes away before acknowledging it.
    pub shared_group: Option<Arc<str>>,
    /// Its position in a stored session's queue (0: not stored); see
    /// [`crate::JournalEvent`]. Set by [`crate::Session::enqueue`].
    pub seq: u64,
    /// It may have been sent before, under this packet id: before the broker restarted (a
    /// stored entry, its id derived from `seq`), or by another node of a cluster before the
    /// session was handed over here. It goes out again with DUP and under the same id
    /// [MQTT-4.4.0-1]; see [`crate::Session::poll_transmit`] for when that id is taken.
    pub sent_as: Option<PacketId>,
}

impl Delivery {
    /// A delivery of `message` at `qos` with `retain`, outside any subscription identifier,
    /// group or store.
    pub fn new(message: Arc<Message>, qos: QoS, retain: bool) -> Delivery {
        Delivery {
            message,
            qos,
            retain,
            subscription_ids: Vec::new(),
            shared_group: None,
            seq: 0,
            sent_as: None,
        }
    }

    /// It may have been sent before (see [`Delivery::sent_as`]): its PUBLISH carries DUP.
    pub fn maybe_sent(&self) -> bool {
        self.sent_as.is_some()
    }

    /// Bytes this delivery holds on to, for queue accounting.
    pub fn weight(&self) -> usize {
        self.message.payload.len() + self.message.topic.len()
    }
}

/// A stable hash of a client identifier for [`Message::publisher_key`]: FNV-1a, which does not
/// depend on the process or the session, so a client keeps its value across reconnects and
/// restarts.
pub fn publisher_key(client_id: &str) -> u64 {
    client_id.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
