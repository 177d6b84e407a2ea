//! The bench payload: a fixed 24-byte header, then filler up to the requested size.
//!
//! | bytes  | field                                                               |
//! |--------|---------------------------------------------------------------------|
//! | 0..4   | stream id (u32 LE): the publisher, or the topic in fan-out          |
//! | 4..8   | sequence number within the stream (u32 LE), from 0                  |
//! | 8..16  | intended send time (u64 LE, ns since the run epoch)                 |
//! | 16..24 | actual send time (u64 LE, ns since the run epoch)                   |
//!
//! In closed-loop runs both times are equal. Payloads shorter than 24 bytes cannot carry the
//! header, so the effective payload size is at least [`HEADER_LEN`].

use bytes::{BufMut, BytesMut};

/// Size of the header every bench payload starts with.
pub const HEADER_LEN: usize = 24;

/// The decoded payload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Stream id (publisher or topic index).
    pub stream: u32,
    /// Sequence number within the stream.
    pub seq: u32,
    /// Intended send time, ns since the epoch.
    pub intended_ns: u64,
    /// Actual send time, ns since the epoch.
    pub sent_ns: u64,
}

/// Appends a payload of `size` bytes (at least [`HEADER_LEN`]) without allocating beyond `buf`'s
/// own growth.
pub fn write(buf: &mut BytesMut, header: &Header, size: usize) {
    buf.put_u32_le(header.stream);
    buf.put_u32_le(header.seq);
    buf.put_u64_le(header.intended_ns);
    buf.put_u64_le(header.sent_ns);
    if size > HEADER_LEN {
        buf.put_bytes(b'x', size - HEADER_LEN);
    }
}

/// Reads the header; `None` when the payload is too short (not a bench message).
pub fn read(payload: &[u8]) -> Option<Header> {
    let h = payload.get(..HEADER_LEN)?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(b)
    };
    Some(Header {
        stream: u32_at(0),
        seq: u32_at(4),
        intended_ns: u64_at(8),
        sent_ns: u64_at(16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_size() {
        let h = Header {
            stream: 7,
            seq: 42,
            intended_ns: 123_456_789,
            sent_ns: 123_456_999,
        };
        let mut buf = BytesMut::new();
        write(&mut buf, &h, 100);
        assert_eq!(buf.len(), 100);
        assert_eq!(read(&buf), Some(h));
        let mut small = BytesMut::new();
        write(&mut small, &h, 6);
        assert_eq!(small.len(), HEADER_LEN);
        assert_eq!(read(&small[..10]), None);
    }
}
