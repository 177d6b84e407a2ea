//! TLS and TLS-PSK against a real Mosquitto: a TLS listener with a CA and server certificate
//! generated here (client certificates required), and a PSK listener (`psk_hint`,
//! `psk_file`). Short QoS 1 swarms over each must lose nothing; a wrong key must fail with
//! the TLS reason.

mod common;

use common::{assert_delivered, make_pki, run, run_err, start_mosquitto_with, Mosquitto};
use hayate_bench::BenchError;
use std::path::Path;

const Q: &str = "--version-wait-ms 0 --progress 0";
const PSK_IDENTITY: &str = "bench-client";
const PSK_KEY: &str = "00112233445566778899aabbccddeeff";

fn pki_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn tls_mosquitto(pki: &common::TestPki) -> Mosquitto {
    start_mosquitto_with(|port, _| {
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
            pki.ca.display(),
            pki.server_cert.display(),
            pki.server_key.display()
        )
    })
}

fn psk_mosquitto() -> Mosquitto {
    start_mosquitto_with(|port, dir: &Path| {
        let file = dir.join("psk.txt");
        std::fs::write(&file, format!("{PSK_IDENTITY}:{PSK_KEY}\nother:abcdef\n")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644));
        }
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npsk_hint hayate-bench\npsk_file {}\n",
            file.display()
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_over_tls_with_client_certificates() {
    let dir = pki_dir();
    let pki = make_pki(dir.path());
    let m = tls_mosquitto(&pki);
    let port = m.port;
    let auth = format!(
        "--cafile {} --cert {} --key {}",
        pki.ca.display(),
        pki.client_cert.display(),
        pki.client_key.display()
    );
    // Verified against the CA, for the IP address in the server certificate.
    let r = run(&format!(
        "swarm --port {port} {Q} --tls {auth} -c 40 --every 0.5 -d 1.5 -q 1 --sub-qos 1 --broker-pid {}",
        m.pid()
    ))
    .await;
    assert_delivered(&r, "swarm over TLS");
    assert_eq!(r.connections.established, 40);
    assert_eq!(r.config.transport, "tls");
    let session = r.target.tls_session.clone().unwrap_or_default();
    assert!(session.starts_with("TLSv1."), "{session:?}");
    // The same over two worker processes (each builds its own TLS client), MQTT 5, and the
    // DNS name of the certificate.
    let r = run(&format!(
        "swarm --port {port} {Q} {auth} --tls-server-name localhost -c 20 --every 0.5 -d 1 -q 1 --sub-qos 1 --processes 2 --mqtt 5"
    ))
    .await;
    assert_delivered(&r, "swarm over TLS, 2 processes");
    assert!(r.config.processes >= 2, "{}", r.config.processes);
    // --insecure skips verification (a name the certificate does not have).
    let r = run(&format!(
        "fan-in --port {port} {Q} --insecure --tls-server-name not-in-the-cert --cert {} --key {} -c 5 -w 2 -n 200 -q 1 --sub-qos 1",
        pki.client_cert.display(),
        pki.client_key.display()
    ))
    .await;
    assert_delivered(&r, "fan-in over TLS, insecure");
    // Verification on: a name not in the certificate, and a CA that did not sign it.
    let e = run_err(&format!(
        "conn --port {port} {Q} {auth} --tls-server-name not-in-the-cert -c 1"
    ))
    .await;
    match &e {
        BenchError::TlsHandshake { reason, .. } => assert_eq!(reason, "tls-bad-server-name"),
        other => panic!("expected a TLS error, got {other}"),
    }
    let other_dir = pki_dir();
    let other = make_pki(other_dir.path());
    let e = run_err(&format!(
        "conn --port {port} {Q} --cafile {} --cert {} --key {} -c 1",
        other.ca.display(),
        pki.client_cert.display(),
        pki.client_key.display()
    ))
    .await;
    match &e {
        BenchError::TlsHandshake { reason, .. } => assert_eq!(reason, "tls-unknown-issuer"),
        other => panic!("expected a TLS error, got {other}"),
    }
    assert!(e.to_string().contains("--cafile"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_over_tls_psk() {
    let m = psk_mosquitto();
    let port = m.port;
    let psk = format!("--psk-identity {PSK_IDENTITY} --psk {PSK_KEY}");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("psk.json");
    let r = run(&format!(
        "swarm --port {port} {Q} {psk} -c 40 --every 0.5 -d 1.5 -q 1 --sub-qos 1 --broker-pid {} --json {}",
        m.pid(),
        json.display()
    ))
    .await;
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    common::assert_valid(&value);
    assert_eq!(value["config"]["transport"], "tls-psk");
    assert_delivered(&r, "swarm over TLS-PSK");
    assert_eq!(r.connections.established, 40);
    assert_eq!(r.config.transport, "tls-psk");
    let session = r.target.tls_session.clone().unwrap_or_default();
    assert!(
        session.starts_with("TLSv1.2") && session.contains("PSK"),
        "{session:?}"
    );
    let r = run(&format!(
        "swarm --port {port} {Q} {psk} --psk-ciphers PSK-AES128-GCM-SHA256 -c 20 --every 0.5 -d 1 -q 1 --sub-qos 1 --processes 2 --mqtt 5"
    ))
    .await;
    assert_delivered(&r, "swarm over TLS-PSK, 2 processes");
    assert_eq!(
        r.target.tls_session.as_deref(),
        Some("TLSv1.2 PSK-AES128-GCM-SHA256")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_psk_fails_with_the_tls_reason() {
    let m = psk_mosquitto();
    let port = m.port;
    for (what, opts) in [
        (
            "wrong key",
            format!("--psk-identity {PSK_IDENTITY} --psk ffeeddccbbaa99887766554433221100"),
        ),
        (
            "unknown identity",
            format!("--psk-identity nobody --psk {PSK_KEY}"),
        ),
    ] {
        let e = run_err(&format!(
            "swarm --port {port} {Q} {opts} -c 10 --every 0.5 -d 1"
        ))
        .await;
        let BenchError::TlsHandshake {
            reason, transport, ..
        } = &e
        else {
            panic!("{what}: expected a TLS handshake error, got {e}");
        };
        assert_eq!(*transport, "tls-psk", "{what}");
        assert!(
            reason.starts_with("tls-") && reason.len() > 4,
            "{what}: {reason}"
        );
        assert!(e.to_string().contains("--psk"), "{what}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_against_a_plain_listener() {
    let m = start_mosquitto_with(|port, _| {
        format!("listener {port} 127.0.0.1\nallow_anonymous true\n")
    });
    let e = run_err(&format!("conn --port {} {Q} --insecure -c 3", m.port)).await;
    let BenchError::TlsHandshake { reason, .. } = &e else {
        panic!("expected a TLS handshake error, got {e}");
    };
    assert!(reason.starts_with("tls-"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_option_errors() {
    let m = psk_mosquitto();
    let port = m.port;
    for bad in [
        "--psk-identity x",
        "--psk 0011",
        "--psk-identity x --psk zz",
        "--psk-identity x --psk 001",
        "--psk-identity x --psk 0011 --insecure",
        "--psk-identity x --psk 0011 --psk-ciphers NO-SUCH-CIPHER",
        "--tls --psk-ciphers PSK",
        "--tls --cert /nonexistent.pem",
        "--tls --cafile /nonexistent.pem",
        "--tls-server-name localhost",
    ] {
        let e = run_err(&format!("conn --port {port} {Q} -c 1 {bad}")).await;
        assert!(matches!(e, BenchError::InvalidOption(_)), "{bad}: {e}");
    }
}
