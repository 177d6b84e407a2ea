//! A bridge's configuration as parsed from Mosquitto's `connection` sections or Hayate's TOML
//! `[[bridge]]` tables (the parsing lives in `hayate-server`'s configuration module; the types
//! live here so the bridge can run from them).

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
    /// Most messages in the bridge's outgoing queue (waiting plus in flight); past it the
    /// oldest waiting ones are dropped (default: the broker's `max_queued_messages`).
    #[serde(default)]
    pub max_queued_messages: Option<usize>,
    /// Most payload + topic bytes in the bridge's outgoing queue; past it the oldest waiting
    /// messages are dropped (default: the broker's `max_queued_bytes`).
    #[serde(default)]
    pub max_queued_bytes: Option<usize>,
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
            max_queued_messages: None,
            max_queued_bytes: None,
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
        if self.max_queued_messages == Some(0) {
            return Err("bridge_max_queued_messages must be at least 1".into());
        }
        if self.max_queued_bytes == Some(0) {
            return Err("bridge_max_queued_bytes must be at least 1".into());
        }
        let cap = self.restart_timeout_cap_secs;
        if cap != 0 && cap < self.restart_timeout_secs {
            return Err("restart_timeout: the cap is below the base".into());
        }
        Ok(())
    }
}
