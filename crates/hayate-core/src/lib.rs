//! The broker core: everything between "a packet was decoded" and "bytes are ready to write".
//!
//! Owns the subscription index and shared-subscription groups ([`router`]), retained
//! messages, the client-id registry with session takeover and expiry ([`registry`]), will
//! messages, authentication/authorisation hooks ([`hooks`]), statistics ([`stats`]), and the
//! per-connection protocol handler ([`channel::Channel`]) that turns one client's packets into
//! broker actions and output bytes.
//!
//! It owns no sockets and knows nothing of TLS or WebSocket: transports feed it decoded
//! packets and flush the [`OutBuf`] it fills. It never reads the clock; time comes in as
//! `now`. The only async piece it touches is `tokio::sync::Notify`, the doorbell that wakes a
//! connection task when a message is queued for it.

pub mod admin;
mod arrival;
pub mod broker;
pub mod channel;
pub mod close;
pub mod cluster;
pub mod config;
pub mod flow;
pub mod handoff;
pub mod hooks;
pub mod in_process;
pub mod latency;
pub mod persist;
pub mod queues;
pub mod registry;
pub mod router;
pub mod stats;
pub mod store;
mod timers;

pub use broker::{Broker, LiveLimits};
pub use channel::{Channel, ConnectionInfo, ReadGate};
pub use close::{Close, CloseReason};
pub use config::{BrokerConfig, SharedStrategy};
pub use hayate_session::{Arrival, Delivery, Message, OutBuf, PeerScope};
pub use hooks::{
    AuthHook, AuthStep, Authenticated, ClientInfo, ConnectionLimits, EnhancedAuth, ListenerInfo,
    ListenerRole, StaticPolicy,
};
pub use in_process::{InProcess, InProcessError};
pub use queues::QueueLimits;
pub use registry::SessionCell;
pub use router::WakeList;
pub use stats::{PublishCounts, Stats};
