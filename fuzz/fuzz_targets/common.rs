//! Shared body of the decode targets.

use bytes::BytesMut;
use hayate_codec::{decode, encode, peek_packet_len, Packet, ProtocolVersion};

/// Maximum packet size the targets decode with: small enough that inputs also reach the
/// PacketTooLarge path.
const MAX_PACKET_SIZE: u32 = 2048;

/// Decodes packets from `data` until it is used up or an error stops it, starting at level
/// `start` and following a CONNECT's level within the same family (v3.1 / v3.1.1, or v5), as a
/// broker does. Every packet that decodes must re-encode and decode back to itself.
pub fn run(data: &[u8], start: ProtocolVersion) {
    let mut version = start;
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match decode(&mut buf, version, MAX_PACKET_SIZE) {
            Ok(Some(packet)) => {
                assert!(buf.len() < before, "a decoded packet consumes bytes");
                if let Packet::Connect(c) = &packet {
                    if c.protocol.is_v5() == start.is_v5() {
                        version = c.protocol;
                    }
                }
                round_trip(&packet, version);
            }
            Ok(None) => {
                assert_eq!(
                    buf.len(),
                    before,
                    "an incomplete packet leaves the buffer alone"
                );
                if let Ok(Some(total)) = peek_packet_len(&buf, MAX_PACKET_SIZE) {
                    assert!(
                        total > buf.len(),
                        "incomplete means fewer bytes than announced"
                    );
                }
                return;
            }
            Err(_) => return,
        }
    }
}

fn round_trip(packet: &Packet, version: ProtocolVersion) {
    let mut out = BytesMut::new();
    encode(packet, version, &mut out).expect("a decoded packet re-encodes");
    let len = out.len();
    assert_eq!(
        peek_packet_len(&out, u32::MAX),
        Ok(Some(len)),
        "encoded length is exact"
    );
    let again = decode(&mut out, version, u32::MAX)
        .expect("a re-encoded packet decodes")
        .expect("a re-encoded packet is complete");
    assert_eq!(&again, packet, "decode(encode(p)) == p");
    assert!(out.is_empty(), "decode consumes exactly the encoded packet");
}
