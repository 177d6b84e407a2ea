//! Writing a [`Config`] as Hayate TOML (`hayate config convert`): the keys whose value
//! differs from Hayate's default, every `[[listener]]` and every `[[bridge]]`. Reading the
//! output back gives the same configuration (a test checks it).

use super::bridge::BridgeConfig;
use crate::config::{Config, Durability, ListenerConfig, OnCorruption, TransportKind};
use crate::security::V3PublishDenied;
use hayate_core::config::SharedStrategy;
use std::fmt::Write;
use std::path::Path;

/// The configuration as TOML, with `header` as its first comment lines.
pub fn to_toml(config: &Config, header: &str) -> String {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "# {line}");
    }
    server(&mut out, config);
    broker(&mut out, config);
    storage(&mut out, config);
    auth(&mut out, config);
    for listener in &config.listeners {
        listener_table(&mut out, listener);
    }
    for bridge in &config.bridges {
        bridge_table(&mut out, bridge);
    }
    out
}

/// Key-value lines of one table, written only when something differs from the default.
struct Table {
    name: &'static str,
    lines: Vec<String>,
}

impl Table {
    fn new(name: &'static str) -> Table {
        Table {
            name,
            lines: Vec::new(),
        }
    }

    /// `key = value` when `value` differs from `default` (both already TOML).
    fn diff(&mut self, key: &str, value: String, default: String) {
        if value != default {
            self.lines.push(format!("{key} = {value}"));
        }
    }

    fn write(self, out: &mut String) {
        if self.lines.is_empty() {
            return;
        }
        let _ = writeln!(out, "\n[{}]", self.name);
        for line in self.lines {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// A TOML basic string.
fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", c as u32);
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

fn opt<T>(value: &Option<T>, show: impl Fn(&T) -> String) -> Option<String> {
    value.as_ref().map(show)
}

fn list<T>(values: &[T], show: impl Fn(&T) -> String) -> String {
    let items: Vec<String> = values.iter().map(show).collect();
    format!("[{}]", items.join(", "))
}

macro_rules! diff {
    ($table:expr, $value:expr, $default:expr, $($field:ident).+) => {
        $table.diff(
            stringify!($($field).+),
            $value.$($field).+.to_string(),
            $default.$($field).+.to_string(),
        )
    };
}

fn server(out: &mut String, config: &Config) {
    let (s, d) = (&config.server, &Config::default().server);
    let mut table = Table::new("server");
    let addrs = |v: &Vec<std::net::SocketAddr>| list(v, |a| quote(&a.to_string()));
    table.diff("listen", addrs(&s.listen), addrs(&d.listen));
    diff!(table, s, d, threads);
    diff!(table, s, d, keep_arrival_order);
    diff!(table, s, d, max_connections);
    diff!(table, s, d, connect_timeout_secs);
    diff!(table, s, d, tcp_nodelay);
    diff!(table, s, d, sys_interval_secs);
    diff!(table, s, d, max_pending_write_bytes);
    table.diff("log_level", quote(&s.log_level), quote(&d.log_level));
    diff!(table, s, d, max_inbound_bytes_per_sec);
    diff!(table, s, d, max_inbound_messages_per_sec);
    table.write(out);
}

fn broker(out: &mut String, config: &Config) {
    let (b, d) = (&config.broker, &Config::default().broker);
    let mut table = Table::new("broker");
    diff!(table, b, d, max_packet_size);
    diff!(table, b, d, receive_maximum);
    diff!(table, b, d, max_inflight_messages);
    diff!(table, b, d, max_queued_messages);
    diff!(table, b, d, max_queued_bytes);
    diff!(table, b, d, max_queued_bytes_total);
    diff!(table, b, d, queue_qos0_offline);
    diff!(table, b, d, topic_alias_maximum);
    diff!(table, b, d, assign_outbound_topic_aliases);
    diff!(table, b, d, max_keep_alive);
    diff!(table, b, d, max_client_id_len);
    diff!(table, b, d, max_subscriptions_per_client);
    diff!(table, b, d, max_topic_levels);
    diff!(table, b, d, max_session_expiry_interval);
    diff!(table, b, d, max_qos);
    diff!(table, b, d, retain_available);
    diff!(table, b, d, backpressure_stall_timeout_ms);
    diff!(table, b, d, arrival_window_ms);
    diff!(table, b, d, arrival_window_bytes);
    let strategy = |s: SharedStrategy| {
        quote(match s {
            SharedStrategy::RoundRobin => "round_robin",
            SharedStrategy::Random => "random",
            SharedStrategy::HashClientId => "hash_client_id",
        })
    };
    table.diff(
        "shared_subscription_strategy",
        strategy(b.shared_subscription_strategy),
        strategy(d.shared_subscription_strategy),
    );
    table.diff(
        "response_information",
        quote(&b.response_information),
        quote(&d.response_information),
    );
    table.write(out);
}

fn storage(out: &mut String, config: &Config) {
    let (s, d) = (&config.storage, &Config::default().storage);
    let mut table = Table::new("storage");
    if let Some(dir) = &s.dir {
        table.lines.push(format!("dir = {}", path(dir)));
    }
    let durability = |m: Durability| {
        quote(match m {
            Durability::Batched => "batched",
            Durability::Sync => "sync",
            Durability::Off => "off",
        })
    };
    table.diff(
        "durability",
        durability(s.durability),
        durability(d.durability),
    );
    diff!(table, s, d, sync_interval_ms);
    diff!(table, s, d, min_free_mb);
    let corruption = |c: OnCorruption| {
        quote(match c {
            OnCorruption::Fail => "fail",
            OnCorruption::MoveAside => "move_aside",
        })
    };
    table.diff(
        "on_corruption",
        corruption(s.on_corruption),
        corruption(d.on_corruption),
    );
    table.write(out);
}

/// `[auth]`: the keys a Mosquitto file can set and the plain ones beside them (the deny
/// lists, `[auth.throttle]` and `[auth.jwt]` have no Mosquitto form and are not written).
fn auth(out: &mut String, config: &Config) {
    let (a, d) = (&config.auth, &Config::default().auth);
    let mut table = Table::new("auth");
    diff!(table, a, d, allow_anonymous);
    for (key, value) in [
        ("password_file", &a.password_file),
        ("acl_file", &a.acl_file),
        ("scram_file", &a.scram_file),
    ] {
        if let Some(value) = value {
            table.lines.push(format!("{key} = {}", path(value)));
        }
    }
    diff!(table, a, d, scram_sha512_from_password_file);
    diff!(table, a, d, password_cache);
    let denied = |v: V3PublishDenied| {
        quote(match v {
            V3PublishDenied::Drop => "drop",
            V3PublishDenied::Disconnect => "disconnect",
        })
    };
    table.diff(
        "v3_publish_denied",
        denied(a.v3_publish_denied),
        denied(d.v3_publish_denied),
    );
    table.write(out);
}

fn transport(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Mqtt => "mqtt",
        TransportKind::Mqtts => "mqtts",
        TransportKind::Psk => "psk",
        TransportKind::Ws => "ws",
        TransportKind::Wss => "wss",
    }
}

fn listener_table(out: &mut String, l: &ListenerConfig) {
    let d = ListenerConfig::tcp(l.bind);
    let _ = writeln!(out, "\n[[listener]]");
    let mut lines = Vec::new();
    if let Some(name) = &l.name {
        lines.push(format!("name = {}", quote(name)));
    }
    lines.push(format!("bind = {}", quote(&l.bind.to_string())));
    lines.push(format!("transport = {}", quote(transport(l.transport))));
    let optional = [
        (
            "max_connections",
            opt(&l.max_connections, ToString::to_string),
        ),
        (
            "allow_anonymous",
            opt(&l.allow_anonymous, ToString::to_string),
        ),
        ("cert_file", opt(&l.cert_file, |p| path(p))),
        ("key_file", opt(&l.key_file, |p| path(p))),
        ("ca_file", opt(&l.ca_file, |p| path(p))),
        ("psk_file", opt(&l.psk_file, |p| path(p))),
        ("psk_hint", opt(&l.psk_hint, |h| quote(h))),
        (
            "max_inbound_bytes_per_sec",
            opt(&l.max_inbound_bytes_per_sec, ToString::to_string),
        ),
        (
            "max_inbound_messages_per_sec",
            opt(&l.max_inbound_messages_per_sec, ToString::to_string),
        ),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            lines.push(format!("{key} = {value}"));
        }
    }
    let mut table = Table::new("listener");
    diff!(table, l, d, use_identity_as_username);
    diff!(table, l, d, require_certificate);
    table.diff("psk_ciphers", quote(&l.psk_ciphers), quote(&d.psk_ciphers));
    table.diff("ws_path", quote(&l.ws_path), quote(&d.ws_path));
    diff!(table, l, d, max_concurrent_handshakes);
    diff!(table, l, d, max_connection_rate);
    lines.append(&mut table.lines);
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
}

fn bridge_table(out: &mut String, b: &BridgeConfig) {
    let d = BridgeConfig::new(&b.name);
    let mut table = Table::new("bridge");
    table.lines.push(format!("name = {}", quote(&b.name)));
    table
        .lines
        .push(format!("addresses = {}", list(&b.addresses, |a| quote(a))));
    diff!(table, b, d, round_robin);
    table.diff(
        "protocol_version",
        quote(b.protocol_version.as_str()),
        quote(d.protocol_version.as_str()),
    );
    diff!(table, b, d, cleansession);
    diff!(table, b, d, outgoing_retain);
    diff!(table, b, d, try_private);
    diff!(table, b, d, notifications);
    diff!(table, b, d, notifications_local_only);
    table.diff(
        "start_type",
        quote(b.start_type.as_str()),
        quote(d.start_type.as_str()),
    );
    diff!(table, b, d, restart_timeout_secs);
    diff!(table, b, d, threshold);
    diff!(table, b, d, idle_timeout_secs);
    diff!(table, b, d, keepalive_interval_secs);
    diff!(table, b, d, attempt_unsubscribe);
    diff!(table, b, d, insecure);
    diff!(table, b, d, require_ocsp);
    diff!(table, b, d, restart_timeout_cap_secs);
    bridge_options(&mut table, b);
    let _ = writeln!(out, "\n[[bridge]]");
    for line in table.lines {
        let _ = writeln!(out, "{line}");
    }
    for topic in &b.topics {
        let _ = writeln!(out, "\n[[bridge.topic]]");
        let _ = writeln!(out, "pattern = {}", quote(&topic.pattern));
        let _ = writeln!(out, "direction = {}", quote(topic.direction.as_str()));
        let _ = writeln!(out, "qos = {}", topic.qos);
        if !topic.local_prefix.is_empty() || !topic.remote_prefix.is_empty() {
            let _ = writeln!(out, "local_prefix = {}", quote(&topic.local_prefix));
            let _ = writeln!(out, "remote_prefix = {}", quote(&topic.remote_prefix));
        }
    }
}

fn bridge_options(table: &mut Table, b: &BridgeConfig) {
    let strings = [
        ("local_clientid", &b.local_clientid),
        ("remote_clientid", &b.remote_clientid),
        ("remote_username", &b.remote_username),
        ("remote_password", &b.remote_password),
        ("local_username", &b.local_username),
        ("local_password", &b.local_password),
        ("notification_topic", &b.notification_topic),
        ("bind_address", &b.bind_address),
        ("tls_version", &b.tls_version),
        ("alpn", &b.alpn),
        ("identity", &b.identity),
        ("psk", &b.psk),
    ];
    for (key, value) in strings {
        if let Some(value) = value {
            table.lines.push(format!("{key} = {}", quote(value)));
        }
    }
    let paths = [
        ("cafile", &b.cafile),
        ("capath", &b.capath),
        ("certfile", &b.certfile),
        ("keyfile", &b.keyfile),
    ];
    for (key, value) in paths {
        if let Some(value) = value {
            table.lines.push(format!("{key} = {}", path(value)));
        }
    }
    let numbers = [
        (
            "local_cleansession",
            b.local_cleansession.map(|v| v.to_string()),
        ),
        (
            "session_expiry_interval",
            b.session_expiry_interval.map(|v| v.to_string()),
        ),
        ("receive_maximum", b.receive_maximum.map(|v| v.to_string())),
        ("max_packet_size", b.max_packet_size.map(|v| v.to_string())),
        (
            "max_queued_messages",
            b.max_queued_messages.map(|v| v.to_string()),
        ),
        (
            "max_queued_bytes",
            b.max_queued_bytes.map(|v| v.to_string()),
        ),
    ];
    for (key, value) in numbers {
        if let Some(value) = value {
            table.lines.push(format!("{key} = {value}"));
        }
    }
}
