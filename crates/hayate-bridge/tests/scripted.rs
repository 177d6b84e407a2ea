//! A remote peer scripted at the packet level, for an interleaving a real broker cannot be
//! made to produce on demand: the link dropping between PUBREC and PUBREL of a QoS 2 message
//! coming in, and the remote broker then starting a new session.

mod common;

use bytes::BytesMut;
use common::{bridge, drain, topic};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol};
use hayate_codec::{
    decode, encode, ConnAck, Packet, PacketId, Properties, ProtocolVersion, PubResp, QoS,
    ReasonCode, SubAck,
};
use hayate_testkit::{publish_packet, TestBroker};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const V5: ProtocolVersion = ProtocolVersion::V5;

/// One accepted connection from the bridge, spoken to packet by packet.
struct Peer {
    stream: TcpStream,
    buf: BytesMut,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Peer {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the bridge connects")
            .expect("accept");
        Peer {
            stream,
            buf: BytesMut::new(),
        }
    }

    async fn recv(&mut self) -> Packet {
        loop {
            if let Some(packet) = decode(&mut self.buf, V5, u32::MAX).expect("well-formed") {
                if packet == Packet::PingReq {
                    continue;
                }
                return packet;
            }
            let n =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("a packet from the bridge")
                    .expect("read");
            assert!(n > 0, "the bridge closed the connection");
        }
    }

    async fn send(&mut self, packet: Packet) {
        let mut out = BytesMut::new();
        encode(&packet, V5, &mut out).expect("encodes");
        self.stream.write_all(&out).await.expect("write");
    }

    /// CONNECT → CONNACK (a new session), SUBSCRIBE → SUBACK.
    async fn handshake(&mut self) {
        self.handshake_with(Properties::default()).await;
    }

    /// [`Peer::handshake`] with these CONNACK properties.
    async fn handshake_with(&mut self, properties: Properties) {
        assert!(matches!(self.recv().await, Packet::Connect(_)));
        self.send(Packet::ConnAck(ConnAck {
            session_present: false,
            reason_code: ReasonCode::SUCCESS,
            properties,
        }))
        .await;
        loop {
            match self.recv().await {
                Packet::Subscribe(subscribe) => {
                    self.send(Packet::SubAck(SubAck {
                        packet_id: subscribe.packet_id,
                        reason_codes: vec![ReasonCode(2); subscribe.filters.len()],
                        properties: Properties::default(),
                    }))
                    .await;
                    return;
                }
                // The notification of the link state.
                Packet::Publish(_) => {}
                other => panic!("expected SUBSCRIBE, got {other:?}"),
            }
        }
    }

    async fn publish_qos2(&mut self, topic: &str, payload: &[u8], id: u16) {
        let publish = publish_packet(topic, payload, QoS::ExactlyOnce, false, Some(id));
        self.send(Packet::Publish(publish)).await;
        match self.recv().await {
            Packet::PubRec(rec) => assert_eq!(rec.packet_id.get(), id),
            other => panic!("expected PUBREC, got {other:?}"),
        }
    }
}

/// The first link drops after PUBREC of message "a" (id 1); the remote broker comes back with
/// a new session and sends message "b", reusing id 1. The local subscriber gets both: the
/// bridge released "a"'s flow in its local session when it saw the remote session was new.
#[tokio::test]
async fn a_new_remote_session_does_not_make_a_reused_qos2_id_a_duplicate() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let mut config = bridge(
        "scripted",
        port,
        BridgeProtocol::Mqttv50,
        vec![topic("down/#", BridgeDirection::In, 2, "", "")],
    );
    config.cleansession = true;
    config.notifications = false;
    let local = TestBroker::start_with(|c| c.bridges.push(config)).await;
    let mut sub = local.client(V5, "sub").await;
    sub.subscribe("down/#", QoS::AtLeastOnce, 1).await;

    let mut first = Peer::accept(&listener).await;
    first.handshake().await;
    first.publish_qos2("down/a", b"a", 1).await;
    drop(first);

    let mut second = Peer::accept(&listener).await;
    second.handshake().await;
    second.publish_qos2("down/b", b"b", 1).await;
    let id = PacketId::new(1).expect("non-zero");
    second.send(Packet::PubRel(PubResp::new(id))).await;
    match second.recv().await {
        Packet::PubComp(comp) => assert_eq!(comp.packet_id, id),
        other => panic!("expected PUBCOMP, got {other:?}"),
    }

    let payloads: Vec<Vec<u8>> = drain(&mut sub, Duration::from_millis(700))
        .await
        .iter()
        .map(|p| p.payload.to_vec())
        .collect();
    assert_eq!(payloads, vec![b"a".to_vec(), b"b".to_vec()]);
}

/// The bridge pings at the remote broker's Server Keep Alive (1 s here, 60 s configured), and
/// a remote broker that answers nothing for 1.5 × keep alive is taken as gone: the bridge
/// reconnects.
#[tokio::test]
async fn keep_alive_follows_the_server_and_a_silent_remote_is_dropped() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let mut config = bridge(
        "silent",
        port,
        BridgeProtocol::Mqttv50,
        vec![topic("down/#", BridgeDirection::In, 1, "", "")],
    );
    config.keepalive_interval_secs = 60;
    config.notifications = false;
    let _local = TestBroker::start_with(|c| c.bridges.push(config)).await;
    let mut peer = Peer::accept(&listener).await;
    peer.handshake_with(Properties {
        server_keep_alive: Some(1),
        ..Properties::default()
    })
    .await;
    let started = std::time::Instant::now();
    // A PINGREQ comes within the server's keep alive (not the configured 60 s).
    let mut buf = BytesMut::new();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(3), peer.stream.read_buf(&mut buf))
            .await
            .expect("a PINGREQ within the server keep alive")
            .expect("read");
        assert!(n > 0, "closed before pinging");
        if decode(&mut buf, V5, u32::MAX).expect("well-formed") == Some(Packet::PingReq) {
            break;
        }
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    // Unanswered: the bridge drops the link and connects again.
    let mut again = Peer::accept(&listener).await;
    assert!(matches!(again.recv().await, Packet::Connect(_)));
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

/// A remote broker with Maximum QoS 0 (v5 CONNACK) gets a QoS 1 topic's messages at QoS 0:
/// the bridge's local subscriptions ask for no more than the remote broker takes.
#[tokio::test]
async fn the_remote_maximum_qos_caps_what_goes_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let mut config = bridge(
        "maxqos",
        port,
        BridgeProtocol::Mqttv50,
        vec![topic("up/#", BridgeDirection::Out, 1, "", "")],
    );
    config.notifications = false;
    let local = TestBroker::start_with(|c| c.bridges.push(config)).await;
    let mut peer = Peer::accept(&listener).await;
    assert!(matches!(peer.recv().await, Packet::Connect(_)));
    peer.send(Packet::ConnAck(ConnAck {
        session_present: false,
        reason_code: ReasonCode::SUCCESS,
        properties: Properties {
            maximum_qos: Some(0),
            ..Properties::default()
        },
    }))
    .await;
    // No `in` topic: no SUBSCRIBE comes. Let the local session subscribe first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut publisher = local.client(V5, "pub").await;
    publisher
        .publish("up/x", b"m", QoS::AtLeastOnce, false, 1)
        .await;
    match peer.recv().await {
        Packet::Publish(publish) => {
            assert_eq!(publish.topic.as_str(), "up/x");
            assert_eq!(publish.qos, QoS::AtMostOnce);
        }
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}
