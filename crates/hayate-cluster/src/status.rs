//! A node's view of the cluster: published retained on `$SYS/broker/cluster/nodes`, read back
//! by `hayate cluster status` over MQTT.

use crate::client::NodeClient;
use crate::ClusterError;
use hayate_codec::{Packet, PacketId, Properties, QoS, Subscribe, SubscriptionOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

/// Where each node publishes its view.
pub const STATUS_TOPIC: &str = "$SYS/broker/cluster/nodes";

/// One node's view of the cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// This node's name.
    pub node: String,
    /// Its cluster address.
    pub address: String,
    /// Its incarnation (start time in ms since the Unix epoch).
    pub generation: u64,
    /// Filters its clients subscribe to (its route set).
    pub routes: usize,
    /// The other nodes it knows, by name.
    pub nodes: BTreeMap<String, NodeStatus>,
}

/// Another node as seen from one node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeStatus {
    /// Its cluster address.
    pub address: String,
    /// Its incarnation.
    pub generation: u64,
    /// Gossip has it alive.
    pub live: bool,
    /// It announced that it is stopping (a restart or a shutdown): its absence is no split.
    #[serde(default)]
    pub stopping: bool,
    /// This node's link to it is connected.
    pub link_up: bool,
    /// Messages this node received from it.
    pub messages_in: u64,
    /// Link connections made to it.
    pub connects: u64,
}

impl Status {
    /// A table for people.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "node {} at {} (generation {}), {} route filters",
            self.node, self.address, self.generation, self.routes
        );
        let _ = writeln!(
            out,
            "{:<20} {:<22} {:<7} {:<5} {:>12} {:>8}",
            "NODE", "ADDRESS", "STATE", "LINK", "MSGS FROM", "CONNECTS"
        );
        for (name, node) in &self.nodes {
            let _ = writeln!(
                out,
                "{:<20} {:<22} {:<7} {:<5} {:>12} {:>8}",
                name,
                node.address,
                match (node.live, node.stopping) {
                    (true, _) => "live",
                    (false, true) => "stopped",
                    (false, false) => "dead",
                },
                if node.link_up { "up" } else { "down" },
                node.messages_in,
                node.connects
            );
        }
        out
    }
}

/// Asks the node whose MQTT listener is at `mqtt` for its view.
pub async fn fetch(mqtt: SocketAddr, timeout: Duration) -> Result<Status, ClusterError> {
    tokio::time::timeout(timeout, fetch_inner(mqtt))
        .await
        .map_err(|_| ClusterError::Timeout("the cluster status (is the node in a cluster?)"))?
}

async fn fetch_inner(mqtt: SocketAddr) -> Result<Status, ClusterError> {
    let client_id = format!("hayate-cluster-status-{:08x}", rand::random::<u32>());
    let mut client = NodeClient::connect(mqtt, None, &client_id, None, true, 30, 0)
        .await?
        .client;
    client.queue(&Packet::Subscribe(Subscribe {
        packet_id: PacketId::new(1).expect("non-zero"),
        filters: vec![(
            STATUS_TOPIC.into(),
            SubscriptionOptions::with_qos(QoS::AtMostOnce),
        )],
        properties: Properties::default(),
    }))?;
    client.flush().await?;
    loop {
        match client.next_buffered()? {
            Some(Packet::Publish(publish)) => {
                let status = serde_json::from_slice(&publish.payload)
                    .map_err(|e| ClusterError::Protocol(format!("status: {e}")));
                client.disconnect().await;
                return status;
            }
            Some(_) => {}
            None => client.read().await?,
        }
    }
}
