//! `hayate serve -c mosquitto.conf` with a bridge section: the binary starts the bridge and
//! messages cross it both ways (the remote broker is an in-process Hayate).

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{free_port, Received, TestBroker};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");
const V5: ProtocolVersion = ProtocolVersion::V5;

/// Kills the broker when the test ends, however it ends.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_a_bridge_from_a_mosquitto_conf() {
    let remote = TestBroker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let conf = dir.path().join("mosquitto.conf");
    let text = format!(
        "listener {} 127.0.0.1\nallow_anonymous true\n\n\
         connection site\naddress 127.0.0.1:{}\nremote_clientid site-1\n\
         bridge_protocol_version mqttv50\nrestart_timeout 1\n\
         topic up/# out 1 \"\" site/\ntopic down/# in 1\n",
        addr.port(),
        remote.addr.port()
    );
    std::fs::write(&conf, text).unwrap();
    let child = Command::new(HAYATE)
        .args(["serve", "-c"])
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _broker = Broker(child);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "hayate serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The bridge says it is up on its state topic.
    let mut local = hayate_testkit::RawClient::connect_tcp(addr, V5).await;
    let connack = local
        .connect(hayate_testkit::connect_packet(V5, "local", true))
        .await;
    assert_eq!(connack.reason_code.0, 0);
    local
        .subscribe("$SYS/broker/connection/site-1/state", QoS::AtMostOnce, 1)
        .await;
    loop {
        match local.recv_timeout(Duration::from_secs(15)).await {
            Received::Packet(Packet::Publish(p)) if p.payload.as_ref() == b"1" => break,
            Received::Packet(_) => {}
            other => panic!("the bridge did not come up: {other:?}"),
        }
    }
    local.subscribe("down/#", QoS::AtLeastOnce, 2).await;
    let mut remote_client = remote.client(V5, "remote").await;
    remote_client.subscribe("site/#", QoS::AtLeastOnce, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    local
        .publish("up/x", b"to-remote", QoS::AtLeastOnce, false, 10)
        .await;
    let got = remote_client.recv_publish().await;
    assert_eq!(got.topic.as_str(), "site/up/x");
    assert_eq!(got.payload.as_ref(), b"to-remote");

    remote_client
        .publish("down/y", b"to-local", QoS::AtLeastOnce, false, 11)
        .await;
    let got = local.recv_publish().await;
    assert_eq!(got.topic.as_str(), "down/y");
    assert_eq!(got.payload.as_ref(), b"to-local");
}
