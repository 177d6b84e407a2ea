//! A real netsplit: three `hayate serve` nodes in their own network namespaces, each with one
//! interface on a cluster network (gossip and node links) and one on a client network (the
//! test's clients, in the root namespace). Cutting a node's cluster interface splits the
//! cluster while its clients still reach it. With the default policy (availability), both
//! sides serve their clients during the split, and after the heal what each side queued for
//! the other's subscribers is delivered, and a client connected on both sides keeps only its
//! later connection (docs/CLUSTER.md, "Netsplit policy").
//!
//! Needs root (network namespaces) and `ip`; without them the test says so and does nothing.

use hayate_codec::{Packet, ProtocolVersion, PubResp, Publish, QoS, ReasonCode};
use hayate_testkit::{connect_packet, RawClient, Received};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");
const V5: ProtocolVersion = ProtocolVersion::V5;

/// Runs `ip ARGS...`, panicking with its output on failure.
fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The namespaces, bridges and node processes; removed on drop.
struct Net {
    tag: String,
    nodes: Vec<Child>,
    logs: tempfile::TempDir,
}

impl Net {
    fn ns(&self, k: usize) -> String {
        format!("{}n{k}", self.tag)
    }

    fn cluster_bridge(&self) -> String {
        format!("{}c", self.tag)
    }

    fn client_bridge(&self) -> String {
        format!("{}k", self.tag)
    }

    /// Client address of node `k` (1-based).
    fn mqtt(&self, k: usize) -> SocketAddr {
        format!("10.202.{}.{k}:1883", self.subnet())
            .parse()
            .unwrap()
    }

    fn subnet(&self) -> u32 {
        std::process::id() % 200 + 20
    }

    fn setup(count: usize) -> Net {
        let tag = format!("hy{}", std::process::id() % 100_000);
        let net = Net {
            tag,
            nodes: Vec::new(),
            logs: tempfile::tempdir().unwrap(),
        };
        let s = net.subnet();
        for (bridge, net_prefix) in [(net.cluster_bridge(), 201), (net.client_bridge(), 202)] {
            ip(&["link", "add", &bridge, "type", "bridge"]);
            ip(&["link", "set", &bridge, "up"]);
            if net_prefix == 202 {
                ip(&["addr", "add", &format!("10.202.{s}.254/24"), "dev", &bridge]);
            }
        }
        for k in 1..=count {
            let ns = net.ns(k);
            ip(&["netns", "add", &ns]);
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            for (side, bridge, prefix) in [
                ("c", net.cluster_bridge(), 201),
                ("k", net.client_bridge(), 202),
            ] {
                let host = format!("{}{side}{k}", net.tag);
                ip(&["link", "add", &host, "type", "veth", "peer", "name", "tmp0"]);
                ip(&["link", "set", "tmp0", "netns", &ns]);
                ip(&["link", "set", &host, "master", &bridge]);
                ip(&["link", "set", &host, "up"]);
                let inner = format!("{side}0");
                ip(&[
                    "netns", "exec", &ns, "ip", "link", "set", "tmp0", "name", &inner,
                ]);
                let addr = format!("10.{prefix}.{s}.{k}/24");
                ip(&[
                    "netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", &inner,
                ]);
                ip(&["netns", "exec", &ns, "ip", "link", "set", &inner, "up"]);
            }
        }
        net
    }

    fn start_node(&mut self, k: usize) {
        let s = self.subnet();
        let log = std::fs::File::create(self.logs.path().join(format!("n{k}.log"))).unwrap();
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.ns(k), HAYATE, "serve", "-l"])
            .arg(self.mqtt(k).to_string())
            .args(["--node-name", &format!("n{k}"), "--cluster-listen"])
            .arg(format!("10.201.{s}.{k}:7000"));
        if k > 1 {
            command.arg("--join").arg(format!("10.201.{s}.1:7000"));
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("hayate serve starts");
        self.nodes.push(child);
    }

    /// Takes node `k`'s cluster interface down (`up` false) or brings it back.
    fn cluster_link(&self, k: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&[
            "netns",
            "exec",
            &self.ns(k),
            "ip",
            "link",
            "set",
            "c0",
            state,
        ]);
    }

    fn log(&self, k: usize) -> String {
        std::fs::read_to_string(self.logs.path().join(format!("n{k}.log"))).unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for child in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        for k in 1..=3 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(k)])
                .status();
        }
        for bridge in [self.cluster_bridge(), self.client_bridge()] {
            let _ = Command::new("ip").args(["link", "del", &bridge]).status();
        }
    }
}

async fn client(addr: SocketAddr, id: &str, clean: bool) -> RawClient {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await
        {
            drop(stream);
            break;
        }
        assert!(Instant::now() < deadline, "{addr} not reachable");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = RawClient::connect_tcp(addr, V5).await;
    let mut connect = connect_packet(V5, id, clean);
    connect.properties.session_expiry_interval = Some(600);
    let connack = client.connect(connect).await;
    assert_eq!(connack.reason_code.0, 0, "{connack:?}");
    client
}

/// `$SYS/broker/cluster/nodes` of the node at `addr`.
async fn status(addr: SocketAddr) -> serde_json::Value {
    let mut client = client(addr, "", true).await;
    client
        .subscribe("$SYS/broker/cluster/nodes", QoS::AtMostOnce, 1)
        .await;
    match client.recv_timeout(Duration::from_secs(5)).await {
        Received::Packet(Packet::Publish(p)) => serde_json::from_slice(&p.payload).unwrap(),
        other => panic!("no status: {other:?}"),
    }
}

async fn wait_for(net: &Net, k: usize, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let s = status(net.mqtt(k)).await;
        if check(&s) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "n{k} never {what}: {s}\n{}",
            net.log(k)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn sees(s: &serde_json::Value, peer: &str, live: bool) -> bool {
    let node = &s["nodes"][peer];
    node["live"].as_bool() == Some(live) && (!live || node["link_up"].as_bool() == Some(true))
}

/// Acknowledged PUBLISH payloads until `quiet` passes without one.
async fn drain(client: &mut RawClient, quiet: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Received::Packet(packet) = client.recv_timeout(quiet).await {
        if let Packet::Publish(Publish {
            payload, packet_id, ..
        }) = packet
        {
            if let Some(id) = packet_id {
                client.send(Packet::PubAck(PubResp::new(id))).await;
            }
            got.push(String::from_utf8_lossy(&payload).into_owned());
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_serve_during_a_split_and_catch_up_after_the_heal() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if !root || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: needs root and iproute2 for network namespaces");
        return;
    }
    let mut net = Net::setup(3);
    for k in 1..=3 {
        net.start_node(k);
    }
    for k in 1..=3 {
        let others: Vec<String> = (1..=3)
            .filter(|j| *j != k)
            .map(|j| format!("n{j}"))
            .collect();
        wait_for(&net, k, "converged", |s| {
            others.iter().all(|o| sees(s, o, true))
        })
        .await;
    }
    let mut s1 = client(net.mqtt(1), "s1", true).await;
    s1.subscribe("p/#", QoS::AtLeastOnce, 1).await;
    let mut s3 = client(net.mqtt(3), "s3", true).await;
    s3.subscribe("p/#", QoS::AtLeastOnce, 1).await;
    let mut p1 = client(net.mqtt(1), "p1", true).await;
    let mut p3 = client(net.mqtt(3), "p3", true).await;
    // Routes in place: a message from each side reaches both subscribers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        p1.publish("p/probe", b"probe", QoS::AtLeastOnce, false, 1)
            .await;
        let got = drain(&mut s3, Duration::from_millis(300)).await;
        drain(&mut s1, Duration::from_millis(100)).await;
        if !got.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "routes never in place");
    }
    let mut dual_old = client(net.mqtt(1), "dual", true).await;

    // Split n3 off.
    net.cluster_link(3, false);
    wait_for(&net, 1, "sees n3 dead", |s| sees(s, "n3", false)).await;
    wait_for(&net, 3, "sees n1 dead", |s| sees(s, "n1", false)).await;

    // Both sides serve their own clients.
    for i in 0..5u16 {
        p1.publish(
            &format!("p/{i}"),
            format!("a{i}").as_bytes(),
            QoS::AtLeastOnce,
            false,
            10 + i,
        )
        .await;
        p3.publish(
            &format!("p/{i}"),
            format!("b{i}").as_bytes(),
            QoS::AtLeastOnce,
            false,
            10 + i,
        )
        .await;
    }
    assert_eq!(
        drain(&mut s1, Duration::from_millis(500)).await,
        ["a0", "a1", "a2", "a3", "a4"]
    );
    assert_eq!(
        drain(&mut s3, Duration::from_millis(500)).await,
        ["b0", "b1", "b2", "b3", "b4"]
    );
    // The same client id registers on the other side too (allow_register_during_netsplit).
    let _dual_new = client(net.mqtt(3), "dual", true).await;

    // Heal: what each side queued for the other's subscribers arrives, and the client
    // connected on both sides keeps only its later connection.
    net.cluster_link(3, true);
    for k in [1, 3] {
        let others: Vec<String> = (1..=3)
            .filter(|j| *j != k)
            .map(|j| format!("n{j}"))
            .collect();
        wait_for(&net, k, "healed", |s| {
            others.iter().all(|o| sees(s, o, true))
        })
        .await;
    }
    let mut got3 = drain(&mut s3, Duration::from_secs(2)).await;
    let mut got1 = drain(&mut s1, Duration::from_secs(2)).await;
    got3.sort();
    got1.sort();
    assert_eq!(
        got3,
        ["a0", "a1", "a2", "a3", "a4"],
        "n3's subscriber after the heal\n{}",
        net.log(1)
    );
    assert_eq!(
        got1,
        ["b0", "b1", "b2", "b3", "b4"],
        "n1's subscriber after the heal\n{}",
        net.log(3)
    );
    let closing = dual_old.expect_closed().await;
    assert!(
        closing.iter().any(|p| matches!(p, Packet::Disconnect(d) if d.reason_code == ReasonCode::SESSION_TAKEN_OVER)),
        "the earlier connection of `dual` is taken over after the heal: {closing:?}"
    );
}
