//! The `cleansession` × `local_cleansession` matrix, against a real Mosquitto as the remote
//! broker, with a TCP proxy in between to take the link down without stopping either broker.
//!
//! Mosquitto documents (mosquitto.conf(5)): `cleansession false` keeps the bridge's
//! subscriptions (and queued messages) on the remote broker when the connection drops, `true`
//! cleans them up; `local_cleansession` splits this for the local side — `false` keeps the
//! local session "independent of the remote connection" — and defaults to `cleansession`.
//! Mosquitto's own test (test/broker/06-bridge-clean-session-core.py) states the matrix as
//! "queued from A (edge) to B (core)" = not `local_cleansession`, "queued from B to A" = not
//! `cleansession`.
//!
//! Hayate (docs/BRIDGES.md) runs the bridge's local side as an ordinary session with Clean
//! Start only on the bridge's *first* connection, and only with `local_cleansession`; it ends
//! it when the bridge stops. So:
//!
//! - **across a bridge restart** (Hayate stopped and started again, `[storage]` on) the matrix
//!   is Mosquitto's: local → remote messages queued in the bridge's local session survive iff
//!   `local_cleansession` (default `cleansession`) is false; remote → local messages queued in
//!   the remote session survive iff `cleansession` is false;
//! - **across a link drop** (the bridge keeps running) the local session is always resumed, so
//!   local → remote messages queued during the outage are delivered whatever
//!   `local_cleansession` says. Mosquitto does not queue for a disconnected bridge with
//!   `local_cleansession true` (rows 1, 3, 4 of its test): a difference, documented in
//!   BRIDGES.md. Remote → local messages published during the drop survive iff `cleansession`
//!   is false, as with Mosquitto (that is the remote broker's doing).

mod common;

use common::{bridge, topic, wait_for_state, Mosquitto};
use hayate_bridge::config::{BridgeConfig, BridgeDirection, BridgeProtocol};
use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::proxy::Proxy;
use hayate_testkit::{RawClient, Received, TestBroker};
use std::path::Path;
use std::time::Duration;

const STATE: &str = "$SYS/broker/connection/matrix-remote/state";

async fn start_hayate(config: &BridgeConfig, dir: &Path) -> TestBroker {
    let config = config.clone();
    let dir = dir.to_path_buf();
    TestBroker::start_with(move |c| {
        c.storage.dir = Some(dir);
        c.storage.sync_interval_ms = 10;
        c.bridges.push(config);
    })
    .await
}

async fn watcher(hayate: &TestBroker) -> RawClient {
    let mut watcher = hayate.client(ProtocolVersion::V5, "watcher").await;
    watcher.subscribe(STATE, QoS::AtMostOnce, 1).await;
    watcher
}

/// Receives PUBLISHes (acknowledged) until one with payload `last` has come, then for 500 ms
/// more; returns their payloads in order.
async fn payloads_until(client: &mut RawClient, last: &str) -> Vec<String> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen_last = got.iter().any(|p| p == last);
        let wait = if seen_last {
            Duration::from_millis(500)
        } else {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        };
        match client.recv_timeout(wait).await {
            Received::Packet(Packet::Publish(p)) => {
                client.ack(&p).await;
                got.push(String::from_utf8_lossy(&p.payload).into_owned());
            }
            Received::Packet(_) => {}
            Received::Timeout if seen_last => return got,
            other => panic!("{last} never arrived ({other:?}); got {got:?}"),
        }
    }
}

/// The link goes down (the proxy cuts it and refuses reconnections) and the bridge notices.
async fn link_down(proxy: &Proxy, watcher: &mut RawClient) {
    proxy.set_blocked(true);
    proxy.cut();
    wait_for_state(watcher, b"0").await;
}

fn expected(queued: bool, queued_msg: &str, after: &str) -> Vec<String> {
    let mut v = Vec::new();
    if queued {
        v.push(queued_msg.to_string());
    }
    v.push(after.to_string());
    v
}

async fn matrix(protocol: BridgeProtocol, cleansession: bool, local_cleansession: Option<bool>) {
    let local_clean = local_cleansession.unwrap_or(cleansession);
    let v = match protocol {
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
        _ => ProtocolVersion::V311,
    };
    let mosquitto = Mosquitto::start(false);
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], mosquitto.port))).await;
    let mut config = bridge(
        "matrix",
        proxy.addr.port(),
        protocol,
        vec![
            topic("out/#", BridgeDirection::Out, 1, "", ""),
            topic("in/#", BridgeDirection::In, 1, "", ""),
        ],
    );
    config.cleansession = cleansession;
    config.local_cleansession = local_cleansession;
    let data = tempfile::tempdir().unwrap();

    // Far-side clients, never disconnected: a subscriber and a publisher on Mosquitto.
    let mut remote_sub = mosquitto.client(v, "remote-sub", true).await;
    remote_sub.subscribe("out/#", QoS::AtLeastOnce, 1).await;
    let mut remote_pub = mosquitto.client(v, "remote-pub", true).await;

    let hayate = start_hayate(&config, data.path()).await;
    let mut state = watcher(&hayate).await;
    wait_for_state(&mut state, b"1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut local_sub = hayate.client(ProtocolVersion::V5, "local-sub").await;
    local_sub.subscribe("in/#", QoS::AtLeastOnce, 1).await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;

    // Both ways work.
    local_pub
        .publish("out/x", b"out-1", QoS::AtLeastOnce, false, 1)
        .await;
    remote_pub
        .publish("in/x", b"in-1", QoS::AtLeastOnce, false, 1)
        .await;
    assert_eq!(payloads_until(&mut remote_sub, "out-1").await, ["out-1"]);
    assert_eq!(payloads_until(&mut local_sub, "in-1").await, ["in-1"]);

    // 1. A link drop, the bridge running on.
    link_down(&proxy, &mut state).await;
    local_pub
        .publish("out/x", b"out-2", QoS::AtLeastOnce, false, 2)
        .await;
    remote_pub
        .publish("in/x", b"in-2", QoS::AtLeastOnce, false, 2)
        .await;
    proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    local_pub
        .publish("out/x", b"out-3", QoS::AtLeastOnce, false, 3)
        .await;
    remote_pub
        .publish("in/x", b"in-3", QoS::AtLeastOnce, false, 3)
        .await;
    // Hayate resumes its local session on every reconnection: always queued.
    assert_eq!(
        payloads_until(&mut remote_sub, "out-3").await,
        expected(true, "out-2", "out-3"),
        "link drop, local -> remote"
    );
    // The remote session (and what Mosquitto queued in it) survives iff not cleansession.
    assert_eq!(
        payloads_until(&mut local_sub, "in-3").await,
        expected(!cleansession, "in-2", "in-3"),
        "link drop, remote -> local"
    );

    // 2. A bridge restart: the link down, a message queued locally for the bridge, Hayate
    // stopped, a message published remotely meanwhile, Hayate started again.
    link_down(&proxy, &mut state).await;
    local_pub
        .publish("out/x", b"out-4", QoS::AtLeastOnce, false, 4)
        .await;
    drop((local_pub, local_sub, state));
    hayate.handle.shutdown().await;
    remote_pub
        .publish("in/x", b"in-4", QoS::AtLeastOnce, false, 4)
        .await;
    let hayate = start_hayate(&config, data.path()).await;
    let mut state = watcher(&hayate).await;
    let mut local_sub = hayate.client(ProtocolVersion::V5, "local-sub").await;
    local_sub.subscribe("in/#", QoS::AtLeastOnce, 1).await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    local_pub
        .publish("out/x", b"out-5", QoS::AtLeastOnce, false, 5)
        .await;
    remote_pub
        .publish("in/x", b"in-5", QoS::AtLeastOnce, false, 5)
        .await;
    assert_eq!(
        payloads_until(&mut remote_sub, "out-5").await,
        expected(!local_clean, "out-4", "out-5"),
        "bridge restart, local -> remote"
    );
    assert_eq!(
        payloads_until(&mut local_sub, "in-5").await,
        expected(!cleansession, "in-4", "in-5"),
        "bridge restart, remote -> local"
    );
}

// Rows as in Mosquitto's test: local_cleansession unset / true / false × cleansession.

#[tokio::test]
async fn cs_true_lcs_unset_v311() {
    matrix(BridgeProtocol::Mqttv311, true, None).await;
}

#[tokio::test]
async fn cs_false_lcs_unset_v311() {
    matrix(BridgeProtocol::Mqttv311, false, None).await;
}

#[tokio::test]
async fn cs_true_lcs_true_v311() {
    matrix(BridgeProtocol::Mqttv311, true, Some(true)).await;
}

#[tokio::test]
async fn cs_false_lcs_true_v311() {
    matrix(BridgeProtocol::Mqttv311, false, Some(true)).await;
}

#[tokio::test]
async fn cs_true_lcs_false_v311() {
    matrix(BridgeProtocol::Mqttv311, true, Some(false)).await;
}

#[tokio::test]
async fn cs_false_lcs_false_v311() {
    matrix(BridgeProtocol::Mqttv311, false, Some(false)).await;
}

#[tokio::test]
async fn cs_true_lcs_unset_v5() {
    matrix(BridgeProtocol::Mqttv50, true, None).await;
}

#[tokio::test]
async fn cs_false_lcs_unset_v5() {
    matrix(BridgeProtocol::Mqttv50, false, None).await;
}

#[tokio::test]
async fn cs_false_lcs_true_v5() {
    matrix(BridgeProtocol::Mqttv50, false, Some(true)).await;
}

#[tokio::test]
async fn cs_true_lcs_false_v5() {
    matrix(BridgeProtocol::Mqttv50, true, Some(false)).await;
}
