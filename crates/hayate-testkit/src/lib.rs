//! Test support for Hayate's integration tests: start a broker in-process on a free loopback
//! port, and talk to it with [`RawClient`], which sends and receives individual packets (or
//! arbitrary bytes) so tests can check exactly what the broker puts on the wire.
//!
//! Everything here panics on unexpected conditions: it is for tests only.

#![allow(clippy::missing_panics_doc)]

pub mod blocking;
pub mod cluster;
pub mod core;
pub mod mosquitto;
pub mod ops;
pub mod pki;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod store;

use bytes::{Bytes, BytesMut};
use hayate_codec::{
    decode, encode, ByteStr, ConnAck, Connect, Packet, PacketId, Properties, ProtocolVersion,
    PubResp, Publish, QoS, Subscribe, SubscriptionOptions, Unsubscribe, Will,
};
use hayate_server::{Config, Server, ServerHandle};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long [`RawClient::recv`] waits before failing the test.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// A broker running in this process on 127.0.0.1 with an OS-assigned port.
pub struct TestBroker {
    /// The server handle (its `broker` field exposes the core state).
    pub handle: ServerHandle,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl TestBroker {
    /// Starts a broker with default settings (`$SYS` disabled to keep traffic predictable).
    pub async fn start() -> TestBroker {
        TestBroker::start_with(|_| {}).await
    }

    /// Starts a broker after letting `configure` adjust the default configuration.
    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> TestBroker {
        let mut config = Config::default();
        config.server.listen = vec![SocketAddr::from(([127, 0, 0, 1], 0))];
        config.server.sys_interval_secs = 0;
        configure(&mut config);
        let handle = Server::start(config).await.expect("test broker starts");
        let addr = handle.local_addrs()[0];
        TestBroker { handle, addr }
    }

    /// Connects a raw client (no CONNECT sent yet).
    pub async fn raw(&self, version: ProtocolVersion) -> RawClient {
        RawClient::connect_tcp(self.addr, version).await
    }

    /// Connects and completes CONNECT/CONNACK with a clean session; panics unless accepted.
    pub async fn client(&self, version: ProtocolVersion, client_id: &str) -> RawClient {
        let mut client = self.raw(version).await;
        let connack = client
            .connect(connect_packet(version, client_id, true))
            .await;
        assert_eq!(connack.reason_code.0, 0, "CONNACK refused: {connack:?}");
        client
    }
}

/// A CONNECT with the given id and clean flag, keep alive 60 s, no will, no credentials.
pub fn connect_packet(version: ProtocolVersion, client_id: &str, clean_start: bool) -> Connect {
    Connect {
        protocol: version,
        clean_start,
        keep_alive: 60,
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
        bridge: false,
    }
}

/// A port on 127.0.0.1 free a moment ago for TCP and UDP (for a broker started as a process;
/// a cluster node gossips over UDP on its cluster port).
///
/// Taken from below the kernel's ephemeral range, one after the other from a random start:
/// a port the kernel hands out (bind to 0) and takes back can meanwhile become some client
/// connection's source port, and the broker's own bind then fails ("Address already in use").
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .clamp(10_001, 65_535);
    let span = low - 10_000;
    if NEXT.load(Ordering::Relaxed) == 0 {
        let seed = std::process::id().wrapping_mul(7_919)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.subsec_nanos());
        let _ = NEXT.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span {
        let port = (10_000 + NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range");
}

/// A will message for [`Connect::will`].
pub fn will(topic: &str, payload: &'static [u8], qos: QoS, retain: bool) -> Will {
    Will {
        topic: topic.into(),
        payload: Bytes::from_static(payload),
        qos,
        retain,
        properties: Properties::default(),
    }
}

/// A PUBLISH packet; `packet_id` must be `Some` exactly when `qos` > 0.
pub fn publish_packet(
    topic: &str,
    payload: &[u8],
    qos: QoS,
    retain: bool,
    packet_id: Option<u16>,
) -> Publish {
    Publish {
        dup: false,
        qos,
        retain,
        topic: ByteStr::from(topic),
        packet_id: packet_id.and_then(PacketId::new),
        properties: Properties::default(),
        payload: Bytes::copy_from_slice(payload),
    }
}

/// A byte stream a [`RawClient`] speaks over: TCP, or TLS over TCP.
pub trait ClientStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ClientStream for T {}

/// A client that speaks individual MQTT packets over TCP (or any [`ClientStream`]).
pub struct RawClient {
    stream: Box<dyn ClientStream>,
    version: ProtocolVersion,
    buf: BytesMut,
}

impl RawClient {
    /// Opens a TCP connection.
    pub async fn connect_tcp(addr: SocketAddr, version: ProtocolVersion) -> RawClient {
        let stream = TcpStream::connect(addr).await.expect("tcp connect");
        stream.set_nodelay(true).expect("nodelay");
        RawClient::over(stream, version)
    }

    /// A client over an established stream (a TLS session, say); no CONNECT sent yet.
    pub fn over(stream: impl ClientStream + 'static, version: ProtocolVersion) -> RawClient {
        RawClient {
            stream: Box::new(stream),
            version,
            buf: BytesMut::new(),
        }
    }

    /// The protocol version used to encode and decode.
    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// Sends CONNECT and returns the CONNACK.
    pub async fn connect(&mut self, connect: Connect) -> ConnAck {
        self.version = connect.protocol;
        self.send(Packet::Connect(Box::new(connect))).await;
        match self.recv().await {
            Packet::ConnAck(connack) => connack,
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Encodes and sends one packet.
    pub async fn send(&mut self, packet: Packet) {
        let mut out = BytesMut::new();
        encode(&packet, self.version, &mut out).expect("test packet encodes");
        self.send_raw(&out).await;
    }

    /// Sends arbitrary bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        // A write error means the broker already closed; tests then observe that on recv.
        // (Flushed: a TLS stream may keep written bytes until then.)
        if self.stream.write_all(bytes).await.is_ok() {
            let _ = self.stream.flush().await;
        }
    }

    /// Subscribes to one filter at `qos` and returns the SUBACK codes.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS, packet_id: u16) -> Vec<u8> {
        self.subscribe_with(
            filter,
            SubscriptionOptions::with_qos(qos),
            Properties::default(),
            packet_id,
        )
        .await
    }

    /// Subscribes with full options and properties; returns the SUBACK codes.
    pub async fn subscribe_with(
        &mut self,
        filter: &str,
        options: SubscriptionOptions,
        properties: Properties,
        packet_id: u16,
    ) -> Vec<u8> {
        let packet_id = PacketId::new(packet_id).expect("non-zero packet id");
        let subscribe = Subscribe {
            packet_id,
            filters: vec![(filter.into(), options)],
            properties,
        };
        self.send(Packet::Subscribe(subscribe)).await;
        match self.recv().await {
            Packet::SubAck(suback) => {
                assert_eq!(suback.packet_id, packet_id);
                suback.reason_codes.iter().map(|c| c.0).collect()
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Unsubscribes from one filter; returns the UNSUBACK codes (empty for v3).
    pub async fn unsubscribe(&mut self, filter: &str, packet_id: u16) -> Vec<u8> {
        let packet_id = PacketId::new(packet_id).expect("non-zero packet id");
        let unsubscribe = Unsubscribe {
            packet_id,
            filters: vec![filter.into()],
            properties: Properties::default(),
        };
        self.send(Packet::Unsubscribe(unsubscribe)).await;
        match self.recv().await {
            Packet::UnsubAck(unsuback) => unsuback.reason_codes.iter().map(|c| c.0).collect(),
            other => panic!("expected UNSUBACK, got {other:?}"),
        }
    }

    /// Publishes and completes the QoS handshake (PUBACK, or PUBREC/PUBREL/PUBCOMP).
    pub async fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        packet_id: u16,
    ) {
        let id = (qos != QoS::AtMostOnce).then_some(packet_id);
        self.send(Packet::Publish(publish_packet(
            topic, payload, qos, retain, id,
        )))
        .await;
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => match self.recv().await {
                Packet::PubAck(ack) => assert_eq!(ack.packet_id.get(), packet_id),
                other => panic!("expected PUBACK, got {other:?}"),
            },
            QoS::ExactlyOnce => {
                match self.recv().await {
                    Packet::PubRec(rec) => assert_eq!(rec.packet_id.get(), packet_id),
                    other => panic!("expected PUBREC, got {other:?}"),
                }
                let id = PacketId::new(packet_id).expect("non-zero");
                self.send(Packet::PubRel(PubResp::new(id))).await;
                match self.recv().await {
                    Packet::PubComp(comp) => assert_eq!(comp.packet_id.get(), packet_id),
                    other => panic!("expected PUBCOMP, got {other:?}"),
                }
            }
        }
    }

    /// Publishes `b"m"` at QoS 1 or 2 and returns the reason code of the PUBACK or PUBREC
    /// (v5; 0 for v3), completing a QoS 2 flow the broker accepted.
    pub async fn publish_reason(&mut self, topic: &str, qos: QoS, packet_id: u16) -> u8 {
        assert_ne!(qos, QoS::AtMostOnce, "QoS 0 has no acknowledgement");
        self.send(Packet::Publish(publish_packet(
            topic,
            b"m",
            qos,
            false,
            Some(packet_id),
        )))
        .await;
        match (qos, self.recv().await) {
            (QoS::AtLeastOnce, Packet::PubAck(ack)) => ack.reason_code.0,
            (QoS::ExactlyOnce, Packet::PubRec(rec)) => {
                if rec.reason_code.0 < 0x80 {
                    let id = PacketId::new(packet_id).expect("non-zero packet id");
                    self.send(Packet::PubRel(PubResp::new(id))).await;
                    match self.recv().await {
                        Packet::PubComp(comp) => assert_eq!(comp.packet_id, id),
                        other => panic!("expected PUBCOMP, got {other:?}"),
                    }
                }
                rec.reason_code.0
            }
            (_, other) => panic!("expected an acknowledgement, got {other:?}"),
        }
    }

    /// Receives the next packet; panics after [`RECV_TIMEOUT`] or if the connection closes.
    pub async fn recv(&mut self) -> Packet {
        match self.recv_timeout(RECV_TIMEOUT).await {
            Received::Packet(packet) => packet,
            Received::Closed => panic!("connection closed while waiting for a packet"),
            Received::Timeout => panic!("no packet within {RECV_TIMEOUT:?}"),
        }
    }

    /// Receives the next PUBLISH, acknowledging QoS 1/2 automatically; panics on another packet.
    pub async fn recv_publish(&mut self) -> Publish {
        match self.recv().await {
            Packet::Publish(publish) => {
                self.ack(&publish).await;
                publish
            }
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    /// Acknowledges a received PUBLISH (PUBACK, or PUBREC → PUBREL → PUBCOMP).
    pub async fn ack(&mut self, publish: &Publish) {
        let Some(id) = publish.packet_id else { return };
        match publish.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.send(Packet::PubAck(PubResp::new(id))).await,
            QoS::ExactlyOnce => {
                self.send(Packet::PubRec(PubResp::new(id))).await;
                match self.recv().await {
                    Packet::PubRel(rel) => assert_eq!(rel.packet_id, id),
                    other => panic!("expected PUBREL, got {other:?}"),
                }
                self.send(Packet::PubComp(PubResp::new(id))).await;
            }
        }
    }

    /// Receives with a timeout, reporting closure and timeouts instead of panicking.
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Received {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match decode(&mut self.buf, self.version, u32::MAX) {
                Ok(Some(packet)) => return Received::Packet(packet),
                Ok(None) => {}
                Err(error) => panic!("broker sent a malformed packet: {error}"),
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await;
            match read {
                Err(_) => return Received::Timeout,
                Ok(Ok(0)) | Ok(Err(_)) => return Received::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Asserts that nothing arrives within `within`.
    pub async fn expect_nothing(&mut self, within: Duration) {
        match self.recv_timeout(within).await {
            Received::Timeout => {}
            Received::Packet(packet) => panic!("expected nothing, got {packet:?}"),
            Received::Closed => panic!("expected nothing, but the connection closed"),
        }
    }

    /// Waits for the broker to close the connection, returning the packets it sent first
    /// (e.g. a v5 DISCONNECT). Panics if it stays open for [`RECV_TIMEOUT`].
    pub async fn expect_closed(&mut self) -> Vec<Packet> {
        let mut before = Vec::new();
        loop {
            match self.recv_timeout(RECV_TIMEOUT).await {
                Received::Closed => return before,
                Received::Packet(packet) => before.push(packet),
                Received::Timeout => panic!("connection still open; received {before:?}"),
            }
        }
    }

    /// Closes the connection without DISCONNECT (an abnormal close; over TLS, after
    /// close_notify).
    pub async fn drop_connection(mut self) {
        let _ = self.stream.shutdown().await;
    }
}

/// What [`RawClient::recv_timeout`] saw.
// Test-only value, returned and matched at once; boxing the packet would only burden tests.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Received {
    /// A packet.
    Packet(Packet),
    /// The broker closed the connection.
    Closed,
    /// Nothing arrived in time.
    Timeout,
}
