//! Mosquitto configuration files translated into Hayate's configuration: every key family,
//! every class of error (unknown key, malformed value, key outside its section, value that
//! cannot be honoured), the single warning line, `hayate config convert`'s TOML read back,
//! and real-world files (Debian's, and files written the way Mosquitto's manual shows).

use hayate_server::config::mosquitto::{
    self, BridgeDirection, BridgeProtocol, BridgeStartType, MosquittoError, Translation,
};
use hayate_server::config::{ConfigFormat, TransportKind};
use hayate_server::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

fn ok(text: &str) -> Translation {
    mosquitto::from_text(text, "test.conf").unwrap_or_else(|e| panic!("{e}"))
}

/// The error message, which must name the file, the line and the key.
fn err(text: &str, line: usize, key: &str) -> String {
    let error = mosquitto::from_text(text, "test.conf").expect_err("must be refused");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("test.conf:{line}: {key}: ")),
        "{message}"
    );
    message
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mosquitto")
        .join(name)
}

fn load(name: &str) -> Translation {
    mosquitto::load(&fixture(name)).unwrap_or_else(|e| panic!("{e}"))
}

// ---- listeners ----

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

// ---- security ----

#[test]
fn global_security_settings() {
    let t = ok("allow_anonymous true\npassword_file /p\nacl_file /a\npsk_file /k\nlistener 1883 127.0.0.1\n");
    // psk_file without a psk_hint listener has no effect, in Mosquitto too: said.
    assert_eq!(t.warnings[0].key, "psk_file");
    assert!(t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
    assert_eq!(t.config.auth.acl_file.as_deref(), Some(Path::new("/a")));
    // Without per_listener_settings their place does not matter.
    let t = ok("listener 1883 127.0.0.1\nallow_anonymous true\nconnection b\naddress h\ntopic t\npassword_file /p\n");
    assert!(t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
    err("allow_anonymous yes\n", 1, "allow_anonymous");
    err("password_file\n", 1, "password_file");
    // A file given twice in one section is refused, as Mosquitto does.
    err(
        "password_file /p\nlistener 1883 127.0.0.1\npassword_file /q\n",
        3,
        "password_file",
    );
    err(
        "listener 8883 0.0.0.0\ncertfile /a\ncertfile /b\n",
        3,
        "certfile",
    );
    ok("listener 8883 0.0.0.0\ncertfile /a\nkeyfile /k\nlistener 8884 0.0.0.0\ncertfile /a\nkeyfile /k\n");
}

#[test]
fn per_listener_settings_with_shared_files_and_own_anonymous_access() {
    let t = load("per-listener.conf");
    let l = &t.config.listeners;
    assert_eq!(l[0].allow_anonymous, Some(true));
    assert_eq!(l[1].allow_anonymous, Some(false));
    assert!(!t.config.auth.allow_anonymous);
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/etc/mosquitto/passwd"))
    );
    assert_eq!(
        t.config.auth.acl_file.as_deref(),
        Some(Path::new("/etc/mosquitto/acl"))
    );
    // A listener without allow_anonymous gets Mosquitto 2's default, false.
    let t = ok("per_listener_settings true\nlistener 1883 127.0.0.1\n");
    assert_eq!(t.config.listeners[0].allow_anonymous, Some(false));
}

#[test]
fn per_listener_settings_with_differing_files_is_an_error_naming_the_line() {
    let error = mosquitto::load(&fixture("per-listener-differs.conf")).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("per-listener-differs.conf:9: password_file:"),
        "{message}"
    );
    assert!(message.contains("differs between listeners"), "{message}");
    // One listener with an ACL, the other without: named at the second listener's line.
    let text = "per_listener_settings true\nlistener 1883 127.0.0.1\nacl_file /a\nlistener 1884 127.0.0.1\n";
    err(text, 4, "listener");
    // Security settings for a default listener that does not exist (as in Mosquitto 2,
    // acl_file and allow_anonymous do not create it; Mosquitto would drop them unsaid).
    let text = "per_listener_settings true\nacl_file /a\nlistener 1884 127.0.0.1\n";
    err(text, 2, "acl_file");
    // password_file does create it, on port 1883.
    let t = ok("per_listener_settings true\npassword_file /p\nallow_anonymous true\n");
    assert_eq!(t.config.listeners[0].bind, addr("0.0.0.0:1883"));
    assert_eq!(t.config.listeners[0].allow_anonymous, Some(true));
    assert_eq!(
        t.config.auth.password_file.as_deref(),
        Some(Path::new("/p"))
    );
}

#[test]
fn security_keys_hayate_cannot_honour() {
    err("auth_plugin /usr/lib/auth.so\n", 1, "auth_plugin");
    err(
        "plugin /usr/lib/mosquitto_dynamic_security.so\n",
        1,
        "plugin",
    );
    err(
        "plugin_opt_config_file /x.json\n",
        1,
        "plugin_opt_config_file",
    );
    err("auth_opt_backends mysql\n", 1, "auth_opt_backends");
    err("clientid_prefixes sensor-\n", 1, "clientid_prefixes");
    err(
        "use_username_as_clientid true\n",
        1,
        "use_username_as_clientid",
    );
    err(
        "allow_zero_length_clientid false\n",
        1,
        "allow_zero_length_clientid",
    );
    ok("allow_zero_length_clientid true\n");
}

// ---- limits and behaviour ----

#[test]
fn limits_map_onto_broker_keys() {
    let t = load("limits-persistence-logging.conf");
    let b = &t.config.broker;
    assert_eq!(b.max_inflight_messages, 40);
    assert_eq!(b.max_queued_messages, 5000);
    assert_eq!(b.max_queued_bytes, i64::MAX as usize, "0 = no limit");
    assert_eq!(b.max_packet_size, 262_144);
    assert_eq!(b.max_keep_alive, 300);
    assert_eq!(b.max_qos, 1);
    assert_eq!(b.topic_alias_maximum, 20);
    assert!(!b.retain_available);
    assert!(b.queue_qos0_offline);
    assert_eq!(b.max_session_expiry_interval, 14 * 86_400);
    assert_eq!(t.config.server.sys_interval_secs, 30);
    assert!(t.config.server.tcp_nodelay);
}

#[test]
fn zero_means_unlimited_where_mosquitto_says_so() {
    let t = ok("max_inflight_messages 0\nmax_queued_messages 0\nmax_keepalive 0\n");
    assert_eq!(t.config.broker.max_inflight_messages, u16::MAX);
    assert_eq!(t.config.broker.max_queued_messages, i64::MAX as usize);
    assert_eq!(t.config.broker.max_keep_alive, u16::MAX);
    // Negative values are "no limit" too, as Mosquitto reads them.
    let t = ok("max_inflight_messages -1\nmax_queued_bytes -1\nset_tcp_nodelay false\npersistent_client_expiration 2h\n");
    assert_eq!(t.config.broker.max_inflight_messages, u16::MAX);
    assert_eq!(t.config.broker.max_queued_bytes, i64::MAX as usize);
    assert!(!t.config.server.tcp_nodelay);
    assert_eq!(t.config.broker.max_session_expiry_interval, 7200);
}

#[test]
fn limits_with_malformed_or_unhonourable_values() {
    err("max_inflight_messages ten\n", 1, "max_inflight_messages");
    err("max_queued_messages 1e3\n", 1, "max_queued_messages");
    err("max_packet_size 32\n", 1, "max_packet_size");
    // Mosquitto refuses max_packet_size below 20, 0 included.
    err("max_packet_size 0\n", 1, "max_packet_size");
    err("max_inflight_messages 70000\n", 1, "max_inflight_messages");
    err("sys_interval 70000\n", 1, "sys_interval");
    err("max_keepalive 70000\n", 1, "max_keepalive");
    err("max_qos 3\n", 1, "max_qos");
    err(
        "persistent_client_expiration 14x\n",
        1,
        "persistent_client_expiration",
    );
    err(
        "persistent_client_expiration d\n",
        1,
        "persistent_client_expiration",
    );
    let message = err("message_size_limit 1024\n", 1, "message_size_limit");
    assert!(message.contains("max_packet_size"), "{message}");
    err("max_inflight_bytes 1000\n", 1, "max_inflight_bytes");
    err("memory_limit 1000000\n", 1, "memory_limit");
    err("upgrade_outgoing_qos true\n", 1, "upgrade_outgoing_qos");
    err("check_retain_source true\n", 1, "check_retain_source");
    ok("message_size_limit 0\nmax_inflight_bytes 0\nupgrade_outgoing_qos false\n");
}

/// `max_qos` and `max_topic_alias` are per listener in Mosquitto, broker-wide in Hayate.
#[test]
fn per_listener_protocol_limits_must_agree() {
    let t = ok("listener 1883 127.0.0.1\nmax_qos 1\nmax_topic_alias 5\nlistener 1884 127.0.0.1\nmaximum_qos 1\nmax_topic_alias 5\n");
    assert_eq!(t.config.broker.max_qos, 1);
    assert_eq!(t.config.broker.topic_alias_maximum, 5);
    let message = err(
        "listener 1883 127.0.0.1\nmax_qos 1\nlistener 1884 127.0.0.1\nmax_qos 0\n",
        4,
        "max_qos",
    );
    assert!(message.contains("differs between listeners"), "{message}");
    // A listener without the key has Mosquitto's default (2): named at its listener line.
    err(
        "listener 1883 127.0.0.1\nmax_qos 1\nlistener 1884 127.0.0.1\n",
        3,
        "listener",
    );
    // Set on none: Hayate's defaults stay.
    let t = ok("listener 1883 127.0.0.1\n");
    assert_eq!(t.config.broker.max_qos, 2);
    assert_eq!(t.config.broker.topic_alias_maximum, 64);
}

#[test]
fn per_listener_settings_must_come_before_security_keys() {
    err(
        "allow_anonymous true\nper_listener_settings true\n",
        2,
        "per_listener_settings",
    );
    ok("allow_anonymous true\nper_listener_settings false\n");
    err("per_listener_settings maybe\n", 1, "per_listener_settings");
}

#[test]
fn retry_interval_is_warned_as_mosquitto_2_does() {
    assert_eq!(ok("retry_interval 20\n").warnings[0].key, "retry_interval");
}

// ---- persistence and logging ----

#[test]
fn persistence_becomes_the_storage_directory() {
    let t = load("limits-persistence-logging.conf");
    assert_eq!(
        t.config.storage.dir.as_deref(),
        Some(Path::new("/var/lib/mosquitto/"))
    );
    assert_eq!(
        t.config.storage.durability,
        hayate_server::config::Durability::Batched
    );
    let t = ok("persistence true\n");
    assert_eq!(t.config.storage.dir.as_deref(), Some(Path::new(".")));
    let t = ok("persistence false\npersistence_location /var/lib/mosquitto\n");
    assert_eq!(t.config.storage.dir, None);
    assert_eq!(t.warnings[0].key, "persistence_location");
    err("persistence on\n", 1, "persistence");
}

#[test]
fn logging_keys_set_the_log_level_or_are_warned() {
    let t = load("limits-persistence-logging.conf");
    assert_eq!(t.config.server.log_level, "info");
    let keys: Vec<&str> = t.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "autosave_interval",
            "log_dest",
            "connection_messages",
            "pid_file"
        ]
    );
    let level = |text: &str| ok(text).config.server.log_level;
    assert_eq!(level("log_type error\nlog_type warning\n"), "warn");
    assert_eq!(level("log_type error\n"), "error");
    assert_eq!(level("log_type all\n"), "debug");
    assert_eq!(level("log_type debug\nlog_type error\n"), "debug");
    assert_eq!(level("log_type none\n"), "off");
    assert_eq!(level("log_dest none\n"), "off");
    assert_eq!(level("log_dest stdout\n"), "info");
    assert!(ok("log_dest stdout\nlog_timestamp true\n")
        .warnings
        .is_empty());
    assert_eq!(ok("log_timestamp false\n").warnings[0].key, "log_timestamp");
    err("log_type verbose\n", 1, "log_type");
    err("log_dest file\n", 1, "log_dest");
    err("log_dest printer\n", 1, "log_dest");
}

#[test]
fn every_key_without_effect_is_named_in_one_warning_line() {
    let text = "pid_file /run/m.pid\nuser mosquitto\nlistener 1883 127.0.0.1\nwebsockets_headers_size 4096\nautosave_on_changes false\nlog_facility 5\n";
    let t = ok(text);
    let line = t.warning_line().expect("warnings");
    assert!(!line.contains('\n'), "{line}");
    for (key, number) in [
        ("pid_file", 1),
        ("user", 2),
        ("websockets_headers_size", 4),
        ("autosave_on_changes", 5),
        ("log_facility", 6),
    ] {
        assert!(line.contains(&format!("{key} (line {number}: ")), "{line}");
    }
    assert!(ok("listener 1883 127.0.0.1\n").warning_line().is_none());
}

// ---- bridges ----

#[test]
fn bridge_sections_are_parsed_into_bridge_configs() {
    let t = load("bridge.conf");
    let bridges = &t.config.bridges;
    assert_eq!(bridges.len(), 2);
    let cloud = &bridges[0];
    assert_eq!(cloud.name, "cloud");
    assert_eq!(
        cloud.addresses,
        ["cloud.example.com:8883", "backup.example.com:1883"]
    );
    assert!(cloud.round_robin);
    assert_eq!(cloud.protocol_version, BridgeProtocol::Mqttv50);
    assert!(cloud.cleansession);
    assert_eq!(cloud.local_cleansession, Some(false));
    assert_eq!(cloud.session_expiry_interval, Some(3600));
    assert_eq!(cloud.receive_maximum, Some(100));
    assert_eq!(cloud.max_packet_size, Some(65536));
    assert!(!cloud.outgoing_retain && !cloud.try_private);
    assert_eq!(cloud.local_clientid.as_deref(), Some("bridge-local"));
    assert_eq!(cloud.remote_clientid.as_deref(), Some("site-42"));
    assert_eq!(cloud.remote_username.as_deref(), Some("site42"));
    assert_eq!(cloud.remote_password.as_deref(), Some("s3cret"));
    assert_eq!(cloud.local_username.as_deref(), Some("bridge"));
    assert_eq!(cloud.local_password.as_deref(), Some("local-pw"));
    assert!(cloud.notifications);
    assert_eq!(
        cloud.notification_topic.as_deref(),
        Some("$SYS/bridges/cloud/state")
    );
    assert_eq!(cloud.start_type, BridgeStartType::Lazy);
    assert_eq!((cloud.threshold, cloud.idle_timeout_secs), (20, 120));
    assert_eq!(
        (cloud.restart_timeout_secs, cloud.restart_timeout_cap_secs),
        (10, 300)
    );
    assert_eq!(cloud.keepalive_interval_secs, 30);
    assert!(cloud.cafile.is_some() && cloud.certfile.is_some() && cloud.keyfile.is_some());
    assert!(!cloud.insecure);
    let topics: Vec<_> = cloud
        .topics
        .iter()
        .map(|t| {
            (
                t.pattern.as_str(),
                t.direction,
                t.qos,
                t.local_prefix.as_str(),
                t.remote_prefix.as_str(),
            )
        })
        .collect();
    assert_eq!(
        topics,
        [
            ("sensors/#", BridgeDirection::Out, 1, "site42/", ""),
            ("commands/#", BridgeDirection::In, 2, "", "cloud/site42/"),
            ("status", BridgeDirection::Both, 0, "", ""),
        ]
    );
    let partner = &bridges[1];
    assert_eq!(partner.addresses, ["partner.example.net:1884"]);
    assert_eq!(partner.identity.as_deref(), Some("site42"));
    assert_eq!(partner.psk.as_deref(), Some("0123456789abcdef"));
    assert_eq!(partner.start_type, BridgeStartType::Once);
    assert_eq!(
        (
            partner.restart_timeout_secs,
            partner.restart_timeout_cap_secs
        ),
        (15, 0)
    );
    assert_eq!(partner.topics[0].pattern, "");
    assert_eq!(partner.topics[0].local_prefix, "exchange/out");
}

#[test]
fn a_bridge_with_settings_not_built_or_unreadable_files_validates_but_cannot_run() {
    let t = load("bridge.conf");
    t.config.validate().expect("valid");
    // `serve` reads the bridge's CA file at start (the fixture's does not exist here).
    let message = t.config.ensure_runnable().unwrap_err().to_string();
    assert!(
        message.contains("bridge cloud: bridge_cafile /etc/mosquitto/ca_certificates/cloud-ca.crt"),
        "{message}"
    );
    ok("listener 1883 127.0.0.1\nconnection b\naddress h\ntopic t/# both 1\n")
        .config
        .ensure_runnable()
        .expect("a plain TCP bridge runs");
    ok("listener 1883 127.0.0.1\nconnection b\naddress h\ntopic t\nstart_type lazy\n")
        .config
        .ensure_runnable()
        .expect("lazy bridges run");
    let message =
        ok("listener 1883 127.0.0.1\nconnection b\naddress h\ntopic t\nbridge_require_ocsp true\n")
            .config
            .ensure_runnable()
            .expect_err("OCSP is not built")
            .to_string();
    assert!(
        message.contains("bridge b: bridge_require_ocsp"),
        "{message}"
    );
    ok("listener 1883 127.0.0.1\n")
        .config
        .ensure_runnable()
        .expect("no bridge");
}

#[test]
fn bridge_errors_name_the_line() {
    let head = "connection b\naddress h\n";
    err("address h\n", 1, "address");
    err("listener 1883 127.0.0.1\ntopic t\n", 2, "topic");
    err(&format!("{head}cafile /ca.pem\n"), 3, "cafile");
    err(&format!("{head}topic t sideways\n"), 3, "topic");
    err(&format!("{head}topic t in 3\n"), 3, "topic");
    err(&format!("{head}topic t in 1 local/\n"), 3, "topic");
    err(&format!("{head}topic t in 1 a/# b/\n"), 3, "topic");
    err(&format!("{head}topic \"\"\n"), 3, "topic");
    err(
        &format!("{head}topic t\nbridge_protocol_version mqttv6\n"),
        4,
        "bridge_protocol_version",
    );
    err(
        &format!("{head}topic t\nstart_type sometimes\n"),
        4,
        "start_type",
    );
    err(
        &format!("{head}topic t\nrestart_timeout 0\n"),
        4,
        "restart_timeout",
    );
    err(
        &format!("{head}topic t\nkeepalive_interval 1\n"),
        4,
        "keepalive_interval",
    );
    err(&format!("{head}topic t\nbridge_psk xyz\n"), 4, "bridge_psk");
    err(&format!("{head}topic t\naddress h:0\n"), 4, "address");
    err(&format!("{head}topic t\nconnection b\n"), 4, "connection");
    // Whole-bridge checks are named at the `connection` line.
    err("connection b\ntopic t\n", 1, "connection");
    err(head, 1, "connection");
    err(
        &format!("{head}topic t\nremote_password p\n"),
        1,
        "connection",
    );
    err(
        &format!("{head}topic t\nbridge_identity i\n"),
        1,
        "connection",
    );
    err(
        &format!("{head}topic t\nbridge_certfile c\nbridge_keyfile k\n"),
        1,
        "connection",
    );
    err(
        &format!("{head}topic t\nrestart_timeout 30 10\n"),
        1,
        "connection",
    );
}

// ---- general errors ----

#[test]
fn unknown_keys_and_malformed_lines_are_errors() {
    let message = err("port 1883\nmax_conections 10\n", 2, "max_conections");
    assert!(message.contains("unknown key"), "{message}");
    err("listener 1883 127.0.0.1\nport x\n", 2, "port");
    err("sys_interval\n", 1, "sys_interval");
    err("max_qos 1 2\n", 1, "max_qos");
}

#[test]
fn errors_in_included_files_name_that_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("10-limits.conf"), "max_qos 1\n").unwrap();
    std::fs::write(dir.path().join("20-bad.conf"), "# comment\nmax_qos 7\n").unwrap();
    let text = format!("include_dir {}\n", dir.path().display());
    let error = mosquitto::from_text(&text, "main.conf").unwrap_err();
    let MosquittoError::Line {
        file, line, key, ..
    } = error
    else {
        panic!("{error}");
    };
    assert!(file.ends_with("20-bad.conf"), "{file}");
    assert_eq!((line, key.as_str()), (2, "max_qos"));
}

// ---- format detection and conversion ----

#[test]
fn load_file_recognises_the_format_by_extension_or_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "a.conf",
            "listener 1883 127.0.0.1\n",
            ConfigFormat::Mosquitto,
        ),
        (
            "b.cfg",
            "# broker\nlistener 1883 127.0.0.1\n",
            ConfigFormat::Mosquitto,
        ),
        (
            "c.cfg",
            "[server]\nlisten = [\"127.0.0.1:1883\"]\n",
            ConfigFormat::Toml,
        ),
        (
            "d",
            "# auth\n[auth]\nallow_anonymous = true\n",
            ConfigFormat::Toml,
        ),
        ("e.toml", "", ConfigFormat::Toml),
        (
            "f.conf",
            "# nothing but comments\n",
            ConfigFormat::Mosquitto,
        ),
    ];
    for (name, text, format) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let loaded = Config::load_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(loaded.format, format, "{name}");
    }
    assert!(!mosquitto::looks_like_mosquitto("key = value"));
    assert!(!mosquitto::looks_like_mosquitto("key=value"));
    assert!(mosquitto::looks_like_mosquitto("# c\n  key value = x"));
    let path = dir.path().join("g.conf");
    std::fs::write(&path, "pid_file /run/x.pid\n").unwrap();
    let loaded = Config::load_file(&path).unwrap();
    assert!(loaded.warnings.unwrap().contains("pid_file (line 1:"));
}

/// `hayate config convert` writes TOML that loads back into the same configuration.
#[test]
fn converted_toml_reads_back_into_the_same_configuration() {
    for name in [
        "listeners-tls.conf",
        "bridge.conf",
        "limits-persistence-logging.conf",
        "per-listener.conf",
        "debian-example-mosquitto.conf",
        "debian-etc-mosquitto.conf.local",
    ] {
        let t = match name {
            // Debian's /etc file names /etc/mosquitto/conf.d, which a test machine may lack.
            "debian-etc-mosquitto.conf.local" => debian_etc_with_include_dir().0,
            _ => load(name),
        };
        let toml = mosquitto::to_toml(&t.config, "test");
        let back = Config::from_toml(&toml, name).unwrap_or_else(|e| panic!("{name}: {e}\n{toml}"));
        assert_eq!(mosquitto::to_toml(&back, "test"), toml, "{name}");
        assert_eq!(back.bridges, t.config.bridges, "{name}");
        assert_eq!(back.listeners.len(), t.config.listeners.len(), "{name}");
        for (a, b) in back.listeners.iter().zip(&t.config.listeners) {
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
        }
        assert_eq!(
            format!("{:?}", back.broker),
            format!("{:?}", t.config.broker),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", back.server),
            format!("{:?}", t.config.server),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", back.storage),
            format!("{:?}", t.config.storage),
            "{name}"
        );
        assert_eq!(
            back.auth.allow_anonymous, t.config.auth.allow_anonymous,
            "{name}"
        );
        assert_eq!(
            back.auth.password_file, t.config.auth.password_file,
            "{name}"
        );
        assert_eq!(back.auth.acl_file, t.config.auth.acl_file, "{name}");
    }
}

#[test]
fn toml_strings_are_escaped() {
    let t = ok("listener 1883 127.0.0.1\npassword_file /etc/a \"quoted\" \\path\n");
    let toml = mosquitto::to_toml(&t.config, "x");
    let back = Config::from_toml(&toml, "x").unwrap();
    assert_eq!(
        back.auth.password_file.as_deref(),
        Some(Path::new("/etc/a \"quoted\" \\path"))
    );
}

// ---- real-world files ----

/// Debian's example mosquitto.conf (/usr/share/doc/mosquitto/examples): every setting is
/// commented out, so it is Mosquitto 2's local-only mode.
#[test]
fn debian_example_file_is_local_only_mode() {
    let t = load("debian-example-mosquitto.conf");
    assert_eq!(t.config.server.listen, [addr("127.0.0.1:1883")]);
    assert!(t.config.auth.allow_anonymous);
    assert!(t.config.bridges.is_empty());
    assert!(t.warnings.is_empty());
}

/// Debian's /etc/mosquitto/mosquitto.conf with its `include_dir` pointed at a directory of
/// ours: (translation, the temporary directory holding the copy).
fn debian_etc_with_include_dir() -> (Translation, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir(&conf_d).unwrap();
    std::fs::write(
        conf_d.join("README"),
        "Any files placed here ending in .conf are read.\n",
    )
    .unwrap();
    std::fs::write(
        conf_d.join("local.conf"),
        "listener 1883 127.0.0.1\nallow_anonymous true\n",
    )
    .unwrap();
    let original = std::fs::read_to_string(fixture("debian-etc-mosquitto.conf")).unwrap();
    assert!(original.contains("include_dir /etc/mosquitto/conf.d"));
    let text = original.replace("/etc/mosquitto/conf.d", &conf_d.display().to_string());
    let path = dir.path().join("mosquitto.conf");
    std::fs::write(&path, text).unwrap();
    (
        mosquitto::load(&path).unwrap_or_else(|e| panic!("{e}")),
        dir,
    )
}

#[test]
fn debian_etc_file_with_its_conf_d() {
    let (t, _dir) = debian_etc_with_include_dir();
    assert_eq!(
        t.config.storage.dir.as_deref(),
        Some(Path::new("/var/lib/mosquitto/"))
    );
    assert_eq!(t.config.listeners.len(), 1);
    assert!(t.config.auth.allow_anonymous);
    let line = t.warning_line().unwrap();
    assert!(line.contains("pid_file (line 6:"), "{line}");
    assert!(line.contains("log_dest (line 11:"), "{line}");
}

#[test]
fn debian_etc_file_as_shipped() {
    // As shipped it reads /etc/mosquitto/conf.d: fine where the package is installed, an
    // error naming include_dir where the directory does not exist.
    match mosquitto::load(&fixture("debian-etc-mosquitto.conf")) {
        Ok(t) => assert_eq!(
            t.config.storage.dir.as_deref(),
            Some(Path::new("/var/lib/mosquitto/"))
        ),
        Err(error) => {
            assert!(!Path::new("/etc/mosquitto/conf.d").is_dir(), "{error}");
            assert!(error.to_string().contains(":13: include_dir:"), "{error}");
        }
    }
}

// ---- translated files, served ----

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
