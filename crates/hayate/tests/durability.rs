//! Persistence end to end (`docs/DURABILITY.md`): the real `hayate` binary with `--data-dir`
//! is killed with SIGKILL right after its last PUBACK and started again on the same
//! directory; every acknowledged retained message and a persistent session with its
//! subscription are back. A second broker on a directory in use
//! refuses to start and names it.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::{connect_packet, free_port, publish_packet};
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
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(HAYATE)
            .args(["serve", "--log-level", "warn", "-l", &addr.to_string()])
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
