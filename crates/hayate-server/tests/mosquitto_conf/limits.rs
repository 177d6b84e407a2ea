//! Limits and broker behaviour, persistence and logging, and the single warning line.

use crate::common::*;
use std::path::Path;

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
