//! A blocking MQTT client on a plain `std::net::TcpStream`, for tests whose clients must not
//! share the broker's runtime (its scheduling is what they observe) or must write packets from
//! several connections microseconds apart from one thread.

use bytes::BytesMut;
use hayate_codec::{
    decode, encode, ConnAck, Connect, Packet, ProtocolVersion, QoS, Subscribe, SubscriptionOptions,
};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A connected client speaking individual packets over a blocking socket.
pub struct BlockingClient {
    stream: TcpStream,
    version: ProtocolVersion,
    buf: BytesMut,
}

impl BlockingClient {
    /// Connects and completes CONNECT/CONNACK (clean session); panics unless accepted.
    pub fn connect(addr: SocketAddr, version: ProtocolVersion, client_id: &str) -> BlockingClient {
        BlockingClient::connect_with(addr, crate::connect_packet(version, client_id, true)).0
    }

    /// Connects with `connect` and returns the client with its CONNACK; panics unless
    /// accepted.
    pub fn connect_with(addr: SocketAddr, connect: Connect) -> (BlockingClient, ConnAck) {
        let stream = TcpStream::connect(addr).expect("tcp connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut client = BlockingClient {
            stream,
            version: connect.protocol,
            buf: BytesMut::new(),
        };
        client.send(&Packet::Connect(Box::new(connect)));
        match client.recv(Duration::from_secs(5)) {
            Some(Packet::ConnAck(ack)) => {
                assert_eq!(ack.reason_code.0, 0, "CONNACK {ack:?}");
                (client, ack)
            }
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Writes one packet (one `write_all`).
    pub fn send(&mut self, packet: &Packet) {
        let mut bytes = BytesMut::new();
        encode(packet, self.version, &mut bytes).expect("encode");
        self.stream.write_all(&bytes).expect("write");
    }

    /// Sends SUBSCRIBE for one filter without waiting for SUBACK.
    pub fn send_subscribe(&mut self, filter: &str, qos: QoS, packet_id: u16) {
        self.send(&Packet::Subscribe(Subscribe {
            packet_id: hayate_codec::PacketId::new(packet_id).expect("non-zero packet id"),
            filters: vec![(filter.into(), SubscriptionOptions::with_qos(qos))],
            properties: Default::default(),
        }));
    }

    /// Sends a QoS 0 PUBLISH.
    pub fn send_publish(&mut self, topic: &str, payload: &[u8]) {
        let publish = crate::publish_packet(topic, payload, QoS::AtMostOnce, false, None);
        self.send(&Packet::Publish(publish));
    }

    /// The next packet, or `None` when nothing complete arrives within `timeout` (or the
    /// connection ended).
    pub fn recv(&mut self, timeout: Duration) -> Option<Packet> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(packet) = decode(&mut self.buf, self.version, u32::MAX).expect("decode") {
                return Some(packet);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("read timeout");
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Waits for the next PUBLISH within `timeout`, skipping other packets (SUBACK...).
    pub fn recv_publish(&mut self, timeout: Duration) -> Option<hayate_codec::Publish> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.recv(left)? {
                Packet::Publish(publish) => return Some(publish),
                _ => continue,
            }
        }
    }
}
