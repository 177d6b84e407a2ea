//! Three real `hayate serve` processes on loopback acting as one broker (docs/CLUSTER.md):
//! messages published on one node reach subscribers on the others at every QoS, once;
//! wildcards, shared groups and retained messages work across nodes; a client that connects to
//! another node takes its connection and its session with it; a node killed with SIGKILL is
//! detected, and a restarted node rejoins.

use hayate_codec::{Packet, QoS};
use hayate_testkit::cluster::{
    await_route, connect_persistent, drain, payloads, publish_numbered, reordered_first_copies,
    Cluster, Node, Tally,
};
use hayate_testkit::{RawClient, Received};
use std::path::Path;
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");

fn bin() -> &'static Path {
    Path::new(HAYATE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_cross_nodes_once_at_every_qos_with_wildcards() {
    let cluster = Cluster::start(bin(), 3, &[]).await;
    let [n1, n2, n3] = &cluster.nodes[..] else {
        unreachable!()
    };
    let mut sub2 = n2.client("sub2", true).await;
    sub2.subscribe("plant/+/temp", QoS::AtLeastOnce, 1).await;
    let mut sub3 = n3.client("sub3", true).await;
    // Two overlapping filters: one copy, at the higher QoS.
    sub3.subscribe("plant/#", QoS::ExactlyOnce, 1).await;
    sub3.subscribe("plant/7/temp", QoS::AtMostOnce, 2).await;
    let mut publisher = n1.client("pub", true).await;
    await_route(&mut publisher, &mut sub2, "plant/0/temp").await;
    await_route(&mut publisher, &mut sub3, "plant/0/temp").await;
    drain(&mut sub2, Duration::from_millis(300)).await;

    for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        let payload = format!("m{i}");
        publisher
            .publish(
                "plant/7/temp",
                payload.as_bytes(),
                qos,
                false,
                10 + i as u16,
            )
            .await;
    }
    publisher
        .publish("plant/7/pressure", b"p", QoS::AtLeastOnce, false, 20)
        .await;

    let got2 = drain(&mut sub2, Duration::from_secs(1)).await;
    assert_eq!(payloads(&got2), ["m0", "m1", "m2"]);
    assert_eq!(
        got2.iter().map(|p| p.qos).collect::<Vec<_>>(),
        [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::AtLeastOnce]
    );
    let got3 = drain(&mut sub3, Duration::from_secs(1)).await;
    assert_eq!(payloads(&got3), ["m0", "m1", "m2", "p"]);
    assert_eq!(
        got3.iter().map(|p| p.qos).collect::<Vec<_>>(),
        [
            QoS::AtMostOnce,
            QoS::AtLeastOnce,
            QoS::ExactlyOnce,
            QoS::AtLeastOnce
        ]
    );

    // An unsubscribe travels too: nothing more reaches sub2.
    sub2.unsubscribe("plant/+/temp", 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    publisher
        .publish("plant/7/temp", b"after", QoS::AtLeastOnce, false, 30)
        .await;
    sub2.expect_nothing(Duration::from_millis(700)).await;
    let got3 = drain(&mut sub3, Duration::from_secs(1)).await;
    assert_eq!(payloads(&got3), ["after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_group_delivers_each_message_to_one_member_cluster_wide() {
    let cluster = Cluster::start(bin(), 3, &[]).await;
    let [n1, n2, n3] = &cluster.nodes[..] else {
        unreachable!()
    };
    let mut m2 = n2.client("m2", true).await;
    m2.subscribe("$share/g/jobs/#", QoS::AtLeastOnce, 1).await;
    let mut m3 = n3.client("m3", true).await;
    m3.subscribe("$share/g/jobs/#", QoS::AtLeastOnce, 1).await;
    // Routes of both members reach n1 (watched through a plain subscription beside them).
    let mut w2 = n2.client("w2", true).await;
    w2.subscribe("jobs/#", QoS::AtMostOnce, 1).await;
    let mut w3 = n3.client("w3", true).await;
    w3.subscribe("jobs/#", QoS::AtMostOnce, 1).await;
    let mut publisher = n1.client("pub", true).await;
    await_route(&mut publisher, &mut w2, "jobs/probe").await;
    await_route(&mut publisher, &mut w3, "jobs/probe").await;
    drain(&mut m2, Duration::from_millis(300)).await;
    drain(&mut m3, Duration::from_millis(300)).await;

    // No member on n1: the group's messages are shared between the two other nodes.
    for i in 0..40u16 {
        let payload = format!("j{i}");
        publisher
            .publish("jobs/x", payload.as_bytes(), QoS::AtLeastOnce, false, i + 1)
            .await;
    }
    let got2 = payloads(&drain(&mut m2, Duration::from_secs(1)).await);
    let got3 = payloads(&drain(&mut m3, Duration::from_secs(1)).await);
    let mut all: Vec<String> = got2.iter().chain(&got3).cloned().collect();
    all.sort();
    let mut expected: Vec<String> = (0..40).map(|i| format!("j{i}")).collect();
    expected.sort();
    assert_eq!(all, expected, "each message to exactly one member");
    assert!(!got2.is_empty() && !got3.is_empty(), "{got2:?} / {got3:?}");

    // With a member on the publishing node, it gets them all (prefer_local_shared).
    let mut m1 = n1.client("m1", true).await;
    m1.subscribe("$share/g/jobs/#", QoS::AtLeastOnce, 1).await;
    for i in 0..10u16 {
        publisher
            .publish("jobs/y", b"local", QoS::AtLeastOnce, false, 100 + i)
            .await;
    }
    assert_eq!(drain(&mut m1, Duration::from_secs(1)).await.len(), 10);
    m2.expect_nothing(Duration::from_millis(300)).await;
    m3.expect_nothing(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_messages_are_on_every_node() {
    let cluster = Cluster::start(bin(), 3, &[]).await;
    let [n1, n2, n3] = &cluster.nodes[..] else {
        unreachable!()
    };
    let mut publisher = n1.client("pub", true).await;
    publisher
        .publish("cfg/a", b"A", QoS::AtLeastOnce, true, 1)
        .await;
    publisher
        .publish("cfg/b", b"B", QoS::AtLeastOnce, true, 2)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut late = n3.client("late", true).await;
    late.subscribe("cfg/#", QoS::AtLeastOnce, 1).await;
    let mut got = payloads(&drain(&mut late, Duration::from_secs(1)).await);
    got.sort();
    assert_eq!(got, ["A", "B"]);
    assert!(drain(&mut late, Duration::from_millis(10)).await.is_empty());

    // Cleared on another node: gone everywhere.
    let mut other = n2.client("other", true).await;
    other.publish("cfg/a", b"", QoS::AtLeastOnce, true, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut later = n3.client("later", true).await;
    later.subscribe("cfg/#", QoS::AtLeastOnce, 1).await;
    assert_eq!(
        payloads(&drain(&mut later, Duration::from_secs(1)).await),
        ["B"]
    );

    // A node that joins afterwards gets them too.
    let mut n4 = Node::start(bin(), cluster.dir.path(), "n4", &[n1.cluster], &[]);
    n4.wait_listening().await;
    n4.wait_sees(&["n1", "n2", "n3"], Duration::from_secs(20))
        .await;
    let mut fresh = n4.client("fresh", true).await;
    fresh.subscribe("cfg/#", QoS::AtLeastOnce, 1).await;
    assert_eq!(
        payloads(&drain(&mut fresh, Duration::from_secs(1)).await),
        ["B"]
    );
    n4.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_takes_its_connection_and_session_to_another_node() {
    let cluster = Cluster::start(bin(), 3, &[]).await;
    let [n1, n2, n3] = &cluster.nodes[..] else {
        unreachable!()
    };
    // A persistent session on n1, offline, with messages queued for it.
    let mut client = RawClient::connect_tcp(n1.mqtt, hayate_codec::ProtocolVersion::V5).await;
    let mut connect =
        hayate_testkit::connect_packet(hayate_codec::ProtocolVersion::V5, "mover", true);
    connect.properties.session_expiry_interval = Some(600);
    client.connect(connect.clone()).await;
    client.subscribe("orders/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = n2.client("pub", true).await;
    let mut watcher = n1.client("watch", true).await;
    watcher.subscribe("orders/#", QoS::AtMostOnce, 1).await;
    await_route(&mut publisher, &mut watcher, "orders/probe").await;
    drain(&mut client, Duration::from_millis(300)).await;
    client.drop_connection().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..5u16 {
        let payload = format!("o{i}");
        publisher
            .publish(
                "orders/x",
                payload.as_bytes(),
                QoS::AtLeastOnce,
                false,
                i + 1,
            )
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // It comes back on n3: the queued messages follow, and so does the subscription.
    let mut moved = RawClient::connect_tcp(n3.mqtt, hayate_codec::ProtocolVersion::V5).await;
    connect.clean_start = false;
    let connack = moved.connect(connect.clone()).await;
    assert!(
        connack.session_present,
        "CONNACK waits for the handover and says Session Present"
    );
    let got = payloads(&drain(&mut moved, Duration::from_secs(2)).await);
    assert_eq!(got, ["o0", "o1", "o2", "o3", "o4"], "{}", n1.log_text());
    publisher
        .publish("orders/y", b"live", QoS::AtLeastOnce, false, 50)
        .await;
    // The subscription now lives on n3; the route may take a moment to reach n2.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = payloads(&drain(&mut moved, Duration::from_millis(500)).await);
        if got.iter().any(|p| p == "live" || p == "again") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the moved subscription gets nothing"
        );
        publisher
            .publish("orders/y", b"again", QoS::AtLeastOnce, false, 51)
            .await;
    }

    // Connected on n3, it connects again on n1: n3 disconnects it (Session taken over).
    let _again = n1.client("mover", false).await;
    let closing = moved.expect_closed().await;
    let taken_over = closing.iter().any(|p| {
        matches!(p, Packet::Disconnect(d) if d.reason_code == hayate_codec::ReasonCode::SESSION_TAKEN_OVER)
    });
    assert!(taken_over, "expected DISCONNECT 0x8E, got {closing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_detected_and_a_restarted_one_rejoins() {
    let mut cluster = Cluster::start(bin(), 3, &[]).await;
    let killed_at = Instant::now();
    cluster.nodes[2].kill();
    // n1 sees n3 dead.
    let deadline = killed_at + Duration::from_secs(20);
    let detected = loop {
        let status = cluster.nodes[0].status().await;
        if status["nodes"]["n3"]["live"].as_bool() == Some(false) {
            break killed_at.elapsed();
        }
        assert!(Instant::now() < deadline, "n3 never seen dead: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("kill -9 of n3 detected by n1 after {detected:?}");
    // n1 and n2 go on serving each other.
    let mut sub = cluster.nodes[1].client("s", true).await;
    sub.subscribe("after/kill", QoS::AtLeastOnce, 1).await;
    let mut publisher = cluster.nodes[0].client("p", true).await;
    await_route(&mut publisher, &mut sub, "after/kill").await;

    // n3 comes back (a new incarnation) and gets messages from n1 again.
    cluster.nodes[2].restart();
    cluster.nodes[2].wait_listening().await;
    cluster.wait_converged(Duration::from_secs(20)).await;
    let mut back = cluster.nodes[2].client("back", true).await;
    back.subscribe("after/restart", QoS::AtLeastOnce, 1).await;
    await_route(&mut publisher, &mut back, "after/restart").await;
    publisher
        .publish("after/restart", b"hello", QoS::AtLeastOnce, false, 7)
        .await;
    let got = payloads(&drain(&mut back, Duration::from_secs(1)).await);
    assert_eq!(got, ["hello"]);
}

/// A persistent session whose node dies follows its client to another node once its node is
/// back: what the other node acknowledged for it meanwhile (queued there for the dead node)
/// reaches the restarted node, lands in the session's queue on disk, and goes with the
/// session when the claim that waited behind it arrives (`prepare_hand_over`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_session_follows_its_client_when_its_node_comes_back() {
    // The fence's path: the client does not wait for the killed node (tests/cluster_lost.rs
    // has the wait).
    let dir = tempfile::tempdir().unwrap();
    let config = hayate_testkit::cluster::cluster_config(dir.path(), "lost_node_wait_secs = 0");
    let config = config.to_str().unwrap().to_string();
    let mut cluster = Cluster::start_durable(bin(), 2, &["--config", &config]).await;
    let persistent = |node: &Node| {
        let mqtt = node.mqtt;
        async move {
            let mut client = RawClient::connect_tcp(mqtt, hayate_codec::ProtocolVersion::V5).await;
            let mut connect = hayate_testkit::connect_packet(
                hayate_codec::ProtocolVersion::V5,
                "stored-sub",
                false,
            );
            connect.properties.session_expiry_interval = Some(600);
            client.connect(connect).await;
            client
        }
    };
    let mut sub = persistent(&cluster.nodes[1]).await;
    sub.subscribe("r/#", QoS::AtLeastOnce, 1).await;
    let mut publisher = cluster.nodes[0].client("pub", true).await;
    await_route(&mut publisher, &mut sub, "r/probe").await;
    cluster.nodes[1].kill();
    drop(sub);
    for i in 0..10u16 {
        publisher
            .publish(
                "r/x",
                format!("down-{i}").as_bytes(),
                QoS::AtLeastOnce,
                false,
                i + 1,
            )
            .await;
    }
    // The client moves to n1 while n2 is down (no Session Present: n1 cannot know yet).
    let mut moved = persistent(&cluster.nodes[0]).await;
    moved.subscribe("r/#", QoS::AtLeastOnce, 1).await;
    cluster.nodes[1].restart();
    cluster.nodes[1].wait_listening().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < 10 && Instant::now() < deadline {
        got.extend(payloads(
            &drain(&mut moved, Duration::from_millis(500)).await,
        ));
    }
    let expected: Vec<String> = (0..10).map(|i| format!("down-{i}")).collect();
    assert_eq!(got, expected, "n2:\n{}", cluster.nodes[1].log_text());
}

/// A rolling restart's gap (docs/CLUSTER.md, "Relay after a handover"): a client of a node
/// stopped for a restart resumes its session on another node, whose CONNACK waits for the
/// stopped node. Meanwhile a third node goes on routing the client's messages to the stopped
/// node (its route set still has the session's filter), where they wait. Back, that node
/// hands the session over on the claim, and what arrives from the third node after that is
/// relayed to the new node, which meanwhile keeps the third node's own copies from the
/// session: no QoS 2 message is lost, none arrives twice, and they arrive in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_during_a_restart_gets_what_was_published_meanwhile() {
    moved_during_a_restart(2).await;
}

/// The same with the publisher on the node the session moves to (docs/CLUSTER.md, "Own
/// copies after a take-over"): what that node routed to the stopped node waits there and
/// comes back relayed after the take-over, while what it routes afterwards reaches the session
/// directly; the session holds the latter back until the old node's end of relaying the
/// former, so they arrive in order (without the hold, 182, 62 and 183 of 3,000 came after
/// higher ones in 3 runs of 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_during_a_restart_gets_its_new_nodes_messages_in_order() {
    moved_during_a_restart(1).await;
}

/// See the two tests above: the publisher is on node `publisher_on` (1 or 2).
async fn moved_during_a_restart(publisher_on: usize) {
    const TOTAL: u16 = 3_000;
    let mut cluster = Cluster::start_durable(bin(), 3, &[]).await;
    let connect_as = |mqtt| connect_persistent(mqtt, "roll-sub");
    let (mut sub, _) = connect_as(cluster.nodes[0].mqtt).await;
    sub.subscribe("roll/#", QoS::ExactlyOnce, 1).await;
    // Another subscriber of the filter on n2: n3 routes it to n2 all along, so after the
    // take-over n2 gets n3's copies directly while n1 relays n3's earlier ones.
    let mut other = cluster.nodes[1].client("roll-other", true).await;
    other.subscribe("roll/#", QoS::ExactlyOnce, 1).await;
    let mut publisher = cluster.nodes[publisher_on].client("roll-pub", true).await;
    await_route(&mut publisher, &mut sub, "roll/probe").await;
    await_route(&mut publisher, &mut other, "roll/probe").await;

    // The client resumes on n2 while n1 shuts down (its claim reaches n1 then, which leaves
    // it for after its restart); its CONNACK waits for n1's return.
    cluster.nodes[0].begin_terminate();
    // As n1's clients do: it leaves when n1 disconnects it (Server shutting down).
    let closed_by = Instant::now() + Duration::from_secs(5);
    while Instant::now() < closed_by {
        match sub.recv_timeout(Duration::from_millis(100)).await {
            Received::Packet(Packet::Disconnect(_)) | Received::Closed => break,
            _ => {}
        }
    }
    drop(sub);
    let moving = tokio::spawn(connect_as(cluster.nodes[1].mqtt));
    tokio::task::block_in_place(|| cluster.nodes[0].wait_exit());
    let shutdown_log = cluster.nodes[0].log_text();
    publish_numbered(&mut publisher, 0..20, Duration::from_millis(20)).await;
    cluster.nodes[0].restart();
    // Published while n1 restarts, hands the session over and n2's route reaches n3: as
    // fast as the QoS 2 flow goes, so that some are on their way during the take-over.
    publish_numbered(&mut publisher, 20..TOTAL, Duration::ZERO).await;
    let (mut moved, connack) = moving.await.unwrap();
    assert!(connack.session_present, "n1 handed the session over");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < TOTAL as usize && Instant::now() < deadline {
        got.extend(payloads(
            &drain(&mut moved, Duration::from_millis(500)).await,
        ));
    }
    got.retain(|p| p != "probe");
    let tally = Tally::of(&got);
    let (missing, twice) = (tally.missing(TOTAL), tally.twice());
    assert!(
        missing.is_empty(),
        "lost {} of {TOTAL}: {missing:?}; n1:\n{}",
        missing.len(),
        cluster.nodes[0].log_text()
    );
    // Exactly once: before the old node stopped relaying a node's copies at that node's
    // mark, about one run in four delivered a block of up to 8 twice.
    assert!(
        twice.is_empty(),
        "{} of {TOTAL} delivered twice: {twice:?}\nn1:\n{}\nn2:\n{}\nn3:\n{}",
        twice.len(),
        cluster.nodes[0].log_text(),
        cluster.nodes[1].log_text(),
        cluster.nodes[2].log_text()
    );
    // In order. Publisher on n3: n3's own copies reach the session only after n1's end of
    // relaying n3's earlier ones (without the link's hold, 4 and 381 of 3,000 came after
    // higher ones in 2 of 3 runs). Publisher on n2: the session holds n2's direct copies until
    // n1's end of relaying n2's earlier ones (`hold_direct_copies`).
    let reordered = reordered_first_copies(&got);
    assert_eq!(
        reordered,
        0,
        "first copies out of order; n2:\n{}",
        cluster.nodes[1].log_text()
    );
    // The claim did reach n1 while it shut down (else this test shows less than it says).
    assert!(
        shutdown_log.contains("cluster_claim_left_for_restart"),
        "n1 saw no claim while shutting down:\n{shutdown_log}"
    );
    // n1 relayed until n2 and n3 had both marked the end, not until its deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.nodes[0]
        .log_text()
        .contains("handover_relay_marked_by_every_node")
    {
        assert!(
            Instant::now() < deadline,
            "n1 never saw every mark:\n{}",
            cluster.nodes[0].log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `node`'s status for `peer` satisfies `check`.
async fn wait_status(node: &Node, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = node.status().await;
        if check(&status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: never {what}: {status}",
            node.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_netsplit_policy_applies_while_a_node_is_unreachable_and_a_stopping_node_is_no_split() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("strict.toml");
    std::fs::write(
        &conf,
        "[cluster]\nnode_name = \"x\"\nlisten = \"127.0.0.1:1\"\n\
         allow_register_during_netsplit = false\nallow_publish_during_netsplit = false\n",
    )
    .unwrap();
    let conf = conf.to_string_lossy().into_owned();
    let mut cluster = Cluster::start(bin(), 3, &["-c", &conf]).await;
    let mut publisher = cluster.nodes[0].client("before", true).await;
    publisher
        .publish("t", b"ok", QoS::AtLeastOnce, false, 1)
        .await;

    // n3 killed: n1 cannot tell a dead node from a split, and refuses what the policy says.
    cluster.nodes[2].kill();
    wait_status(&cluster.nodes[0], "sees n3 dead", |s| {
        s["nodes"]["n3"]["live"].as_bool() == Some(false)
    })
    .await;
    assert_eq!(
        publisher.publish_reason("t", QoS::AtLeastOnce, 2).await,
        0x97,
        "QoS 1 refused during a split"
    );
    let mut refused =
        RawClient::connect_tcp(cluster.nodes[0].mqtt, hayate_codec::ProtocolVersion::V5).await;
    let connack = refused
        .connect(hayate_testkit::connect_packet(
            hayate_codec::ProtocolVersion::V5,
            "during",
            true,
        ))
        .await;
    assert_eq!(
        connack.reason_code.0, 0x88,
        "CONNECT refused during a split"
    );

    // n3 back: everything is accepted again.
    cluster.nodes[2].restart();
    cluster.nodes[2].wait_listening().await;
    cluster.wait_converged(Duration::from_secs(20)).await;
    wait_status(&cluster.nodes[0], "sees no split", |s| {
        s["nodes"]["n3"]["live"].as_bool() == Some(true)
    })
    .await;
    let mut publisher = cluster.nodes[0].client("after", true).await;
    assert_eq!(
        publisher.publish_reason("t", QoS::AtLeastOnce, 3).await,
        0x10
    );

    // n2 stops (SIGTERM): away on purpose, not a split (kept, for its return).
    cluster.nodes[1].terminate();
    wait_status(&cluster.nodes[0], "sees n2 stopped", |s| {
        s["nodes"]["n2"]["live"].as_bool() == Some(false)
            && s["nodes"]["n2"]["stopping"].as_bool() == Some(true)
    })
    .await;
    let _accepted = cluster.nodes[0].client("after-leave", true).await;
    assert_eq!(
        publisher.publish_reason("t", QoS::AtLeastOnce, 4).await,
        0x10
    );
}

/// Two nodes, n1 with an admin listener (token `secret-token`) at the address returned.
async fn two_nodes_with_admin_api(dir: &Path) -> (Node, std::net::SocketAddr, Node) {
    let http: std::net::SocketAddr = ([127, 0, 0, 1], hayate_testkit::free_port()).into();
    let conf = dir.join("http.toml");
    std::fs::write(
        &conf,
        format!("[http]\nlisten = \"{http}\"\ntoken = \"secret-token\"\n"),
    )
    .unwrap();
    let conf = conf.to_string_lossy().into_owned();
    let n1 = Node::start(bin(), dir, "n1", &[], &["-c", &conf]);
    let n2 = Node::start(bin(), dir, "n2", &[n1.cluster], &[]);
    n1.wait_listening().await;
    n2.wait_listening().await;
    (n1, http, n2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_shows_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, http, _n2) = two_nodes_with_admin_api(dir.path()).await;
    n1.wait_sees(&["n2"], Duration::from_secs(20)).await;
    let (status, body) = tokio::task::spawn_blocking(move || {
        hayate_testkit::ops::HttpApi::new(http, Some("secret-token")).get_json("/api/v1/cluster")
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["node"], "n1");
    assert_eq!(body["nodes"]["n2"]["live"], true);
    assert_eq!(body["nodes"]["n2"]["link_up"], true);

    // /metrics: the link's keep-alive round trip, observed once per 5 s keep-alive.
    let metrics = tokio::task::spawn_blocking(move || {
        let api = hayate_testkit::ops::HttpApi::new(http, Some("secret-token"));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, text) = api.get("/metrics");
            assert_eq!(status, 200, "{text}");
            if sample(&text, "hayate_cluster_link_round_trip_seconds_count") >= Some(1.0) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "no link round trip observed: {text}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    })
    .await
    .unwrap();
    let sum = sample(&metrics, "hayate_cluster_link_round_trip_seconds_sum").unwrap();
    assert!(sum > 0.0 && sum < 5.0, "loopback round trips: {sum} s");
    let within_a_second = sample(
        &metrics,
        "hayate_cluster_link_round_trip_seconds_bucket{le=\"1\"}",
    );
    assert!(within_a_second >= Some(1.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "hayate_cluster_relayed_dropped_messages_total"),
        Some(0.0),
        "exposed in a cluster, nothing relayed here: {metrics}"
    );
    if let Some(promtool) = hayate_testkit::ops::tool_or_skip("promtool") {
        hayate_testkit::prometheus::promtool_check_metrics(&promtool, &metrics);
    }
}

/// The value of one sample line of a Prometheus text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `hayate cluster leave` (the admin API) makes a node leave for good: it shuts down, and the
/// others forget it at once instead of keeping what they hold for it as for a stopped node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_leaves_for_good_with_hayate_cluster_leave() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, http, n2) = two_nodes_with_admin_api(dir.path()).await;
    n2.wait_sees(&["n1"], Duration::from_secs(20)).await;

    // A wrong token is refused, and nothing happens.
    let refused = std::process::Command::new(bin())
        .args([
            "cluster",
            "leave",
            "--http",
            &http.to_string(),
            "--token",
            "wrong",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let left = std::process::Command::new(bin())
        .args(["cluster", "leave", "--http", &http.to_string()])
        .env("HAYATE_HTTP_TOKEN", "secret-token")
        .output()
        .unwrap();
    assert!(
        left.status.success(),
        "{}",
        String::from_utf8_lossy(&left.stderr)
    );
    wait_status(&n2, "forgets n1", |s| s["nodes"].get("n1").is_none()).await;
    // n1 shut down.
    let deadline = Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(n1.mqtt).await.is_ok() {
        assert!(Instant::now() < deadline, "n1 still listening");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = n1.log_text();
    assert!(log.contains("admin_cluster_leave"), "{log}");
}
