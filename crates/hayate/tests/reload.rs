//! Configuration reload on SIGHUP against a running `hayate serve` with real MQTT clients:
//! limits lowered for new connections while existing ones keep what they were told,
//! listeners added and removed (clients on the others keep publishing without loss), the
//! mosquitto.conf form, the restart line, and HTTP Basic authentication with a password file.

use hayate_codec::{Packet, PacketId, ProtocolVersion, PubResp, QoS, ReasonCode};
use hayate_testkit::blocking::BlockingClient;
use hayate_testkit::ops::{HttpApi, ReloadableHayate};
use hayate_testkit::{connect_packet, free_port, publish_packet};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "reload-test-token";
const WAIT: Duration = Duration::from_secs(5);

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_hayate"))
}

/// A broker on `text` written to `file_name`, reloadable with SIGHUP.
fn start_broker(file_name: &str, text: &str) -> ReloadableHayate {
    ReloadableHayate::start(binary(), TOKEN, file_name, text)
}

fn v5_connect(addr: SocketAddr, client_id: &str) -> (BlockingClient, hayate_codec::ConnAck) {
    BlockingClient::connect_with(addr, connect_packet(ProtocolVersion::V5, client_id, true))
}

/// CONNECT that the broker answers with a failure code; returns the code.
fn refused(addr: SocketAddr, client_id: &str) -> ReasonCode {
    let mut client = RawClient::connect(addr, ProtocolVersion::V5);
    client.send(&Packet::Connect(Box::new(connect_packet(
        ProtocolVersion::V5,
        client_id,
        true,
    ))));
    match client.recv(WAIT) {
        Some(Packet::ConnAck(ack)) => ack.reason_code,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

/// A client whose CONNECT may be refused (BlockingClient panics on refusal).
struct RawClient {
    stream: TcpStream,
    version: ProtocolVersion,
    buf: bytes::BytesMut,
}

impl RawClient {
    fn connect(addr: SocketAddr, version: ProtocolVersion) -> RawClient {
        RawClient {
            stream: TcpStream::connect(addr).expect("tcp connect"),
            version,
            buf: bytes::BytesMut::new(),
        }
    }

    fn send(&mut self, packet: &Packet) {
        use std::io::Write;
        let mut bytes = bytes::BytesMut::new();
        hayate_codec::encode(packet, self.version, &mut bytes).unwrap();
        self.stream.write_all(&bytes).unwrap();
    }

    fn recv(&mut self, timeout: Duration) -> Option<Packet> {
        use std::io::Read;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(packet) =
                hayate_codec::decode(&mut self.buf, self.version, u32::MAX).unwrap()
            {
                return Some(packet);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// The next packet, skipping PUBLISH; `None` once the connection ended.
fn next_non_publish(client: &mut BlockingClient) -> Option<Packet> {
    loop {
        match client.recv(WAIT)? {
            Packet::Publish(_) => continue,
            other => return Some(other),
        }
    }
}

/// A payload of `n` bytes.
fn payload(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}

/// Lowered on SIGHUP, `max_packet_size` holds for connections made afterwards (their CONNACK
/// announces it and a larger PUBLISH ends them), while a connection made before keeps the
/// size it was told; `max_subscriptions_per_client` holds for existing connections too;
/// `max_connections` refuses new connections and leaves the open ones alone. The changed
/// keys that need a restart are named, the applied ones are not.
#[test]
fn sighup_lowers_limits_for_new_connections_while_existing_ones_keep_working() {
    let broker = start_broker(
        "hayate.toml",
        "[broker]\nmax_packet_size = 100000\nmax_subscriptions_per_client = 10\n",
    );
    let mqtt = broker.process.mqtt;
    let (mut sub, _) = v5_connect(mqtt, "limits-sub");
    sub.send_subscribe("big/#", QoS::AtMostOnce, 1);
    assert!(matches!(sub.recv(WAIT), Some(Packet::SubAck(_))));
    let (mut before, ack) = v5_connect(mqtt, "limits-before");
    assert_eq!(ack.properties.maximum_packet_size, Some(100_000));

    let log = broker.reload(
        "[server]\nthreads = 1\n[broker]\nmax_packet_size = 1000\nmax_subscriptions_per_client = 1\nretain_available = false\n",
        1,
    );
    let restart = log
        .lines()
        .find(|line| line.contains("config_changed_needs_restart"))
        .unwrap_or_else(|| panic!("no restart line in {log}"));
    assert!(
        restart.contains("server.threads") && restart.contains("broker.retain_available"),
        "{restart}"
    );
    assert!(
        !restart.contains("max_packet_size") && !restart.contains("max_subscriptions"),
        "applied keys are not named: {restart}"
    );

    // A new connection is told the new size and held to it.
    let (mut after, ack) = v5_connect(mqtt, "limits-after");
    assert_eq!(ack.properties.maximum_packet_size, Some(1000));
    after.send_publish("big/after", &payload(5000));
    match next_non_publish(&mut after) {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason_code, ReasonCode::PACKET_TOO_LARGE),
        other => panic!("expected DISCONNECT 0x95, got {other:?}"),
    }
    // The connection made before keeps the size it was told, and keeps working.
    before.send_publish("big/before", &payload(5000));
    let got = sub
        .recv_publish(WAIT)
        .expect("the large message from before arrives");
    assert_eq!((&*got.topic, got.payload.len()), ("big/before", 5000));

    // The subscription quota holds for existing connections from their next SUBSCRIBE.
    sub.send_subscribe("second/#", QoS::AtMostOnce, 2);
    match sub.recv(WAIT) {
        Some(Packet::SubAck(ack)) => assert_eq!(ack.reason_codes, [ReasonCode::QUOTA_EXCEEDED]),
        other => panic!("expected SUBACK, got {other:?}"),
    }

    // Lowered to the connections open now (sub and before): the next one is refused, the
    // open ones go on.
    broker.reload(
        "[server]\nmax_connections = 2\n[broker]\nmax_packet_size = 1000\n",
        2,
    );
    assert_eq!(refused(mqtt, "limits-refused"), ReasonCode::QUOTA_EXCEEDED);
    before.send_publish("big/still", b"ok");
    let got = sub.recv_publish(WAIT).expect("still delivered");
    assert_eq!(&*got.topic, "big/still");
}

/// Publishes QoS 1 messages `0..n` on `topic` from a thread, each acknowledged before the
/// next; returns the thread.
fn publish_stream(
    mut client: BlockingClient,
    topic: &'static str,
    n: u16,
) -> std::thread::JoinHandle<BlockingClient> {
    std::thread::spawn(move || {
        for i in 1..=n {
            let publish = publish_packet(topic, &i.to_be_bytes(), QoS::AtLeastOnce, false, Some(i));
            client.send(&Packet::Publish(publish));
            match next_non_publish(&mut client) {
                Some(Packet::PubAck(PubResp { packet_id, .. })) => {
                    assert_eq!(packet_id, PacketId::new(i).unwrap())
                }
                other => panic!("expected PUBACK {i}, got {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        client
    })
}

fn listeners(list: &[(&str, u16)]) -> String {
    list.iter()
        .map(|(name, port)| {
            format!("[[listener]]\nname = \"{name}\"\nbind = \"127.0.0.1:{port}\"\n")
        })
        .collect()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// SIGHUP starts a listener added to the file and stops a removed one: new connections to it
/// are refused and its clients are disconnected (v5 with DISCONNECT 0x8B), while a client on
/// another listener publishes through the reload without losing a message, and a listener
/// changed only in its name and limits keeps its connections.
#[test]
fn sighup_adds_and_removes_listeners() {
    let (one, two, three) = (free_port(), free_port(), free_port());
    let broker = start_broker("hayate.toml", &listeners(&[("one", one), ("two", two)]));
    let (mut sub, _) = v5_connect(broker.process.mqtt, "listeners-sub");
    sub.send_subscribe("stream/#", QoS::AtLeastOnce, 1);
    assert!(matches!(sub.recv(WAIT), Some(Packet::SubAck(_))));
    let (publisher, _) = v5_connect(addr(one), "listeners-pub");
    let (mut removed_v5, _) = v5_connect(addr(two), "removed-v5");
    let mut removed_v3 = BlockingClient::connect(addr(two), ProtocolVersion::V311, "removed-v3");
    assert!(
        TcpStream::connect(addr(three)).is_err(),
        "nothing listens on the third port yet"
    );

    const N: u16 = 300;
    let stream = publish_stream(publisher, "stream/one", N);
    std::thread::sleep(Duration::from_millis(100));
    // "one" renamed and given a connection cap (kept running), "two" removed, "three" added.
    let mut text = listeners(&[("three", three)]);
    text.push_str(&format!(
        "[[listener]]\nname = \"first\"\nbind = \"127.0.0.1:{one}\"\nmax_connections = 100\n"
    ));
    let log = broker.reload(&text, 1);
    let reloaded = log
        .lines()
        .find(|line| line.contains("config_reloaded"))
        .unwrap_or_else(|| panic!("no config_reloaded line in {log}"));
    assert!(
        reloaded.contains("three") && reloaded.contains("two") && reloaded.contains("first"),
        "{reloaded}"
    );
    assert!(!log.contains("config_changed_needs_restart"), "{log}");

    // The removed listener's clients are told and disconnected.
    match next_non_publish(&mut removed_v5) {
        Some(Packet::Disconnect(d)) => {
            assert_eq!(d.reason_code, ReasonCode::SERVER_SHUTTING_DOWN)
        }
        other => panic!("expected DISCONNECT 0x8B, got {other:?}"),
    }
    assert!(next_non_publish(&mut removed_v5).is_none(), "then closed");
    assert!(next_non_publish(&mut removed_v3).is_none(), "v3: closed");
    assert!(
        TcpStream::connect(addr(two)).is_err(),
        "the removed listener refuses connections"
    );
    // The added one serves.
    let (mut added, _) = v5_connect(addr(three), "added");
    added.send_publish("stream/three", b"hello");

    // Every message of the publisher on the kept listener arrived, in order, once.
    let publisher = stream.join().expect("the publisher saw every PUBACK");
    let mut expected = 1u16;
    let mut three_seen = false;
    while expected <= N || !three_seen {
        let got = sub.recv_publish(WAIT).unwrap_or_else(|| {
            panic!("lost message: waiting for {expected} (three: {three_seen})")
        });
        if &*got.topic == "stream/three" {
            three_seen = true;
            continue;
        }
        assert_eq!(
            got.payload.as_ref(),
            expected.to_be_bytes(),
            "in order, no loss"
        );
        if let Some(id) = got.packet_id {
            sub.send(&Packet::PubAck(PubResp::new(id)));
        }
        expected += 1;
    }
    drop(publisher);
}

/// The same with a mosquitto.conf: a `listener` line added on SIGHUP starts accepting, one
/// removed stops; a changed key that needs a restart is named by its Hayate key.
#[test]
fn sighup_applies_mosquitto_conf_listeners() {
    let (one, two) = (free_port(), free_port());
    let broker = start_broker(
        "mosquitto.conf",
        &format!("listener {one} 127.0.0.1\nallow_anonymous true\n"),
    );
    let (mut on_one, _) = v5_connect(addr(one), "conf-one");
    let log = broker.reload(
        &format!("listener {two} 127.0.0.1\nallow_anonymous true\nsys_interval 3\n"),
        1,
    );
    let restart = log
        .lines()
        .find(|line| line.contains("config_changed_needs_restart"))
        .unwrap_or_else(|| panic!("no restart line in {log}"));
    assert!(restart.contains("server.sys_interval_secs"), "{restart}");
    assert!(!restart.contains("listener"), "{restart}");
    let (mut on_two, _) = v5_connect(addr(two), "conf-two");
    on_two.send_subscribe("t", QoS::AtMostOnce, 1);
    assert!(matches!(on_two.recv(WAIT), Some(Packet::SubAck(_))));
    match next_non_publish(&mut on_one) {
        Some(Packet::Disconnect(d)) => {
            assert_eq!(d.reason_code, ReasonCode::SERVER_SHUTTING_DOWN)
        }
        other => panic!("expected DISCONNECT 0x8B, got {other:?}"),
    }
    assert!(TcpStream::connect(addr(one)).is_err());
}

/// A file that does not load changes nothing: the broker logs it and keeps its listeners.
#[test]
fn sighup_with_an_invalid_file_keeps_the_running_settings() {
    let one = free_port();
    let broker = start_broker("hayate.toml", &listeners(&[("one", one)]));
    std::fs::write(&broker.config, "[broker]\nmax_packet_size = 1\n").unwrap();
    broker.signal_reload();
    let deadline = Instant::now() + WAIT;
    loop {
        let log = broker.log_text();
        if log.contains("config_reload_failed_keeping_the_running_settings") {
            assert!(log.contains("max_packet_size"), "{log}");
            break;
        }
        assert!(Instant::now() < deadline, "{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_client, ack) = v5_connect(addr(one), "still-there");
    assert_eq!(ack.properties.maximum_packet_size, Some(1024 * 1024));
}

/// `[http] password_file`: the file's users get in with HTTP Basic, beside the bearer token;
/// a wrong password, an unknown user and no credentials are refused with both schemes
/// offered. `hayate config check` reads the file.
#[test]
fn http_basic_authentication_with_the_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    let made = Command::new(binary())
        .args([
            "passwd",
            "-c",
            "-b",
            passwd.to_str().unwrap(),
            "admin",
            "s3cret",
        ])
        .status()
        .unwrap();
    assert!(made.success());
    let text = format!("[http]\npassword_file = \"{}\"\n", passwd.display());
    let broker = start_broker("hayate.toml", &text);
    let api = HttpApi::new(broker.process.http, Some(TOKEN));
    let (status, body) = api.with_basic("admin", "s3cret").get("/api/v1/clients");
    assert_eq!(status, 200, "{body}");
    assert_eq!(api.get("/api/v1/clients").0, 200, "the token still works");
    assert_eq!(api.with_basic("admin", "wrong").get("/metrics").0, 401);
    assert_eq!(api.with_basic("nobody", "s3cret").get("/metrics").0, 401);
    assert_eq!(api.with_token(None).get("/metrics").0, 401);
    assert_eq!(api.with_token(Some("wrong")).get("/metrics").0, 401);

    // config check reads the file: valid now, invalid once the file is broken.
    let check = |path: &Path| {
        Command::new(binary())
            .args(["config", "check", path.to_str().unwrap()])
            .output()
            .unwrap()
    };
    assert!(check(&broker.config).status.success());
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        format!(
            "[http]\nlisten = \"127.0.0.1:0\"\npassword_file = \"{}\"\n",
            dir.path().join("missing").display()
        ),
    )
    .unwrap();
    let output = check(&broken);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("password_file"), "{stderr}");
}
