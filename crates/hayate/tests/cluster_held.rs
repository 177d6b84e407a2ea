//! A claim whose answer sits behind a held link (docs/CLUSTER.md, "Relay after a handover":
//! order): the new node holds what another node sends while it waits for a third node's end
//! of relaying for some other client, and a client that moves from that node meanwhile must
//! still get its whole session.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::cluster::{
    await_route, cluster_config, connect_persistent, drain, payloads, publish_numbered, Cluster,
    Node, Tally,
};
use hayate_testkit::{RawClient, Received};
use std::path::Path;
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");

/// How long n3 holds its link from n2 at most: well past the claim's own wait for answers
/// (2 s), so that only a claim that waits for the held link gets its answer in time.
const HOLD_MS: u64 = 8_000;

/// `text` without its terminal colour codes (`ESC [ ... m`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// As `connect_persistent`, waiting up to 15 s for the CONNACK (a held answer takes as long
/// as the hold).
async fn connect_patiently(
    mqtt: std::net::SocketAddr,
    client_id: &'static str,
) -> (RawClient, hayate_codec::ConnAck) {
    let mut client = RawClient::connect_tcp(mqtt, ProtocolVersion::V5).await;
    let mut connect = hayate_testkit::connect_packet(ProtocolVersion::V5, client_id, false);
    connect.properties.session_expiry_interval = Some(600);
    client.send(Packet::Connect(Box::new(connect))).await;
    match client.recv_timeout(Duration::from_secs(15)).await {
        Received::Packet(Packet::ConnAck(connack)) => (client, connack),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

/// Waits until `node`'s log has a line with every one of `needles`.
async fn await_log(node: &Node, needles: &[&str], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if plain(&node.log_text())
            .lines()
            .any(|line| needles.iter().all(|needle| line.contains(needle)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never logged {needles:?}:\n{}",
            node.name,
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lose-node soak of `c710fdc` (docs/CLUSTER.md, "The wait goes on while the awaited node
/// reconnects"): client A moved from n1 to n3, and n1 does not send its end of relaying n2's
/// copies (frozen here, right after its answer), so n3's link from n2 holds what n2 sends
/// (`relay_order_hold_ms`). Client C, a QoS 2 subscriber on n2, moves to n3 meanwhile: n2's
/// answer to C's claim waits behind that hold. Before, the claim gave up after its 2 s, C got
/// Session Present 0 and subscribed again, and n2's session came later, merged into the new
/// one. Now the claim waits while the link holds: Session Present 1, each message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_sits_behind_a_held_link_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster_config(
        dir.path(),
        &format!("lost_node_wait_secs = 0\nrelay_order_hold_ms = {HOLD_MS}"),
    );
    let config = config.to_str().unwrap().to_string();
    let cluster = Cluster::start_durable(Path::new(HAYATE), 3, &["--config", &config]).await;
    let (n1, n2, n3) = (&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]);

    let (mut a, _) = connect_persistent(n1.mqtt, "held-a").await;
    a.subscribe("a/#", QoS::AtLeastOnce, 1).await;
    let (mut c, _) = connect_persistent(n2.mqtt, "held-c").await;
    c.subscribe("roll/#", QoS::ExactlyOnce, 1).await;
    let mut publisher = n3.client("held-pub", true).await;
    await_route(&mut publisher, &mut a, "a/probe").await;
    await_route(&mut publisher, &mut c, "roll/probe").await;

    // A moves to n3: n2 answers its claim while n1 is frozen; then n2 freezes and n1, thawed,
    // hands the session over; then n1 freezes for good before it can read n2's mark, and n2,
    // thawed, marks: n3 holds its link from n2 for n1's end, which never comes.
    n1.freeze();
    drop(a);
    let a_moving = tokio::spawn(connect_patiently(n3.mqtt, "held-a"));
    // n2 has no session of A: it answers at once (a debug line only; CI logs at info).
    tokio::time::sleep(Duration::from_millis(500)).await;
    n2.freeze();
    n1.thaw();
    await_log(
        n3,
        &["session_taken_over_from_node", "held-a"],
        Duration::from_secs(10),
    )
    .await;
    n1.freeze();
    n2.thaw();
    let (_a, connack) = a_moving.await.unwrap();
    assert!(connack.session_present, "A's session moved to n3");
    assert!(
        !plain(&n3.log_text()).contains("cluster_relay_end_late"),
        "A's CONNACK came once the hold had ended:\n{}",
        cluster.logs()
    );
    // n1 seen dead: C's claim does not wait for it (`lost_node_wait_secs = 0`).
    await_log(
        n3,
        &["cluster_node_down", "peer=n1"],
        Duration::from_secs(10),
    )
    .await;

    publish_numbered(&mut publisher, 0..50, Duration::ZERO).await;
    let mut got = payloads(&drain(&mut c, Duration::from_millis(500)).await);
    drop(c);
    let started = Instant::now();
    let c_moving = tokio::spawn(connect_patiently(n3.mqtt, "held-c"));
    publish_numbered(&mut publisher, 50..100, Duration::from_millis(20)).await;
    let (mut c, connack) = c_moving.await.unwrap();
    let waited = started.elapsed();
    eprintln!("C's CONNACK after {waited:?}");
    if !connack.session_present {
        // What a client told its session is gone does (the soak's clients do too).
        c.subscribe("roll/#", QoS::ExactlyOnce, 1).await;
    }
    publish_numbered(&mut publisher, 100..150, Duration::ZERO).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        got.extend(payloads(&drain(&mut c, Duration::from_millis(1_000)).await));
        if got.iter().filter(|p| p.starts_with("m-")).count() >= 150 {
            got.extend(payloads(&drain(&mut c, Duration::from_millis(1_000)).await));
            break;
        }
    }
    got.retain(|p| p.starts_with("m-"));
    n1.thaw();
    // The scene was set: n3 held its link from n2 until the hold ran out (n1 never ended).
    await_log(
        n3,
        &["cluster_relay_end_late", "peer=n2", "held-a"],
        Duration::from_secs(10),
    )
    .await;
    let tally = Tally::of(&got);
    let (missing, twice) = (tally.missing(150), tally.twice());
    assert!(
        connack.session_present && missing.is_empty() && twice.is_empty(),
        "C's CONNACK after {waited:?}, Session Present {}; lost {} {:?}, twice {} {:?}\n{}",
        connack.session_present,
        missing.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(10).collect::<Vec<_>>(),
        cluster.logs()
    );
}
