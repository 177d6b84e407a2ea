//! Several Hayate nodes acting as one broker (`docs/CLUSTER.md`).
//!
//! - **Membership and failure detection** come from chitchat (scuttlebutt gossip with a
//!   phi-accrual failure detector, [`node`]): every node gossips over UDP on its cluster port
//!   and learns the others, their addresses and incarnations (a restarted node is a new
//!   generation).
//! - **Forwarding**: for every other live node, a [`link`] pulls over TCP (same port) what this
//!   node's clients subscribe to, once per message whatever the number of subscribers, and
//!   publishes it here for local fan-out. With `[cluster] tls_cert`, `tls_key` and `tls_ca`,
//!   links are mutual TLS ([`tls`]). The routing rules that make this loop-free live in
//!   `hayate_core::cluster`.
//! - **Status**: `$SYS/broker/cluster/nodes` (retained JSON, this node's view), read by
//!   `hayate cluster status` ([`status`]).

pub mod config;
pub mod status;

mod client;
mod control;
mod late;
mod link;
mod moved;
mod node;
mod relay;
mod tls;
mod wait;

pub use config::{ClusterConfig, ClusterConfigError, LinkTlsFiles};
pub use node::{attach, start, wait_settled, ClusterHandle, LeaveSwitch};
pub use tls::LinkTlsReload;

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Why a link or a status query ended.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The other node sent bytes that are not MQTT.
    #[error("malformed packet: {0}")]
    Decode(#[from] hayate_codec::DecodeError),
    /// A packet could not be encoded.
    #[error("encoding: {0}")]
    Encode(#[from] hayate_codec::EncodeError),
    /// The other node refused CONNECT (wrong cluster secret: 0x87).
    #[error("refused by the other node (code 0x{0:02x})")]
    Refused(u8),
    /// The other node closed the connection.
    #[error("connection closed")]
    Closed,
    /// The other node sent DISCONNECT.
    #[error("DISCONNECT (code 0x{0:02x})")]
    Disconnected(u8),
    /// Something did not arrive in time.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The other node broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// This node's ingress connection closed.
    #[error("ingress closed: {0}")]
    Ingress(String),
    /// Gossip could not start.
    #[error("gossip: {0}")]
    Gossip(String),
    /// TLS on node links: a file that cannot be used (the message names it), or a handshake
    /// that failed (the other node's certificate, or this one's, was refused).
    #[error("TLS: {0}")]
    Tls(String),
}

/// A link's hold (`[cluster] relay_order_hold_ms`): while it holds, it reads nothing from its
/// node, whose answers to this node's claims wait too, and the claims wait for them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkHold {
    /// The link holds what the node sends.
    pub held: bool,
    /// When its last hold ended (what the node sent meanwhile, its answers among it, is read
    /// from then on).
    pub last_ended: Option<std::time::Instant>,
}

/// What one link has done, for `$SYS` and `hayate cluster status`.
#[derive(Debug, Default)]
pub struct NodeStats {
    /// The link to the node is connected.
    pub link_up: AtomicBool,
    /// Whether the link holds what the node sends, and when its last hold ended; changed by
    /// the link at a hold's start and end only, read by the node's claims (`wait.rs`).
    pub hold: std::sync::Mutex<LinkHold>,
    /// Connections made.
    pub connects: AtomicU64,
    /// Messages received from the node.
    pub messages_in: AtomicU64,
}
