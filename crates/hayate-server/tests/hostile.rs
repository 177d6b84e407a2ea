//! Hostile clients: sockets that never send CONNECT (slowloris), half-sent CONNECTs, oversized
//! remaining lengths, half-finished TLS handshakes and SUBSCRIBE floods. The broker must close
//! or refuse each of them within its limits while an honest client keeps being served.

use hayate_codec::{Packet, PacketId, ProtocolVersion, QoS, Subscribe, SubscriptionOptions};
use hayate_server::config::{ListenerConfig, TransportKind};
use hayate_testkit::{RawClient, TestBroker};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SLOWLORIS: usize = 600;
const HALF_CONNECT: usize = 300;
const OVERSIZED: usize = 300;
const HALF_TLS: usize = 300;

/// Waits for the broker to close `socket` (EOF or reset), reading and discarding what it sends.
async fn closed_by_broker(mut socket: TcpStream, within: Duration) -> bool {
    let mut sink = [0u8; 256];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

async fn open(addr: SocketAddr, count: usize, first_bytes: &[u8]) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(count);
    for _ in 0..count {
        let mut socket = TcpStream::connect(addr).await.expect("connect");
        if !first_bytes.is_empty() {
            socket.write_all(first_bytes).await.expect("write");
        }
        sockets.push(socket);
    }
    sockets
}

fn tls_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    std::fs::create_dir_all(dir).expect("dir");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).expect("write");
    std::fs::write(&key_path, key.serialize_pem()).expect("write");
    (cert_path, key_path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_connections_are_shed_while_an_honest_client_is_served() {
    let dir = std::env::temp_dir().join(format!("hayate-hostile-{}", std::process::id()));
    let (cert_file, key_file) = tls_files(&dir);
    let broker = TestBroker::start_with(|config| {
        config.server.connect_timeout_secs = 1;
        config.broker.max_subscriptions_per_client = 100;
        let mut tls = ListenerConfig::tcp("127.0.0.1:0".parse().unwrap());
        tls.transport = TransportKind::Mqtts;
        tls.cert_file = Some(cert_file.clone());
        tls.key_file = Some(key_file.clone());
        tls.max_concurrent_handshakes = 64;
        config.listeners.push(tls);
    })
    .await;
    let addr = broker.addr;
    let tls_addr = broker.handle.local_addrs()[1];

    let mut honest_sub = broker.client(ProtocolVersion::V5, "honest-sub").await;
    honest_sub.subscribe("honest/t", QoS::AtLeastOnce, 1).await;

    // The attack: silent sockets, half a CONNECT, a remaining length of 268,435,455 bytes
    // (far over max_packet_size), half a TLS ClientHello.
    let silent = open(addr, SLOWLORIS, b"").await;
    let half_connect = open(addr, HALF_CONNECT, &[0x10, 0x20, 0x00, 0x04, b'M']).await;
    let oversized = open(addr, OVERSIZED, &[0x10, 0xFF, 0xFF, 0xFF, 0x7F]).await;
    let half_tls = open(tls_addr, HALF_TLS, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await;
    // A SUBSCRIBE flood from a connected client: 50 packets of 10 filters each.
    let mut flooder = broker.client(ProtocolVersion::V5, "flooder").await;
    for packet_id in 1..=50u16 {
        let filters = (0..10)
            .map(|i| {
                (
                    format!("flood/{packet_id}/{i}").as_str().into(),
                    SubscriptionOptions::with_qos(QoS::AtMostOnce),
                )
            })
            .collect();
        flooder
            .send(Packet::Subscribe(Subscribe {
                packet_id: PacketId::new(packet_id).expect("non-zero"),
                filters,
                properties: Default::default(),
            }))
            .await;
    }

    // Meanwhile the honest client publishes and receives.
    let mut honest_pub = broker.client(ProtocolVersion::V5, "honest-pub").await;
    let started = Instant::now();
    for id in 1..=20u16 {
        honest_pub
            .publish("honest/t", b"still here", QoS::AtLeastOnce, false, id)
            .await;
        let publish = honest_sub.recv_publish().await;
        assert_eq!(&publish.payload[..], b"still here");
        honest_sub.ack(&publish).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "honest traffic took {:?} during the attack",
        started.elapsed()
    );

    // The flooder got SUBACKs for everything, with refusals past its 100-subscription limit.
    let mut granted = 0;
    let mut refused = 0;
    for _ in 0..50 {
        match flooder.recv().await {
            Packet::SubAck(suback) => {
                for code in suback.reason_codes {
                    if code.0 < 0x80 {
                        granted += 1;
                    } else {
                        refused += 1;
                    }
                }
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }
    assert_eq!(granted, 100, "the per-client subscription limit holds");
    assert_eq!(refused, 400);

    // Every hostile socket is closed by the broker: the connect timeout (1 s) for the silent,
    // half-sent and half-TLS ones, at once for the oversized remaining length.
    let mut closers = Vec::new();
    for socket in silent
        .into_iter()
        .chain(half_connect)
        .chain(oversized)
        .chain(half_tls)
    {
        closers.push(tokio::spawn(closed_by_broker(
            socket,
            Duration::from_secs(10),
        )));
    }
    let mut still_open = 0;
    for closer in closers {
        if !closer.await.expect("task") {
            still_open += 1;
        }
    }
    assert_eq!(still_open, 0, "hostile sockets left open");

    // And the broker still accepts and serves new clients, over TCP and TLS.
    let mut late = RawClient::connect_tcp(addr, ProtocolVersion::V311).await;
    let connack = late
        .connect(hayate_testkit::connect_packet(
            ProtocolVersion::V311,
            "late",
            true,
        ))
        .await;
    assert_eq!(connack.reason_code.0, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
