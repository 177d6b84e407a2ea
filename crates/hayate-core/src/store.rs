//! The interface to durable storage, as the core sees it (`docs/design/persistence.md`). The
//! core describes each change to durable state as a [`StoreOp`] and hands it to a [`Store`];
//! an engine (`hayate-storage`) writes them, in the order they were appended, on threads of its
//! own. Without a store (no data directory) the broker is the same code with nothing appended.
//!
//! What is stored so far: retained messages, and persistent sessions (expiry, protocol version,
//! when they were disconnected) with their subscriptions. Queued and in-flight messages are not
//! stored yet. The PUBACK/PUBREC of a retained PUBLISH is held until its op is durable
//! ([`Store::durable`]); other acknowledgements queue behind a held one, in order.

use bytes::Bytes;
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
}

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
}

/// Durable storage as the core uses it. See the module docs.
pub trait Store: Send + Sync + Debug {
    /// Queues `op` to be written after every op appended before it. Never blocks on I/O and
    /// never fails: write errors are the store's to report.
    fn append(&self, op: StoreOp);

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

    /// Rings `doorbell` once `ticket` is durable (at once if it already is).
    fn notify_when_durable(&self, ticket: Ticket, doorbell: Arc<Notify>) {
        let _ = ticket;
        doorbell.notify_one();
    }
}
