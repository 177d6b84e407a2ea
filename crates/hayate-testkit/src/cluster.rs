//! Clusters of real `hayate serve` processes on loopback, for the cluster tests.

use crate::{connect_packet, free_port, RawClient, Received};
use hayate_codec::{Packet, ProtocolVersion, PubResp, Publish, QoS};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// One node: its process, MQTT and cluster addresses, and its log file.
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Its MQTT listener.
    pub mqtt: SocketAddr,
    /// Its cluster listener (gossip over UDP, links over TCP).
    pub cluster: SocketAddr,
    /// Where its standard output and error go.
    pub log: PathBuf,
    child: Option<Child>,
    bin: PathBuf,
    join: Vec<SocketAddr>,
    extra: Vec<String>,
}

impl Node {
    /// Starts `hayate serve` (`bin`) as node `name`, joining `join`, with `extra` arguments.
    pub fn start(bin: &Path, dir: &Path, name: &str, join: &[SocketAddr], extra: &[&str]) -> Node {
        let mut node = Node {
            name: name.to_string(),
            mqtt: ([127, 0, 0, 1], free_port()).into(),
            cluster: ([127, 0, 0, 1], free_port()).into(),
            log: dir.join(format!("{name}.log")),
            child: None,
            bin: bin.to_path_buf(),
            join: join.to_vec(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut command = Command::new(&self.bin);
        command
            // `TEST_NODE_LOG` (tracing filter directives) overrides the nodes' log level.
            .args(["serve", "--log-level", &log_level(), "-l"])
            .arg(self.mqtt.to_string())
            .args(["--node-name", &self.name, "--cluster-listen"])
            .arg(self.cluster.to_string());
        if !self.join.is_empty() {
            let join: Vec<String> = self.join.iter().map(|a| a.to_string()).collect();
            command.arg("--join").arg(join.join(","));
        }
        command.args(&self.extra);
        // Logs go to standard output.
        let child = command
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("hayate serve starts");
        self.child = Some(child);
    }

    /// Kills the process with SIGKILL (nothing is flushed, no goodbye to the others).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process with SIGTERM (a graceful shutdown: it leaves the cluster) and waits
    /// for it to exit.
    pub fn terminate(&mut self) {
        self.begin_terminate();
        self.wait_exit();
    }

    /// Sends SIGTERM and returns at once (the node shuts down meanwhile; [`Node::wait_exit`]).
    pub fn begin_terminate(&self) {
        self.signal("-TERM");
    }

    /// Stops the process with SIGSTOP: it holds its sockets open but answers nothing (a node
    /// that hangs, or a network that drops its packets) until [`Node::thaw`].
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Asks the process to read its files again (SIGHUP).
    pub fn hangup(&self) {
        self.signal("-HUP");
    }

    /// Lets a frozen process run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Starts the node again on the same addresses (a new incarnation).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The node's log so far (for failure messages).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the MQTT listener accepts connections.
    pub async fn wait_listening(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(self.mqtt).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} did not start:\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A v5 client connected to this node (`clean_start`).
    pub async fn client(&self, client_id: &str, clean_start: bool) -> RawClient {
        let mut client = RawClient::connect_tcp(self.mqtt, ProtocolVersion::V5).await;
        let connack = client
            .connect(connect_packet(ProtocolVersion::V5, client_id, clean_start))
            .await;
        assert_eq!(connack.reason_code.0, 0, "CONNACK refused: {connack:?}");
        client
    }

    /// This node's view of the cluster (`$SYS/broker/cluster/nodes`) as JSON.
    pub async fn status(&self) -> serde_json::Value {
        let mut client = RawClient::connect_tcp(self.mqtt, ProtocolVersion::V5).await;
        client
            .connect(connect_packet(ProtocolVersion::V5, "", true))
            .await;
        client
            .subscribe("$SYS/broker/cluster/nodes", QoS::AtMostOnce, 1)
            .await;
        match client.recv_timeout(Duration::from_secs(5)).await {
            Received::Packet(Packet::Publish(publish)) => {
                serde_json::from_slice(&publish.payload).expect("status JSON")
            }
            other => panic!("no cluster status from {}: {other:?}", self.name),
        }
    }

    /// Waits until this node sees exactly `others` live with their links up.
    pub async fn wait_sees(&self, others: &[&str], within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let status = self.status().await;
            let nodes = status["nodes"].as_object().cloned().unwrap_or_default();
            let up = |name: &str| {
                nodes.get(name).is_some_and(|n| {
                    n["live"].as_bool() == Some(true) && n["link_up"].as_bool() == Some(true)
                })
            };
            if others.iter().all(|name| up(name)) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} does not see {others:?} up: {status}\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Nodes started together, each joining the first.
pub struct Cluster {
    /// The nodes, `n1`, `n2`, ...
    pub nodes: Vec<Node>,
    /// Holds the logs.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `count` nodes and waits until every node sees every other one.
    pub async fn start(bin: &Path, count: usize, extra: &[&str]) -> Cluster {
        Cluster::start_nodes(bin, count, extra, false).await
    }

    /// As [`Cluster::start`], each node with its own data directory (`--data-dir`), kept
    /// across restarts.
    pub async fn start_durable(bin: &Path, count: usize, extra: &[&str]) -> Cluster {
        Cluster::start_nodes(bin, count, extra, true).await
    }

    async fn start_nodes(bin: &Path, count: usize, extra: &[&str], durable: bool) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes: Vec<Node> = Vec::new();
        for i in 1..=count {
            let name = format!("n{i}");
            let join: Vec<SocketAddr> = nodes.first().map(|n| n.cluster).into_iter().collect();
            let data = dir.path().join(format!("{name}.data"));
            let data = data.to_str().expect("a UTF-8 temp path").to_string();
            let mut args: Vec<&str> = extra.to_vec();
            if durable {
                args.extend(["--data-dir", &data]);
            }
            nodes.push(Node::start(bin, dir.path(), &name, &join, &args));
        }
        let cluster = Cluster { nodes, dir };
        for node in &cluster.nodes {
            node.wait_listening().await;
        }
        cluster.wait_converged(Duration::from_secs(20)).await;
        cluster
    }

    /// Every node's log, each headed by the node's name (for a failed assertion).
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("{}:\n{}", node.name, node.log_text()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until every node sees every other one live with its link up.
    pub async fn wait_converged(&self, within: Duration) {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        for node in &self.nodes {
            let others: Vec<&str> = names
                .iter()
                .filter(|n| **n != node.name)
                .map(String::as_str)
                .collect();
            node.wait_sees(&others, within).await;
        }
    }
}

/// Publishes probes on `topic` from `publisher` until `subscriber` receives one: the route of
/// its subscription has reached the publisher's node. Drains the probes.
pub async fn await_route(publisher: &mut RawClient, subscriber: &mut RawClient, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        publisher
            .publish(topic, b"probe", QoS::AtMostOnce, false, 0)
            .await;
        if let Received::Packet(Packet::Publish(p)) =
            subscriber.recv_timeout(Duration::from_millis(200)).await
        {
            subscriber.ack(&p).await;
            // Probes still in flight.
            while let Received::Packet(Packet::Publish(p)) =
                subscriber.recv_timeout(Duration::from_millis(300)).await
            {
                subscriber.ack(&p).await;
            }
            return;
        }
        assert!(Instant::now() < deadline, "route for {topic} never arrived");
    }
}

/// Every PUBLISH received within `quiet` of the previous one, acknowledged (QoS 2 flows
/// completed as their PUBRELs come, interleaved with other messages).
pub async fn drain(client: &mut RawClient, quiet: Duration) -> Vec<Publish> {
    drain_at_most(client, quiet, usize::MAX).await
}

/// As [`drain`], returning once `max` PUBLISHes came (traffic that never pauses for `quiet`
/// does not hold it up).
pub async fn drain_at_most(client: &mut RawClient, quiet: Duration, max: usize) -> Vec<Publish> {
    let mut got = Vec::new();
    while got.len() < max {
        let Received::Packet(packet) = client.recv_timeout(quiet).await else {
            break;
        };
        match packet {
            Packet::Publish(publish) => {
                match (publish.qos, publish.packet_id) {
                    (QoS::AtLeastOnce, Some(id)) => {
                        client.send(Packet::PubAck(PubResp::new(id))).await
                    }
                    (QoS::ExactlyOnce, Some(id)) => {
                        client.send(Packet::PubRec(PubResp::new(id))).await
                    }
                    _ => {}
                }
                got.push(publish);
            }
            Packet::PubRel(rel) => {
                client
                    .send(Packet::PubComp(PubResp::new(rel.packet_id)))
                    .await
            }
            _ => {}
        }
    }
    got
}

/// The payloads of `got`, as text.
pub fn payloads(got: &[Publish]) -> Vec<String> {
    got.iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect()
}

/// Connects `client_id` over MQTT 5 with a session kept 600 s (clean start off).
pub async fn connect_persistent(
    mqtt: std::net::SocketAddr,
    client_id: &'static str,
) -> (RawClient, hayate_codec::ConnAck) {
    let mut client = RawClient::connect_tcp(mqtt, hayate_codec::ProtocolVersion::V5).await;
    let mut connect = crate::connect_packet(hayate_codec::ProtocolVersion::V5, client_id, false);
    connect.properties.session_expiry_interval = Some(600);
    let connack = client.connect(connect).await;
    (client, connack)
}

/// Publishes `m-I` on `roll/x` at QoS 2 for each I, `gap` apart.
pub async fn publish_numbered(
    publisher: &mut RawClient,
    range: std::ops::Range<u16>,
    gap: Duration,
) {
    for i in range {
        let payload = format!("m-{i}");
        publisher
            .publish("roll/x", payload.as_bytes(), QoS::ExactlyOnce, false, i + 1)
            .await;
        tokio::time::sleep(gap).await;
    }
}

/// How often each payload arrived (`publish_numbered`'s `m-N` and the like): what never came,
/// what came more than once.
#[derive(Debug)]
pub struct Tally<'a> {
    seen: std::collections::HashMap<&'a str, u32>,
}

impl<'a> Tally<'a> {
    /// Counts `got`.
    pub fn of(got: &'a [String]) -> Tally<'a> {
        let mut seen = std::collections::HashMap::new();
        for payload in got {
            *seen.entry(payload.as_str()).or_default() += 1;
        }
        Tally { seen }
    }

    /// Different payloads received.
    pub fn distinct(&self) -> usize {
        self.seen.len()
    }

    /// Payloads received more than once, sorted.
    pub fn twice(&self) -> Vec<&'a str> {
        let mut twice: Vec<&str> = self
            .seen
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(p, _)| *p)
            .collect();
        twice.sort_unstable();
        twice
    }

    /// Of `m-0` .. `m-{total - 1}`, those never received, in order.
    pub fn missing(&self, total: u16) -> Vec<String> {
        (0..total)
            .map(|i| format!("m-{i}"))
            .filter(|p| !self.seen.contains_key(p.as_str()))
            .collect()
    }
}

/// How many first copies of `m-N` came after a higher N (the soak's "reordered").
pub fn reordered_first_copies(got: &[String]) -> usize {
    let mut seen = std::collections::HashSet::new();
    let mut highest = None;
    let mut reordered = 0;
    for n in got
        .iter()
        .filter_map(|p| p.strip_prefix("m-")?.parse::<u32>().ok())
    {
        if !seen.insert(n) {
            continue;
        }
        if highest.is_some_and(|h| n < h) {
            reordered += 1;
        }
        highest = highest.max(Some(n));
    }
    reordered
}

/// Writes a configuration file into `dir` whose `[cluster]` table holds `keys` (for
/// `hayate serve --config`: the command line's `--node-name` and `--cluster-listen` go over the
/// table's name and address).
pub fn cluster_config(dir: &Path, keys: &str) -> PathBuf {
    let path = dir.join("cluster.toml");
    let text = format!("[cluster]\nnode_name = \"x\"\nlisten = \"127.0.0.1:1\"\n{keys}\n");
    std::fs::write(&path, text).expect("write the configuration file");
    path
}

/// The nodes' `--log-level`: `info`, or what `TEST_NODE_LOG` says.
fn log_level() -> String {
    std::env::var("TEST_NODE_LOG").unwrap_or_else(|_| "info".to_string())
}
