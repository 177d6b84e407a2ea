//! A Mosquitto broker started by the test on a free loopback port, and a Hayate with a bridge
//! to it.

#![allow(dead_code)]

use hayate_bridge::config::{BridgeConfig, BridgeDirection, BridgeProtocol, BridgeTopic};
use hayate_codec::{Packet, ProtocolVersion};
use hayate_testkit::{free_port, RawClient, Received, TestBroker};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the Mosquitto broker binary.
pub const MOSQUITTO: &str = "/usr/sbin/mosquitto";

/// A Mosquitto broker, killed on drop; it can be stopped and started again on the same port.
pub struct Mosquitto {
    child: Option<Child>,
    pub port: u16,
    conf: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Mosquitto with an anonymous listener; with `persistence`, it saves its sessions and
    /// queued messages when stopped and reloads them when started again.
    pub fn start(persistence: bool) -> Mosquitto {
        Mosquitto::start_with(persistence, "")
    }

    /// [`Mosquitto::start`] with more configuration lines (e.g. a bridge section) at the end.
    pub fn start_with(persistence: bool, extra: &str) -> Mosquitto {
        assert!(
            Path::new(MOSQUITTO).exists(),
            "{MOSQUITTO} not found: these tests need the Mosquitto broker (apt-get install mosquitto)"
        );
        let port = free_port();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut text = format!(
            "log_dest none\nlistener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 10000\n"
        );
        {
            use std::os::unix::fs::PermissionsExt;
            // Mosquitto started as root drops to its own user: let it read and write here.
            let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777));
        }
        if persistence {
            text.push_str(&format!(
                "persistence true\npersistence_location {}/\n",
                dir.path().display()
            ));
        } else {
            text.push_str("persistence false\n");
        }
        text.push_str(extra);
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(&conf, text).expect("write config");
        let mut mosquitto = Mosquitto {
            child: None,
            port,
            conf,
            _dir: dir,
        };
        mosquitto.restart();
        mosquitto
    }

    /// Starts the broker again (after [`Mosquitto::stop`]) and waits for its listener.
    pub fn restart(&mut self) {
        let child = Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("mosquitto exited ({status}) instead of listening");
            }
            assert!(
                Instant::now() < deadline,
                "mosquitto did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the broker with SIGTERM (it saves its state when persistent) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }

    /// A client connected to this broker.
    pub async fn client(
        &self,
        version: ProtocolVersion,
        client_id: &str,
        clean: bool,
    ) -> RawClient {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut client = RawClient::connect_tcp(addr, version).await;
        let mut connect = hayate_testkit::connect_packet(version, client_id, clean);
        if !clean && version == ProtocolVersion::V5 {
            // A v5 session outlives the connection only with an expiry interval.
            connect.properties.session_expiry_interval = Some(3600);
        }
        let connack = client.connect(connect).await;
        assert_eq!(connack.reason_code.0, 0, "mosquitto refused {client_id}");
        client
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A topic line.
pub fn topic(
    pattern: &str,
    direction: BridgeDirection,
    qos: u8,
    local: &str,
    remote: &str,
) -> BridgeTopic {
    BridgeTopic {
        pattern: pattern.into(),
        direction,
        qos,
        local_prefix: local.into(),
        remote_prefix: remote.into(),
    }
}

/// A bridge named `name` to Mosquitto on `port`, reconnecting after 1 s.
pub fn bridge(
    name: &str,
    port: u16,
    protocol: BridgeProtocol,
    topics: Vec<BridgeTopic>,
) -> BridgeConfig {
    let mut config = BridgeConfig::new(name);
    config.addresses = vec![format!("127.0.0.1:{port}")];
    config.protocol_version = protocol;
    config.topics = topics;
    config.remote_clientid = Some(format!("{name}-remote"));
    config.restart_timeout_secs = 1;
    config.restart_timeout_cap_secs = 0;
    config
}

/// Hayate with `bridge`, and a local client that has seen the bridge's state topic say "1"
/// (the link is up and the remote subscriptions are sent).
pub async fn hayate_with(bridge: BridgeConfig) -> TestBroker {
    // `RUST_LOG=hayate_bridge=debug` shows the bridge's log lines.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let state = format!(
        "$SYS/broker/connection/{}/state",
        bridge.remote_clientid.clone().unwrap()
    );
    let broker = TestBroker::start_with(|config| config.bridges.push(bridge)).await;
    let mut watcher = broker.client(ProtocolVersion::V5, "state-watcher").await;
    watcher
        .subscribe(&state, hayate_codec::QoS::AtMostOnce, 1)
        .await;
    wait_for_state(&mut watcher, b"1").await;
    // Let the remote broker handle the bridge's SUBSCRIBE before the test publishes there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    broker
}

/// Waits until the state topic says `state`.
pub async fn wait_for_state(watcher: &mut RawClient, state: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match watcher.recv_timeout(left).await {
            Received::Packet(Packet::Publish(p)) if p.payload.as_ref() == state => return,
            Received::Packet(_) => {}
            other => panic!("bridge state never became {state:?}: {other:?}"),
        }
    }
}

/// Receives PUBLISHes (acknowledging them) until nothing comes for `quiet`.
pub async fn drain(client: &mut RawClient, quiet: Duration) -> Vec<hayate_codec::Publish> {
    let mut received = Vec::new();
    loop {
        match client.recv_timeout(quiet).await {
            Received::Packet(Packet::Publish(publish)) => {
                client.ack(&publish).await;
                received.push(publish);
            }
            Received::Packet(_) => {}
            Received::Timeout | Received::Closed => return received,
        }
    }
}
