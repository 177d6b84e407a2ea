//! TLS on node links (docs/CLUSTER.md, "TLS on node links"): real `hayate serve` processes on
//! loopback, each with its own certificate signed by the cluster's CA. Links are mutual TLS
//! and carry messages as over TCP; the cluster listener does not speak plain MQTT; a node
//! whose certificate another CA signed is refused both ways; unusable files stop a node at
//! start, naming the file.

use bytes::BytesMut;
use hayate_codec::{encode, Packet, ProtocolVersion, QoS};
use hayate_testkit::cluster::{await_route, drain, payloads, Cluster, Node};
use hayate_testkit::connect_packet;
use hayate_testkit::pki::make_node_pki;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");

fn bin() -> &'static Path {
    Path::new(HAYATE)
}

/// A configuration file for node `name` whose `[cluster]` table holds `keys` (the command
/// line's `--node-name` and `--cluster-listen` go over the table's name and address).
fn node_config(dir: &Path, name: &str, keys: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!("[cluster]\nnode_name = \"x\"\nlisten = \"127.0.0.1:1\"\n{keys}\n");
    std::fs::write(&path, text).expect("write the configuration file");
    path
}

fn tls_keys(cert: &Path, key: &Path, ca: &Path) -> String {
    format!(
        "tls_cert = {:?}\ntls_key = {:?}\ntls_ca = {:?}\n",
        cert.display().to_string(),
        key.display().to_string(),
        ca.display().to_string()
    )
}

/// Starts node `name` with the configuration file `config`, joining `join`.
fn start_node(dir: &Path, name: &str, join: &[SocketAddr], config: &Path) -> Node {
    let config = config.to_str().expect("a UTF-8 temp path");
    Node::start(bin(), dir, name, join, &["--config", config])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_forward_qos1_over_mutual_tls_links() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = make_node_pki(dir.path(), "good", &["n1", "n2", "n3"], "127.0.0.1");
    let mut nodes: Vec<Node> = Vec::new();
    for (i, (cert, key)) in pki.nodes.iter().enumerate() {
        let name = format!("n{}", i + 1);
        let config = node_config(dir.path(), &name, &tls_keys(cert, key, &pki.ca));
        let join: Vec<SocketAddr> = nodes.first().map(|n| n.cluster).into_iter().collect();
        nodes.push(start_node(dir.path(), &name, &join, &config));
    }
    for node in &nodes {
        node.wait_listening().await;
    }
    let cluster = Cluster { nodes, dir };
    cluster.wait_converged(Duration::from_secs(20)).await;
    let [n1, n2, n3] = &cluster.nodes[..] else {
        unreachable!()
    };

    // The cluster listener speaks TLS only: a plain MQTT CONNECT gets no CONNACK.
    assert_no_plain_mqtt(n2.cluster).await;

    let mut sub3 = n3.client("sub3", true).await;
    sub3.subscribe("tls/#", QoS::AtLeastOnce, 1).await;
    let mut sub2 = n2.client("sub2", true).await;
    sub2.subscribe("tls/x", QoS::AtLeastOnce, 1).await;
    let mut publisher = n1.client("pub", true).await;
    await_route(&mut publisher, &mut sub3, "tls/x").await;
    await_route(&mut publisher, &mut sub2, "tls/x").await;
    // The probes for sub2's route reached sub3 as well.
    drain(&mut sub3, Duration::from_millis(300)).await;

    let sent: Vec<String> = (0..200).map(|i| format!("m-{i}")).collect();
    for (i, payload) in sent.iter().enumerate() {
        publisher
            .publish(
                "tls/x",
                payload.as_bytes(),
                QoS::AtLeastOnce,
                false,
                i as u16 + 1,
            )
            .await;
    }
    for (name, subscriber) in [("sub3", &mut sub3), ("sub2", &mut sub2)] {
        let got = drain(subscriber, Duration::from_secs(2)).await;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for payload in payloads(&got) {
            *counts.entry(payload).or_default() += 1;
        }
        let expected: BTreeMap<String, usize> = sent.iter().map(|p| (p.clone(), 1)).collect();
        if counts != expected {
            let wrong: Vec<_> = expected
                .keys()
                .chain(counts.keys())
                .filter(|p| counts.get(*p) != expected.get(*p))
                .map(|p| (p, counts.get(p).copied().unwrap_or(0)))
                .collect();
            panic!(
                "{name}: every payload once; got {} messages; payload, times received: {wrong:?}",
                got.len()
            );
        }
        assert!(got.iter().all(|p| p.qos == QoS::AtLeastOnce));
    }
    // The links' handshakes all succeeded; the plain connection to n2 was logged as refused.
    for node in [n1, n3] {
        let log = node.log_text();
        assert!(
            !log.contains("cluster_link_handshake_failed"),
            "{}: {log}",
            node.name
        );
    }
    let log2 = n2.log_text();
    assert_eq!(
        log2.matches("cluster_link_handshake_failed").count(),
        1,
        "{log2}"
    );
}

/// Sends a CONNECT in plain TCP to `cluster` and asserts that no CONNACK comes back (the
/// TLS server takes it as a broken handshake and closes).
async fn assert_no_plain_mqtt(cluster: SocketAddr) {
    let mut stream = tokio::net::TcpStream::connect(cluster)
        .await
        .expect("tcp connect");
    let mut bytes = BytesMut::new();
    let connect = connect_packet(ProtocolVersion::V5, "$cluster/plain", true);
    encode(
        &Packet::Connect(Box::new(connect)),
        ProtocolVersion::V5,
        &mut bytes,
    )
    .expect("encode");
    stream.write_all(&bytes).await.expect("write CONNECT");
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply)).await;
    // A CONNACK is 0x20; a TLS server answers a record it cannot parse with an alert (0x15)
    // or nothing, and closes.
    assert!(
        reply.first() != Some(&0x20),
        "plain MQTT answered on a TLS cluster listener: {reply:?}"
    );
    assert!(
        read.is_ok(),
        "the cluster listener kept a plain connection open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_certificate_of_another_ca_gets_no_link() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = make_node_pki(dir.path(), "good", &["n1"], "127.0.0.1");
    let rogue = make_node_pki(dir.path(), "rogue", &["n2"], "127.0.0.1");
    let (cert1, key1) = &good.nodes[0];
    let config1 = node_config(dir.path(), "n1", &tls_keys(cert1, key1, &good.ca));
    // The rogue node trusts the cluster's CA, so only its own certificate is wrong: n1 must
    // refuse it as a client (n2's link to n1) and as a server (n1's link to n2).
    let (cert2, key2) = &rogue.nodes[0];
    let config2 = node_config(dir.path(), "n2", &tls_keys(cert2, key2, &good.ca));
    let n1 = start_node(dir.path(), "n1", &[], &config1);
    n1.wait_listening().await;
    let n2 = start_node(dir.path(), "n2", &[n1.cluster], &config2);
    n2.wait_listening().await;

    // Gossip (not TLS) lets them see each other; the links stay down.
    wait_live(&n1, "n2").await;
    wait_live(&n2, "n1").await;
    let mut sub1 = n1.client("sub1", true).await;
    sub1.subscribe("rogue/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = n2.client("pub2", true).await;
    for i in 1..=20u16 {
        publisher
            .publish("rogue/x", b"leak", QoS::AtLeastOnce, false, i)
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = drain(&mut sub1, Duration::from_secs(1)).await;
    assert!(
        got.is_empty(),
        "a message published on the rogue node reached n1: {:?}",
        payloads(&got)
    );
    assert_eq!(link_up(&n1, "n2").await, Some(false), "n1's link to n2");
    assert_eq!(link_up(&n2, "n1").await, Some(false), "n2's link to n1");
    let log1 = n1.log_text();
    assert!(
        log1.contains("cluster_link_handshake_failed"),
        "n1 did not log refusing n2's certificate:\n{log1}"
    );
    assert!(!log1.contains("cluster_link_up"), "{log1}");
    assert!(!n2.log_text().contains("cluster_link_up"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_read_again_at_sighup_open_the_links_after_a_rotation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old = make_node_pki(dir.path(), "old", &["n1", "n2"], "127.0.0.1");
    let new = make_node_pki(dir.path(), "new", &["n1", "n2"], "127.0.0.1");
    // Each node reads its files from paths of its own; the rotation replaces them in place.
    let ca = dir.path().join("ca.pem");
    let files: Vec<(PathBuf, PathBuf)> = ["n1", "n2"]
        .iter()
        .map(|n| {
            let p = |ext: &str| dir.path().join(format!("{n}.{ext}"));
            (p("pem"), p("key"))
        })
        .collect();
    let put = |pki: &hayate_testkit::pki::NodePki| {
        std::fs::copy(&pki.ca, &ca).expect("copy");
        for ((cert, key), (from_cert, from_key)) in files.iter().zip(&pki.nodes) {
            std::fs::copy(from_cert, cert).expect("copy");
            std::fs::copy(from_key, key).expect("copy");
        }
    };
    put(&old);
    let configs: Vec<PathBuf> = ["n1", "n2"]
        .iter()
        .zip(&files)
        .map(|(name, (cert, key))| node_config(dir.path(), name, &tls_keys(cert, key, &ca)))
        .collect();
    let n1 = start_node(dir.path(), "n1", &[], &configs[0]);
    n1.wait_listening().await;
    let mut n2 = start_node(dir.path(), "n2", &[n1.cluster], &configs[1]);
    n2.wait_listening().await;
    wait_links(&n1, &n2).await;

    // The cluster moves to a new CA. n1 reads its files again on SIGHUP (its listener and its
    // links); n2 is restarted with the new files, so every link is opened anew: n1's link to
    // n2 is accepted only if it presents n1's new certificate.
    put(&new);
    n1.hangup();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !n1.log_text().contains("cluster_link_tls_reloaded") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "n1 did not reload its link TLS:\n{}",
            n1.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    n2.restart();
    n2.wait_listening().await;
    wait_links(&n1, &n2).await;
    let mut sub2 = n2.client("sub2", true).await;
    sub2.subscribe("rotated/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = n1.client("pub1", true).await;
    await_route(&mut publisher, &mut sub2, "rotated/x").await;
}

/// Waits until the links between `a` and `b` are up both ways.
async fn wait_links(a: &Node, b: &Node) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while link_up(a, &b.name).await != Some(true) || link_up(b, &a.name).await != Some(true) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the links between {} and {} are not up:\n{}\n{}",
            a.name,
            b.name,
            a.log_text(),
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `node` sees `other` live by gossip.
async fn wait_live(node: &Node, other: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let status = node.status().await;
        if status["nodes"][other]["live"].as_bool() == Some(true) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} does not see {other} live: {status}",
            node.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `node`'s link to `other` is up, by its status.
async fn link_up(node: &Node, other: &str) -> Option<bool> {
    node.status().await["nodes"][other]["link_up"].as_bool()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_certificate_file_stops_the_node_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = make_node_pki(dir.path(), "good", &["n1"], "127.0.0.1");
    let (_, key) = &pki.nodes[0];
    let absent = dir.path().join("absent-node.pem");
    let config = node_config(dir.path(), "n1", &tls_keys(&absent, key, &pki.ca));
    let mut node = start_node(dir.path(), "n1", &[], &config);
    let exited = tokio::task::spawn_blocking(move || {
        node.wait_exit();
        node
    });
    let node = tokio::time::timeout(Duration::from_secs(15), exited)
        .await
        .expect("the node exits")
        .expect("join");
    let log = node.log_text();
    assert!(
        log.contains("absent-node.pem") && log.contains("tls_cert"),
        "{log}"
    );
}
