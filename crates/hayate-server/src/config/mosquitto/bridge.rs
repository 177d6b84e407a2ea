//! Bridge sections (`connection NAME` and the keys after it), parsed and validated into
//! [`BridgeConfig`]. Hayate does not run bridges yet: `hayate serve` refuses a configuration
//! that has one, `hayate config check`/`convert` accept it.

use super::reader::Line;
use super::MosquittoError;
use serde::Deserialize;
use std::path::PathBuf;

/// One bridge (`connection NAME` in Mosquitto, `[[bridge]]` in Hayate's TOML).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// The connection name (`connection`).
    pub name: String,
    /// Remote brokers as `host:port` (`address`/`addresses`; port 1883 when not given).
    pub addresses: Vec<String>,
    /// With several addresses: go back to the first when it returns (false) or keep the one
    /// in use (true).
    #[serde(default)]
    pub round_robin: bool,
    /// Topics shared with the remote broker (`topic` lines).
    #[serde(default, rename = "topic")]
    pub topics: Vec<BridgeTopic>,
    /// MQTT version used towards the remote broker.
    #[serde(default)]
    pub protocol_version: BridgeProtocol,
    /// Clean session towards the remote broker.
    #[serde(default)]
    pub cleansession: bool,
    /// Clean session of the bridge's local session (default: as `cleansession`).
    #[serde(default)]
    pub local_cleansession: Option<bool>,
    /// Session Expiry Interval asked of the remote broker (v5).
    #[serde(default)]
    pub session_expiry_interval: Option<u32>,
    /// Receive Maximum announced to the remote broker (v5).
    #[serde(default)]
    pub receive_maximum: Option<u16>,
    /// Maximum Packet Size announced to the remote broker (v5).
    #[serde(default)]
    pub max_packet_size: Option<u32>,
    /// Keep the retain flag on messages sent out.
    #[serde(default = "yes")]
    pub outgoing_retain: bool,
    /// Tell the remote broker it is a bridge (Mosquitto's private protocol bit).
    #[serde(default = "yes")]
    pub try_private: bool,
    /// Client id of the local side.
    #[serde(default)]
    pub local_clientid: Option<String>,
    /// Client id towards the remote broker.
    #[serde(default)]
    pub remote_clientid: Option<String>,
    /// User name towards the remote broker.
    #[serde(default)]
    pub remote_username: Option<String>,
    /// Password towards the remote broker.
    #[serde(default)]
    pub remote_password: Option<String>,
    /// User name of the local side.
    #[serde(default)]
    pub local_username: Option<String>,
    /// Password of the local side.
    #[serde(default)]
    pub local_password: Option<String>,
    /// Publish the bridge state (1 connected, 0 not) on the notification topic.
    #[serde(default = "yes")]
    pub notifications: bool,
    /// Publish notifications on the local broker only.
    #[serde(default)]
    pub notifications_local_only: bool,
    /// Notification topic (default `$SYS/broker/connection/<remote_clientid>/state`).
    #[serde(default)]
    pub notification_topic: Option<String>,
    /// When the bridge connects.
    #[serde(default)]
    pub start_type: BridgeStartType,
    /// Seconds before reconnecting: base of the backoff (or the constant delay).
    #[serde(default = "default_restart_base")]
    pub restart_timeout_secs: u64,
    /// Longest backoff in seconds (0: `restart_timeout_secs` is a constant delay).
    #[serde(default = "default_restart_cap")]
    pub restart_timeout_cap_secs: u64,
    /// `lazy`: messages queued before the bridge connects.
    #[serde(default = "default_threshold")]
    pub threshold: u32,
    /// `lazy`: seconds without traffic before it disconnects.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: u64,
    /// Keep alive towards the remote broker, in seconds.
    #[serde(default = "default_keepalive")]
    pub keepalive_interval_secs: u16,
    /// Unsubscribe from topics no longer configured on reconnection.
    #[serde(default = "yes")]
    pub attempt_unsubscribe: bool,
    /// Local address to connect from.
    #[serde(default)]
    pub bind_address: Option<String>,
    /// TLS: CA certificates for the remote broker's certificate.
    #[serde(default)]
    pub cafile: Option<PathBuf>,
    /// TLS: directory of CA certificates.
    #[serde(default)]
    pub capath: Option<PathBuf>,
    /// TLS: client certificate.
    #[serde(default)]
    pub certfile: Option<PathBuf>,
    /// TLS: client key.
    #[serde(default)]
    pub keyfile: Option<PathBuf>,
    /// TLS: do not check the remote host name against its certificate.
    #[serde(default)]
    pub insecure: bool,
    /// TLS: version (`tlsv1.3`, `tlsv1.2`, ...).
    #[serde(default)]
    pub tls_version: Option<String>,
    /// TLS: require OCSP stapling from the remote broker.
    #[serde(default)]
    pub require_ocsp: bool,
    /// TLS: ALPN protocol.
    #[serde(default)]
    pub alpn: Option<String>,
    /// TLS-PSK: identity.
    #[serde(default)]
    pub identity: Option<String>,
    /// TLS-PSK: key in hexadecimal.
    #[serde(default)]
    pub psk: Option<String>,
}

fn yes() -> bool {
    true
}
fn default_restart_base() -> u64 {
    5
}
fn default_restart_cap() -> u64 {
    30
}
fn default_threshold() -> u32 {
    10
}
fn default_idle_timeout() -> u64 {
    60
}
fn default_keepalive() -> u16 {
    60
}

/// One `topic` line of a bridge.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeTopic {
    /// Topic filter ("" when the prefixes alone name the topic).
    pub pattern: String,
    /// Which way messages go.
    #[serde(default)]
    pub direction: BridgeDirection,
    /// QoS of the bridge's subscriptions and publications.
    #[serde(default)]
    pub qos: u8,
    /// Prefix on the local broker.
    #[serde(default)]
    pub local_prefix: String,
    /// Prefix on the remote broker.
    #[serde(default)]
    pub remote_prefix: String,
}

/// `topic ... in|out|both`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BridgeDirection {
    /// Remote to local.
    In,
    /// Local to remote (Mosquitto's default).
    #[default]
    Out,
    /// Both ways.
    Both,
}

/// `bridge_protocol_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BridgeProtocol {
    /// MQTT 3.1.
    Mqttv31,
    /// MQTT 3.1.1 (Mosquitto's default).
    #[default]
    Mqttv311,
    /// MQTT 5.0.
    Mqttv50,
}

/// `start_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BridgeStartType {
    /// Connect at start and reconnect after `restart_timeout`.
    #[default]
    Automatic,
    /// Connect once `threshold` messages are queued; disconnect after `idle_timeout`.
    Lazy,
    /// Connect at start; do not reconnect.
    Once,
}

impl BridgeDirection {
    /// The Mosquitto/TOML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeDirection::In => "in",
            BridgeDirection::Out => "out",
            BridgeDirection::Both => "both",
        }
    }
}

impl BridgeProtocol {
    /// The Mosquitto/TOML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeProtocol::Mqttv31 => "mqttv31",
            BridgeProtocol::Mqttv311 => "mqttv311",
            BridgeProtocol::Mqttv50 => "mqttv50",
        }
    }
}

impl BridgeStartType {
    /// The Mosquitto/TOML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeStartType::Automatic => "automatic",
            BridgeStartType::Lazy => "lazy",
            BridgeStartType::Once => "once",
        }
    }
}

impl BridgeConfig {
    /// A bridge named `name` with Mosquitto's defaults and no address or topic yet.
    pub fn new(name: &str) -> BridgeConfig {
        BridgeConfig {
            name: name.to_string(),
            addresses: Vec::new(),
            round_robin: false,
            topics: Vec::new(),
            protocol_version: BridgeProtocol::Mqttv311,
            cleansession: false,
            local_cleansession: None,
            session_expiry_interval: None,
            receive_maximum: None,
            max_packet_size: None,
            outgoing_retain: true,
            try_private: true,
            local_clientid: None,
            remote_clientid: None,
            remote_username: None,
            remote_password: None,
            local_username: None,
            local_password: None,
            notifications: true,
            notifications_local_only: false,
            notification_topic: None,
            start_type: BridgeStartType::Automatic,
            restart_timeout_secs: default_restart_base(),
            restart_timeout_cap_secs: default_restart_cap(),
            threshold: default_threshold(),
            idle_timeout_secs: default_idle_timeout(),
            keepalive_interval_secs: default_keepalive(),
            attempt_unsubscribe: true,
            bind_address: None,
            cafile: None,
            capath: None,
            certfile: None,
            keyfile: None,
            insecure: false,
            require_ocsp: false,
            tls_version: None,
            alpn: None,
            identity: None,
            psk: None,
        }
    }

    /// Checks what a bridge needs and what does not go together; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.addresses.is_empty() {
            return Err("address is required".into());
        }
        if self.topics.is_empty() {
            return Err("at least one topic is required".into());
        }
        if self.remote_password.is_some() && self.remote_username.is_none() {
            return Err("remote_password needs remote_username".into());
        }
        if self.local_password.is_some() && self.local_username.is_none() {
            return Err("local_password needs local_username".into());
        }
        if self.identity.is_some() != self.psk.is_some() {
            return Err("bridge_identity and bridge_psk go together".into());
        }
        if self.psk.is_some() && (self.cafile.is_some() || self.capath.is_some()) {
            return Err("bridge_psk and bridge_cafile/bridge_capath exclude each other".into());
        }
        if self.certfile.is_some() != self.keyfile.is_some() {
            return Err("bridge_certfile and bridge_keyfile go together".into());
        }
        if self.certfile.is_some() && self.cafile.is_none() && self.capath.is_none() {
            return Err("bridge_certfile needs bridge_cafile or bridge_capath".into());
        }
        for topic in &self.topics {
            if topic.qos > 2 {
                return Err(format!("topic {}: QoS must be 0, 1 or 2", topic.pattern));
            }
            if topic.pattern.is_empty() && topic.local_prefix.is_empty() {
                return Err("topic \"\" needs a local prefix".into());
            }
        }
        let cap = self.restart_timeout_cap_secs;
        if cap != 0 && cap < self.restart_timeout_secs {
            return Err("restart_timeout: the cap is below the base".into());
        }
        Ok(())
    }
}

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
