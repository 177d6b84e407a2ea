//! Bridges: a client inside the broker that connects to a remote broker and forwards chosen
//! topics in one or both directions, with Mosquitto's semantics (`docs/BRIDGES.md`).
//!
//! Each bridge is one Tokio task. Towards the local broker it is an ordinary client session
//! driven in-process through a `hayate_core::Channel` ([`local`]); towards the remote broker it
//! is an MQTT client over TCP, TLS or TLS-PSK ([`remote`], [`transport`]). The link between them ([`link`]) passes packets
//! through, mapping topics ([`mapping`]) and keeping packet identifiers, so that a message is
//! acknowledged on one side only once the other side has acknowledged it.

pub mod config;
pub mod mapping;

mod backoff;
mod bridge;
mod lazy;
mod link;
mod local;
mod remote;
mod retained;
mod session;
mod set;
mod transport;

pub use backoff::{AddressCycle, Backoff};
pub use bridge::{spawn, unsupported, BridgeHandle, BridgeStats, QueueFigures};
pub use set::{BridgeSet, Reload};

/// Why a bridge's link ended (each is logged, then the bridge backs off and reconnects).
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// A socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The remote broker sent bytes that are not MQTT.
    #[error("malformed packet: {0}")]
    Decode(#[from] hayate_codec::DecodeError),
    /// A packet could not be encoded.
    #[error("encoding: {0}")]
    Encode(#[from] hayate_codec::EncodeError),
    /// The remote broker refused CONNECT with this reason (or v3 return) code.
    #[error("remote broker refused the connection (code 0x{0:02x})")]
    Refused(u8),
    /// The local broker refused the bridge's CONNECT.
    #[error("local broker refused the bridge's session (code 0x{0:02x})")]
    LocalRefused(u8),
    /// The remote broker closed the connection.
    #[error("remote broker closed the connection")]
    Closed,
    /// The remote broker sent DISCONNECT.
    #[error("remote broker sent DISCONNECT (code 0x{0:02x})")]
    Disconnected(u8),
    /// The local channel closed (its session was taken over, or a protocol error).
    #[error("local session closed: {0}")]
    LocalClosed(String),
    /// Something did not arrive in time.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The TLS settings could not be used (a file unreadable, a bad key).
    #[error("TLS setup: {0}")]
    TlsSetup(String),
    /// `start_type lazy`: no message either way for `idle_timeout` (the link closes cleanly).
    #[error("idle for idle_timeout (start_type lazy)")]
    Idle,
    /// The remote broker broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
}
