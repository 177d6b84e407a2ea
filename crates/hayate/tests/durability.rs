//! Persistence end to end (`docs/DURABILITY.md`): the real `hayate` binary with `--data-dir`
//! is killed with SIGKILL right after its last PUBACK and started again on the same
//! directory; every acknowledged retained message and a persistent session with its
//! subscription are back; so are QoS 1/2 messages queued for persistent sessions (offline, or
//! online and not yet acknowledged), each QoS 2 message delivered exactly once, in `batched`
//! and `sync` mode. A second broker on a directory in use refuses to start and names it.

use hayate_codec::{Packet, PacketId, ProtocolVersion, PubResp, QoS};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::{connect_packet, free_port, publish_packet};
use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");
const V: ProtocolVersion = ProtocolVersion::V311;

/// Kills the broker (SIGKILL) when dropped, however the test ends.
struct Broker {
    child: Child,
    addr: SocketAddr,
}

impl Broker {
    fn start(dir: &Path) -> Broker {
        Broker::start_in(dir, "batched")
    }

    fn start_in(dir: &Path, durability: &str) -> Broker {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(HAYATE)
            .args(["serve", "--log-level", "warn", "-l", &addr.to_string()])
            .args(["--durability", durability])
            .arg("--data-dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("hayate serve");
        let mut broker = Broker { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // A broker that exited (its port taken meanwhile by another test's broker, say)
            // must not pass for one that listens.
            if let Some(status) = broker.child.try_wait().expect("try_wait") {
                panic!("hayate serve exited: {status}");
            }
            if TcpStream::connect(addr).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "hayate serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Still running after answering: it is ours that listens.
        std::thread::sleep(Duration::from_millis(50));
        if let Some(status) = broker.child.try_wait().expect("try_wait") {
            panic!("hayate serve exited: {status}");
        }
        broker
    }

    /// SIGKILL, then wait for the process to be gone.
    fn kill(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A v3.1.1 client with clean session off: its session persists (no expiry in v3).
fn persistent(addr: SocketAddr, client_id: &str) -> (BlockingClient, bool) {
    let (client, ack) = BlockingClient::connect_with(addr, connect_packet(V, client_id, false));
    (client, ack.session_present)
}

fn publish_qos1(client: &mut BlockingClient, topic: &str, payload: &[u8], retain: bool, id: u16) {
    client.send(&Packet::Publish(publish_packet(
        topic,
        payload,
        QoS::AtLeastOnce,
        retain,
        Some(id),
    )));
    match client.recv(Duration::from_secs(5)) {
        Some(Packet::PubAck(ack)) => assert_eq!(ack.packet_id.get(), id),
        other => panic!("expected PUBACK {id}, got {other:?}"),
    }
}

/// One test at a time: each starts brokers on ports picked free a moment before.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn retained_messages_and_persistent_sessions_survive_kill_9() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Broker::start(dir.path());
    let (mut device, present) = persistent(first.addr, "device-1");
    assert!(!present);
    device.send_subscribe("cmd/device-1/#", QoS::AtLeastOnce, 1);
    assert!(matches!(
        device.recv(Duration::from_secs(5)),
        Some(Packet::SubAck(_))
    ));
    drop(device);
    let mut publisher = BlockingClient::connect(first.addr, V, "publisher");
    for i in 1..=100u16 {
        publish_qos1(
            &mut publisher,
            &format!("state/{i}"),
            format!("v{i}").as_bytes(),
            true,
            i,
        );
    }
    // An update and a removal must win over what they replace.
    publish_qos1(&mut publisher, "state/1", b"updated", true, 101);
    publish_qos1(&mut publisher, "state/2", b"", true, 102);
    // No pause: the PUBACK of a retained PUBLISH is sent only once the store committed it,
    // and the session's ops were appended (so committed) before those.
    first.kill();

    let second = Broker::start(dir.path());
    let mut reader = BlockingClient::connect(second.addr, V, "reader");
    reader.send_subscribe("state/#", QoS::AtLeastOnce, 1);
    let mut got = std::collections::BTreeMap::new();
    while let Some(publish) = reader.recv_publish(Duration::from_secs(2)) {
        assert!(publish.retain, "sent as retained");
        got.insert(publish.topic.to_string(), publish.payload.to_vec());
    }
    assert_eq!(got.len(), 99, "100 retained, one removed");
    assert_eq!(got["state/1"], b"updated");
    assert!(!got.contains_key("state/2"));
    assert_eq!(got["state/100"], b"v100");

    let (mut device, present) = persistent(second.addr, "device-1");
    assert!(present, "the persistent session is back");
    let mut publisher = BlockingClient::connect(second.addr, V, "publisher");
    publish_qos1(&mut publisher, "cmd/device-1/reboot", b"now", false, 1);
    let command = device
        .recv_publish(Duration::from_secs(5))
        .expect("the restored subscription delivers");
    assert_eq!(&*command.topic, "cmd/device-1/reboot");
    assert_eq!(command.qos, QoS::AtLeastOnce);
}

fn id(n: u16) -> PacketId {
    PacketId::new(n).expect("non-zero")
}

/// Sends a QoS 1 or 2 PUBLISH and completes its flow (PUBACK, or PUBREC/PUBREL/PUBCOMP).
fn publish_acknowledged(
    client: &mut BlockingClient,
    topic: &str,
    payload: &[u8],
    qos: QoS,
    n: u16,
) {
    client.send(&Packet::Publish(publish_packet(
        topic,
        payload,
        qos,
        false,
        Some(n),
    )));
    let wait = Duration::from_secs(5);
    match (qos, client.recv(wait)) {
        (QoS::AtLeastOnce, Some(Packet::PubAck(ack))) => assert_eq!(ack.packet_id, id(n)),
        (QoS::ExactlyOnce, Some(Packet::PubRec(rec))) => {
            assert_eq!(rec.packet_id, id(n));
            client.send(&Packet::PubRel(PubResp::new(id(n))));
            match client.recv(wait) {
                Some(Packet::PubComp(comp)) => assert_eq!(comp.packet_id, id(n)),
                other => panic!("expected PUBCOMP {n}, got {other:?}"),
            }
        }
        (_, other) => panic!("expected the acknowledgement of {n}, got {other:?}"),
    }
}

/// A subscriber that keeps a client's side of QoS 2 across its connections: a PUBLISH whose
/// packet id awaits PUBREL is acknowledged again but not delivered again.
#[derive(Default)]
struct Receiver {
    awaiting_pubrel: HashSet<u16>,
    /// Topic → payloads delivered, in order.
    delivered: BTreeMap<String, Vec<String>>,
}

impl Receiver {
    /// Reads (and acknowledges) until nothing comes for a second.
    fn drain(&mut self, client: &mut BlockingClient) {
        while let Some(packet) = client.recv(Duration::from_secs(1)) {
            match packet {
                Packet::Publish(publish) => {
                    let n = publish.packet_id.expect("QoS 1/2");
                    let fresh = match publish.qos {
                        QoS::ExactlyOnce => self.awaiting_pubrel.insert(n.get()),
                        _ => true,
                    };
                    if fresh {
                        self.delivered
                            .entry(publish.topic.to_string())
                            .or_default()
                            .push(String::from_utf8_lossy(&publish.payload).into_owned());
                    }
                    client.send(&match publish.qos {
                        QoS::ExactlyOnce => Packet::PubRec(PubResp::new(n)),
                        _ => Packet::PubAck(PubResp::new(n)),
                    });
                }
                Packet::PubRel(rel) => {
                    self.awaiting_pubrel.remove(&rel.packet_id.get());
                    client.send(&Packet::PubComp(PubResp::new(rel.packet_id)));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

/// Persistent subscribers, one offline and one connected that has not read anything, get
/// 100 QoS 1 and 100 QoS 2 messages; the broker is killed right after the last
/// acknowledgement to the publisher. After the restart each subscriber gets every QoS 1
/// message (at least once) and every QoS 2 message exactly once, in order.
fn queued_messages_survive_kill_9(durability: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Broker::start_in(dir.path(), durability);
    let mut subscribers = Vec::new();
    for name in ["offline", "online"] {
        let (mut client, _) = persistent(first.addr, name);
        client.send_subscribe("q/#", QoS::ExactlyOnce, 1);
        assert!(matches!(
            client.recv(Duration::from_secs(5)),
            Some(Packet::SubAck(_))
        ));
        subscribers.push(client);
    }
    drop(subscribers.remove(0));
    let (mut publisher, _) = persistent(first.addr, "publisher");
    for n in 1..=100u16 {
        let payload = n.to_string();
        publish_acknowledged(
            &mut publisher,
            "q/1",
            payload.as_bytes(),
            QoS::AtLeastOnce,
            n,
        );
        publish_acknowledged(
            &mut publisher,
            "q/2",
            payload.as_bytes(),
            QoS::ExactlyOnce,
            n + 100,
        );
    }
    first.kill();
    drop(subscribers);

    let second = Broker::start_in(dir.path(), durability);
    let expected: Vec<String> = (1..=100).map(|n: u16| n.to_string()).collect();
    for name in ["offline", "online"] {
        let (mut client, present) = persistent(second.addr, name);
        assert!(present, "{name}: the session is back");
        let mut receiver = Receiver::default();
        receiver.drain(&mut client);
        let qos1 = receiver.delivered.remove("q/1").unwrap_or_default();
        let mut first_arrivals = qos1.clone();
        first_arrivals.dedup();
        assert_eq!(first_arrivals, expected, "{name}: QoS 1, in order");
        let qos2 = receiver.delivered.remove("q/2").unwrap_or_default();
        assert_eq!(qos2, expected, "{name}: QoS 2, exactly once, in order");
        // Nothing left: everything was acknowledged.
        drop(client);
        let (mut client, _) = persistent(second.addr, name);
        let mut again = Receiver::default();
        again.drain(&mut client);
        assert!(
            again.delivered.is_empty(),
            "{name}: acknowledged messages came back"
        );
    }
}

#[test]
fn queued_messages_survive_kill_9_batched() {
    queued_messages_survive_kill_9("batched");
}

#[test]
fn queued_messages_survive_kill_9_sync() {
    queued_messages_survive_kill_9("sync");
}

#[test]
fn a_data_dir_in_use_is_refused() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let _running = Broker::start(dir.path());
    let mut second = Command::new(HAYATE)
        .args(["serve", "--log-level", "warn", "-l"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hayate serve");
    // Bounded: a second broker that did start would otherwise run (and hang the test) forever.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second broker started on a data directory in use");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "a second broker started");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr read");
    assert!(
        stderr.contains(&dir.path().display().to_string()),
        "the error names the directory: {stderr}"
    );
}
