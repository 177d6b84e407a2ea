//! MQTT wire codec for protocol levels 3 (MQTT 3.1, `MQIsdp`), 4 (3.1.1) and 5 (5.0).
//!
//! This crate owns the byte format and nothing else: it turns a `BytesMut` holding bytes read
//! from somewhere into [`Packet`]s and packets back into bytes. It knows nothing of sockets,
//! tasks, clocks or sessions, and it must never depend on an async runtime.
//!
//! Invariants:
//! - [`decode`] checks the fixed header and the remaining length against the caller's maximum
//!   packet size *before* it looks at (or allocates for) the body, and returns `Ok(None)` while
//!   the packet is incomplete.
//! - Decoded strings and binary fields are zero-copy slices (`Bytes`) of the read buffer.
//! - Every malformed input is a [`DecodeError`]; nothing panics on any byte sequence.
//! - Protocol rules that depend only on the bytes of one packet (reserved flags, UTF-8 rules,
//!   duplicate or misplaced v5 properties) are enforced here; rules that need session state
//!   live in `hayate-session`.

mod decode;
mod encode;
mod error;
mod packet;
mod properties;
mod props;
mod types;

#[cfg(test)]
mod tests;

pub use decode::{decode, peek_packet_len, read_variable_int};
pub use encode::{
    encode, encode_pub_resp, encode_publish_header, publish_header_len, variable_int_len,
    write_variable_int,
};
pub use error::{DecodeError, EncodeError};
pub use packet::{
    Auth, ConnAck, Connect, Disconnect, Packet, PacketType, PubResp, Publish, SubAck, Subscribe,
    SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};
pub use properties::{Properties, PropertyId};
pub use types::{ByteStr, PacketId, ProtocolVersion, QoS, ReasonCode};

/// Largest value a variable byte integer can hold (268,435,455), so also the largest remaining
/// length of any packet (§1.5.5).
pub const MAX_VARIABLE_INT: u32 = 268_435_455;
