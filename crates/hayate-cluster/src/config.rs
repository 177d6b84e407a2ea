//! `[cluster]`: this node's name and address, the nodes to join, and the timings of failure
//! detection.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The `[cluster]` table (`hayate serve --node-name --cluster-listen --join`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster (`--node-name`).
    pub node_name: String,
    /// Where this node listens for the other nodes (`--cluster-listen`): gossip over UDP and
    /// node links over TCP, on the same port.
    pub listen: SocketAddr,
    /// The address the other nodes reach this one at, when not `listen` (behind NAT, or
    /// `listen` is 0.0.0.0).
    #[serde(default)]
    pub advertise: Option<SocketAddr>,
    /// Nodes to contact at start (`--join`, `host:port` of their cluster listeners). Any one
    /// live node is enough; the rest are learnt by gossip.
    #[serde(default)]
    pub join: Vec<String>,
    /// Nodes present this password to each other when their links connect (in CONNECT; the
    /// gossip does not carry it, its cluster id is fixed). Unset: any node that can reach the
    /// cluster listener is admitted, so keep it on a private network, or use TLS (`tls_*`).
    #[serde(default)]
    pub secret: Option<String>,
    /// A shared subscription's message goes to a member on the node where it was published
    /// when one is online, to another node's members otherwise.
    #[serde(default = "yes")]
    pub prefer_local_shared: bool,
    /// Gossip rounds, in milliseconds.
    #[serde(default = "default_gossip_interval_ms")]
    pub gossip_interval_ms: u64,
    /// Phi-accrual threshold above which a silent node is taken as dead (chitchat; 8 is the
    /// usual value: a node missing about 8 × its usual heartbeat spacing).
    #[serde(default = "default_phi_threshold")]
    pub phi_threshold: f64,
    /// While some known node is unreachable, accept client CONNECTs (VerneMQ's
    /// `allow_register_during_netsplit`); off: refuse them with Server unavailable.
    #[serde(default = "yes")]
    pub allow_register_during_netsplit: bool,
    /// While some known node is unreachable, accept QoS 1/2 PUBLISH (VerneMQ's
    /// `allow_publish_during_netsplit`); off: refuse them (v5 0x97, v3 disconnected).
    #[serde(default = "yes")]
    pub allow_publish_during_netsplit: bool,
    /// How long a dead node's state is kept here (its session of forwarded messages, the
    /// messages queued for it) in case it comes back, in seconds.
    #[serde(default = "default_dead_node_grace_secs")]
    pub dead_node_grace_secs: u64,
    /// How long a client resuming its session here waits for its CONNACK when the session may
    /// be on a node that announced it is stopping (a restart): until that node is back and
    /// answers, at most this many seconds (then Session Present 0; the session follows later).
    #[serde(default = "default_stopped_node_wait_secs")]
    pub stopped_node_wait_secs: u64,
    /// How long a client resuming its session here waits for its CONNACK when the session may
    /// be on a node with a store that went away without notice (killed, crashed, or cut off)
    /// less than this many seconds ago: until that node is back and answers, at most until
    /// this long after it went away (then Session Present 0, and a fence; `docs/CLUSTER.md`,
    /// "After a kill -9"). 0: no wait.
    #[serde(default = "default_lost_node_wait_secs")]
    pub lost_node_wait_secs: u64,
    /// After handing a session over to another node, this node passes on to it what the
    /// other nodes still forward here for the session, until each has marked the end of it,
    /// at most this many seconds (`docs/CLUSTER.md`, "Relay after a handover").
    #[serde(default = "default_handover_relay_secs")]
    pub handover_relay_secs: u64,
    /// A session taken over here: once a node's mark comes back, its link holds what that
    /// node sends until the old node's end of relaying that node's copies is here, at most
    /// this many milliseconds, so the copies stay in order (`docs/CLUSTER.md`, "Relay after a
    /// handover": order). Every other session's copies from that node wait as long. The same
    /// bound for a link that waits for a publisher's old node's notice of its take-over
    /// ("A publisher that moves"). 0: no hold (relayed copies, and what a publisher sent
    /// through its old node, may come after newer ones).
    #[serde(default = "default_relay_order_hold_ms")]
    pub relay_order_hold_ms: u64,
    /// A client that resumed its session here while the node that had it could not be asked
    /// (away past the wait): a QoS 2 PUBLISH it sends again (DUP) with a packet id not known
    /// here waits, unacknowledged, for that node's answer (which brings the ids the old session
    /// had routed), at most this many seconds after the CONNACK; then it is routed, perhaps a
    /// second time (`docs/CLUSTER.md`, "A QoS 2 message sent again past the wait"). The client
    /// is not read meanwhile. 0: routed at once.
    #[serde(default = "default_resent_qos2_hold_secs")]
    pub resent_qos2_hold_secs: u64,
    /// This node's certificate chain (PEM, leaf first) for TLS on node links. With
    /// `tls_key` and `tls_ca`, every link is mutual TLS: this node presents it to the nodes it
    /// connects to, and its cluster listener presents it to the nodes that connect here.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// The CA certificate(s) (PEM) that sign every node's certificate: the only ones trusted
    /// on node links, both ways.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// The DNS name every other node's certificate must carry; unset: the other node's IP
    /// address (as gossip advertises it) must be among its certificate's IP addresses.
    #[serde(default)]
    pub tls_server_name: Option<String>,
}

/// The files of TLS on node links (`[cluster] tls_cert`, `tls_key`, `tls_ca`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTlsFiles<'a> {
    /// This node's certificate chain.
    pub cert: &'a Path,
    /// Its private key.
    pub key: &'a Path,
    /// The CA of every node's certificate.
    pub ca: &'a Path,
}

fn yes() -> bool {
    true
}

fn default_gossip_interval_ms() -> u64 {
    200
}

fn default_phi_threshold() -> f64 {
    8.0
}

fn default_dead_node_grace_secs() -> u64 {
    60
}

fn default_stopped_node_wait_secs() -> u64 {
    15
}

fn default_lost_node_wait_secs() -> u64 {
    10
}

fn default_handover_relay_secs() -> u64 {
    30
}

fn default_relay_order_hold_ms() -> u64 {
    3_000
}

fn default_resent_qos2_hold_secs() -> u64 {
    30
}

/// Why a `[cluster]` table cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClusterConfigError {
    /// The node name is empty or holds characters a client identifier or topic cannot.
    #[error("cluster.node_name {0:?} must be 1-64 characters of [A-Za-z0-9._-]")]
    NodeName(String),
    /// A value is out of range.
    #[error("cluster.{0} is out of range")]
    Range(&'static str),
    /// Some of `tls_cert`, `tls_key`, `tls_ca` are set, not all.
    #[error("cluster.tls_cert, tls_key and tls_ca go together: {0} missing (set all three for TLS on node links, or none)")]
    TlsPartial(String),
    /// `tls_server_name` without the TLS files, or not a DNS name.
    #[error("cluster.tls_server_name {0:?}: needs tls_cert, tls_key and tls_ca, and a DNS name")]
    TlsServerName(String),
}

impl ClusterConfig {
    /// A node named `node_name` listening at `listen`, joining `join`, with default timings.
    pub fn new(node_name: &str, listen: SocketAddr, join: Vec<String>) -> ClusterConfig {
        ClusterConfig {
            node_name: node_name.to_string(),
            listen,
            advertise: None,
            join,
            secret: None,
            prefer_local_shared: true,
            allow_register_during_netsplit: true,
            allow_publish_during_netsplit: true,
            gossip_interval_ms: default_gossip_interval_ms(),
            phi_threshold: default_phi_threshold(),
            dead_node_grace_secs: default_dead_node_grace_secs(),
            stopped_node_wait_secs: default_stopped_node_wait_secs(),
            lost_node_wait_secs: default_lost_node_wait_secs(),
            handover_relay_secs: default_handover_relay_secs(),
            relay_order_hold_ms: default_relay_order_hold_ms(),
            resent_qos2_hold_secs: default_resent_qos2_hold_secs(),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_server_name: None,
        }
    }

    /// Checks names and ranges.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        let name_ok = !self.node_name.is_empty()
            && self.node_name.len() <= 64
            && self
                .node_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err(ClusterConfigError::NodeName(self.node_name.clone()));
        }
        if !(10..=60_000).contains(&self.gossip_interval_ms) {
            return Err(ClusterConfigError::Range("gossip_interval_ms"));
        }
        if !(1.0..=100.0).contains(&self.phi_threshold) {
            return Err(ClusterConfigError::Range("phi_threshold"));
        }
        if !(1..=3_600).contains(&self.handover_relay_secs) {
            return Err(ClusterConfigError::Range("handover_relay_secs"));
        }
        if self.lost_node_wait_secs > 300 {
            return Err(ClusterConfigError::Range("lost_node_wait_secs"));
        }
        if self.relay_order_hold_ms > 60_000 {
            return Err(ClusterConfigError::Range("relay_order_hold_ms"));
        }
        if self.resent_qos2_hold_secs > 3_600 {
            return Err(ClusterConfigError::Range("resent_qos2_hold_secs"));
        }
        self.validate_tls()
    }

    fn validate_tls(&self) -> Result<(), ClusterConfigError> {
        let keys = [
            ("tls_cert", self.tls_cert.is_some()),
            ("tls_key", self.tls_key.is_some()),
            ("tls_ca", self.tls_ca.is_some()),
        ];
        let missing: Vec<&str> = keys
            .iter()
            .filter(|(_, set)| !set)
            .map(|(key, _)| *key)
            .collect();
        if !missing.is_empty() && missing.len() < keys.len() {
            return Err(ClusterConfigError::TlsPartial(missing.join(", ")));
        }
        if let Some(name) = &self.tls_server_name {
            let dns_like = !name.is_empty()
                && name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '*'));
            if self.link_tls().is_none() || !dns_like {
                return Err(ClusterConfigError::TlsServerName(name.clone()));
            }
        }
        Ok(())
    }

    /// The files of TLS on node links, when all three are set (see [`ClusterConfig::validate`]
    /// for a partial set).
    pub fn link_tls(&self) -> Option<LinkTlsFiles<'_>> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(LinkTlsFiles { cert, key, ca }),
            _ => None,
        }
    }

    /// The netsplit policy for the core.
    pub fn split_policy(&self) -> hayate_core::cluster::SplitPolicy {
        hayate_core::cluster::SplitPolicy {
            allow_register: self.allow_register_during_netsplit,
            allow_publish: self.allow_publish_during_netsplit,
        }
    }

    /// The address the other nodes reach this one at.
    pub fn advertised(&self) -> SocketAddr {
        self.advertise.unwrap_or(self.listen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        assert!(ClusterConfig::new("n1", addr, vec![]).validate().is_ok());
        for bad in ["", "a/b", "a b", "#", &"x".repeat(65)] {
            assert_eq!(
                ClusterConfig::new(bad, addr, vec![]).validate(),
                Err(ClusterConfigError::NodeName(bad.to_string()))
            );
        }
    }

    #[test]
    fn toml_defaults() {
        let config: ClusterConfig =
            toml_like(r#"{"node_name":"a","listen":"127.0.0.1:7001"}"#).unwrap();
        assert!(config.prefer_local_shared);
        assert_eq!(config.gossip_interval_ms, 200);
        assert_eq!(config.lost_node_wait_secs, 10);
        assert_eq!(config.relay_order_hold_ms, 3_000);
        assert_eq!(config.advertised(), "127.0.0.1:7001".parse().unwrap());
    }

    #[test]
    fn the_relay_order_hold_is_bounded() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut config = ClusterConfig::new("n1", addr, vec![]);
        for ok in [0, 60_000] {
            config.relay_order_hold_ms = ok;
            assert!(config.validate().is_ok(), "{ok}");
        }
        config.relay_order_hold_ms = 60_001;
        assert_eq!(
            config.validate(),
            Err(ClusterConfigError::Range("relay_order_hold_ms"))
        );
    }

    #[test]
    fn tls_keys_go_together() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut config = ClusterConfig::new("n1", addr, vec![]);
        assert!(config.validate().is_ok());
        assert_eq!(config.link_tls(), None);
        config.tls_cert = Some("node.pem".into());
        let error = config.validate().unwrap_err();
        assert_eq!(
            error,
            ClusterConfigError::TlsPartial("tls_key, tls_ca".into())
        );
        assert!(
            error.to_string().contains("tls_key, tls_ca missing"),
            "{error}"
        );
        config.tls_key = Some("node.key".into());
        assert_eq!(
            config.validate(),
            Err(ClusterConfigError::TlsPartial("tls_ca".into()))
        );
        config.tls_ca = Some("ca.pem".into());
        assert!(config.validate().is_ok());
        assert_eq!(config.link_tls().map(|f| f.ca), Some(Path::new("ca.pem")));
        config.tls_server_name = Some("bad name".into());
        assert!(matches!(
            config.validate(),
            Err(ClusterConfigError::TlsServerName(_))
        ));
        config.tls_server_name = Some("nodes.cluster.internal".into());
        assert!(config.validate().is_ok());
        // A server name without the files is refused as well.
        config.tls_cert = None;
        config.tls_key = None;
        config.tls_ca = None;
        assert!(matches!(
            config.validate(),
            Err(ClusterConfigError::TlsServerName(_))
        ));
    }

    #[test]
    fn tls_keys_load_from_the_table() {
        let config: ClusterConfig = toml_like(
            r#"{"node_name":"a","listen":"127.0.0.1:7001","tls_cert":"a.pem","tls_key":"a.key","tls_ca":"ca.pem"}"#,
        )
        .unwrap();
        assert!(config.validate().is_ok());
        let files = config.link_tls().expect("TLS files");
        assert_eq!(files.key, Path::new("a.key"));
        let partial: ClusterConfig =
            toml_like(r#"{"node_name":"a","listen":"127.0.0.1:7001","tls_ca":"ca.pem"}"#).unwrap();
        assert_eq!(
            partial.validate(),
            Err(ClusterConfigError::TlsPartial("tls_cert, tls_key".into()))
        );
    }

    fn toml_like(json: &str) -> serde_json::Result<ClusterConfig> {
        serde_json::from_str(json)
    }
}
