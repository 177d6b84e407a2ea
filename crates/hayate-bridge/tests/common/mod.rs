//! A Mosquitto broker started by the test on a free loopback port, and a Hayate with a bridge
//! to it.

#![allow(dead_code)]

use hayate_bridge::config::{BridgeConfig, BridgeDirection, BridgeProtocol, BridgeTopic};
use hayate_codec::{Packet, ProtocolVersion};
#[allow(unused_imports)]
pub use hayate_testkit::mosquitto::Mosquitto;
use hayate_testkit::{RawClient, Received, TestBroker};
use std::time::Duration;

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
