//! Translated files served by a broker started in this process, to real Mosquitto clients.

use crate::common::*;
use std::net::SocketAddr;

/// A broker started in this process from Mosquitto text (listener ports chosen free).
async fn serve(text: &str) -> hayate_server::ServerHandle {
    let t = ok(text);
    hayate_server::Server::start(t.config)
        .await
        .expect("broker starts")
}

async fn anonymous_connack(addr: SocketAddr) -> u8 {
    let version = hayate_codec::ProtocolVersion::V5;
    let mut client = hayate_testkit::RawClient::connect_tcp(addr, version).await;
    let connect = hayate_testkit::connect_packet(version, "anon", true);
    client.connect(connect).await.reason_code.0
}

/// `per_listener_settings true`: anonymous access differs per listener, served as configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_listener_anonymous_access_is_served_per_listener() {
    let (open, closed) = (hayate_testkit::free_port(), hayate_testkit::free_port());
    let text = format!(
        "per_listener_settings true\nsys_interval 0\n\
         listener {open} 127.0.0.1\nallow_anonymous true\n\
         listener {closed} 127.0.0.1\nallow_anonymous false\n"
    );
    let server = serve(&text).await;
    assert_eq!(
        anonymous_connack(addr(&format!("127.0.0.1:{open}"))).await,
        0
    );
    assert_eq!(
        anonymous_connack(addr(&format!("127.0.0.1:{closed}"))).await,
        0x87
    );
    server.shutdown().await;
}

/// A Mosquitto TLS-PSK listener (`psk_hint` + `psk_file`, identity as user name) served to the
/// real `mosquitto_pub`, with the ACL applied to the PSK identity; an anonymous subscriber on a
/// plain listener sees what was allowed through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psk_listener_serves_mosquitto_pub() {
    if std::process::Command::new("mosquitto_pub")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("note: mosquitto_pub not installed, test skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let psk = dir.path().join("psk");
    std::fs::write(&psk, "sensor1:00112233445566778899aabbccddeeff\n").unwrap();
    let acl = dir.path().join("acl");
    let rules = "topic read sensors/#\n\nuser sensor1\ntopic write sensors/1/#\n";
    std::fs::write(&acl, rules).unwrap();
    let (plain, port) = (hayate_testkit::free_port(), hayate_testkit::free_port());
    let text = format!(
        "sys_interval 0\nallow_anonymous true\nacl_file {}\npsk_file {}\n\
         listener {plain} 127.0.0.1\n\
         listener {port} 127.0.0.1\npsk_hint hayate\nuse_identity_as_username true\n",
        acl.display(),
        psk.display()
    );
    let server = serve(&text).await;
    let version = hayate_codec::ProtocolVersion::V5;
    let plain_addr = addr(&format!("127.0.0.1:{plain}"));
    let mut watcher = hayate_testkit::RawClient::connect_tcp(plain_addr, version).await;
    let connect = hayate_testkit::connect_packet(version, "watcher", true);
    assert_eq!(watcher.connect(connect).await.reason_code.0, 0);
    let qos = hayate_codec::QoS::AtLeastOnce;
    assert_eq!(watcher.subscribe("sensors/#", qos, 1).await, [1]);

    let publish = move |key: &'static str, topic: &'static str| {
        let port = port.to_string();
        let args = [
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "--psk-identity",
            "sensor1",
            "--psk",
            key,
        ];
        std::process::Command::new("mosquitto_pub")
            .args(args)
            .args(["-V", "mqttv311", "-q", "1", "-t", topic, "-m", "21.5"])
            .output()
            .unwrap()
    };
    let key = "00112233445566778899aabbccddeeff";
    let output = tokio::task::spawn_blocking(move || publish(key, "sensors/2/temp"))
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let output = tokio::task::spawn_blocking(move || publish(key, "sensors/1/temp"))
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    // Only the allowed topic arrives (v3: the refused one is acknowledged and dropped).
    assert_eq!(
        watcher.recv_publish().await.topic.as_str(),
        "sensors/1/temp"
    );
    watcher
        .expect_nothing(std::time::Duration::from_millis(300))
        .await;

    let output = tokio::task::spawn_blocking(move || publish("ffeeddcc", "sensors/1/temp"))
        .await
        .unwrap();
    assert!(
        !output.status.success(),
        "a wrong PSK must fail the handshake"
    );
    server.shutdown().await;
}

/// A Mosquitto certificate listener (`certfile`/`keyfile`, `tls_version tlsv1.2`) served to
/// the real `mosquitto_pub`; the message reaches a subscriber on a plain listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_serves_mosquitto_pub() {
    if std::process::Command::new("mosquitto_pub")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("note: mosquitto_pub not installed, test skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let (plain, tls) = (hayate_testkit::free_port(), hayate_testkit::free_port());
    let text = format!(
        "sys_interval 0\nallow_anonymous true\nlistener {plain} 127.0.0.1\n\
         listener {tls} 127.0.0.1\ncertfile {}\nkeyfile {}\ntls_version tlsv1.2\n",
        cert_file.display(),
        key_file.display()
    );
    let server = serve(&text).await;
    let version = hayate_codec::ProtocolVersion::V5;
    let mut watcher =
        hayate_testkit::RawClient::connect_tcp(addr(&format!("127.0.0.1:{plain}")), version).await;
    let connect = hayate_testkit::connect_packet(version, "watcher", true);
    assert_eq!(watcher.connect(connect).await.reason_code.0, 0);
    assert_eq!(
        watcher
            .subscribe("tls/#", hayate_codec::QoS::AtLeastOnce, 1)
            .await,
        [1]
    );
    let output = tokio::task::spawn_blocking(move || {
        let port = tls.to_string();
        std::process::Command::new("mosquitto_pub")
            .args(["-h", "localhost", "-p", &port, "--cafile"])
            .arg(&cert_file)
            .args(["-q", "1", "-t", "tls/hello", "-m", "over tls"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let message = watcher.recv_publish().await;
    assert_eq!(message.topic.as_str(), "tls/hello");
    assert_eq!(&message.payload[..], b"over tls");
    server.shutdown().await;
}
