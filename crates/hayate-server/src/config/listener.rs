//! `[[listener]]` tables: one listener each, with its own address, transport and the settings
//! that differ per listener (TLS files, PSK keys, WebSocket path, anonymous access, limits).

use hayate_core::ListenerRole;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// MQTT over TCP.
    #[default]
    Mqtt,
    /// MQTT over TLS with certificates (rustls).
    Mqtts,
    /// MQTT over TLS 1.2 with pre-shared keys (OpenSSL), as Mosquitto's `psk_file` listeners.
    Psk,
    /// MQTT over WebSocket.
    Ws,
    /// MQTT over WebSocket over TLS.
    Wss,
}

/// One `[[listener]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Name in logs and for the authentication settings (default: the transport and address).
    pub name: Option<String>,
    /// Address and port to listen on.
    pub bind: SocketAddr,
    /// `mqtt`, `mqtts`, `psk`, `ws` or `wss`.
    #[serde(default)]
    pub transport: TransportKind,
    /// Most connections on this listener (default: only `server.max_connections` applies).
    pub max_connections: Option<usize>,
    /// Overrides `auth.allow_anonymous` on this listener.
    pub allow_anonymous: Option<bool>,
    /// The client certificate's CN (else first SAN), or the PSK identity, is the user name;
    /// the CONNECT user name and password are not used.
    #[serde(default)]
    pub use_identity_as_username: bool,
    /// `mqtts`/`wss`: server certificate chain (PEM).
    pub cert_file: Option<PathBuf>,
    /// `mqtts`/`wss`: server private key (PEM).
    pub key_file: Option<PathBuf>,
    /// `mqtts`/`wss`: CA certificates (PEM) that client certificates must chain to; enables
    /// client certificates.
    pub ca_file: Option<PathBuf>,
    /// `mqtts`/`wss`: refuse clients without a valid certificate (mutual TLS).
    #[serde(default)]
    pub require_certificate: bool,
    /// `psk`: `identity:hexkey` lines (Mosquitto's `psk_file` format).
    pub psk_file: Option<PathBuf>,
    /// `psk`: identity hint sent to clients.
    pub psk_hint: Option<String>,
    /// `psk`: OpenSSL cipher list.
    #[serde(default = "default_psk_ciphers")]
    pub psk_ciphers: String,
    /// `ws`/`wss`: the HTTP path of the upgrade.
    #[serde(default = "default_ws_path")]
    pub ws_path: String,
    /// TLS/WebSocket handshakes in progress at once on this listener; further connections wait
    /// (within `server.connect_timeout_secs`) for a slot.
    #[serde(default = "default_max_handshakes")]
    pub max_concurrent_handshakes: usize,
    /// New connections accepted per second on this listener (0 = no limit); the excess waits
    /// in the kernel's accept queue.
    #[serde(default)]
    pub max_connection_rate: u32,
    /// Per-client inbound bytes per second on this listener (overrides the `[server]` value).
    pub max_inbound_bytes_per_sec: Option<u64>,
    /// Per-client inbound PUBLISH packets per second on this listener (overrides `[server]`).
    pub max_inbound_messages_per_sec: Option<u64>,
    /// Clients, or (only through `[cluster]`, never from the file) the other nodes.
    #[serde(skip)]
    pub role: ListenerRole,
}

fn default_psk_ciphers() -> String {
    "PSK".to_string()
}

fn default_ws_path() -> String {
    "/mqtt".to_string()
}

fn default_max_handshakes() -> usize {
    1024
}

impl ListenerConfig {
    /// A plain TCP listener on `bind` with every default.
    pub fn tcp(bind: SocketAddr) -> ListenerConfig {
        ListenerConfig {
            name: None,
            bind,
            transport: TransportKind::Mqtt,
            max_connections: None,
            allow_anonymous: None,
            use_identity_as_username: false,
            cert_file: None,
            key_file: None,
            ca_file: None,
            require_certificate: false,
            psk_file: None,
            psk_hint: None,
            psk_ciphers: default_psk_ciphers(),
            ws_path: default_ws_path(),
            max_concurrent_handshakes: default_max_handshakes(),
            max_connection_rate: 0,
            max_inbound_bytes_per_sec: None,
            max_inbound_messages_per_sec: None,
            role: ListenerRole::Clients,
        }
    }

    /// The cluster listener of a node (`[cluster] listen`): plain TCP, for other nodes only.
    pub fn cluster(bind: SocketAddr) -> ListenerConfig {
        ListenerConfig {
            name: Some(format!("cluster@{bind}")),
            role: ListenerRole::Cluster,
            ..ListenerConfig::tcp(bind)
        }
    }

    /// The cluster listener of a node as `[cluster]` asks: with `tls_cert`, `tls_key` and
    /// `tls_ca`, TLS with client certificates required, signed by `tls_ca` (the `mqtts` code
    /// path); else plain TCP ([`ListenerConfig::cluster`]).
    pub fn cluster_for(cluster: &hayate_cluster::ClusterConfig) -> ListenerConfig {
        let plain = ListenerConfig::cluster(cluster.listen);
        match cluster.link_tls() {
            Some(files) => ListenerConfig {
                transport: TransportKind::Mqtts,
                cert_file: Some(files.cert.to_path_buf()),
                key_file: Some(files.key.to_path_buf()),
                ca_file: Some(files.ca.to_path_buf()),
                require_certificate: true,
                ..plain
            },
            None => plain,
        }
    }

    /// The name used in logs: configured, else `transport@address`.
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let kind = match self.transport {
                TransportKind::Mqtt => "mqtt",
                TransportKind::Mqtts => "mqtts",
                TransportKind::Psk => "psk",
                TransportKind::Ws => "ws",
                TransportKind::Wss => "wss",
            };
            format!("{kind}@{}", self.bind)
        })
    }

    /// The same endpoint: address, transport and transport settings (TLS and PSK files and
    /// options, WebSocket path, handshake cap) and role. A reload keeps such a listener
    /// running and applies the rest (name, connection limits and rate, inbound rates,
    /// anonymous access, identity as user name) to its new connections; a listener whose
    /// endpoint changed is stopped and started again.
    pub fn same_endpoint(&self, other: &ListenerConfig) -> bool {
        self.bind == other.bind
            && self.transport == other.transport
            && self.cert_file == other.cert_file
            && self.key_file == other.key_file
            && self.ca_file == other.ca_file
            && self.require_certificate == other.require_certificate
            && self.psk_file == other.psk_file
            && self.psk_hint == other.psk_hint
            && self.psk_ciphers == other.psk_ciphers
            && self.ws_path == other.ws_path
            && self.max_concurrent_handshakes == other.max_concurrent_handshakes
            && self.role == other.role
    }

    /// Checks that the settings the transport needs are there; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.display_name();
        let tls = matches!(self.transport, TransportKind::Mqtts | TransportKind::Wss);
        if tls && (self.cert_file.is_none() || self.key_file.is_none()) {
            return Err(format!(
                "listener {name}: cert_file and key_file are required"
            ));
        }
        if !tls && (self.cert_file.is_some() || self.key_file.is_some() || self.ca_file.is_some()) {
            return Err(format!(
                "listener {name}: cert_file/key_file/ca_file need transport mqtts or wss"
            ));
        }
        if self.require_certificate && self.ca_file.is_none() {
            return Err(format!(
                "listener {name}: require_certificate needs ca_file"
            ));
        }
        if (self.transport == TransportKind::Psk) != self.psk_file.is_some() {
            return Err(format!(
                "listener {name}: psk_file is required with transport psk, and only there"
            ));
        }
        if self.use_identity_as_username
            && !(self.transport == TransportKind::Psk || (tls && self.ca_file.is_some()))
        {
            return Err(format!(
                "listener {name}: use_identity_as_username needs client certificates (ca_file) or transport psk"
            ));
        }
        if matches!(self.transport, TransportKind::Ws | TransportKind::Wss)
            && !self.ws_path.starts_with('/')
        {
            return Err(format!("listener {name}: ws_path must start with '/'"));
        }
        if self.max_concurrent_handshakes == 0 {
            return Err(format!(
                "listener {name}: max_concurrent_handshakes must be at least 1"
            ));
        }
        Ok(())
    }
}
