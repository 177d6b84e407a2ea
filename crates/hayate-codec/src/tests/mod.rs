//! Unit tests: byte-literal fixtures, one failure test per specification rule, the property
//! table, property-based round trips, and the fuzz seed corpus.

use crate::*;
use bytes::{Bytes, BytesMut};

mod corpus;
mod encode_rules;
mod fixtures;
mod props_table;
mod proptests;
mod rules;

const MAX: u32 = 1 << 20;

fn id(v: u16) -> PacketId {
    PacketId::new(v).expect("non-zero packet id")
}

fn s(v: &str) -> ByteStr {
    ByteStr::from(v)
}

/// Decodes exactly one packet from `bytes`, checking it consumed everything.
fn dec(bytes: &[u8], version: ProtocolVersion) -> Result<Packet, DecodeError> {
    let mut buf = BytesMut::from(bytes);
    let packet = decode(&mut buf, version, MAX)?.expect("complete packet");
    assert!(buf.is_empty(), "decode left {} bytes", buf.len());
    Ok(packet)
}

fn enc(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode(packet, version, &mut buf).expect("encode");
    buf.to_vec()
}

/// `bytes` decodes to `packet` at `version`, and `packet` encodes back to exactly `bytes`.
#[track_caller]
fn fixture(bytes: &[u8], version: ProtocolVersion, packet: Packet) {
    assert_eq!(
        dec(bytes, version),
        Ok(packet.clone()),
        "decode of {bytes:02X?}"
    );
    assert_eq!(enc(&packet, version), bytes, "encode of {packet:?}");
}

/// `bytes` fails to decode with `err`.
#[track_caller]
fn rejects(bytes: &[u8], version: ProtocolVersion, err: DecodeError) {
    let mut buf = BytesMut::from(bytes);
    assert_eq!(
        decode(&mut buf, version, MAX),
        Err(err),
        "decode of {bytes:02X?}"
    );
}

/// Wraps a v5 property block (without its length) into a PUBACK-like packet of type `first`
/// with packet id 1, reason 0, so property rules can be tested in any ack packet.
fn with_props(first: u8, props: &[u8]) -> Vec<u8> {
    let mut body = vec![0x00, 0x01, 0x00, props.len() as u8];
    body.extend_from_slice(props);
    let mut out = vec![first, body.len() as u8];
    out.extend_from_slice(&body);
    out
}
