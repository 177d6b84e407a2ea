//! Persistence as the core sees it (`crate::persist`, `docs/design/persistence.md`): which
//! changes reach the store, and what a broker restored from them looks like. The store here
//! (`hayate_testkit::store`) keeps the ops in memory and folds them into a `Recovered` the way
//! an engine would.

use hayate_codec::QoS;
use hayate_core::store::StoreOp;
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::store::{fold, MemoryStore};
use std::sync::Arc;
use std::time::Duration;

/// Wall-clock milliseconds the first broker of each test starts at.
const T0_MS: u64 = 1_800_000_000_000;

/// A v5 client with a session that outlives its connection by 60 s.
fn persistent(h: &CoreHarness, client_id: &str) -> TestChannel {
    h.client(
        ConnectSpec::v5(client_id)
            .clean_start(false)
            .session_expiry(60),
    )
}

fn attached(h: &CoreHarness, unix_ms: u64) -> Arc<MemoryStore> {
    h.attach_memory_store(unix_ms)
}

#[test]
fn persistent_sessions_subscriptions_and_retained_messages_are_written() {
    let h = CoreHarness::new();
    let store = attached(&h, T0_MS);
    let mut device = persistent(&h, "device");
    assert_eq!(device.subscribe("cmd/device/#", QoS::AtLeastOnce), vec![1]);
    let mut clean = h.client(ConnectSpec::v5("clean"));
    assert_eq!(clean.subscribe("x/#", QoS::AtMostOnce), vec![0]);
    clean
        .send(hayate_codec::Packet::Publish(
            hayate_testkit::publish_packet("state/lamp", b"on", QoS::AtLeastOnce, true, Some(1)),
        ))
        .expect("retained publish");
    h.advance(Duration::from_secs(5));
    device.finish();
    clean.finish();

    let ops = store.take();
    let kinds: Vec<&str> = ops
        .iter()
        .map(|op| match op {
            StoreOp::PutSession(r) if r.disconnected_at_ms.is_none() => "session",
            StoreOp::PutSession(_) => "session disconnected",
            StoreOp::PutSubscription { .. } => "subscription",
            StoreOp::PutRetained { .. } => "retained",
            StoreOp::DeleteRetained { .. } => "retained deleted",
            StoreOp::DeleteSession { .. } => "session deleted",
            StoreOp::DeleteSubscription { .. } => "subscription deleted",
            _ => "queue",
        })
        .collect();
    // The clean session (expiry 0) writes nothing of its own.
    assert_eq!(
        kinds,
        vec![
            "session",
            "subscription",
            "retained",
            "session disconnected"
        ]
    );
    let StoreOp::PutSession(last) = &ops[3] else {
        unreachable!()
    };
    assert_eq!(last.disconnected_at_ms, Some(T0_MS + 5_000));
    assert_eq!(last.expiry_interval, 60);
    assert_eq!(last.protocol, 5);
}

#[test]
fn a_restored_broker_resumes_sessions_and_keeps_retained_messages() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    let mut device = first.client(
        ConnectSpec::v311("device")
            .clean_start(false)
            .session_expiry(60),
    );
    assert_eq!(device.subscribe("cmd/device/#", QoS::AtLeastOnce), vec![1]);
    let mut publisher = first.client(ConnectSpec::v5("pub"));
    publisher
        .send(hayate_codec::Packet::Publish(
            hayate_testkit::publish_packet("state/lamp", b"on", QoS::AtMostOnce, true, None),
        ))
        .expect("retained publish");
    device.finish();
    let recovered = fold(&store.take());

    // 30 s later, a new broker from what was stored.
    let second = CoreHarness::new();
    let store = attached(&second, T0_MS + 30_000);
    let restored = second.broker.restore(recovered, second.now());
    assert_eq!(
        (restored.sessions, restored.subscriptions, restored.retained),
        (1, 1, 1)
    );
    let mut device = second.client(
        ConnectSpec::v311("device")
            .clean_start(false)
            .session_expiry(60),
    );
    let mut publisher = second.client(ConnectSpec::v5("pub"));
    publisher
        .publish("cmd/device/reboot", b"now", QoS::AtLeastOnce)
        .expect("publish");
    let got = device.transmit_publishes();
    assert_eq!(got.len(), 1, "the restored subscription delivers: {got:?}");
    assert_eq!(&*got[0].topic, "cmd/device/reboot");
    assert_eq!(got[0].qos, QoS::AtLeastOnce);
    let mut reader = second.client(ConnectSpec::v5("reader"));
    assert_eq!(reader.subscribe("state/#", QoS::AtMostOnce), vec![0]);
    let got = reader.received_publishes();
    assert_eq!(got.len(), 1);
    assert!(got[0].retain);
    assert_eq!(&got[0].payload[..], b"on");
    drop(store);
}

#[test]
fn downtime_counts_against_session_expiry() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    let mut device = persistent(&first, "device");
    assert_eq!(device.subscribe("a/#", QoS::AtMostOnce), vec![0]);
    device.finish();
    let recovered = fold(&store.take());

    // Back after 50 s: 10 s of the minute left.
    let second = CoreHarness::new();
    attached(&second, T0_MS + 50_000);
    assert_eq!(
        second
            .broker
            .restore(recovered.clone(), second.now())
            .sessions,
        1
    );
    second.advance(Duration::from_millis(9_999));
    second.run_timers();
    assert!(second.session("device").is_some(), "not yet expired");
    second.advance(Duration::from_millis(2));
    second.run_timers();
    assert!(
        second.session("device").is_none(),
        "expired 60 s after disconnecting"
    );

    // Back after 61 s: gone, and deleted from the store.
    let third = CoreHarness::new();
    let store = attached(&third, T0_MS + 61_000);
    let restored = third.broker.restore(recovered, third.now());
    assert_eq!((restored.sessions, restored.sessions_expired), (0, 1));
    assert!(third.session("device").is_none());
    assert_eq!(
        store.take(),
        vec![StoreOp::DeleteSession {
            client_id: "device".into()
        }]
    );
}

#[test]
fn a_clean_start_deletes_the_stored_session() {
    let h = CoreHarness::new();
    let store = attached(&h, T0_MS);
    let mut device = persistent(&h, "device");
    assert_eq!(device.subscribe("a/#", QoS::AtMostOnce), vec![0]);
    device.finish();
    h.client(ConnectSpec::v5("device")).finish();
    let recovered = fold(&store.take());
    assert!(recovered.sessions.is_empty(), "{recovered:?}");
}

#[test]
fn acknowledgements_wait_for_the_store_in_order() {
    let h = CoreHarness::new();
    let store = attached(&h, T0_MS);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    store.hold();
    let retained = |id| {
        hayate_codec::Packet::Publish(hayate_testkit::publish_packet(
            "state/lamp",
            b"on",
            QoS::AtLeastOnce,
            true,
            Some(id),
        ))
    };
    publisher.send(retained(1)).expect("retained publish");
    publisher
        .send(hayate_codec::Packet::Publish(
            hayate_testkit::publish_packet("plain", b"x", QoS::AtLeastOnce, false, Some(2)),
        ))
        .expect("plain publish");
    assert!(
        publisher.received().is_empty(),
        "no PUBACK before the retained message is stored, and none out of order"
    );
    store.complete();
    assert!(
        publisher.woken(),
        "the store rings the publisher's doorbell"
    );
    let acks: Vec<u16> = publisher
        .transmit()
        .into_iter()
        .map(|packet| match packet {
            hayate_codec::Packet::PubAck(ack) => ack.packet_id.get(),
            other => panic!("expected PUBACK, got {other:?}"),
        })
        .collect();
    assert_eq!(acks, vec![1, 2]);
    // Once nothing is held, acknowledgements go out at once again.
    publisher.send(retained(3)).expect("retained publish");
    assert!(
        publisher.received().is_empty(),
        "held again: the store holds"
    );
    store.complete();
    assert_eq!(publisher.transmit().len(), 1);
}

#[test]
fn the_suback_of_a_stored_session_waits_for_the_store() {
    let h = CoreHarness::new();
    let store = attached(&h, T0_MS);
    let mut device = persistent(&h, "device");
    store.hold();
    device
        .send(hayate_codec::Packet::Subscribe(hayate_codec::Subscribe {
            packet_id: hayate_codec::PacketId::new(9).unwrap(),
            filters: vec![(
                "cmd/#".into(),
                hayate_codec::SubscriptionOptions::with_qos(QoS::AtLeastOnce),
            )],
            properties: Default::default(),
        }))
        .expect("subscribe");
    assert!(
        device.received().is_empty(),
        "no SUBACK before the subscription is stored"
    );
    store.complete();
    assert!(device.woken());
    assert!(matches!(
        device.transmit().as_slice(),
        [hayate_codec::Packet::SubAck(ack)] if ack.packet_id.get() == 9
    ));
    // A clean session's SUBACK never waits (nothing of it is stored).
    let mut clean = h.client(ConnectSpec::v5("clean"));
    assert_eq!(clean.subscribe("x", QoS::AtMostOnce), vec![0]);
}

/// A v5 client with a persistent session and a will (QoS 1, on `status/<id>`) with `delay`.
fn with_will(h: &CoreHarness, client_id: &str, delay: u32) -> TestChannel {
    h.client(
        ConnectSpec::v5(client_id)
            .clean_start(false)
            .session_expiry(600)
            .will(&format!("status/{client_id}"), b"gone", QoS::AtLeastOnce)
            .will_delay(delay),
    )
}

/// A persistent watcher of `status/#` (its session outlives every test), offline.
fn watcher(h: &CoreHarness) {
    let mut watcher = long_lived(h, "watcher");
    assert_eq!(watcher.subscribe("status/#", QoS::AtLeastOnce), vec![1]);
    watcher.finish();
}

fn long_lived(h: &CoreHarness, client_id: &str) -> TestChannel {
    h.client(
        ConnectSpec::v5(client_id)
            .clean_start(false)
            .session_expiry(3_600),
    )
}

fn wills_seen(h: &CoreHarness) -> Vec<String> {
    long_lived(h, "watcher")
        .transmit_publishes()
        .iter()
        .map(|p| p.topic.to_string())
        .collect()
}

#[test]
fn a_will_with_a_delay_survives_a_restart_and_its_delay_counts_the_downtime() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    watcher(&first);
    // The connection fails (no DISCONNECT): the will is due 60 s later.
    with_will(&first, "dev", 60).finish();
    let recovered = fold(&store.take());

    // Back 45 s later: 15 s left.
    let second = CoreHarness::new();
    attached(&second, T0_MS + 45_000);
    let restored = second.broker.restore(recovered, second.now());
    assert_eq!(restored.wills_published, 0);
    second.advance(Duration::from_millis(14_900));
    second.run_timers();
    assert!(
        second
            .session("watcher")
            .unwrap()
            .state
            .lock()
            .session
            .spilled()
            == 0
    );
    second.advance(Duration::from_millis(200));
    second.run_timers();
    assert_eq!(wills_seen(&second), vec!["status/dev"]);
}

#[test]
fn a_will_whose_delay_passed_while_the_broker_was_down_is_published_at_restore() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    watcher(&first);
    with_will(&first, "dev", 10).finish();
    let recovered = fold(&store.take());
    let second = CoreHarness::new();
    let store = attached(&second, T0_MS + 20_000);
    assert_eq!(
        second
            .broker
            .restore(recovered, second.now())
            .wills_published,
        1
    );
    assert!(store.take().contains(&StoreOp::DeleteWill {
        client_id: "dev".into()
    }));
    assert_eq!(wills_seen(&second), vec!["status/dev"]);
}

#[test]
fn a_connection_open_when_the_broker_stopped_has_its_will_published_as_a_failure() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    watcher(&first);
    // Still connected when the broker dies: its will (no delay) must go out after the restart.
    let _dev = with_will(&first, "dev", 0);
    // A client that disconnected normally has no will to send.
    let mut polite = with_will(&first, "polite", 0);
    polite
        .send(hayate_codec::Packet::Disconnect(hayate_codec::Disconnect {
            reason_code: hayate_codec::ReasonCode::SUCCESS,
            properties: Default::default(),
        }))
        .unwrap_err();
    polite.finish();
    let recovered = fold(&store.take());
    let second = CoreHarness::new();
    attached(&second, T0_MS + 5_000);
    assert_eq!(
        second
            .broker
            .restore(recovered, second.now())
            .wills_published,
        1
    );
    assert_eq!(wills_seen(&second), vec!["status/dev"]);
}

/// A v5 client that sent no client id gets one assigned; its persistent session is stored
/// under it, so the client resumes it after a restart with that id.
#[test]
fn an_assigned_client_id_and_its_session_survive_a_restart() {
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    let mut device = first.channel();
    let connack = device.connect(ConnectSpec::v5("").clean_start(false).session_expiry(600));
    let assigned = connack
        .properties
        .assigned_client_identifier
        .expect("an id is assigned")
        .to_string();
    assert_eq!(device.subscribe("cmd/#", QoS::AtLeastOnce), vec![1]);
    device.finish();
    let recovered = fold(&store.take());
    let second = CoreHarness::new();
    attached(&second, T0_MS + 1_000);
    assert_eq!(second.broker.restore(recovered, second.now()).sessions, 1);
    let mut device = second.channel();
    let connack = device.connect(
        ConnectSpec::v5(&assigned)
            .clean_start(false)
            .session_expiry(600),
    );
    assert!(connack.session_present, "resumed under the assigned id");
    second
        .client(ConnectSpec::v5("pub"))
        .publish("cmd/x", b"x", QoS::AtLeastOnce)
        .unwrap();
    assert_eq!(device.transmit_publishes().len(), 1);
}

#[test]
fn a_retained_message_that_expires_is_removed_from_the_store() {
    let h = CoreHarness::new();
    let store = attached(&h, T0_MS);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    let mut publish =
        hayate_testkit::publish_packet("state/lamp", b"on", QoS::AtMostOnce, true, None);
    publish.properties.message_expiry_interval = Some(10);
    publisher
        .send(hayate_codec::Packet::Publish(publish))
        .expect("retained publish");
    assert_eq!(fold(&store.take()).retained.len(), 1);
    h.advance(Duration::from_secs(11));
    h.run_timers();
    assert_eq!(
        store.take(),
        vec![StoreOp::DeleteRetained {
            topic: "state/lamp".into()
        }]
    );
}

/// The lifetime counters (`$SYS` totals) are stored when asked and continue from the stored
/// values after a restart; gauges (clients connected) start from what is restored.
#[test]
fn lifetime_counters_continue_after_a_restart() {
    use hayate_core::Stats;
    let first = CoreHarness::new();
    let store = attached(&first, T0_MS);
    let mut publisher = first.client(ConnectSpec::v5("pub"));
    for _ in 0..3 {
        publisher
            .publish("t", b"x", QoS::AtMostOnce)
            .expect("publish");
    }
    let received = first.broker.stats.publish_received.total();
    let connections = Stats::get(&first.broker.stats.connections_total);
    assert_eq!((received, connections), (3, 1));
    first.broker.persist_totals();
    let recovered = fold(&store.take());

    let second = CoreHarness::new();
    let _store = attached(&second, T0_MS + 1_000);
    second.broker.restore(recovered, second.now());
    let stats = &second.broker.stats;
    assert_eq!(stats.publish_received.total(), 3);
    assert_eq!(stats.publish_received.packets(QoS::AtMostOnce), 3);
    assert_eq!(stats.publish_received.payload_bytes(QoS::AtMostOnce), 3);
    assert_eq!(Stats::get(&stats.connections_total), 1);
    assert_eq!(
        Stats::get(&stats.clients_connected),
        0,
        "a gauge is not carried over"
    );
    let mut publisher = second.client(ConnectSpec::v5("pub"));
    publisher
        .publish("t", b"x", QoS::AtMostOnce)
        .expect("publish");
    assert_eq!(stats.publish_received.total(), 4);
    assert_eq!(Stats::get(&stats.connections_total), 2);
}
