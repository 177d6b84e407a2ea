//! Delivery guarantees under concurrent load: 1,000 clients (3.1.1 and 5.0 mixed) subscribed
//! on wildcard filters, 500 of them publishing at QoS 1 and QoS 2 at the same time.

use crate::common::*;
use hayate_codec::{Packet, ProtocolVersion, PubResp, QoS};
use hayate_testkit::{publish_packet, RawClient, Received, TestBroker};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Barrier;

/// Clients connected.
const CLIENTS: usize = 1000;
/// Clients connected at once.
const CONNECT_BATCH: usize = 100;
/// Topic groups: client `i` is in group `i % GROUPS` and subscribes to `load/{group}/+`.
const GROUPS: usize = 100;
/// Messages each publishing client sends: even sequence numbers at QoS 1, odd at QoS 2.
const MESSAGES: u16 = 20;
/// Clients that also subscribe to `load/#` and so receive every message.
const MONITORS: usize = 4;
/// Receive Maximum of the v5 clients whose index is a multiple of 4 (the others send none).
const SMALL_RECEIVE_MAXIMUM: u16 = 8;
/// Longest a phase may take before the test fails.
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);

fn group_of(client: usize) -> usize {
    client % GROUPS
}

/// Half of each group publishes: those whose index in the group is even.
fn is_publisher(client: usize) -> bool {
    (client / GROUPS) % 2 == 0
}

fn version_of(client: usize) -> ProtocolVersion {
    if client % 2 == 0 {
        V5
    } else {
        V3
    }
}

fn qos_of(seq: u16) -> QoS {
    if seq % 2 == 0 {
        QoS::AtLeastOnce
    } else {
        QoS::ExactlyOnce
    }
}

/// The (publisher, sequence) pairs client `i` must receive, each exactly once.
fn expected_for(client: usize) -> HashSet<(u16, u16)> {
    (0..CLIENTS)
        .filter(|&p| is_publisher(p) && (client < MONITORS || group_of(p) == group_of(client)))
        .flat_map(|p| (0..MESSAGES).map(move |seq| (p as u16, seq)))
        .collect()
}

/// What one client saw.
struct Report {
    client: usize,
    /// How often each (publisher, sequence) arrived.
    received: HashMap<(u16, u16), u32>,
    /// Deliveries at a QoS other than the published one (granted is 2, so min = published).
    wrong_qos: Vec<(u16, u16, QoS)>,
}

/// Connects, subscribes, waits for everyone, publishes its messages pipelined while
/// receiving, and returns once its own flows are complete and all expected messages arrived.
async fn run_client(
    broker_addr: std::net::SocketAddr,
    i: usize,
    ready: Arc<Barrier>,
    done: Arc<Barrier>,
) -> Report {
    let version = version_of(i);
    let mut client = RawClient::connect_tcp(broker_addr, version).await;
    let mut connect = hayate_testkit::connect_packet(version, &format!("load-{i}"), true);
    let receive_maximum = (version.is_v5() && i % 4 == 0).then_some(SMALL_RECEIVE_MAXIMUM);
    connect.properties.receive_maximum = receive_maximum;
    let connack = client.connect(connect).await;
    assert_eq!(connack.reason_code.0, 0, "client {i} refused");
    let filter = format!("load/{}/+", group_of(i));
    assert_eq!(
        client.subscribe(&filter, QoS::ExactlyOnce, 1).await,
        vec![2]
    );
    // Overlaps the group filter for this client's own topic: still one copy [MQTT-3.3.4-2].
    let own = format!("load/+/c{i}");
    assert_eq!(client.subscribe(&own, QoS::AtLeastOnce, 2).await, vec![1]);
    if i < MONITORS {
        assert_eq!(
            client.subscribe("load/#", QoS::ExactlyOnce, 3).await,
            vec![2]
        );
    }
    tokio::time::timeout(PHASE_TIMEOUT, ready.wait())
        .await
        .expect("everyone subscribed");

    let expected = expected_for(i);
    let topic = format!("load/{}/c{i}", group_of(i));
    // Own publishes: packet id = seq + 1.
    let mut open_publishes: HashSet<u16> = HashSet::new();
    if is_publisher(i) {
        for seq in 0..MESSAGES {
            let mut payload = Vec::with_capacity(5);
            payload.extend_from_slice(&(i as u16).to_be_bytes());
            payload.extend_from_slice(&seq.to_be_bytes());
            payload.push(qos_of(seq) as u8);
            let id = seq + 1;
            client
                .send(Packet::Publish(publish_packet(
                    &topic,
                    &payload,
                    qos_of(seq),
                    false,
                    Some(id),
                )))
                .await;
            open_publishes.insert(id);
        }
    }
    let mut received: HashMap<(u16, u16), u32> = HashMap::new();
    let mut wrong_qos = Vec::new();
    let mut awaiting_rel: HashSet<u16> = HashSet::new();
    let mut total = 0usize;
    let deadline = tokio::time::Instant::now() + PHASE_TIMEOUT;
    while !(open_publishes.is_empty() && awaiting_rel.is_empty() && total >= expected.len()) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let packet = match client.recv_timeout(left).await {
            Received::Packet(packet) => packet,
            other => panic!(
                "client {i}: {other:?} with {total}/{} received, {} own flows open, {} PUBRELs awaited",
                expected.len(),
                open_publishes.len(),
                awaiting_rel.len()
            ),
        };
        match packet {
            Packet::Publish(p) => {
                let key = (
                    u16::from_be_bytes([p.payload[0], p.payload[1]]),
                    u16::from_be_bytes([p.payload[2], p.payload[3]]),
                );
                let published = QoS::from_u8(p.payload[4]).unwrap();
                if p.qos != published {
                    wrong_qos.push((key.0, key.1, p.qos));
                }
                // A retransmission (DUP) would be legitimate only after a reconnect; there is
                // none here, so every PUBLISH counts.
                *received.entry(key).or_default() += 1;
                total += 1;
                let id = p.packet_id.expect("QoS > 0");
                match p.qos {
                    QoS::AtLeastOnce => client.send(Packet::PubAck(PubResp::new(id))).await,
                    QoS::ExactlyOnce => {
                        assert!(
                            awaiting_rel.insert(id.get()),
                            "client {i}: packet id {id} reused while in flight"
                        );
                        // The broker counts these in flight until PUBCOMP [MQTT-3.3.4-9].
                        if let Some(max) = receive_maximum {
                            assert!(
                                awaiting_rel.len() <= usize::from(max),
                                "client {i}: {} QoS 2 in flight, Receive Maximum {max}",
                                awaiting_rel.len()
                            );
                        }
                        client.send(Packet::PubRec(PubResp::new(id))).await;
                    }
                    QoS::AtMostOnce => {}
                }
            }
            Packet::PubRel(rel) => {
                assert!(
                    awaiting_rel.remove(&rel.packet_id.get()),
                    "client {i}: PUBREL for unknown {rel:?}"
                );
                client
                    .send(Packet::PubComp(PubResp::new(rel.packet_id)))
                    .await;
            }
            Packet::PubAck(ack) => {
                assert_eq!(qos_of(ack.packet_id.get() - 1), QoS::AtLeastOnce);
                assert!(!ack.reason_code.is_error(), "client {i}: {ack:?}");
                assert!(
                    open_publishes.remove(&ack.packet_id.get()),
                    "client {i}: PUBACK for unknown {ack:?}"
                );
            }
            Packet::PubRec(rec) => {
                assert!(!rec.reason_code.is_error(), "client {i}: {rec:?}");
                client
                    .send(Packet::PubRel(PubResp::new(rec.packet_id)))
                    .await;
            }
            Packet::PubComp(comp) => {
                assert!(
                    open_publishes.remove(&comp.packet_id.get()),
                    "client {i}: PUBCOMP for unknown {comp:?}"
                );
            }
            other => panic!("client {i}: unexpected {other:?}"),
        }
    }
    // Everyone is done sending; anything arriving now is a duplicate.
    tokio::time::timeout(PHASE_TIMEOUT, done.wait())
        .await
        .expect("everyone done");
    for publish in receive_until_quiet(&mut client, Duration::from_millis(500)).await {
        let key = (
            u16::from_be_bytes([publish.payload[0], publish.payload[1]]),
            u16::from_be_bytes([publish.payload[2], publish.payload[3]]),
        );
        *received.entry(key).or_default() += 1;
    }
    disconnect(client).await;
    Report {
        client: i,
        received,
        wrong_qos,
    }
}

/// §4.3.2: QoS 1 "at least once" — with no reconnects, exactly once here — and
/// §4.3.3: QoS 2 "exactly once": under concurrent load every message reaches every
/// matching subscriber exactly once, none is lost, none is duplicated, each at the published
/// QoS (all subscriptions grant QoS 2 [MQTT-3.8.4-8]), with one copy per client for
/// overlapping subscriptions [MQTT-3.3.4-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_3_exactly_once_delivery_counts_under_load_1000_clients() {
    let broker = TestBroker::start().await;
    let started = std::time::Instant::now();
    let ready = Arc::new(Barrier::new(CLIENTS));
    let done = Arc::new(Barrier::new(CLIENTS));
    let mut tasks = Vec::with_capacity(CLIENTS);
    for batch in (0..CLIENTS).collect::<Vec<_>>().chunks(CONNECT_BATCH) {
        // Let each batch's TCP connections be accepted before opening the next.
        for &i in batch {
            tasks.push(tokio::spawn(run_client(
                broker.addr,
                i,
                ready.clone(),
                done.clone(),
            )));
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut reports = Vec::with_capacity(CLIENTS);
    for task in tasks {
        let report = tokio::time::timeout(PHASE_TIMEOUT * 2, task)
            .await
            .expect("client task finished")
            .expect("client task did not panic");
        reports.push(report);
    }

    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    let mut unexpected = Vec::new();
    let mut wrong_qos = Vec::new();
    let mut deliveries = 0u64;
    for report in &reports {
        let expected = expected_for(report.client);
        for key in &expected {
            match report.received.get(key).copied().unwrap_or(0) {
                0 => lost.push((report.client, *key)),
                1 => {}
                n => duplicated.push((report.client, *key, n)),
            }
        }
        for (key, n) in &report.received {
            deliveries += u64::from(*n);
            if !expected.contains(key) {
                unexpected.push((report.client, *key, *n));
            }
        }
        wrong_qos.extend(report.wrong_qos.iter().map(|w| (report.client, *w)));
    }
    let expected_total: usize = (0..CLIENTS).map(|i| expected_for(i).len()).sum();
    assert!(
        lost.is_empty(),
        "{} deliveries lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(
        duplicated.is_empty(),
        "{} duplicated, e.g. {:?}",
        duplicated.len(),
        &duplicated[..duplicated.len().min(10)]
    );
    assert!(
        unexpected.is_empty(),
        "unexpected deliveries: {:?}",
        &unexpected[..unexpected.len().min(10)]
    );
    assert!(
        wrong_qos.is_empty(),
        "wrong QoS: {:?}",
        &wrong_qos[..wrong_qos.len().min(10)]
    );
    assert_eq!(deliveries, expected_total as u64);
    eprintln!(
        "{CLIENTS} clients, {deliveries} deliveries in {:?}",
        started.elapsed()
    );
}
