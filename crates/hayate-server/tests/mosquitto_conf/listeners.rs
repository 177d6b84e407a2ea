//! Listeners: addresses, ports, socket domains, TLS, PSK and WebSockets transports.

use crate::common::*;
use hayate_server::config::TransportKind;
use std::net::SocketAddr;
use std::path::Path;

#[test]
fn no_listener_is_mosquitto_2_local_only_mode_with_anonymous_access() {
    let t = ok("# only comments\n\n   # and blank lines\n");
    assert_eq!(t.config.server.listen, [addr("127.0.0.1:1883")]);
    assert!(t.config.listeners.is_empty());
    assert!(t.config.auth.allow_anonymous);
    assert!(t.warnings.is_empty());
}

#[test]
fn listeners_turn_anonymous_access_off_as_in_mosquitto_2() {
    let t = ok("listener 1883 127.0.0.1\n");
    assert!(t.config.server.listen.is_empty());
    assert_eq!(t.config.listeners.len(), 1);
    assert_eq!(t.config.listeners[0].bind, addr("127.0.0.1:1883"));
    assert_eq!(t.config.listeners[0].transport, TransportKind::Mqtt);
    assert!(!t.config.auth.allow_anonymous);
    assert_eq!(t.config.listeners[0].allow_anonymous, None);
}

#[test]
fn port_and_bind_address_make_the_default_listener() {
    let t = ok("bind_address 127.0.0.1\nport 1884\nlistener 1885 127.0.0.1\n");
    let binds: Vec<SocketAddr> = t.config.listeners.iter().map(|l| l.bind).collect();
    assert_eq!(binds, [addr("127.0.0.1:1884"), addr("127.0.0.1:1885")]);
    // Listener keys before the first `listener` line configure the default listener.
    let t = ok("max_connections 10\nlistener 1885 127.0.0.1\n");
    assert_eq!(t.config.listeners[0].bind, addr("0.0.0.0:1883"));
    assert_eq!(t.config.listeners[0].max_connections, Some(10));
    assert_eq!(t.config.listeners[1].max_connections, None);
}

#[test]
fn socket_domain_and_missing_address() {
    let t = ok("listener 1883\nsocket_domain ipv6\nlistener 1884\nsocket_domain ipv4\n");
    assert_eq!(t.config.listeners[0].bind, addr("[::]:1883"));
    assert_eq!(t.config.listeners[1].bind, addr("0.0.0.0:1884"));
    assert!(t.warnings.is_empty());
    // Without socket_domain Mosquitto listens on IPv4 and IPv6; Hayate on IPv4: said once.
    let t = ok("listener 1883\n");
    assert_eq!(t.config.listeners[0].bind, addr("0.0.0.0:1883"));
    assert_eq!(t.warnings.len(), 1);
    assert_eq!(
        (t.warnings[0].key.as_str(), t.warnings[0].line),
        ("listener", 1)
    );
    // A host name is resolved.
    let t = ok("listener 1883 localhost\nsocket_domain ipv4\n");
    assert_eq!(t.config.listeners[0].bind, addr("127.0.0.1:1883"));
}

#[test]
fn websockets_tls_mutual_tls_and_psk_map_onto_transports() {
    let t = load("listeners-tls.conf");
    let l = &t.config.listeners;
    assert_eq!(l.len(), 6);
    assert_eq!(
        (l[0].bind, l[0].transport),
        (addr("127.0.0.1:1883"), TransportKind::Mqtt)
    );

    assert_eq!(
        (l[1].bind, l[1].transport),
        (addr("0.0.0.0:8883"), TransportKind::Mqtts)
    );
    assert_eq!(
        l[1].cert_file.as_deref(),
        Some(Path::new("/etc/mosquitto/certs/server.crt"))
    );
    assert_eq!(
        l[1].key_file.as_deref(),
        Some(Path::new("/etc/mosquitto/certs/server.key"))
    );
    assert_eq!(l[1].ca_file, None);
    assert!(!l[1].require_certificate);

    assert_eq!(l[2].transport, TransportKind::Mqtts);
    assert_eq!(
        l[2].ca_file.as_deref(),
        Some(Path::new("/etc/mosquitto/ca_certificates/ca.crt"))
    );
    assert!(l[2].require_certificate && l[2].use_identity_as_username);
    assert_eq!(l[2].max_connections, Some(500));

    assert_eq!(l[3].transport, TransportKind::Psk);
    assert_eq!(l[3].psk_hint.as_deref(), Some("hayate-psk"));
    assert_eq!(
        l[3].psk_file.as_deref(),
        Some(Path::new("/etc/mosquitto/pskfile"))
    );
    assert_eq!(l[3].psk_ciphers, "PSK-AES128-CBC-SHA");
    assert!(l[3].use_identity_as_username);

    assert_eq!(
        (l[4].bind, l[4].transport),
        (addr("[::]:9001"), TransportKind::Ws)
    );
    assert_eq!(l[4].ws_path, "/mqtt");
    assert_eq!(l[5].transport, TransportKind::Wss);

    let auth = &t.config.auth;
    assert!(!auth.allow_anonymous);
    assert_eq!(
        auth.password_file.as_deref(),
        Some(Path::new("/etc/mosquitto/passwd"))
    );
    assert_eq!(
        auth.acl_file.as_deref(),
        Some(Path::new("/etc/mosquitto/acl"))
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warning_line());
}

#[test]
fn tls_settings_that_cannot_be_honoured_are_refused() {
    let tls = "listener 8883\nsocket_domain ipv4\ncertfile c.pem\nkeyfile k.pem\n";
    err(&format!("{tls}tls_version tlsv1.3\n"), 5, "tls_version");
    err(&format!("{tls}tls_version tlsv1.1\n"), 5, "tls_version");
    err(&format!("{tls}tls_version sslv3\n"), 5, "tls_version");
    err(
        &format!("{tls}ciphers ECDHE-RSA-AES128-GCM-SHA256\n"),
        5,
        "ciphers",
    );
    err(&format!("{tls}capath /etc/ssl/certs\n"), 5, "capath");
    err(&format!("{tls}crlfile /etc/ssl/crl.pem\n"), 5, "crlfile");
    err(
        &format!("{tls}use_subject_as_username true\n"),
        5,
        "use_subject_as_username",
    );
    // require_certificate without a CA: named at the listener line.
    let message = err(&format!("{tls}require_certificate true\n"), 1, "listener");
    assert!(message.contains("ca_file"), "{message}");
    // A key file without its certificate.
    err("listener 8883 0.0.0.0\nkeyfile k.pem\n", 1, "listener");
    // PSK without a psk_file, PSK together with certificates.
    err("listener 8885 0.0.0.0\npsk_hint h\n", 1, "listener");
    err(
        &format!("{tls}psk_hint h\npsk_file /etc/psk\n"),
        1,
        "listener",
    );
    // TLS settings on a listener without TLS are said in the warning line.
    let t = ok("listener 1883 127.0.0.1\ntls_version tlsv1.2\n");
    assert_eq!(t.warnings[0].key, "tls_version");
}

#[test]
fn listener_lines_that_cannot_be_honoured_are_refused() {
    err("listener 0 /run/mosquitto.sock\n", 1, "listener");
    err("listener\n", 1, "listener");
    err("listener 70000\n", 1, "listener");
    err("listener 1883 127.0.0.1 extra\n", 1, "listener");
    err(
        "listener 1883 127.0.0.1\nmount_point site/\n",
        2,
        "mount_point",
    );
    err(
        "listener 1883 127.0.0.1\nbind_interface eth0\n",
        2,
        "bind_interface",
    );
    err(
        "listener 1883 127.0.0.1\nhttp_dir /var/www\n",
        2,
        "http_dir",
    );
    err("listener 1883 127.0.0.1\nprotocol coap\n", 2, "protocol");
    err(
        "listener 1883 127.0.0.1\nsocket_domain ipx\n",
        2,
        "socket_domain",
    );
    err("listener 1883 no-such-host.invalid\n", 1, "listener");
}
