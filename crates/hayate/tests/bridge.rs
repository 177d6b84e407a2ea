//! `hayate serve -c mosquitto.conf` with bridge sections: the binary starts the bridges,
//! messages cross them both ways, and SIGHUP adds, changes and removes bridges without
//! touching the others, and the HTTP edge lists the bridges of the last reload. The remote
//! brokers are an in-process Hayate and a real Mosquitto.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::mosquitto::Mosquitto;
use hayate_testkit::ops::{HayateProcess, HttpApi};
use hayate_testkit::process::{wait_until_listening, KillOnDrop};
use hayate_testkit::{free_port, RawClient, Received, TestBroker};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");
const V5: ProtocolVersion = ProtocolVersion::V5;

fn serve(conf: &Path) -> KillOnDrop {
    let child = Command::new(HAYATE)
        .args(["serve", "-c"])
        .arg(conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

async fn client(addr: SocketAddr, id: &str) -> RawClient {
    let mut client = RawClient::connect_tcp(addr, V5).await;
    let connack = client
        .connect(hayate_testkit::connect_packet(V5, id, true))
        .await;
    assert_eq!(connack.reason_code.0, 0);
    client
}

/// Waits until `topic` carries `payload` (other messages are acknowledged and skipped);
/// returns every `topic=payload` seen meanwhile.
async fn wait_for(client: &mut RawClient, topic: &str, payload: &[u8]) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match client.recv_timeout(left).await {
            Received::Packet(Packet::Publish(p)) => {
                client.ack(&p).await;
                seen.push(format!(
                    "{}={}",
                    p.topic,
                    String::from_utf8_lossy(&p.payload)
                ));
                if p.topic.as_str() == topic && p.payload.as_ref() == payload {
                    return seen;
                }
            }
            Received::Packet(_) => {}
            other => panic!("{topic} never carried {payload:?}: {other:?}"),
        }
    }
}

/// The next message on `topic` (others are acknowledged and skipped).
async fn next_on(client: &mut RawClient, topic: &str) -> String {
    loop {
        match client.recv_timeout(Duration::from_secs(10)).await {
            Received::Packet(Packet::Publish(p)) => {
                client.ack(&p).await;
                if p.topic.as_str() == topic {
                    return String::from_utf8_lossy(&p.payload).into_owned();
                }
            }
            Received::Packet(_) => {}
            other => panic!("nothing on {topic}: {other:?}"),
        }
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
    let _broker = serve(&conf);
    wait_until_listening(addr).await;

    // The bridge says it is up on its state topic.
    let mut local = client(addr, "local").await;
    local
        .subscribe("$SYS/broker/connection/site-1/state", QoS::AtMostOnce, 1)
        .await;
    let _ = wait_for(&mut local, "$SYS/broker/connection/site-1/state", b"1").await;
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

/// A `connection` section to Mosquitto on `port`: `PATTERN out 1 "" PREFIX`.
fn section(name: &str, port: u16, pattern: &str, prefix: &str) -> String {
    format!(
        "\nconnection {name}\naddress 127.0.0.1:{port}\nremote_clientid {name}-remote\n\
         restart_timeout 1\ntopic {pattern} out 1 \"\" {prefix}\n"
    )
}

/// Bridge two's state topic.
const TWO: &str = "$SYS/broker/connection/two-remote/state";

fn sighup(broker: &KillOnDrop) {
    sighup_pid(broker.id());
}

fn sighup_pid(pid: u32) {
    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// SIGHUP with a bridge added, then changed, then removed: each change applies, and the
/// bridge left alone keeps its one connection throughout (its `connects` counter stays 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_changes_and_removes_bridges_without_touching_the_others() {
    let mosquitto = Mosquitto::start(false);
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let conf = dir.path().join("mosquitto.conf");
    let head = format!(
        "listener {} 127.0.0.1\nallow_anonymous true\nsys_interval 1\n",
        addr.port()
    );
    let one = section("one", mosquitto.port, "a/#", "one/");
    std::fs::write(&conf, format!("{head}{one}")).unwrap();
    let broker = serve(&conf);
    wait_until_listening(addr).await;

    let mut watcher = client(addr, "watcher").await;
    watcher
        .subscribe("$SYS/broker/connection/+/state", QoS::AtMostOnce, 1)
        .await;
    let one_up = "$SYS/broker/connection/one-remote/state";
    let mut states = wait_for(&mut watcher, one_up, b"1").await;
    // Before one came up it said 0; from here on it must not.
    states.clear();
    let mut remote = mosquitto.client(V5, "remote-sub", true).await;
    remote.subscribe("#", QoS::AtLeastOnce, 1).await;
    let mut local = client(addr, "publisher").await;

    // Added: bridge two starts.
    let two = section("two", mosquitto.port, "b/#", "two/");
    std::fs::write(&conf, format!("{head}{one}{two}")).unwrap();
    sighup(&broker);
    states.extend(wait_for(&mut watcher, TWO, b"1").await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    local
        .publish("b/1", b"via-two", QoS::AtLeastOnce, false, 1)
        .await;
    assert_eq!(next_on(&mut remote, "two/b/1").await, "via-two");

    // Changed: bridge two restarts with its new prefix.
    let two_changed = section("two", mosquitto.port, "b/#", "two-v2/");
    std::fs::write(&conf, format!("{head}{one}{two_changed}")).unwrap();
    sighup(&broker);
    states.extend(wait_for(&mut watcher, TWO, b"0").await);
    states.extend(wait_for(&mut watcher, TWO, b"1").await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    local
        .publish("b/2", b"via-two-v2", QoS::AtLeastOnce, false, 2)
        .await;
    assert_eq!(next_on(&mut remote, "two-v2/b/2").await, "via-two-v2");

    // Removed: bridge two stops; b/# is no longer forwarded, a/# still is.
    std::fs::write(&conf, format!("{head}{one}")).unwrap();
    sighup(&broker);
    states.extend(wait_for(&mut watcher, TWO, b"0").await);
    local
        .publish("b/3", b"nowhere", QoS::AtLeastOnce, false, 3)
        .await;
    local
        .publish("a/1", b"via-one", QoS::AtLeastOnce, false, 4)
        .await;
    // Nothing for b/3 arrives before one's message (same remote subscriber, sent before).
    let next = remote.recv_publish().await;
    assert_eq!(
        (next.topic.as_str(), next.payload.as_ref()),
        ("one/a/1", &b"via-one"[..])
    );

    // Bridge one was never restarted: its state never said 0 (a bridge says 0 when it stops
    // and when it starts), one connection in all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Received::Packet(Packet::Publish(p)) =
        watcher.recv_timeout(Duration::from_millis(200)).await
    {
        states.push(format!(
            "{}={}",
            p.topic,
            String::from_utf8_lossy(&p.payload)
        ));
    }
    assert!(
        states.iter().any(|s| s.contains("two-remote/state=1")),
        "{states:?}"
    );
    assert!(!states.contains(&format!("{one_up}=0")), "{states:?}");
    let mut sys = client(addr, "sys").await;
    sys.subscribe("$SYS/broker/bridge/+/connects", QoS::AtMostOnce, 1)
        .await;
    assert_eq!(
        next_on(&mut sys, "$SYS/broker/bridge/one/connects").await,
        "1"
    );
    // A removed bridge's counters are no longer published (its last values stay retained).
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2500);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match sys.recv_timeout(left).await {
            Received::Packet(Packet::Publish(p)) => assert!(
                p.retain || p.topic.as_str() != "$SYS/broker/bridge/two/connects",
                "bridge two's counters are still published"
            ),
            Received::Packet(_) => {}
            Received::Timeout => break,
            Received::Closed => panic!("closed"),
        }
    }
}

/// The bridges the admin API lists (`GET /api/v1/bridges`): name and connected, in order.
fn listed_bridges(api: &HttpApi) -> Vec<(String, bool)> {
    let (status, body) = api.get_json("/api/v1/bridges");
    assert_eq!(status, 200, "{body}");
    body["bridges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["connected"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Waits until the admin API lists `want` (name, connected); panics with what it lists after
/// 20 s.
fn wait_for_listed(api: &HttpApi, want: &[(&str, bool)]) {
    let want: Vec<(String, bool)> = want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed = listed_bridges(api);
        if listed == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the API lists {listed:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The bridges in `/metrics` (`hayate_bridge_up{bridge="..."}`), sorted.
fn bridges_in_metrics(api: &HttpApi) -> Vec<String> {
    let (status, text) = api.get("/metrics");
    assert_eq!(status, 200);
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("hayate_bridge_up{bridge=\""))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// The HTTP edge follows SIGHUP: a bridge added appears in `GET /api/v1/bridges` and
/// `/metrics`, a removed one disappears, the one left alone stays.
#[test]
fn the_admin_api_lists_the_bridges_after_each_reload() {
    let mosquitto = Mosquitto::start(false);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("mosquitto.conf");
    let one = section("one", mosquitto.port, "a/#", "one/");
    let two = section("two", mosquitto.port, "b/#", "two/");
    std::fs::write(&conf, &one).unwrap();
    let broker = HayateProcess::start(
        Path::new(HAYATE),
        "bridge-token",
        &["-c", conf.to_str().unwrap()],
    );
    let api = HttpApi::new(broker.http, Some("bridge-token"));
    wait_for_listed(&api, &[("one", true)]);
    assert_eq!(bridges_in_metrics(&api), ["one"]);

    std::fs::write(&conf, format!("{one}{two}")).unwrap();
    sighup_pid(broker.pid());
    wait_for_listed(&api, &[("one", true), ("two", true)]);
    assert_eq!(bridges_in_metrics(&api), ["one", "two"]);

    std::fs::write(&conf, &two).unwrap();
    sighup_pid(broker.pid());
    wait_for_listed(&api, &[("two", true)]);
    assert_eq!(bridges_in_metrics(&api), ["two"]);
}
