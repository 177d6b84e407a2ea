//! The configuration file (TOML). Every table and key is documented in `hayate.toml` at the
//! repository root, which a test loads so it cannot drift. Unknown keys are errors that name
//! the key. A Mosquitto `mosquitto.conf` is accepted too ([`mosquitto`]).

pub mod listener;
pub mod mosquitto;

pub use listener::{ListenerConfig, TransportKind};

use crate::security::AuthConfig;
use hayate_core::BrokerConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Listeners, threads, connection handling.
    pub server: ServerConfig,
    /// Protocol limits and behaviour.
    pub broker: BrokerConfig,
    /// Listeners with their own transport and settings (`[[listener]]`), besides the plain
    /// TCP addresses of `server.listen`.
    #[serde(rename = "listener")]
    pub listeners: Vec<ListenerConfig>,
    /// Authentication and authorisation (`[auth]`).
    pub auth: AuthConfig,
    /// Durable storage (`[storage]`).
    pub storage: StoreConfig,
    /// Bridges to other brokers (`[[bridge]]`, Mosquitto's `connection` sections): parsed
    /// and validated; run by the server (`hayate_bridge`), except the settings
    /// [`Config::ensure_runnable`] refuses.
    #[serde(rename = "bridge")]
    pub bridges: Vec<mosquitto::BridgeConfig>,
    /// This node's place in a cluster (`[cluster]`, `hayate serve --node-name
    /// --cluster-listen --join`; `docs/CLUSTER.md`). Unset: a single node.
    pub cluster: Option<hayate_cluster::ClusterConfig>,
    /// The HTTP edge: metrics, health, admin API, dashboard (`[http]`; off unless `listen`).
    pub http: hayate_http::HttpConfig,
}

/// Which syntax a configuration file is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// Hayate's TOML.
    Toml,
    /// Mosquitto's `mosquitto.conf` format.
    Mosquitto,
}

/// A loaded file: the configuration, its format, and for a Mosquitto file the keys that have
/// no effect in Hayate (all in one line).
#[derive(Debug)]
pub struct Loaded {
    /// The configuration (validated).
    pub config: Config,
    /// The file's format.
    pub format: ConfigFormat,
    /// Keys accepted without effect, in one line (`None`: none).
    pub warnings: Option<String>,
}

/// Durable storage (`[storage]`; `docs/design/persistence.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Directory of the embedded store; persistence is on when set (`hayate serve --data-dir`).
    pub dir: Option<PathBuf>,
    /// How durable an acknowledged change is (`--durability`).
    pub durability: Durability,
    /// `batched`: longest time between a commit and its fsync (the window a power loss can
    /// take).
    pub sync_interval_ms: u64,
    /// A store that cannot be read at start: `fail` (refuse to start) or `move_aside` (rename
    /// it and start empty).
    pub on_corruption: OnCorruption,
    /// Below this many MiB free on the data directory's file system, QoS 1/2 publishes are
    /// refused as on a full disk, before it is full (0: no threshold).
    pub min_free_mb: u64,
}

/// `[storage] on_corruption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnCorruption {
    /// Refuse to start, naming the directory and the error.
    #[default]
    Fail,
    /// Rename the directory to `DIR.corrupt-<unix seconds>` and start with an empty store.
    MoveAside,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            dir: None,
            durability: Durability::Batched,
            sync_interval_ms: 200,
            on_corruption: OnCorruption::Fail,
            min_free_mb: 64,
        }
    }
}

impl StoreConfig {
    /// The directory to open, when persistence is on (a directory set, durability not `off`).
    pub fn enabled_dir(&self) -> Option<&Path> {
        match self.durability {
            Durability::Off => None,
            _ => self.dir.as_deref(),
        }
    }
}

/// `server.log_format` (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, fields, message).
    Json,
}

/// Durability modes (`[storage] durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Written to the store as changes happen (survives kill -9 once committed, within
    /// milliseconds), fsynced every `sync_interval_ms`.
    Batched,
    /// An acknowledgement waits until what it acknowledges is fsynced (group commit: one
    /// fsync covers every change made while the previous one ran).
    Sync,
    /// No persistence, even with a directory set.
    Off,
}

/// Network and process settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Addresses to listen on for MQTT over TCP with the default settings (more listeners,
    /// and other transports, in `[[listener]]` tables).
    pub listen: Vec<SocketAddr>,
    /// Worker threads; 0 means one per CPU core.
    pub threads: usize,
    /// Keep arrival order across connections (`docs/design/arrival-order.md`): plain TCP
    /// input is stamped with the kernel's receive time (`SO_TIMESTAMPNS`, read with
    /// `recvmsg`) and a new subscription receives the messages that arrived after its
    /// SUBSCRIBE but were routed before it was in place (within `[broker]
    /// arrival_window_ms`). false: no stamps, no catch-up.
    pub keep_arrival_order: bool,
    /// Most simultaneous client connections; more are refused (CONNACK 0x97 / 0x03).
    pub max_connections: usize,
    /// Seconds a new connection may take to send CONNECT before it is closed.
    pub connect_timeout_secs: u64,
    /// Disable Nagle's algorithm on client sockets (low latency; on by default).
    pub tcp_nodelay: bool,
    /// Seconds between `$SYS` updates; 0 disables `$SYS`.
    pub sys_interval_secs: u64,
    /// Stop reading from a client while this many bytes wait to be written to it.
    pub max_pending_write_bytes: usize,
    /// Log filter (`error`, `warn`, `info`, `debug`, `trace`, or a tracing filter directive).
    pub log_level: String,
    /// Log line format: `text` (readable) or `json` (one object per line).
    pub log_format: LogFormat,
    /// Write logs to this file (appending) instead of standard error; reopened on SIGHUP, so
    /// logrotate can move it away.
    pub log_file: Option<PathBuf>,
    /// Per-client inbound limit in bytes per second, enforced by pausing reads (0: none);
    /// `[[listener]]` may override it.
    pub max_inbound_bytes_per_sec: u64,
    /// Per-client inbound limit in PUBLISH packets per second, enforced by pausing reads
    /// (0: none); `[[listener]]` may override it.
    pub max_inbound_messages_per_sec: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 1883))],
            threads: 0,
            keep_arrival_order: true,
            max_connections: 100_000,
            connect_timeout_secs: 10,
            tcp_nodelay: true,
            sys_interval_secs: 10,
            max_pending_write_bytes: 1024 * 1024,
            log_level: "info".to_string(),
            log_format: LogFormat::Text,
            log_file: None,
            max_inbound_bytes_per_sec: 0,
            max_inbound_messages_per_sec: 0,
        }
    }
}

impl ServerConfig {
    /// The connect timeout as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs.max(1))
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is invalid or has unknown keys (the message names them).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// Parser message, with line and column.
        message: String,
    },
    /// A value is out of range.
    #[error(transparent)]
    Invalid(#[from] hayate_core::config::ConfigError),
    /// No listener configured.
    #[error("server.listen or [[listener]]: at least one listener is required")]
    NoListener,
    /// A `[[listener]]` lacks what its transport needs.
    #[error("{0}")]
    Listener(String),
    /// `[storage]` asks for something not available.
    #[error("{0}")]
    Storage(String),
    /// `[cluster]` is not usable.
    #[error("{0}")]
    Cluster(String),
    /// `[http]` cannot be used as set.
    #[error(transparent)]
    Http(#[from] hayate_http::HttpConfigError),
    /// A Mosquitto file could not be translated (the message names file, line and key).
    #[error(transparent)]
    Mosquitto(#[from] mosquitto::MosquittoError),
    /// The configuration is valid but asks for something the broker cannot run yet.
    #[error("{0}")]
    Unsupported(String),
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a file, TOML or Mosquitto (see [`Config::load_file`]); the warnings
    /// of a Mosquitto file are logged.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let loaded = Config::load_file(path)?;
        if let Some(warnings) = &loaded.warnings {
            tracing::warn!(file = %path.display(), "{warnings}");
        }
        Ok(loaded.config)
    }

    /// Reads and parses a file: Mosquitto's format for a `.conf` file or (unless it ends in
    /// `.toml`) a file whose first setting reads `key value`, else TOML.
    pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        if !mosquitto::is_mosquitto_file(path, &text) {
            return Ok(Loaded {
                config: Config::from_toml(&text, &path.display().to_string())?,
                format: ConfigFormat::Toml,
                warnings: None,
            });
        }
        let translation = mosquitto::from_text(&text, &path.display().to_string())?;
        Ok(Loaded {
            warnings: translation.warning_line(),
            config: translation.config,
            format: ConfigFormat::Mosquitto,
        })
    }

    /// Refuses what validates but cannot run yet (some bridge settings), naming it.
    pub fn ensure_runnable(&self) -> Result<(), ConfigError> {
        match self.bridges.iter().find_map(hayate_bridge::unsupported) {
            Some(message) => Err(ConfigError::Unsupported(format!(
                "{message}: `hayate config check` accepts the file, `hayate serve` does not"
            ))),
            None => Ok(()),
        }
    }

    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.server.listen.is_empty() && self.listeners.is_empty() {
            return Err(ConfigError::NoListener);
        }
        for listener in &self.listeners {
            listener.validate().map_err(ConfigError::Listener)?;
        }
        self.broker.validate()?;
        if let Some(cluster) = &self.cluster {
            cluster
                .validate()
                .map_err(|e| ConfigError::Cluster(e.to_string()))?;
        }
        self.http.validate()?;
        if self.storage.sync_interval_ms == 0 {
            return Err(ConfigError::Storage(
                "storage.sync_interval_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_file_loads_and_matches_defaults_where_documented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hayate.toml");
        let config = Config::load(&path).expect("hayate.toml must stay valid");
        let defaults = Config::default();
        assert_eq!(config.server.listen, defaults.server.listen);
        assert_eq!(
            config.broker.max_packet_size,
            defaults.broker.max_packet_size
        );
        assert_eq!(
            config.broker.receive_maximum,
            defaults.broker.receive_maximum
        );
        assert_eq!(
            config.server.max_connections,
            defaults.server.max_connections
        );
        assert!(config.auth.allow_anonymous);
    }

    #[test]
    fn the_documented_cluster_table_loads_with_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hayate.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let table: String = text
            .split("# [cluster]\n")
            .nth(1)
            .expect("hayate.toml documents [cluster]")
            .lines()
            .filter_map(|line| line.strip_prefix("# "))
            .filter(|line| line.contains(" = "))
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::from_toml(&format!("[cluster]\n{table}\n"), "hayate.toml").unwrap();
        let cluster = config.cluster.clone().expect("[cluster]");
        assert_eq!(cluster.node_name, "n1");
        assert!(cluster.allow_register_during_netsplit && cluster.prefer_local_shared);
        assert_eq!(cluster.dead_node_grace_secs, 60);
        assert_eq!(cluster.stopped_node_wait_secs, 15);
        assert_eq!(cluster.lost_node_wait_secs, 10);
        assert_eq!(cluster.handover_relay_secs, 30);
        assert_eq!(cluster.relay_order_hold_ms, 3_000);
        assert_eq!(cluster.resent_qos2_hold_secs, 30);
        let tls = cluster.link_tls().expect("tls_cert, tls_key and tls_ca");
        assert_eq!(tls.ca, Path::new("/etc/hayate/cluster-ca.pem"));
        assert_eq!(
            cluster.tls_server_name.as_deref(),
            Some("node.cluster.internal")
        );
        config.validate().unwrap();
    }

    #[test]
    fn cluster_tls_is_all_three_files_or_none() {
        let table = "[cluster]\nnode_name = \"n1\"\nlisten = \"127.0.0.1:7000\"\n";
        let partial = format!("{table}tls_cert = \"n1.pem\"\ntls_key = \"n1.key\"\n");
        let error = Config::from_toml(&partial, "test").unwrap_err();
        assert!(error.to_string().contains("tls_ca missing"), "{error}");
        let plain = Config::from_toml(table, "test").unwrap();
        let listener = ListenerConfig::cluster_for(plain.cluster.as_ref().unwrap());
        assert_eq!(listener.transport, TransportKind::Mqtt);
        let full = format!("{partial}tls_ca = \"ca.pem\"\n");
        let tls = Config::from_toml(&full, "test").unwrap();
        let listener = ListenerConfig::cluster_for(tls.cluster.as_ref().unwrap());
        assert_eq!(listener.transport, TransportKind::Mqtts);
        assert!(listener.require_certificate);
        assert_eq!(listener.ca_file.as_deref(), Some(Path::new("ca.pem")));
        assert_eq!(listener.role, hayate_core::ListenerRole::Cluster);
    }

    #[test]
    fn unknown_key_is_an_error_naming_the_key() {
        let error = Config::from_toml("[broker]\nmax_pakcet_size = 10\n", "test").unwrap_err();
        assert!(error.to_string().contains("max_pakcet_size"), "{error}");
        let error = Config::from_toml("[nonsense]\n", "test").unwrap_err();
        assert!(error.to_string().contains("nonsense"), "{error}");
    }

    #[test]
    fn out_of_range_value_is_an_error() {
        let error = Config::from_toml("[broker]\nreceive_maximum = 0\n", "test").unwrap_err();
        assert!(error.to_string().contains("receive_maximum"), "{error}");
    }

    #[test]
    fn empty_file_gives_defaults() {
        let config = Config::from_toml("", "test").unwrap();
        assert_eq!(config.server.listen[0].port(), 1883);
        assert!(config.server.tcp_nodelay);
    }
}
