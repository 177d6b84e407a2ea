//! Per-client MQTT session state, without I/O.
//!
//! This crate owns what a session must remember between packets and across connections:
//! outbound QoS 1/2 messages in flight and their packet identifiers, the queue of messages
//! waiting for an in-flight slot, inbound QoS 2 packet identifiers awaiting PUBREL, topic
//! aliases in both directions, and the flow-control windows negotiated at CONNECT.
//!
//! It owns no sockets, spawns no tasks and never reads the clock: every entry point that
//! depends on time takes `now`. Output is written as encoded bytes into an [`OutBuf`] that the
//! caller flushes to whatever transport it has. Routing, subscriptions and authorisation live
//! in `hayate-core`.

mod budget;
mod limits;
mod message;
mod outbuf;
mod session;

pub use budget::{MemoryBudget, DELIVERY_OVERHEAD_BYTES};
pub use limits::SharedLimits;
pub use message::{publisher_key, Arrival, Delivery, Message, MessageProperties, PeerScope};
pub use outbuf::OutBuf;
pub use session::{
    ConnectionParams, EnqueueOutcome, InboundPublish, JournalEvent, OutflightState, OutputState,
    QueueFull, Session, SessionError, SessionLimits, TransmitReport,
};
