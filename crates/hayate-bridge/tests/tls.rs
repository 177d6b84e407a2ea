//! Bridges over TLS (certificates) and TLS-PSK, to a real Mosquitto started by the test and to
//! Hayate's own TLS and PSK listeners. Certificates are made by the test (rcgen).

mod common;

use common::{bridge, drain, hayate_with, topic, wait_for_state, Mosquitto};
use hayate_bridge::config::{BridgeConfig, BridgeDirection, BridgeProtocol};
use hayate_codec::{ProtocolVersion, QoS};
use hayate_server::config::{ListenerConfig, TransportKind};
use hayate_testkit::pki::{make_pki, make_pki_for, TestPki};
use hayate_testkit::{free_port, RawClient, Received, TestBroker};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const V5: ProtocolVersion = ProtocolVersion::V5;
const QUIET: Duration = Duration::from_millis(700);
const PSK_IDENTITY: &str = "edge-1";
const PSK_KEY: &str = "0123456789abcdef0123456789abcdef";

/// Mosquitto with a plain listener (for the test's clients) and a certificate TLS listener
/// on `tls_port` that requires a client certificate from `pki`'s CA.
fn mosquitto_tls(pki: &TestPki, tls_port: u16) -> Mosquitto {
    Mosquitto::start_with(
        false,
        &format!(
            "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
            pki.ca.display(),
            pki.server_cert.display(),
            pki.server_key.display()
        ),
    )
}

/// Mosquitto with a plain listener and a TLS-PSK listener on `psk_port` that knows
/// [`PSK_IDENTITY`].
fn mosquitto_psk(dir: &Path, psk_port: u16) -> Mosquitto {
    let file = write_psk_file(dir);
    Mosquitto::start_with(
        false,
        &format!(
            "listener {psk_port} 127.0.0.1\npsk_hint hayate-test\npsk_file {}\n",
            file.display()
        ),
    )
}

fn write_psk_file(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join("psk");
    std::fs::write(&file, format!("{PSK_IDENTITY}:{PSK_KEY}\n")).unwrap();
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644));
    file
}

/// A bridge to `address` with one `out` topic (`up/#` → `edge/up/#`) and one `in` topic
/// (`edge/down/#` → `down/#`).
fn two_way(name: &str, address: String, protocol: BridgeProtocol) -> BridgeConfig {
    let mut config = bridge(
        name,
        0,
        protocol,
        vec![
            topic("up/#", BridgeDirection::Out, 1, "", "edge/"),
            topic("down/#", BridgeDirection::In, 1, "", "edge/"),
        ],
    );
    config.addresses = vec![address];
    config
}

/// Messages cross the bridge both ways: `remote` is a client of the remote broker.
async fn crosses_both_ways(local_broker: &TestBroker, remote: &mut RawClient) {
    remote.subscribe("edge/up/#", QoS::AtLeastOnce, 1).await;
    let mut local = local_broker.client(V5, "local").await;
    local.subscribe("down/#", QoS::AtLeastOnce, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    local
        .publish("up/1", b"out", QoS::AtLeastOnce, false, 10)
        .await;
    let got = drain(remote, QUIET).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].topic.as_str(), "edge/up/1");
    assert_eq!(got[0].payload.as_ref(), b"out");
    remote
        .publish("edge/down/2", b"in", QoS::AtLeastOnce, false, 11)
        .await;
    let got = drain(&mut local, QUIET).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].topic.as_str(), "down/2");
    assert_eq!(got[0].payload.as_ref(), b"in");
}

/// Starts Hayate with `config` and tells whether the bridge's state says "1" within `within`.
async fn comes_up(config: BridgeConfig, within: Duration) -> bool {
    let state = format!(
        "$SYS/broker/connection/{}/state",
        config.remote_clientid.clone().unwrap()
    );
    let broker = TestBroker::start_with(|c| c.bridges.push(config)).await;
    let mut watcher = broker.client(V5, "watcher").await;
    watcher.subscribe(&state, QoS::AtMostOnce, 1).await;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match watcher.recv_timeout(left).await {
            Received::Packet(hayate_codec::Packet::Publish(p)) if p.payload.as_ref() == b"1" => {
                return true
            }
            Received::Packet(_) => {}
            Received::Timeout | Received::Closed => return false,
        }
    }
}

fn with_client_cert(mut config: BridgeConfig, pki: &TestPki) -> BridgeConfig {
    config.cafile = Some(pki.ca.clone());
    config.certfile = Some(pki.client_cert.clone());
    config.keyfile = Some(pki.client_key.clone());
    config
}

async fn tls_to_mosquitto(protocol: BridgeProtocol) {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let tls_port = free_port();
    let mosquitto = mosquitto_tls(&pki, tls_port);
    // The host name is checked against the certificate (it names localhost).
    let config = with_client_cert(
        two_way("tls", format!("localhost:{tls_port}"), protocol),
        &pki,
    );
    let hayate = hayate_with(config).await;
    let mut remote = mosquitto.client(V5, "remote", true).await;
    crosses_both_ways(&hayate, &mut remote).await;
}

#[tokio::test]
async fn tls_bridge_with_a_client_certificate_to_mosquitto_v311() {
    tls_to_mosquitto(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn tls_bridge_with_a_client_certificate_to_mosquitto_v5() {
    tls_to_mosquitto(BridgeProtocol::Mqttv50).await;
}

/// What the remote broker's certificate must satisfy: a CA the bridge trusts, and (unless
/// `bridge_insecure`) the host name connected to; Mosquitto also wants the client certificate.
#[tokio::test]
async fn tls_bridges_check_the_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki_for(dir.path(), &["broker.invalid"]);
    let other_dir = tempfile::tempdir().unwrap();
    let other = make_pki(other_dir.path());
    let tls_port = free_port();
    let _mosquitto = mosquitto_tls(&pki, tls_port);
    let address = format!("127.0.0.1:{tls_port}");
    let base = two_way("check", address, BridgeProtocol::Mqttv311);
    let wait = Duration::from_secs(3);

    // The certificate names broker.invalid, not 127.0.0.1: refused...
    assert!(!comes_up(with_client_cert(base.clone(), &pki), wait).await);
    // ... unless bridge_insecure, which skips the name check only:
    let mut insecure = with_client_cert(base.clone(), &pki);
    insecure.insecure = true;
    assert!(comes_up(insecure.clone(), wait).await);
    // a CA the bridge does not trust is still refused,
    let mut wrong_ca = insecure.clone();
    wrong_ca.cafile = Some(other.ca.clone());
    assert!(!comes_up(wrong_ca, wait).await);
    // and Mosquitto (require_certificate) refuses a bridge without a client certificate.
    let mut no_cert = insecure;
    no_cert.certfile = None;
    no_cert.keyfile = None;
    assert!(!comes_up(no_cert, wait).await);
}

/// Hayate's own TLS listener as the remote broker, with client certificates required, TLS 1.3
/// only and ALPN offered; `bridge_capath` instead of `bridge_cafile`.
#[tokio::test]
async fn tls_bridge_to_hayate_with_capath_and_tls13() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let remote_broker = TestBroker::start_with(|c| {
        let mut tls = ListenerConfig::tcp(SocketAddr::from(([127, 0, 0, 1], 0)));
        tls.transport = TransportKind::Mqtts;
        tls.cert_file = Some(pki.server_cert.clone());
        tls.key_file = Some(pki.server_key.clone());
        tls.ca_file = Some(pki.ca.clone());
        tls.require_certificate = true;
        c.listeners.push(tls);
    })
    .await;
    let tls_addr = remote_broker.handle.local_addrs()[1];
    let capath = tempfile::tempdir().unwrap();
    std::fs::copy(&pki.ca, capath.path().join("ca.pem")).unwrap();
    let mut config = with_client_cert(
        two_way(
            "tls-hayate",
            format!("localhost:{}", tls_addr.port()),
            BridgeProtocol::Mqttv50,
        ),
        &pki,
    );
    config.cafile = None;
    config.capath = Some(capath.path().to_path_buf());
    config.tls_version = Some("tlsv1.3".into());
    config.alpn = Some("mqtt".into());
    let hayate = hayate_with(config).await;
    let mut remote = remote_broker.client(V5, "remote").await;
    crosses_both_ways(&hayate, &mut remote).await;
}

async fn psk_to_mosquitto(protocol: BridgeProtocol) {
    let dir = tempfile::tempdir().unwrap();
    let psk_port = free_port();
    let mosquitto = mosquitto_psk(dir.path(), psk_port);
    let mut config = two_way("psk", format!("127.0.0.1:{psk_port}"), protocol);
    config.identity = Some(PSK_IDENTITY.into());
    config.psk = Some(PSK_KEY.into());
    let hayate = hayate_with(config).await;
    let mut remote = mosquitto.client(V5, "remote", true).await;
    crosses_both_ways(&hayate, &mut remote).await;
}

#[tokio::test]
async fn psk_bridge_to_mosquitto_v311() {
    psk_to_mosquitto(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn psk_bridge_to_mosquitto_v5() {
    psk_to_mosquitto(BridgeProtocol::Mqttv50).await;
}

/// A wrong key or an unknown identity does not connect.
#[tokio::test]
async fn psk_bridge_with_a_wrong_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let psk_port = free_port();
    let _mosquitto = mosquitto_psk(dir.path(), psk_port);
    let mut config = two_way(
        "psk-wrong",
        format!("127.0.0.1:{psk_port}"),
        BridgeProtocol::Mqttv311,
    );
    config.identity = Some(PSK_IDENTITY.into());
    config.psk = Some("00112233445566778899aabbccddeeff".into());
    assert!(!comes_up(config.clone(), Duration::from_secs(3)).await);
    config.identity = Some("stranger".into());
    config.psk = Some(PSK_KEY.into());
    assert!(!comes_up(config, Duration::from_secs(3)).await);
}

/// Hayate's own PSK listener as the remote broker, the identity taken as the user name.
#[tokio::test]
async fn psk_bridge_to_hayate() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_psk_file(dir.path());
    let remote_broker = TestBroker::start_with(|c| {
        let mut psk = ListenerConfig::tcp(SocketAddr::from(([127, 0, 0, 1], 0)));
        psk.transport = TransportKind::Psk;
        psk.psk_file = Some(file.clone());
        psk.psk_hint = Some("hayate-test".into());
        psk.use_identity_as_username = true;
        c.listeners.push(psk);
    })
    .await;
    let psk_addr = remote_broker.handle.local_addrs()[1];
    let mut config = two_way(
        "psk-hayate",
        format!("127.0.0.1:{}", psk_addr.port()),
        BridgeProtocol::Mqttv50,
    );
    config.identity = Some(PSK_IDENTITY.into());
    config.psk = Some(PSK_KEY.into());
    let hayate = hayate_with(config).await;
    let mut remote = remote_broker.client(V5, "remote").await;
    crosses_both_ways(&hayate, &mut remote).await;
    // The state topic was also published remotely, over the PSK link.
    let mut watcher = remote_broker.client(V5, "watcher").await;
    watcher
        .subscribe(
            "$SYS/broker/connection/psk-hayate-remote/state",
            QoS::AtMostOnce,
            1,
        )
        .await;
    wait_for_state(&mut watcher, b"1").await;
}
