//! Bridge sections: parsed into bridge configurations, checked, and their errors.

use crate::common::*;
use hayate_server::config::mosquitto::{BridgeDirection, BridgeProtocol, BridgeStartType};

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
