//! Certificate TLS listeners (`mqtts`, rustls on the socket) with a rustls client: TLS 1.2 and
//! 1.3, messages of many records in both directions, bursts of small ones, the client
//! certificate's identity as the user name, and a client's close_notify.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_server::config::{ListenerConfig, TransportKind};
use hayate_testkit::pki::{make_pki, TestPki};
use hayate_testkit::{connect_packet, will, RawClient, Received, TestBroker};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const V5: ProtocolVersion = ProtocolVersion::V5;

/// A broker with a plain listener (`addr`) and an `mqtts` one (`local_addrs()[1]`), adjusted by
/// `configure`.
async fn broker_with_tls(pki: &TestPki, configure: impl FnOnce(&mut ListenerConfig)) -> TestBroker {
    TestBroker::start_with(|config| {
        let mut tls = ListenerConfig::tcp("127.0.0.1:0".parse().unwrap());
        tls.transport = TransportKind::Mqtts;
        tls.cert_file = Some(pki.server_cert.clone());
        tls.key_file = Some(pki.server_key.clone());
        configure(&mut tls);
        config.listeners.push(tls);
    })
    .await
}

/// A rustls client of `version` trusting the test CA, with the test client certificate when
/// `with_certificate`.
fn client_config(
    pki: &TestPki,
    version: &'static SupportedProtocolVersion,
    with_certificate: bool,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&pki.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots);
    let config = if with_certificate {
        let chain = CertificateDer::pem_file_iter(&pki.client_cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&pki.client_key).unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(config)
}

async fn tls_client(addr: SocketAddr, config: Arc<ClientConfig>) -> RawClient {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    RawClient::over(stream, V5)
}

/// A payload whose every byte depends on its position and on `seed`.
fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_many_records_and_bursts_cross_tls_1_2_and_1_3() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let broker = broker_with_tls(&pki, |_| {}).await;
    let tls_addr = broker.handle.local_addrs()[1];
    let mut watcher = broker.client(V5, "plain-watcher").await;
    watcher.subscribe("tls/#", QoS::AtLeastOnce, 1).await;
    for (round, version) in [&rustls::version::TLS12, &rustls::version::TLS13]
        .into_iter()
        .enumerate()
    {
        let mut client = tls_client(tls_addr, client_config(&pki, version, false)).await;
        let id = format!("tls-{round}");
        let mut connect = connect_packet(V5, &id, true);
        connect.will = Some(will("tls/will", b"gone", QoS::AtMostOnce, false));
        assert_eq!(client.connect(connect).await.reason_code.0, 0);
        assert_eq!(client.subscribe("tls/#", QoS::AtLeastOnce, 1).await, [1]);
        // 300 kB: about 19 records each way.
        let big = payload(300_000, round as u8);
        client
            .publish("tls/big", &big, QoS::AtLeastOnce, false, 2)
            .await;
        for receiver in [&mut client, &mut watcher] {
            let message = receiver.recv_publish().await;
            assert_eq!(message.topic.as_str(), "tls/big");
            assert!(message.payload[..] == big[..], "300 kB payload corrupted");
        }
        // A burst of small messages, many per record and per read, in both directions.
        for i in 0..500u32 {
            client
                .publish("tls/small", &i.to_be_bytes(), QoS::AtMostOnce, false, 0)
                .await;
        }
        for receiver in [&mut client, &mut watcher] {
            for i in 0..500u32 {
                let message = receiver.recv_publish().await;
                assert_eq!(&message.payload[..], &i.to_be_bytes(), "message {i}");
            }
        }
        // The client's close_notify and FIN without DISCONNECT end the connection like a TCP
        // close: the broker publishes the will.
        client.drop_connection().await;
        let will = watcher.recv_publish().await;
        assert_eq!(
            (will.topic.as_str(), &will.payload[..]),
            ("tls/will", &b"gone"[..])
        );
        // After a DISCONNECT the broker closes the connection.
        let mut again = tls_client(tls_addr, client_config(&pki, version, false)).await;
        assert_eq!(
            again
                .connect(connect_packet(V5, &id, true))
                .await
                .reason_code
                .0,
            0
        );
        again.send(Packet::Disconnect(Default::default())).await;
        assert!(matches!(
            again.recv_timeout(Duration::from_secs(5)).await,
            Received::Closed
        ));
    }
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_certificate_is_the_user_name() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let broker = broker_with_tls(&pki, |tls| {
        tls.ca_file = Some(pki.ca.clone());
        tls.use_identity_as_username = true;
    })
    .await;
    let tls_addr = broker.handle.local_addrs()[1];
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        // With a certificate: its CN is the user name, so the login succeeds.
        let mut with = tls_client(tls_addr, client_config(&pki, version, true)).await;
        let connack = with.connect(connect_packet(V5, "with-cert", true)).await;
        assert_eq!(connack.reason_code.0, 0, "{connack:?}");
        // Without one there is no identity to log in with.
        let mut without = tls_client(tls_addr, client_config(&pki, version, false)).await;
        let connack = without.connect(connect_packet(V5, "no-cert", true)).await;
        assert_eq!(connack.reason_code.0, 0x87, "{connack:?}");
    }
    broker.handle.shutdown().await;
}
