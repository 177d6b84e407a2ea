//! The interface to durable storage, as the core sees it (`docs/design/persistence.md`). The
//! core describes each change to durable state as a [`StoreOp`] and hands it to a [`Store`];
//! an engine (`hayate-storage`) writes them, in the order they were appended, on threads of its
//! own. Without a store (no data directory) the broker is the same code with nothing appended.
//!
//! What is stored: retained messages; persistent sessions (expiry, protocol version, when they
//! were disconnected) with their subscriptions, their queued and in-flight QoS 1/2 messages
//! (each message body once, however many sessions queue it) and their inbound QoS 2 packet
//! ids. An acknowledgement is held until what it acknowledges is durable
//! ([`Store::durable`]); other acknowledgements queue behind a held one, in order.

use bytes::Bytes;
use hayate_session::Message;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::Notify;

/// The position of an appended op (the first is 1). Ops become durable in ticket order.
pub type Ticket = u64;

/// One change to durable state. Client ids, topics and filters are the client's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// A retained message was stored on `topic` (replacing any other there).
    PutRetained {
        /// Topic name.
        topic: String,
        /// When it expires, in milliseconds since the Unix epoch (`None`: never).
        expires_at_ms: Option<u64>,
        /// The message as an MQTT 5 PUBLISH packet encoded by `hayate-codec` (the wire format
        /// is the record: topic, QoS, payload and properties).
        publish: Bytes,
    },
    /// The retained message on `topic` was removed.
    DeleteRetained {
        /// Topic name.
        topic: String,
    },
    /// A persistent session was created or changed.
    PutSession(SessionRecord),
    /// The pending will of a stored session was published (or dropped): the session record
    /// keeps everything else.
    DeleteWill {
        /// Client identifier.
        client_id: String,
    },
    /// A session ended: remove it and all its subscriptions.
    DeleteSession {
        /// Client identifier.
        client_id: String,
    },
    /// A subscription of a persistent session was added or replaced.
    PutSubscription {
        /// Client identifier.
        client_id: String,
        /// The subscription.
        subscription: SubscriptionData,
    },
    /// A subscription of a persistent session was removed.
    DeleteSubscription {
        /// Client identifier.
        client_id: String,
        /// Topic filter, as subscribed (with `$share/...`).
        filter: String,
    },
    /// A QoS 1/2 message was queued for a persistent session.
    Enqueue {
        /// Client identifier.
        client_id: String,
        /// The entry.
        entry: QueueEntry,
        /// Its message, which the store writes (once, under `entry.message_id`) unless an
        /// entry written before still refers to it.
        body: MessageBody,
    },
    /// PUBREC arrived for queue entry `seq`: the entry now only stands for the PUBREL/PUBCOMP
    /// that remain (the message body is no longer needed).
    Release {
        /// Client identifier.
        client_id: String,
        /// The entry.
        seq: u64,
    },
    /// Queue entry `seq` is gone (acknowledged, expired, dropped or handed to another member
    /// of its shared group).
    Dequeue {
        /// Client identifier.
        client_id: String,
        /// The entry.
        seq: u64,
        /// It had been released.
        released: bool,
    },
    /// An inbound QoS 2 packet id awaits PUBREL (`true`) or no longer does.
    InboundQos2 {
        /// Client identifier.
        client_id: String,
        /// The packet id.
        packet_id: u16,
        /// Awaiting PUBREL.
        awaiting: bool,
    },
    /// The broker's lifetime counters as they stand ([`crate::Stats::totals`]), replacing the
    /// stored ones; given back at start, so that `$SYS` totals count across restarts.
    PutTotals {
        /// Counter name and value.
        totals: Vec<(String, u64)>,
    },
}

/// A stored message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its id, unique in the store.
    pub id: u64,
    /// When it expires, in milliseconds since the Unix epoch (`None`: never).
    pub expires_at_ms: Option<u64>,
    /// The message as an MQTT 5 PUBLISH packet encoded by `hayate-codec`.
    pub publish: Bytes,
}

/// The message of a queued entry, as the core holds it: the store encodes it
/// ([`MessageBody::encode`]) only when it has to write it. Equal when the ids are.
#[derive(Clone)]
pub struct MessageBody {
    /// When it expires, in milliseconds since the Unix epoch (`None`: never).
    pub expires_at_ms: Option<u64>,
    /// The message.
    pub message: Arc<Message>,
}

impl MessageBody {
    /// The message as an MQTT 5 PUBLISH packet (the stored form); `None` if it cannot be
    /// encoded (a message a client sent always can).
    pub fn encode(&self) -> Option<Bytes> {
        crate::persist::encode_message(&self.message)
    }

    /// Appends the same bytes as [`MessageBody::encode`] to `buf` (the store writes them
    /// behind a prefix of its own, without a copy); false, with nothing appended, if the
    /// message cannot be encoded.
    pub fn encode_into(&self, buf: &mut bytes::BytesMut) -> bool {
        crate::persist::encode_message_into(&self.message, buf).is_some()
    }
}

impl Debug for MessageBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBody")
            .field("topic", &self.message.topic)
            .field("payload_len", &self.message.payload.len())
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

impl PartialEq for MessageBody {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.message, &other.message) && self.expires_at_ms == other.expires_at_ms
    }
}

impl Eq for MessageBody {}

/// One queued message of a persistent session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// Its position in the session's queue (from 1; its packet id is derived from it).
    pub seq: u64,
    /// The [`StoredMessage`] it delivers.
    pub message_id: u64,
    /// QoS to deliver at (1 or 2).
    pub qos: u8,
    /// Retain flag to send.
    pub retain: bool,
    /// Subscription identifiers to send.
    pub subscription_ids: Vec<u32>,
    /// The shared subscription it came through (`$share/group/filter`), if any.
    pub shared_group: Option<String>,
}

/// What a persistent session had queued and in flight. The queued entries themselves stay on
/// disk; [`Store::read_page`] reads them back as the client drains them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredQueue {
    /// Client identifier.
    pub client_id: String,
    /// Entries not yet released.
    pub count: u64,
    /// No entry has a lower seq (0 when there are none). A store may keep it as a bound, exact
    /// only while entries leave in queue order: pages are read from it and skip gaps.
    pub first_seq: u64,
    /// No entry has a higher seq (0 when there are none); a bound as `first_seq` is.
    pub last_seq: u64,
    /// Seqs of released entries (PUBREL to send again), in order.
    pub released: Vec<u64>,
    /// Inbound QoS 2 packet ids awaiting PUBREL.
    pub inbound_qos2: Vec<u16>,
}

/// One queued entry read back by [`Store::read_page`], with its message.
pub type PageEntry = (QueueEntry, StoredMessage);

/// Where a page read by [`Store::read_page`] goes. Called once, on a thread of the store's,
/// without any of the store's locks held.
pub type PageReply = Box<dyn FnOnce(Vec<PageEntry>) + Send>;

/// A persistent session as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// Client identifier; never empty (the engine cannot store an empty key, and a client
    /// that sends none is assigned one).
    pub client_id: String,
    /// Session Expiry Interval in seconds (`u32::MAX`: never).
    pub expiry_interval: u32,
    /// Protocol level of its last connection (3, 4 or 5).
    pub protocol: u8,
    /// When its last connection ended, in milliseconds since the Unix epoch; `None` while
    /// connected. Downtime counts against the expiry interval.
    pub disconnected_at_ms: Option<u64>,
    /// Its will, while one is pending (the connection's, or a disconnected one's whose delay
    /// has not passed).
    pub will: Option<StoredWill>,
}

/// A pending will as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWill {
    /// The will message as an MQTT 5 PUBLISH (topic, payload, QoS, retain and its properties
    /// but the Will Delay Interval, which a PUBLISH cannot carry).
    pub publish: Bytes,
    /// Will Delay Interval in seconds.
    pub delay: u32,
    /// Who set it, as authenticated: the will is authorised as their publish.
    pub username: Option<String>,
    /// The listener they connected through.
    pub listener: String,
    /// The identity their transport proved, if any.
    pub transport_identity: Option<String>,
}

/// A subscription as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionData {
    /// Topic filter, as subscribed (with `$share/...`).
    pub filter: String,
    /// The options byte of SUBSCRIBE (§3.8.3.1): QoS in bits 0-1, No Local bit 2, Retain As
    /// Published bit 3, Retain Handling bits 4-5.
    pub options: u8,
    /// Subscription Identifier, if any.
    pub subscription_id: Option<u32>,
}

/// What a store held when it was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Retained messages: topic, expiry (ms since the Unix epoch) and encoded PUBLISH.
    pub retained: Vec<(String, Option<u64>, Bytes)>,
    /// Persistent sessions with their subscriptions. Subscriptions stored without their
    /// session are not given back (the store logs them).
    pub sessions: Vec<(SessionRecord, Vec<SubscriptionData>)>,
    /// Queues of persistent sessions (those with anything queued, in flight or awaiting
    /// PUBREL).
    pub queues: Vec<StoredQueue>,
    /// The first message id not used in the store.
    pub next_message_id: u64,
    /// The lifetime counters last stored ([`StoreOp::PutTotals`]).
    pub totals: Vec<(String, u64)>,
}

/// Durable storage as the core uses it. See the module docs.
pub trait Store: Send + Sync + Debug {
    /// Queues `op` to be written after every op appended before it. Never blocks on I/O and
    /// never fails: write errors are the store's to report.
    fn append(&self, op: StoreOp);

    /// Appends `ops` in order and returns a ticket that covers all of them.
    fn append_all(&self, ops: Vec<StoreOp>) -> Ticket {
        for op in ops {
            self.append(op);
        }
        self.appended()
    }

    /// The ticket of the last op appended so far (0: none). Read right after an `append`, it
    /// covers that op (and perhaps a few appended meanwhile by other threads). The default is a
    /// store that does not track durability: everything counts as durable at once.
    fn appended(&self) -> Ticket {
        0
    }

    /// Every op up to this ticket is durable. After a write error it stops advancing: nothing
    /// appended later is reported durable.
    fn durable(&self) -> Ticket {
        Ticket::MAX
    }

    /// Reads up to `max` queued entries of `client_id` with a seq of `from_seq` or more, in
    /// seq order, after every op appended before this call is written, and hands them to
    /// `reply`. Fewer than `max` means there were no more. The default store keeps nothing:
    /// it answers with none.
    fn read_page(&self, client_id: &str, from_seq: u64, max: usize, reply: PageReply) {
        let _ = (client_id, from_seq, max);
        reply(Vec::new());
    }

    /// Opens a group: every op appended from now until [`Store::end_group`] is called with
    /// the returned id (by any thread) is written in one batch, so a crash keeps all of them
    /// or none. Used around the routing of a QoS 2 PUBLISH: a crash that kept only some of
    /// its queue entries would make the publisher's resend deliver it twice to the others.
    /// The default store writes every op on its own.
    fn begin_group(&self) -> u64 {
        0
    }

    /// Closes a group opened by [`Store::begin_group`].
    fn end_group(&self, group: u64) {
        let _ = group;
    }

    /// False while the store cannot write (a full disk, an I/O error): QoS 1/2 publishes are
    /// refused then, since they could not be acknowledged.
    fn accepting(&self) -> bool {
        true
    }

    /// Rings `doorbell` once `ticket` is durable (at once if it already is).
    fn notify_when_durable(&self, ticket: Ticket, doorbell: Arc<Notify>) {
        let _ = ticket;
        doorbell.notify_one();
    }
}
