//! Link faults: a TCP proxy between the bridge and the remote broker (`hayate_testkit::proxy`)
//! cuts the link — both sockets dropped — at random moments (seeded RNG, several cuts) while
//! one publisher streams numbered QoS 1 messages and another numbered QoS 2 messages across
//! the bridge, `out` (local → remote) or `in` (remote → local). The remote broker keeps the
//! bridge's session (`cleansession false`), as the guarantees in docs/BRIDGES.md require.
//!
//! What is checked, per stream, at a subscriber on the far side whose own connection is never
//! cut:
//!
//! - **No loss**: every number arrives.
//! - **QoS 2: exactly once and in order**: the subscriber sees exactly 1, 2, ..., N.
//! - **QoS 1: at least once, duplicates within the in-flight window**: at most `window`
//!   duplicates per cut (20 here: Mosquitto's `max_inflight_messages`, the bridge's v3 window
//!   and, for v5, the Receive Maximum each side announces).
//! - **Order per publisher**: MQTT 3.1.1 §4.6 / MQTT 5 §4.6 require a sender to resend its
//!   unacknowledged PUBLISHes, after a reconnection, in their original order, and a broker to
//!   forward each topic's messages in the order received ("ordered topic"). A QoS 1 message
//!   that was delivered but whose PUBACK was lost in the cut is delivered again, after later
//!   messages: so the one reordering MQTT permits is a *redelivery* of an earlier message. The
//!   test therefore requires the first occurrences of the numbers to be exactly 1, 2, ..., N
//!   in that order (no new message overtakes an older one), and allows repeated numbers only
//!   as QoS 1 duplicates (within the bound above). QoS 2 allows no reordering at all.
//!
//! Except `in` from Mosquitto: there the order is Mosquitto's, and Mosquitto 2.0.11 does not
//! keep it. After a reconnection, while it drains what it queued for the bridge, a message
//! published meanwhile can take a free in-flight slot ahead of the queue (seen here with the
//! bridge's input logged: message 692, packet id 1352, sent to the bridge between 683 and 684,
//! ids 1334 and 1336; the bridge forwarded them in that order). Nor does it keep to the
//! bridge's Receive Maximum (v5, 20): once it resent 77 consecutive QoS 1 messages with DUP
//! after one cut (all first sent on the link just cut), so the duplicates there are bounded
//! by Mosquitto, not by the bridge. Those tests check no loss and QoS 2 exactly once, and
//! report the reordering and the duplicates they saw.
//!
//! The seed is printed; `HAYATE_FAULT_SEED=n` replays a run (the cut moments; the timing of
//! the rest still varies).

mod common;

use common::{bridge, hayate_with, topic, Mosquitto};
use hayate_bridge::config::{BridgeDirection, BridgeProtocol};
use hayate_codec::{Packet, ProtocolVersion, PubResp, QoS};
use hayate_testkit::proxy::Proxy;
use hayate_testkit::{RawClient, Received, TestBroker};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Messages per stream.
const N: u32 = 800;
/// Pause between two messages of a stream (the stream lasts about N × this).
const PACE: Duration = Duration::from_millis(5);
/// Cuts per test.
const CUTS: usize = 5;
/// The in-flight window on both sides of the link.
const WINDOW: usize = 20;

enum RemoteBroker {
    Mosquitto(Mosquitto),
    Hayate(TestBroker),
}

impl RemoteBroker {
    fn addr(&self) -> std::net::SocketAddr {
        match self {
            RemoteBroker::Mosquitto(m) => std::net::SocketAddr::from(([127, 0, 0, 1], m.port)),
            RemoteBroker::Hayate(h) => h.addr,
        }
    }

    async fn client(&self, version: ProtocolVersion, id: &str) -> RawClient {
        match self {
            RemoteBroker::Mosquitto(m) => m.client(version, id, true).await,
            RemoteBroker::Hayate(h) => h.client(version, id).await,
        }
    }
}

fn version(protocol: BridgeProtocol) -> ProtocolVersion {
    match protocol {
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
        _ => ProtocolVersion::V311,
    }
}

/// Publishes 1..=N on `topic` at `qos`, each acknowledged before the next.
async fn stream(mut client: RawClient, topic: String, qos: QoS) -> RawClient {
    for i in 1..=N {
        // Packet ids 1..=1000 cycle; one message is in flight at a time.
        let id = (i % 1000 + 1) as u16;
        client
            .publish(&topic, i.to_string().as_bytes(), qos, false, id)
            .await;
        tokio::time::sleep(PACE).await;
    }
    client
}

/// What a subscriber received, per topic: the numbers in arrival order.
type Arrivals = HashMap<String, Vec<u32>>;

/// Receives PUBLISHes until `done` is set and nothing has come for `quiet`; acknowledges
/// QoS 1 with PUBACK and QoS 2 with PUBREC, then PUBCOMP on PUBREL (flows may interleave).
async fn collect(mut client: RawClient, done: Arc<AtomicBool>, quiet: Duration) -> Arrivals {
    let mut arrivals = Arrivals::new();
    loop {
        match client.recv_timeout(quiet).await {
            Received::Packet(Packet::Publish(p)) => {
                let n: u32 = std::str::from_utf8(&p.payload)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .expect("numbered payload");
                arrivals.entry(p.topic.to_string()).or_default().push(n);
                let id = p.packet_id;
                match (p.qos, id) {
                    (QoS::AtLeastOnce, Some(id)) => {
                        client.send(Packet::PubAck(PubResp::new(id))).await;
                    }
                    (QoS::ExactlyOnce, Some(id)) => {
                        client.send(Packet::PubRec(PubResp::new(id))).await;
                    }
                    _ => {}
                }
            }
            Received::Packet(Packet::PubRel(rel)) => {
                client
                    .send(Packet::PubComp(PubResp::new(rel.packet_id)))
                    .await;
            }
            Received::Packet(_) => {}
            Received::Timeout if done.load(Ordering::SeqCst) => return arrivals,
            Received::Timeout => {}
            Received::Closed => panic!("the subscriber's connection closed"),
        }
    }
}

/// Waits until the bridge has a connection through the proxy, its `after`-th or a later one.
async fn wait_for_link(proxy: &Proxy, after: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while proxy.open() == 0 || proxy.accepted() <= after {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bridge did not reconnect through the proxy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks one stream; `cuts` is how many cuts hit a live link; `ordered`: whether the order
/// is checked (see the module's documentation).
fn check(label: &str, arrivals: &[u32], qos: QoS, cuts: usize, ordered: bool) {
    let expected: Vec<u32> = (1..=N).collect();
    if !ordered {
        let mut sorted = arrivals.to_vec();
        sorted.sort_unstable();
        let overtaking = arrivals.windows(2).filter(|w| w[1] < w[0]).count();
        eprintln!("{label}: order not checked (the remote broker's); {overtaking} steps back");
        if qos == QoS::ExactlyOnce {
            let mut counts = vec![0usize; N as usize + 2];
            for &n in arrivals {
                counts[(n as usize).min(N as usize + 1)] += 1;
            }
            let wrong: Vec<(u32, usize)> = (1..=N)
                .filter(|n| counts[*n as usize] != 1)
                .map(|n| (n, counts[n as usize]))
                .collect();
            assert!(
                wrong.is_empty() && arrivals.len() == N as usize,
                "{label}: QoS 2 must arrive exactly once: (number, times) {wrong:?}"
            );
            return;
        }
        let duplicates = sorted.windows(2).filter(|w| w[0] == w[1]).count();
        sorted.dedup();
        eprintln!("{label}: {duplicates} duplicates (the remote broker's window)");
        return check(label, &sorted, qos, cuts, true);
    }
    if qos == QoS::ExactlyOnce {
        if arrivals != &expected[..] {
            let mut counts = vec![0usize; N as usize + 2];
            for &n in arrivals {
                counts[(n as usize).min(N as usize + 1)] += 1;
            }
            let missing: Vec<u32> = (1..=N).filter(|n| counts[*n as usize] == 0).collect();
            let repeated: Vec<(u32, usize)> = (1..=N)
                .filter(|n| counts[*n as usize] > 1)
                .map(|n| (n, counts[n as usize]))
                .collect();
            let at = arrivals
                .iter()
                .zip(&expected)
                .position(|(a, e)| a != e)
                .unwrap_or(arrivals.len().min(expected.len()));
            let around = &arrivals[at.saturating_sub(3)..(at + 25).min(arrivals.len())];
            panic!(
                "{label}: QoS 2 must arrive exactly once, in order: {} received, missing \
                 {missing:?}, repeated (number, times) {repeated:?}, first difference at \
                 position {at}: {around:?}",
                arrivals.len()
            );
        }
        return;
    }
    let mut seen = vec![false; N as usize + 1];
    let mut first: Vec<u32> = Vec::new();
    let mut duplicates = 0usize;
    for &n in arrivals {
        assert!((1..=N).contains(&n), "{label}: unexpected number {n}");
        if seen[n as usize] {
            duplicates += 1;
        } else {
            seen[n as usize] = true;
            first.push(n);
        }
    }
    let missing: Vec<u32> = (1..=N).filter(|n| !seen[*n as usize]).collect();
    assert!(missing.is_empty(), "{label}: lost {missing:?}");
    if let Some(at) = first.iter().zip(&expected).position(|(f, e)| f != e) {
        let pos = arrivals
            .iter()
            .position(|n| *n == first[at])
            .unwrap_or_default();
        panic!(
            "{label}: a new message overtook an older one: first occurrences differ at {at}; \
             arrivals around it: {:?}",
            &arrivals[pos.saturating_sub(30)..(pos + 30).min(arrivals.len())]
        );
    }
    assert!(
        duplicates <= WINDOW * cuts.max(1),
        "{label}: {duplicates} duplicates for {cuts} cuts: more than the window of {WINDOW} per cut"
    );
    eprintln!(
        "{label}: {} received, {duplicates} duplicates",
        arrivals.len()
    );
}

async fn link_faults(remote: RemoteBroker, protocol: BridgeProtocol, direction: BridgeDirection) {
    let seed: u64 = std::env::var("HAYATE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("link faults: {protocol:?} {direction:?}, seed {seed}");
    let started = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let proxy = Proxy::start(remote.addr()).await;
    let mut config = bridge(
        "faults",
        proxy.addr.port(),
        protocol,
        vec![
            topic("q1/#", direction, 1, "local/", "remote/"),
            topic("q2/#", direction, 2, "local/", "remote/"),
        ],
    );
    config.cleansession = false;
    if protocol == BridgeProtocol::Mqttv50 {
        config.receive_maximum = Some(WINDOW as u16);
    }
    let local = hayate_with(config).await;
    let v = version(protocol);

    // The far side's subscriber and the near side's two publishers.
    let (subscriber, publishers) = match direction {
        BridgeDirection::Out => {
            let mut sub = remote.client(v, "far-sub").await;
            sub.subscribe("remote/#", QoS::ExactlyOnce, 1).await;
            let p1 = local.client(ProtocolVersion::V5, "pub-q1").await;
            let p2 = local.client(ProtocolVersion::V5, "pub-q2").await;
            (sub, [(p1, "local/q1/s"), (p2, "local/q2/s")])
        }
        _ => {
            let mut sub = local.client(ProtocolVersion::V5, "far-sub").await;
            sub.subscribe("local/#", QoS::ExactlyOnce, 1).await;
            let p1 = remote.client(v, "pub-q1").await;
            let p2 = remote.client(v, "pub-q2").await;
            (sub, [(p1, "remote/q1/s"), (p2, "remote/q2/s")])
        }
    };
    let done = Arc::new(AtomicBool::new(false));
    let collector = tokio::spawn(collect(subscriber, done.clone(), Duration::from_secs(2)));
    let [(p1, t1), (p2, t2)] = publishers;
    let s1 = tokio::spawn(stream(p1, t1.to_string(), QoS::AtLeastOnce));
    let s2 = tokio::spawn(stream(p2, t2.to_string(), QoS::ExactlyOnce));

    // The cuts: each at a random moment after the bridge is linked again: half of them within
    // 80 ms (during the handshake or the burst of what queued during the outage, when the
    // window is full), the others within 700 ms (in the steady stream).
    let mut hit = 0usize;
    let mut linked = 0;
    for _ in 0..CUTS {
        wait_for_link(&proxy, linked).await;
        linked = proxy.accepted();
        let delay = if rng.random_bool(0.5) {
            rng.random_range(0..80)
        } else {
            rng.random_range(0..700)
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        hit += proxy.cut() as usize;
    }
    let _p1 = s1.await.expect("QoS 1 publisher");
    let _p2 = s2.await.expect("QoS 2 publisher");
    wait_for_link(&proxy, linked).await;
    done.store(true, Ordering::SeqCst);
    let arrivals = collector.await.expect("subscriber");
    eprintln!(
        "{protocol:?} {direction:?}: {hit} cuts hit a live link; {} connections through the proxy; {:?}",
        proxy.accepted(),
        started.elapsed()
    );
    assert!(hit >= 1, "no cut hit the link: the test tested nothing");
    let ordered =
        !(matches!(remote, RemoteBroker::Mosquitto(_)) && direction == BridgeDirection::In);
    let far = match direction {
        BridgeDirection::Out => "remote",
        _ => "local",
    };
    for (suffix, qos) in [("q1/s", QoS::AtLeastOnce), ("q2/s", QoS::ExactlyOnce)] {
        let name = format!("{far}/{suffix}");
        let got = arrivals.get(&name).cloned().unwrap_or_default();
        check(&format!("{name} (seed {seed})"), &got, qos, hit, ordered);
    }
}

async fn mosquitto() -> RemoteBroker {
    RemoteBroker::Mosquitto(Mosquitto::start(false))
}

async fn hayate() -> RemoteBroker {
    // A v3 bridge gets the remote broker's window: 20, as Mosquitto's.
    RemoteBroker::Hayate(TestBroker::start_with(|c| c.broker.max_inflight_messages = 20).await)
}

#[tokio::test]
async fn cuts_out_to_mosquitto_v311() {
    link_faults(
        mosquitto().await,
        BridgeProtocol::Mqttv311,
        BridgeDirection::Out,
    )
    .await;
}

#[tokio::test]
async fn cuts_in_from_mosquitto_v311() {
    link_faults(
        mosquitto().await,
        BridgeProtocol::Mqttv311,
        BridgeDirection::In,
    )
    .await;
}

#[tokio::test]
async fn cuts_out_to_mosquitto_v5() {
    link_faults(
        mosquitto().await,
        BridgeProtocol::Mqttv50,
        BridgeDirection::Out,
    )
    .await;
}

#[tokio::test]
async fn cuts_in_from_mosquitto_v5() {
    link_faults(
        mosquitto().await,
        BridgeProtocol::Mqttv50,
        BridgeDirection::In,
    )
    .await;
}

#[tokio::test]
async fn cuts_out_to_hayate_v5() {
    link_faults(
        hayate().await,
        BridgeProtocol::Mqttv50,
        BridgeDirection::Out,
    )
    .await;
}

#[tokio::test]
async fn cuts_in_from_hayate_v5() {
    link_faults(hayate().await, BridgeProtocol::Mqttv50, BridgeDirection::In).await;
}

#[tokio::test]
async fn cuts_out_to_hayate_v311() {
    link_faults(
        hayate().await,
        BridgeProtocol::Mqttv311,
        BridgeDirection::Out,
    )
    .await;
}

#[tokio::test]
async fn cuts_in_from_hayate_v311() {
    link_faults(
        hayate().await,
        BridgeProtocol::Mqttv311,
        BridgeDirection::In,
    )
    .await;
}
