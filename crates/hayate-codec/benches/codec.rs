//! Decode and encode cost per packet type and payload size (divan).
//! Run: `cargo bench -p hayate-codec`; CI compiles and runs each once with `-- --test`.
#![allow(missing_docs)]

use bytes::{Bytes, BytesMut};
use hayate_codec::{
    decode, encode, encode_pub_resp, Packet, PacketId, PacketType, Properties, ProtocolVersion,
    PubResp, Publish, QoS, ReasonCode,
};

fn main() {
    divan::main();
}

fn publish(payload_len: usize, qos: QoS) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: "plant/7/temperature".into(),
        packet_id: (qos != QoS::AtMostOnce).then(|| PacketId::new(7).unwrap()),
        properties: Properties::default(),
        payload: Bytes::from(vec![0x5a; payload_len]),
    })
}

fn encoded(packet: &Packet, version: ProtocolVersion) -> Bytes {
    let mut buf = BytesMut::new();
    encode(packet, version, &mut buf).unwrap();
    buf.freeze()
}

const SIZES: &[usize] = &[6, 100, 1024, 10 * 1024, 100 * 1024];

#[divan::bench(args = SIZES)]
fn decode_publish_qos1_v311(bencher: divan::Bencher, size: usize) {
    let wire = encoded(&publish(size, QoS::AtLeastOnce), ProtocolVersion::V311);
    bencher.bench_local(|| {
        let mut buf = BytesMut::from(&wire[..]);
        decode(divan::black_box(&mut buf), ProtocolVersion::V311, u32::MAX).unwrap()
    });
}

#[divan::bench(args = SIZES)]
fn decode_publish_qos1_v5_with_properties(bencher: divan::Bencher, size: usize) {
    let mut packet = publish(size, QoS::AtLeastOnce);
    if let Packet::Publish(p) = &mut packet {
        p.properties.content_type = Some("application/json".into());
        p.properties.user_properties =
            vec![("site".into(), "7".into()), ("unit".into(), "C".into())];
        p.properties.message_expiry_interval = Some(60);
    }
    let wire = encoded(&packet, ProtocolVersion::V5);
    bencher.bench_local(|| {
        let mut buf = BytesMut::from(&wire[..]);
        decode(divan::black_box(&mut buf), ProtocolVersion::V5, u32::MAX).unwrap()
    });
}

#[divan::bench(args = SIZES)]
fn encode_publish_qos0_v311(bencher: divan::Bencher, size: usize) {
    let packet = publish(size, QoS::AtMostOnce);
    let mut buf = BytesMut::with_capacity(size + 64);
    bencher.bench_local(|| {
        buf.clear();
        encode(divan::black_box(&packet), ProtocolVersion::V311, &mut buf).unwrap();
    });
}

#[divan::bench]
fn decode_puback_v5(bencher: divan::Bencher) {
    let wire = encoded(
        &Packet::PubAck(PubResp::new(PacketId::new(9).unwrap())),
        ProtocolVersion::V5,
    );
    bencher.bench_local(|| {
        let mut buf = BytesMut::from(&wire[..]);
        decode(divan::black_box(&mut buf), ProtocolVersion::V5, u32::MAX).unwrap()
    });
}

/// A PUBACK as the broker writes one for each QoS 1 PUBLISH: through `encode` of a built
/// packet, and through `encode_pub_resp`.
#[divan::bench]
fn encode_puback_v311_packet(bencher: divan::Bencher) {
    let mut buf = BytesMut::with_capacity(64);
    bencher.bench_local(|| {
        buf.clear();
        let ack = Packet::PubAck(PubResp::new(divan::black_box(PacketId::new(9).unwrap())));
        encode(&ack, ProtocolVersion::V311, &mut buf).unwrap();
    });
}

#[divan::bench]
fn encode_puback_v311_direct(bencher: divan::Bencher) {
    let mut buf = BytesMut::with_capacity(64);
    bencher.bench_local(|| {
        buf.clear();
        encode_pub_resp(
            PacketType::PubAck,
            divan::black_box(PacketId::new(9).unwrap()),
            ReasonCode::SUCCESS,
            ProtocolVersion::V311,
            &mut buf,
        )
        .unwrap();
    });
}
