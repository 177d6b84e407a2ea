//! The bridge's bounded outgoing queue (docs/BRIDGES.md, "The outgoing queue"): while the link
//! is down, messages for the remote broker wait in the bridge's local session, bounded by
//! `max_queued_messages` / `max_queued_bytes` of the bridge, dropping the **oldest** waiting
//! ones when full, counted in `$SYS/broker/bridge/<name>/queue/dropped`. A real Mosquitto is
//! the remote broker, behind a TCP proxy that takes the link down.

mod common;

use common::{bridge, topic, wait_for_state, Mosquitto};
use hayate_bridge::config::{BridgeConfig, BridgeDirection, BridgeProtocol, BridgeStartType};
use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::proxy::Proxy;
use hayate_testkit::{publish_packet, RawClient, Received, TestBroker};
use std::path::Path;
use std::time::Duration;

const NAME: &str = "q";
const STATE: &str = "$SYS/broker/connection/q-remote/state";

struct Setup {
    mosquitto: Mosquitto,
    proxy: Proxy,
    config: BridgeConfig,
}

async fn setup(protocol: BridgeProtocol) -> Setup {
    let mosquitto = Mosquitto::start(false);
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], mosquitto.port))).await;
    let config = bridge(
        NAME,
        proxy.addr.port(),
        protocol,
        vec![topic("q/#", BridgeDirection::Out, 1, "", "")],
    );
    Setup {
        mosquitto,
        proxy,
        config,
    }
}

async fn start_hayate(config: &BridgeConfig, dir: Option<&Path>) -> TestBroker {
    let config = config.clone();
    let dir = dir.map(Path::to_path_buf);
    TestBroker::start_with(move |c| {
        if let Some(dir) = dir {
            c.storage.dir = Some(dir);
            c.storage.sync_interval_ms = 10;
        }
        c.server.sys_interval_secs = 1;
        c.bridges.push(config);
    })
    .await
}

async fn state_watcher(hayate: &TestBroker) -> RawClient {
    let mut watcher = hayate.client(ProtocolVersion::V5, "watcher").await;
    watcher.subscribe(STATE, QoS::AtMostOnce, 1).await;
    watcher
}

/// Takes the link down (the proxy cuts it and refuses reconnections) and waits until the
/// bridge noticed.
async fn link_down(proxy: &Proxy, watcher: &mut RawClient) {
    proxy.set_blocked(true);
    proxy.cut();
    wait_for_state(watcher, b"0").await;
}

/// The payload of message `n`: its number, padded with `-` to `len` bytes.
fn payload(n: usize, len: usize) -> Vec<u8> {
    let mut p = format!("{n:06}").into_bytes();
    p.resize(len.max(6), b'-');
    p
}

/// Publishes messages `from..to` on `q/m` at QoS 1, 100 at a time before reading their
/// PUBACKs.
async fn publish_range(client: &mut RawClient, from: usize, to: usize, len: usize) {
    let mut n = from;
    while n < to {
        let batch = (to - n).min(100);
        for i in 0..batch {
            let id = ((n + i) % 65_535 + 1) as u16;
            let packet = publish_packet(
                "q/m",
                &payload(n + i, len),
                QoS::AtLeastOnce,
                false,
                Some(id),
            );
            client.send(Packet::Publish(packet)).await;
        }
        for _ in 0..batch {
            match client.recv().await {
                Packet::PubAck(_) => {}
                other => panic!("expected PUBACK, got {other:?}"),
            }
        }
        n += batch;
    }
}

/// Receives PUBLISHes (acknowledged) until nothing comes for 1.5 s after the one numbered
/// `last`; returns the numbers in order of arrival.
async fn numbers_until(client: &mut RawClient, last: usize) -> Vec<usize> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen_last = got.contains(&last);
        let wait = if seen_last {
            Duration::from_millis(1500)
        } else {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        };
        match client.recv_timeout(wait).await {
            Received::Packet(Packet::Publish(p)) => {
                client.ack(&p).await;
                let number = std::str::from_utf8(&p.payload[..6])
                    .unwrap()
                    .parse()
                    .unwrap();
                got.push(number);
            }
            Received::Packet(_) => {}
            Received::Timeout if seen_last => return got,
            other => panic!(
                "{last} never arrived ({other:?}); got {} messages",
                got.len()
            ),
        }
    }
}

/// Waits until `$SYS/broker/bridge/q/<key>` reads `want` (published every second), and
/// returns it; panics with the last value seen after 10 s.
async fn sys_value(hayate: &TestBroker, key: &str, want: impl Fn(u64) -> bool) -> u64 {
    let topic = format!("$SYS/broker/bridge/{NAME}/{key}");
    let mut client = hayate
        .client(ProtocolVersion::V5, &format!("sys-{key}"))
        .await;
    client.subscribe(&topic, QoS::AtMostOnce, 1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match client.recv_timeout(left).await {
            Received::Packet(Packet::Publish(p)) => {
                let value: u64 = std::str::from_utf8(&p.payload).unwrap().parse().unwrap();
                if want(value) {
                    return value;
                }
                last = Some(value);
            }
            Received::Packet(_) => {}
            other => panic!("{topic} never as expected (last {last:?}): {other:?}"),
        }
    }
}

/// With the link down, `total` messages of `len` bytes are published; when it is back, exactly
/// the newest `kept` arrive, in order, and `total - kept` were counted as dropped.
async fn outage_keeps_the_newest(
    protocol: BridgeProtocol,
    config: impl FnOnce(&mut BridgeConfig),
    total: usize,
    len: usize,
    kept: usize,
) {
    let mut s = setup(protocol).await;
    config(&mut s.config);
    let v = match protocol {
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
        _ => ProtocolVersion::V311,
    };
    let mut remote_sub = s.mosquitto.client(v, "remote-sub", true).await;
    remote_sub.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    let hayate = start_hayate(&s.config, None).await;
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    link_down(&s.proxy, &mut state).await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 0, total, len).await;
    let dropped = (total - kept) as u64;
    assert_eq!(
        sys_value(&hayate, "queue/dropped", |v| v == dropped).await,
        dropped
    );
    assert_eq!(
        sys_value(&hayate, "queue/messages", |v| v == kept as u64).await,
        kept as u64
    );

    s.proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    let got = numbers_until(&mut remote_sub, total - 1).await;
    let want: Vec<usize> = (total - kept..total).collect();
    assert_eq!(got, want, "exactly the newest {kept}, in order");
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 0).await, 0);
}

#[tokio::test]
async fn count_limit_keeps_the_newest_messages_v311() {
    outage_keeps_the_newest(
        BridgeProtocol::Mqttv311,
        |c| c.max_queued_messages = Some(50),
        200,
        10,
        50,
    )
    .await;
}

#[tokio::test]
async fn count_limit_keeps_the_newest_messages_v5() {
    outage_keeps_the_newest(
        BridgeProtocol::Mqttv50,
        |c| c.max_queued_messages = Some(50),
        200,
        10,
        50,
    )
    .await;
}

#[tokio::test]
async fn byte_limit_keeps_the_newest_messages() {
    // Each message weighs its topic (3 bytes) and payload (97 bytes): 100 bytes.
    outage_keeps_the_newest(
        BridgeProtocol::Mqttv311,
        |c| c.max_queued_bytes = Some(2_000),
        150,
        97,
        20,
    )
    .await;
}

/// With `[storage]` the queue is on disk too: Hayate stopped and started again during the
/// outage resumes it, still bounded, and keeps dropping the oldest.
#[tokio::test]
async fn the_queue_survives_a_restart_still_bounded() {
    let mut s = setup(BridgeProtocol::Mqttv311).await;
    s.config.max_queued_messages = Some(30);
    let data = tempfile::tempdir().unwrap();
    let mut remote_sub = s
        .mosquitto
        .client(ProtocolVersion::V311, "remote-sub", true)
        .await;
    remote_sub.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    let hayate = start_hayate(&s.config, Some(data.path())).await;
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    link_down(&s.proxy, &mut state).await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 0, 100, 10).await;
    assert_eq!(sys_value(&hayate, "queue/dropped", |v| v == 70).await, 70);
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 30).await, 30);
    drop((local_pub, state));
    hayate.handle.shutdown().await;

    // Started again, the link still down: the 30 queued are back, and 20 more push out the
    // 20 oldest.
    let hayate = start_hayate(&s.config, Some(data.path())).await;
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"0").await;
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 30).await, 30);
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 100, 120, 10).await;
    assert_eq!(sys_value(&hayate, "queue/dropped", |v| v == 20).await, 20);
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 30).await, 30);

    s.proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    let got = numbers_until(&mut remote_sub, 119).await;
    assert_eq!(
        got,
        (90..120).collect::<Vec<_>>(),
        "the newest 30, in order"
    );
}

/// The remote broker unreachable from the very first start of Hayate (the proxy refuses
/// every connection): the bridge's session exists from the start, so what is published for it
/// waits in its bounded queue (the oldest dropped, counted) and arrives, in order, once the
/// remote broker can be reached.
async fn remote_down_from_the_first_start(protocol: BridgeProtocol) {
    let mut s = setup(protocol).await;
    s.config.max_queued_messages = Some(50);
    s.proxy.set_blocked(true);
    let v = match protocol {
        BridgeProtocol::Mqttv50 => ProtocolVersion::V5,
        _ => ProtocolVersion::V311,
    };
    let mut remote_sub = s.mosquitto.client(v, "remote-sub", true).await;
    remote_sub.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    let hayate = start_hayate(&s.config, None).await;
    // The bridge says 0 once its session exists.
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"0").await;

    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 0, 120, 10).await;
    assert_eq!(sys_value(&hayate, "queue/dropped", |v| v == 70).await, 70);
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 50).await, 50);
    assert_eq!(sys_value(&hayate, "connects", |_| true).await, 0);

    s.proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    let got = numbers_until(&mut remote_sub, 119).await;
    assert_eq!(
        got,
        (70..120).collect::<Vec<_>>(),
        "the newest 50, in order"
    );
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 0).await, 0);
}

#[tokio::test]
async fn remote_down_from_the_first_start_v311() {
    remote_down_from_the_first_start(BridgeProtocol::Mqttv311).await;
}

#[tokio::test]
async fn remote_down_from_the_first_start_v5() {
    remote_down_from_the_first_start(BridgeProtocol::Mqttv50).await;
}

/// The same with `[storage]`, and Hayate restarted before the remote broker is ever reached:
/// the queue made at the first start is on disk, comes back, and is delivered in order.
#[tokio::test]
async fn remote_down_from_the_first_start_across_a_restart() {
    let mut s = setup(BridgeProtocol::Mqttv311).await;
    s.config.max_queued_messages = Some(30);
    s.proxy.set_blocked(true);
    let data = tempfile::tempdir().unwrap();
    let mut remote_sub = s
        .mosquitto
        .client(ProtocolVersion::V311, "remote-sub", true)
        .await;
    remote_sub.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    let hayate = start_hayate(&s.config, Some(data.path())).await;
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"0").await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 0, 40, 10).await;
    assert_eq!(sys_value(&hayate, "queue/dropped", |v| v == 10).await, 10);
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 30).await, 30);
    drop((local_pub, state));
    hayate.handle.shutdown().await;

    let hayate = start_hayate(&s.config, Some(data.path())).await;
    assert_eq!(sys_value(&hayate, "queue/messages", |v| v == 30).await, 30);
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"0").await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 40, 50, 10).await;
    assert_eq!(sys_value(&hayate, "queue/dropped", |v| v == 10).await, 10);

    s.proxy.set_blocked(false);
    wait_for_state(&mut state, b"1").await;
    let got = numbers_until(&mut remote_sub, 49).await;
    assert_eq!(got, (20..50).collect::<Vec<_>>(), "the newest 30, in order");
    assert_eq!(sys_value(&hayate, "connects", |v| v == 1).await, 1);
}

/// `start_type once` with the remote broker unreachable at start: the bridge tries once and
/// stops for good (it does not connect when the remote broker comes up), its session keeps
/// what was published for it, and a reload that starts it again (changed to `automatic`)
/// sends that, in order.
#[tokio::test]
async fn once_stops_after_its_failed_attempt_and_keeps_the_queue_for_a_later_start() {
    let mut s = setup(BridgeProtocol::Mqttv311).await;
    s.config.start_type = BridgeStartType::Once;
    s.proxy.set_blocked(true);
    let mut remote_sub = s
        .mosquitto
        .client(ProtocolVersion::V311, "remote-sub", true)
        .await;
    remote_sub.subscribe("q/#", QoS::AtLeastOnce, 1).await;
    // The bridge is added once the state watcher listens: it says 0 when it starts and 0
    // again when it stops after its one attempt.
    let hayate = TestBroker::start().await;
    let mut state = state_watcher(&hayate).await;
    let report = hayate.handle.reload_bridges(vec![s.config.clone()]).await;
    assert_eq!(report.added, [NAME]);
    wait_for_state(&mut state, b"0").await;
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    publish_range(&mut local_pub, 0, 10, 10).await;
    wait_for_state(&mut state, b"0").await;
    s.proxy.set_blocked(false);
    // Several restart_timeouts (1 s): a bridge that retried would be connected by now.
    match remote_sub.recv_timeout(Duration::from_secs(3)).await {
        Received::Timeout => {}
        other => panic!("the once bridge connected again: {other:?}"),
    }
    assert_eq!(
        hayate
            .handle
            .broker
            .queue_figures("local.q-remote")
            .map(|(n, _)| n),
        Some(10)
    );

    let mut again = s.config.clone();
    again.start_type = BridgeStartType::Automatic;
    let report = hayate.handle.reload_bridges(vec![again]).await;
    assert_eq!(report.changed, [NAME]);
    wait_for_state(&mut state, b"1").await;
    let got = numbers_until(&mut remote_sub, 9).await;
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

/// A bridge removed (SIGHUP) while its remote broker has never been reached: with
/// `local_cleansession true` its session ends with what queued in it; without, the session
/// stays with its queue, as any persistent session.
#[tokio::test]
async fn a_bridge_removed_while_down_ends_its_session_only_with_local_cleansession() {
    for clean in [false, true] {
        let mut s = setup(BridgeProtocol::Mqttv311).await;
        s.config.local_cleansession = Some(clean);
        s.proxy.set_blocked(true);
        let hayate = start_hayate(&s.config, None).await;
        let mut state = state_watcher(&hayate).await;
        wait_for_state(&mut state, b"0").await;
        let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
        publish_range(&mut local_pub, 0, 5, 10).await;
        let broker = &hayate.handle.broker;
        let client_id = "local.q-remote";
        assert_eq!(broker.queue_figures(client_id).map(|(n, _)| n), Some(5));
        let report = hayate.handle.reload_bridges(Vec::new()).await;
        assert_eq!(report.removed, [NAME]);
        let left = broker.queue_figures(client_id).map(|(n, _)| n);
        let want = if clean { None } else { Some(5) };
        assert_eq!(left, want, "local_cleansession {clean}");
    }
}

/// Resident memory of this process, in bytes (`/proc/self/statm`).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Far more than the limits published during an outage (100 MiB of payload): the queue's
/// accounted bytes never pass its limit, and the process (Hayate and the test's clients)
/// grows by far less than what was published.
#[tokio::test]
async fn memory_stays_bounded_through_an_outage() {
    const LIMIT_BYTES: usize = 512 * 1024;
    const LEN: usize = 1024;
    const TOTAL: usize = 100_000;
    let mut s = setup(BridgeProtocol::Mqttv311).await;
    s.config.max_queued_messages = Some(10_000);
    s.config.max_queued_bytes = Some(LIMIT_BYTES);
    let hayate = start_hayate(&s.config, None).await;
    let mut state = state_watcher(&hayate).await;
    wait_for_state(&mut state, b"1").await;
    link_down(&s.proxy, &mut state).await;

    let before = rss_bytes();
    let mut local_pub = hayate.client(ProtocolVersion::V5, "local-pub").await;
    let mut peak = 0;
    for chunk in 0..10 {
        publish_range(
            &mut local_pub,
            chunk * TOTAL / 10,
            (chunk + 1) * TOTAL / 10,
            LEN,
        )
        .await;
        peak = peak.max(rss_bytes());
        let bytes = sys_value(&hayate, "queue/bytes", |_| true).await;
        assert!(bytes <= LIMIT_BYTES as u64, "queue holds {bytes} bytes");
    }
    // 1027 bytes a message: 510 fit in 512 KiB.
    let kept = LIMIT_BYTES / (LEN + 3);
    assert_eq!(
        sys_value(&hayate, "queue/messages", |v| v == kept as u64).await,
        kept as u64
    );
    let dropped = (TOTAL - kept) as u64;
    assert_eq!(
        sys_value(&hayate, "queue/dropped", |v| v == dropped).await,
        dropped
    );
    let grown = peak.saturating_sub(before);
    eprintln!("rss before {before}, peak {peak}, grown {grown}");
    assert!(
        grown < 48 * 1024 * 1024,
        "grew by {grown} bytes while 100 MiB were published"
    );
}
