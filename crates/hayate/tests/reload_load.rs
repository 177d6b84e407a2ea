//! Reload under load (issue 14: "change limits, ACLs and listeners under load; nothing drops
//! that should not"), against a real `hayate serve` with real MQTT clients on their own
//! threads.
//!
//! A hundred QoS 1 publishers on three listeners and three QoS 1 subscribers run while one
//! SIGHUP lowers `[broker]` limits, takes read access to one subtree away in the ACL file,
//! removes one listener and adds another. Every publisher stamps its messages with its index
//! and a sequence number, and every message the broker acknowledged is counted at every
//! subscriber: nothing acknowledged on a kept listener (or on the removed one before it was
//! removed) may be missing. The removed listener's clients must be told 0x8B, the newly
//! denied subtree must stop being delivered while the rest goes on, and new connections must
//! get the new limits.

use hayate_codec::{Packet, ProtocolVersion, PubResp, QoS, ReasonCode};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::ops::{HttpApi, ReloadableHayate};
use hayate_testkit::{connect_packet, free_port, publish_packet};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TOKEN: &str = "reload-load-token";
const WAIT: Duration = Duration::from_secs(5);
/// Publishers connected from the start (on the testkit's listener, "kept" and "removed").
const PUBLISHERS: u32 = 100;
/// Publishers connected to the added listener after the reload.
const ADDED_PUBLISHERS: u32 = 10;
/// The pause between a PUBACK and the next PUBLISH of one publisher.
const PACE: Duration = Duration::from_millis(5);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Where a publisher is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The testkit's `--listen` listener (kept).
    Main,
    /// The `[[listener]]` "kept".
    Kept,
    /// The `[[listener]]` "removed" by the reload.
    Removed,
    /// The `[[listener]]` "added" by the reload.
    Added,
}

/// Publisher `index`'s listener and topic: every fifth on "removed", every fifth on "kept",
/// the rest on the main listener; every tenth publishes under `load/secret/`, which the
/// reload makes unreadable.
fn placement(index: u32) -> (Place, String) {
    let place = match index % 5 {
        3 => Place::Kept,
        4 => Place::Removed,
        _ => Place::Main,
    };
    let topic = if index % 10 == 1 {
        format!("load/secret/{index}")
    } else {
        format!("load/plain/{index}")
    };
    (place, topic)
}

/// `index`, `seq`, and whether it was sent once the reload was seen done.
fn payload(index: u32, seq: u32, after_reload: bool) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(9);
    bytes.extend_from_slice(&index.to_be_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes.push(u8::from(after_reload));
    bytes
}

fn parse(payload: &[u8]) -> (u32, u32, bool) {
    assert_eq!(payload.len(), 9, "a payload of this test: {payload:?}");
    let index = u32::from_be_bytes(payload[0..4].try_into().unwrap());
    let seq = u32::from_be_bytes(payload[4..8].try_into().unwrap());
    (index, seq, payload[8] == 1)
}

/// How one publisher's run ended.
#[derive(Debug, Default)]
struct Outcome {
    index: u32,
    secret: bool,
    /// Messages 1..=acked were acknowledged (each waits for its PUBACK).
    acked: u32,
    /// Of those, sent after the reload was seen done.
    acked_after_reload: u32,
    /// The DISCONNECT reason code, if the broker ended the connection with one.
    disconnected: Option<ReasonCode>,
    /// Anything else that ended it early (a refused PUBLISH, a closed connection).
    failure: Option<String>,
}

/// Publishes QoS 1 messages one at a time until `stop`, from its own thread.
fn spawn_publisher(
    mut client: BlockingClient,
    index: u32,
    topic: String,
    after_reload: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Outcome> {
    std::thread::spawn(move || {
        let mut outcome = Outcome {
            index,
            secret: topic.starts_with("load/secret/"),
            ..Outcome::default()
        };
        let mut seq = 0u32;
        while !stop.load(SeqCst) {
            seq += 1;
            let after = after_reload.load(SeqCst);
            let id = (seq % 65_535) as u16 + 1;
            let publish = publish_packet(
                &topic,
                &payload(index, seq, after),
                QoS::AtLeastOnce,
                false,
                Some(id),
            );
            client.send(&Packet::Publish(publish));
            match client.recv(WAIT) {
                Some(Packet::PubAck(ack))
                    if ack.packet_id.get() == id && !ack.reason_code.is_error() =>
                {
                    outcome.acked = seq;
                    outcome.acked_after_reload += u32::from(after);
                }
                Some(Packet::Disconnect(disconnect)) => {
                    outcome.disconnected = Some(disconnect.reason_code);
                    return outcome;
                }
                other => {
                    outcome.failure = Some(format!("message {seq}: {other:?}"));
                    return outcome;
                }
            }
            // The pause doubles as a look for a DISCONNECT, so that none is missed by
            // writing into a closed connection.
            match client.recv(PACE) {
                None => {}
                Some(Packet::Disconnect(disconnect)) => {
                    outcome.disconnected = Some(disconnect.reason_code);
                    return outcome;
                }
                Some(other) => {
                    outcome.failure = Some(format!("unexpected {other:?}"));
                    return outcome;
                }
            }
        }
        outcome
    })
}

/// What one subscriber received.
#[derive(Debug, Default)]
struct Received {
    /// `(publisher, seq)` under `load/plain/`.
    plain: HashSet<(u32, u32)>,
    /// Messages under `load/secret/` sent before the reload was seen done.
    secret_before: u32,
    /// Messages under `load/secret/` sent after it: none may arrive.
    secret_after: Vec<(u32, u32)>,
}

/// Receives and acknowledges until `stop`, from its own thread.
fn spawn_subscriber(
    mut client: BlockingClient,
    received: Arc<Mutex<Received>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(SeqCst) {
            let Some(Packet::Publish(publish)) = client.recv(Duration::from_millis(100)) else {
                continue;
            };
            if let Some(id) = publish.packet_id {
                client.send(&Packet::PubAck(PubResp::new(id)));
            }
            let (index, seq, after) = parse(&publish.payload);
            let mut received = received.lock().unwrap();
            if publish.topic.starts_with("load/secret/") {
                if after {
                    received.secret_after.push((index, seq));
                } else {
                    received.secret_before += 1;
                }
            } else {
                received.plain.insert((index, seq));
            }
        }
    })
}

/// The configuration file: `[broker]` limits, the ACL file, and the `[[listener]]`s.
fn config(
    acl: &Path,
    max_packet_size: u32,
    max_inflight: u16,
    listeners: &[(&str, u16)],
) -> String {
    let mut text = format!(
        "[broker]\nmax_packet_size = {max_packet_size}\nmax_inflight_messages = {max_inflight}\n\
         [auth]\nallow_anonymous = true\nacl_file = \"{}\"\n",
        acl.display()
    );
    for (name, port) in listeners {
        text.push_str(&format!(
            "[[listener]]\nname = \"{name}\"\nbind = \"127.0.0.1:{port}\"\n"
        ));
    }
    text
}

fn v5(addr: SocketAddr, client_id: &str) -> (BlockingClient, hayate_codec::ConnAck) {
    BlockingClient::connect_with(addr, connect_packet(ProtocolVersion::V5, client_id, true))
}

/// A subscriber to `load/#` at QoS 1.
fn subscriber(addr: SocketAddr, version: ProtocolVersion, client_id: &str) -> BlockingClient {
    let mut client = BlockingClient::connect_with(addr, connect_packet(version, client_id, true)).0;
    client.send_subscribe("load/#", QoS::AtLeastOnce, 1);
    match client.recv(WAIT) {
        Some(Packet::SubAck(ack)) => assert!(
            ack.reason_codes.iter().all(|code| !code.is_error()),
            "{client_id}: {ack:?}"
        ),
        other => panic!("{client_id}: expected SUBACK, got {other:?}"),
    }
    client
}

/// The value of one sample line of `/metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn reload_under_load_changes_limits_acls_and_listeners_without_losing_messages() {
    let (kept, removed, added) = (free_port(), free_port(), free_port());
    let acl_dir = tempfile::tempdir().unwrap();
    let acl = acl_dir.path().join("acl");
    std::fs::write(&acl, "topic readwrite load/#\n").unwrap();
    let broker = ReloadableHayate::start(
        Path::new(env!("CARGO_BIN_EXE_hayate")),
        TOKEN,
        "hayate.toml",
        &config(&acl, 100_000, 64, &[("kept", kept), ("removed", removed)]),
    );
    let main = broker.process.mqtt;

    let stop_subscribers = Arc::new(AtomicBool::new(false));
    let subscribers: Vec<(String, Arc<Mutex<Received>>, JoinHandle<()>)> = [
        (main, ProtocolVersion::V5, "sub-main-v5"),
        (main, ProtocolVersion::V311, "sub-main-v311"),
        (addr(kept), ProtocolVersion::V5, "sub-kept-v5"),
    ]
    .into_iter()
    .map(|(at, version, id)| {
        let received = Arc::new(Mutex::new(Received::default()));
        let client = subscriber(at, version, id);
        let thread = spawn_subscriber(client, received.clone(), stop_subscribers.clone());
        (id.to_string(), received, thread)
    })
    .collect();

    let after_reload = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers: Vec<(Place, JoinHandle<Outcome>)> = (0..PUBLISHERS)
        .map(|index| {
            let (place, topic) = placement(index);
            let at = match place {
                Place::Kept => addr(kept),
                Place::Removed => addr(removed),
                _ => main,
            };
            let (client, _) = v5(at, &format!("pub-{index}"));
            let thread = spawn_publisher(client, index, topic, after_reload.clone(), stop.clone());
            (place, thread)
        })
        .collect();

    // Under load: the limits lowered, `load/secret/` made write-only, "removed" removed and
    // "added" added.
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(
        &acl,
        "topic readwrite load/plain/#\ntopic write load/secret/#\n",
    )
    .unwrap();
    let log = broker.reload(
        &config(&acl, 50_000, 4, &[("kept", kept), ("added", added)]),
        1,
    );
    after_reload.store(true, SeqCst);
    assert!(!log.contains("config_changed_needs_restart"), "{log}");
    assert!(!log.contains("config_reload_failed"), "{log}");

    // New connections get the new limits, on the kept and the added listeners.
    for (at, id) in [(main, "probe-main"), (addr(added), "probe-added")] {
        let (_probe, ack) = v5(at, id);
        assert_eq!(ack.properties.maximum_packet_size, Some(50_000), "{id}");
    }
    publishers.extend((0..ADDED_PUBLISHERS).map(|n| {
        let index = PUBLISHERS + n;
        let (client, _) = v5(addr(added), &format!("pub-{index}"));
        let topic = format!("load/plain/{index}");
        let thread = spawn_publisher(client, index, topic, after_reload.clone(), stop.clone());
        (Place::Added, thread)
    }));
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, SeqCst);
    let outcomes: Vec<(Place, Outcome)> = publishers
        .into_iter()
        .map(|(place, thread)| (place, thread.join().expect("publisher thread")))
        .collect();

    // The removed listener's publishers were told 0x8B; the others went on to the end, and
    // published after the reload too.
    for (place, outcome) in &outcomes {
        let index = outcome.index;
        if *place == Place::Removed {
            assert_eq!(
                outcome.disconnected,
                Some(ReasonCode::SERVER_SHUTTING_DOWN),
                "publisher {index} on the removed listener: {outcome:?}"
            );
        } else {
            assert!(
                outcome.disconnected.is_none() && outcome.failure.is_none(),
                "publisher {index} on {place:?}: {outcome:?}"
            );
            assert!(
                outcome.acked_after_reload > 0,
                "publisher {index} on {place:?} published nothing after the reload: {outcome:?}"
            );
        }
        assert!(outcome.acked > 0, "publisher {index}: {outcome:?}");
    }

    // Every acknowledged `load/plain/` message reaches every subscriber.
    let expected: HashSet<(u32, u32)> = outcomes
        .iter()
        .filter(|(_, outcome)| !outcome.secret)
        .flat_map(|(_, outcome)| (1..=outcome.acked).map(move |seq| (outcome.index, seq)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let missing: usize = subscribers
            .iter()
            .map(|(_, received, _)| expected.difference(&received.lock().unwrap().plain).count())
            .sum();
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop_subscribers.store(true, SeqCst);
    let secret_sent_after: u32 = outcomes
        .iter()
        .filter(|(_, outcome)| outcome.secret)
        .map(|(_, outcome)| outcome.acked_after_reload)
        .sum();
    assert!(
        secret_sent_after > 0,
        "the secret publishers went on after the reload"
    );
    for (id, received, thread) in subscribers {
        thread.join().expect("subscriber thread");
        let received = received.lock().unwrap();
        let mut missing: Vec<(u32, u32)> = expected.difference(&received.plain).copied().collect();
        missing.sort_unstable();
        let mut per_publisher: HashMap<u32, usize> = HashMap::new();
        for (index, _) in &missing {
            *per_publisher.entry(*index).or_default() += 1;
        }
        assert!(
            missing.is_empty(),
            "{id} lost {} of {} acknowledged messages (by publisher: {per_publisher:?}; first: {:?})",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(10)]
        );
        // `load/secret/` was delivered before the reload and not after it.
        assert!(received.secret_before > 0, "{id}: no secret message before");
        assert!(
            received.secret_after.is_empty(),
            "{id} received {} messages denied by the reloaded ACL, e.g. {:?}",
            received.secret_after.len(),
            &received.secret_after[..received.secret_after.len().min(10)]
        );
    }

    // The broker counted the deliveries it refused.
    let (status, metrics) = HttpApi::new(broker.process.http, Some(TOKEN)).get("/metrics");
    assert_eq!(status, 200, "{metrics}");
    let denied = sample(
        &metrics,
        "hayate_authorization_denied_total{action=\"delivery\"}",
    )
    .unwrap_or_else(|| panic!("no delivery denials series in {metrics}"));
    assert!(denied >= 1.0, "{denied}");
    let total: u32 = outcomes.iter().map(|(_, outcome)| outcome.acked).sum();
    println!(
        "{} publishers, {total} messages acknowledged, {} of them under load/plain/ received by each of 3 subscribers",
        outcomes.len(),
        expected.len()
    );
}
