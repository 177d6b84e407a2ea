//! The core's share of one wake-up that carries one message (the seed shape of issue 9): decode
//! one PUBLISH from the read buffer, handle it (authorise, build the message, route, queue,
//! collect the doorbell), ring the doorbell, then the subscriber's `poll_transmit` encodes it
//! into its output. No sockets: this is the user-space work per message, beside the syscalls
//! `docs/PERFORMANCE.md` counts. Run: `cargo bench -p hayate-core`; CI runs each once with
//! `-- --test`.
#![allow(missing_docs, clippy::disallowed_methods)]

use bytes::{Bytes, BytesMut};
use hayate_codec::{
    decode, encode, ByteStr, Packet, PacketId, Properties, ProtocolVersion, PubResp, Publish, QoS,
    Subscribe, SubscriptionOptions,
};
use hayate_core::{Broker, BrokerConfig, Channel, ConnectionInfo, OutBuf, StaticPolicy, WakeList};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    divan::main();
}

const V: ProtocolVersion = ProtocolVersion::V311;

struct Conn {
    channel: Channel,
    out: OutBuf,
    wake: WakeList,
}

impl Conn {
    fn connect(broker: &Arc<Broker>, client_id: &str, now: Instant) -> Conn {
        let mut conn = Conn {
            channel: Channel::new(broker.clone(), ConnectionInfo::default(), now),
            out: OutBuf::new(),
            wake: WakeList::new(),
        };
        let connect = hayate_testkit::connect_packet(V, client_id, true);
        conn.handle(Packet::Connect(Box::new(connect)), now);
        conn.clear();
        conn
    }

    fn handle(&mut self, packet: Packet, now: Instant) {
        self.channel
            .handle_packet(packet, now, &mut self.out, &mut self.wake)
            .expect("the channel stays open");
        for doorbell in self.wake.drain(..) {
            doorbell.notify_one();
        }
    }

    fn clear(&mut self) {
        let n = self.out.len();
        self.out.advance(n);
    }
}

/// A broker with `idle` other connected sessions, one subscriber on `t/#` at `sub_qos` and one
/// publisher.
fn setup(idle: usize, sub_qos: QoS) -> (Arc<Broker>, Conn, Conn, Instant) {
    let now = Instant::now();
    let broker = Broker::new(
        BrokerConfig::default(),
        Arc::new(StaticPolicy::default()),
        now,
    );
    let idle_conns: Vec<Conn> = (0..idle)
        .map(|i| Conn::connect(&broker, &format!("idle-{i}"), now))
        .collect();
    // Kept connected for the whole bench.
    std::mem::forget(idle_conns);
    let mut subscriber = Conn::connect(&broker, "sub", now);
    subscriber.handle(
        Packet::Subscribe(Subscribe {
            packet_id: PacketId::new(1).expect("non-zero"),
            filters: vec![("t/#".into(), SubscriptionOptions::with_qos(sub_qos))],
            properties: Properties::default(),
        }),
        now,
    );
    subscriber.clear();
    let publisher = Conn::connect(&broker, "pub", now);
    (broker, subscriber, publisher, now)
}

/// The PUBLISH as it sits in the publisher's read buffer.
fn wire(qos: QoS) -> Bytes {
    let publish = Publish {
        dup: false,
        qos,
        retain: false,
        topic: ByteStr::from("t/device/42"),
        packet_id: (qos != QoS::AtMostOnce).then(|| PacketId::new(7).expect("non-zero")),
        properties: Properties::default(),
        payload: Bytes::from_static(b"22.5C!"),
    };
    let mut bytes = BytesMut::new();
    encode(&Packet::Publish(publish), V, &mut bytes).expect("encodes");
    bytes.freeze()
}

/// One message through the core: decode, handle, route, ring, transmit (and, at QoS 1, the
/// subscriber's PUBACK).
fn one_message(bencher: divan::Bencher, idle: usize, qos: QoS) {
    let (_broker, mut subscriber, mut publisher, now) = setup(idle, qos);
    let wire = wire(qos);
    let mut next_ack = 1u16;
    bencher.bench_local(|| {
        let mut read_buf = BytesMut::from(&wire[..]);
        let packet = decode(&mut read_buf, V, u32::MAX)
            .expect("valid")
            .expect("complete");
        publisher.handle(packet, now);
        publisher.clear();
        subscriber
            .channel
            .poll_transmit(now, &mut subscriber.out)
            .expect("open");
        subscriber.clear();
        if qos == QoS::AtLeastOnce {
            let id = PacketId::new(next_ack).expect("non-zero");
            next_ack = if next_ack == u16::MAX {
                1
            } else {
                next_ack + 1
            };
            subscriber.handle(Packet::PubAck(PubResp::new(id)), now);
            subscriber.clear();
        }
    });
}

#[divan::bench(args = [0, 10_000])]
fn qos0_one_subscriber(bencher: divan::Bencher, idle: usize) {
    one_message(bencher, idle, QoS::AtMostOnce);
}

#[divan::bench(args = [0, 10_000])]
fn qos1_one_subscriber(bencher: divan::Bencher, idle: usize) {
    one_message(bencher, idle, QoS::AtLeastOnce);
}
