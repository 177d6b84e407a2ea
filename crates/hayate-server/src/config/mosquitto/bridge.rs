//! Bridge sections (`connection NAME` and the keys after it), parsed and validated into
//! [`BridgeConfig`] (defined in `hayate-bridge`, which runs them).

use super::reader::Line;
use super::MosquittoError;
pub use hayate_bridge::config::{
    BridgeConfig, BridgeDirection, BridgeProtocol, BridgeStartType, BridgeTopic,
};

/// Applies one key of a bridge section; `Ok(false)` when the key is not a bridge key.
pub(super) fn apply(bridge: &mut BridgeConfig, line: &Line) -> Result<bool, MosquittoError> {
    let text = |l: &Line| l.word().map(str::to_string);
    match line.key.as_str() {
        "address" | "addresses" => {
            let words = line.words();
            if words.is_empty() {
                return Err(line.error("a value is required"));
            }
            for word in words {
                bridge.addresses.push(address(line, word)?);
            }
        }
        "round_robin" => bridge.round_robin = line.boolean()?,
        "topic" => bridge.topics.push(topic(line)?),
        "bridge_protocol_version" => bridge.protocol_version = protocol(line)?,
        "cleansession" => bridge.cleansession = line.boolean()?,
        "local_cleansession" => bridge.local_cleansession = Some(line.boolean()?),
        "bridge_session_expiry_interval" => {
            bridge.session_expiry_interval = Some(line.integer_in(0, u32::MAX.into())? as u32)
        }
        "bridge_receive_maximum" => {
            bridge.receive_maximum = Some(line.integer_in(1, u16::MAX.into())? as u16)
        }
        "bridge_max_packet_size" => {
            bridge.max_packet_size = Some(line.integer_in(0, u32::MAX.into())? as u32)
        }
        "bridge_outgoing_retain" => bridge.outgoing_retain = line.boolean()?,
        "try_private" => bridge.try_private = line.boolean()?,
        "local_clientid" => bridge.local_clientid = Some(text(line)?),
        "remote_clientid" | "clientid" => bridge.remote_clientid = Some(text(line)?),
        "remote_username" | "username" => bridge.remote_username = Some(text(line)?),
        "remote_password" | "password" => bridge.remote_password = Some(text(line)?),
        "local_username" => bridge.local_username = Some(text(line)?),
        "local_password" => bridge.local_password = Some(text(line)?),
        "notifications" => bridge.notifications = line.boolean()?,
        "notifications_local_only" => bridge.notifications_local_only = line.boolean()?,
        "notification_topic" => bridge.notification_topic = Some(text(line)?),
        "start_type" => bridge.start_type = start_type(line)?,
        "restart_timeout" => restart_timeout(bridge, line)?,
        "threshold" => bridge.threshold = line.integer_in(1, u32::MAX.into())? as u32,
        "idle_timeout" => bridge.idle_timeout_secs = line.integer_in(1, i64::MAX)? as u64,
        "keepalive_interval" => {
            bridge.keepalive_interval_secs = line.integer_in(5, u16::MAX.into())? as u16
        }
        "bridge_attempt_unsubscribe" => bridge.attempt_unsubscribe = line.boolean()?,
        "bridge_bind_address" => bridge.bind_address = Some(text(line)?),
        "bridge_cafile" => bridge.cafile = Some(line.string()?.into()),
        "bridge_capath" => bridge.capath = Some(line.string()?.into()),
        "bridge_certfile" => bridge.certfile = Some(line.string()?.into()),
        "bridge_keyfile" => bridge.keyfile = Some(line.string()?.into()),
        "bridge_insecure" => bridge.insecure = line.boolean()?,
        "bridge_require_ocsp" => bridge.require_ocsp = line.boolean()?,
        "bridge_tls_version" => bridge.tls_version = Some(tls_version(line)?),
        "bridge_alpn" => bridge.alpn = Some(text(line)?),
        "bridge_identity" => bridge.identity = Some(text(line)?),
        "bridge_psk" => bridge.psk = Some(psk(line)?),
        "bridge_max_queued_messages" => {
            bridge.max_queued_messages = Some(line.integer_in(1, i64::MAX)? as usize)
        }
        "bridge_max_queued_bytes" => {
            bridge.max_queued_bytes = Some(line.integer_in(1, i64::MAX)? as usize)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The keys of a bridge section (an error anywhere else).
pub(super) const BRIDGE_KEYS: &[&str] = &[
    "address",
    "addresses",
    "round_robin",
    "topic",
    "bridge_protocol_version",
    "cleansession",
    "local_cleansession",
    "bridge_session_expiry_interval",
    "bridge_receive_maximum",
    "bridge_max_packet_size",
    "bridge_outgoing_retain",
    "try_private",
    "local_clientid",
    "remote_clientid",
    "clientid",
    "remote_username",
    "username",
    "remote_password",
    "password",
    "local_username",
    "local_password",
    "notifications",
    "notifications_local_only",
    "notification_topic",
    "start_type",
    "restart_timeout",
    "threshold",
    "idle_timeout",
    "keepalive_interval",
    "bridge_attempt_unsubscribe",
    "bridge_bind_address",
    "bridge_cafile",
    "bridge_capath",
    "bridge_certfile",
    "bridge_keyfile",
    "bridge_insecure",
    "bridge_require_ocsp",
    "bridge_tls_version",
    "bridge_alpn",
    "bridge_identity",
    "bridge_psk",
    "bridge_max_queued_messages",
    "bridge_max_queued_bytes",
];

fn address(line: &Line, word: &str) -> Result<String, MosquittoError> {
    let (host, port) = match word.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.starts_with('[') => (host, Some(port)),
        _ => (word, None),
    };
    if host.is_empty() {
        return Err(line.error(format!("no host in {word:?}")));
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| line.error(format!("invalid port in {word:?}")))?,
        None => 1883,
    };
    if host.contains(':') && !host.starts_with('[') {
        return Ok(format!("[{host}]:{port}"));
    }
    Ok(format!("{host}:{port}"))
}

fn topic(line: &Line) -> Result<BridgeTopic, MosquittoError> {
    let words = line.words();
    let unquote = |w: &str| {
        if w == "\"\"" {
            String::new()
        } else {
            w.to_string()
        }
    };
    let Some(pattern) = words.first() else {
        return Err(line.error("a topic pattern is required"));
    };
    let mut topic = BridgeTopic {
        pattern: unquote(pattern),
        direction: BridgeDirection::Out,
        qos: 0,
        local_prefix: String::new(),
        remote_prefix: String::new(),
    };
    if let Some(direction) = words.get(1) {
        topic.direction = match direction.to_ascii_lowercase().as_str() {
            "in" => BridgeDirection::In,
            "out" => BridgeDirection::Out,
            "both" => BridgeDirection::Both,
            other => {
                return Err(line.error(format!("direction must be in, out or both, got {other:?}")))
            }
        };
    }
    if let Some(qos) = words.get(2) {
        topic.qos = match *qos {
            "0" => 0,
            "1" => 1,
            "2" => 2,
            other => return Err(line.error(format!("QoS must be 0, 1 or 2, got {other:?}"))),
        };
    }
    match words.len() {
        0..=3 => {}
        5 => {
            topic.local_prefix = unquote(words[3]);
            topic.remote_prefix = unquote(words[4]);
        }
        4 => return Err(line.error("a local prefix needs a remote prefix")),
        _ => {
            return Err(line.error(
                "too many values: topic PATTERN [in|out|both] [QOS] [LOCAL_PREFIX REMOTE_PREFIX]",
            ))
        }
    }
    if topic.pattern.is_empty() && topic.local_prefix.is_empty() && topic.remote_prefix.is_empty() {
        return Err(line.error("an empty pattern (\"\") needs prefixes"));
    }
    for prefix in [&topic.local_prefix, &topic.remote_prefix] {
        if prefix.contains(['#', '+']) {
            return Err(line.error(format!("prefix {prefix:?} may not contain wildcards")));
        }
    }
    Ok(topic)
}

fn protocol(line: &Line) -> Result<BridgeProtocol, MosquittoError> {
    match line.word()? {
        "mqttv31" => Ok(BridgeProtocol::Mqttv31),
        "mqttv311" => Ok(BridgeProtocol::Mqttv311),
        "mqttv50" => Ok(BridgeProtocol::Mqttv50),
        other => Err(line.error(format!(
            "expected mqttv31, mqttv311 or mqttv50, got {other:?}"
        ))),
    }
}

fn start_type(line: &Line) -> Result<BridgeStartType, MosquittoError> {
    match line.word()? {
        "automatic" => Ok(BridgeStartType::Automatic),
        "lazy" => Ok(BridgeStartType::Lazy),
        "once" => Ok(BridgeStartType::Once),
        other => Err(line.error(format!("expected automatic, lazy or once, got {other:?}"))),
    }
}

fn restart_timeout(bridge: &mut BridgeConfig, line: &Line) -> Result<(), MosquittoError> {
    let number = |w: &str| {
        w.parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| line.error(format!("expected a positive number of seconds, got {w:?}")))
    };
    match line.words().as_slice() {
        [constant] => {
            bridge.restart_timeout_secs = number(constant)?;
            bridge.restart_timeout_cap_secs = 0;
        }
        [base, cap] => {
            bridge.restart_timeout_secs = number(base)?;
            bridge.restart_timeout_cap_secs = number(cap)?;
        }
        _ => return Err(line.error("expected BASE CAP or CONSTANT seconds")),
    }
    Ok(())
}

fn tls_version(line: &Line) -> Result<String, MosquittoError> {
    match line.word()? {
        v @ ("tlsv1.3" | "tlsv1.2" | "tlsv1.1") => Ok(v.to_string()),
        other => Err(line.error(format!(
            "expected tlsv1.3, tlsv1.2 or tlsv1.1, got {other:?}"
        ))),
    }
}

fn psk(line: &Line) -> Result<String, MosquittoError> {
    let key = line.word()?;
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(line.error("the key must be hexadecimal"));
    }
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: &str, value: &str) -> Line {
        Line {
            file: "t.conf".into(),
            number: 1,
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    #[test]
    fn every_listed_bridge_key_is_applied_and_no_other() {
        for key in BRIDGE_KEYS {
            let mut bridge = BridgeConfig::new("b");
            // With no value every bridge key is an error, never "not a bridge key".
            assert!(apply(&mut bridge, &line(key, "")).is_err(), "{key}");
        }
        let mut bridge = BridgeConfig::new("b");
        assert!(!apply(&mut bridge, &line("listener", "1883")).unwrap());
    }

    #[test]
    fn addresses_get_the_default_port() {
        let mut bridge = BridgeConfig::new("b");
        apply(&mut bridge, &line("address", "a b:1884 [::1]:1885 ::1")).unwrap();
        assert_eq!(
            bridge.addresses,
            ["a:1883", "b:1884", "[::1]:1885", "[::1]:1883"]
        );
    }
}
