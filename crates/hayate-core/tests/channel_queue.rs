//! Queued QoS 1/2 messages of persistent sessions and the store (`crate::persist`, the session
//! journal): what is written, what an acknowledgement waits for, and what a broker restored
//! from the durable ops delivers. A "crash" here is a new broker restored from the ops that
//! were durable when the old one stopped (`MemoryStore::durable_ops`).

use hayate_codec::{Packet, PubResp, Publish, QoS};
use hayate_core::store::{Store, StoreOp};
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::store::{fold, MemoryStore};
use std::sync::Arc;

const T0_MS: u64 = 1_800_000_000_000;

fn attached(h: &CoreHarness) -> Arc<MemoryStore> {
    h.attach_memory_store(T0_MS)
}

fn persistent(h: &CoreHarness, client_id: &str) -> TestChannel {
    h.client(
        ConnectSpec::v5(client_id)
            .clean_start(false)
            .session_expiry(600),
    )
}

fn payloads(publishes: &[Publish]) -> Vec<String> {
    publishes
        .iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect()
}

fn pubrec(publish: &Publish) -> Packet {
    Packet::PubRec(PubResp::new(publish.packet_id.expect("QoS 2")))
}

/// A new broker restored from `ops` (its store holds them: queues are read back in pages).
fn restart(ops: &[StoreOp]) -> (CoreHarness, Arc<MemoryStore>) {
    let h = CoreHarness::new();
    let store = Arc::new(MemoryStore::with_history(ops));
    assert!(h.broker.attach_store(store.clone(), h.now(), T0_MS));
    h.broker.restore(fold(ops), h.now());
    (h, store)
}

#[test]
fn an_offline_sessions_queue_survives_a_restart_and_its_message_is_stored_once() {
    let h = CoreHarness::new();
    let store = attached(&h);
    for client in ["a", "b", "c"] {
        let mut device = persistent(&h, client);
        assert_eq!(device.subscribe("cmd/#", QoS::ExactlyOnce), vec![2]);
        device.finish();
    }
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher
        .publish("cmd/1", b"one", QoS::AtLeastOnce)
        .unwrap();
    publisher
        .publish("cmd/2", b"two", QoS::ExactlyOnce)
        .unwrap();
    let ops = store.take();
    let enqueued: Vec<u64> = ops
        .iter()
        .filter_map(|op| match op {
            StoreOp::Enqueue { entry, .. } => Some(entry.message_id),
            _ => None,
        })
        .collect();
    assert_eq!(enqueued.len(), 6, "two messages for three sessions");
    let mut ids = enqueued.clone();
    ids.dedup();
    assert_eq!(ids.len(), 2, "one id per message, shared: {enqueued:?}");
    let held = hayate_testkit::store::state(&ops);
    let mut bodies: Vec<u64> = held.queue.values().map(|(_, body)| body.id).collect();
    bodies.sort_unstable();
    bodies.dedup();
    assert_eq!(bodies.len(), 2, "each body once: {bodies:?}");

    let (h, _store) = restart(&ops);
    let mut device = persistent(&h, "b");
    let got = device.transmit_publishes();
    assert_eq!(payloads(&got), vec!["one", "two"]);
    assert_eq!(
        got.iter().map(|p| (p.qos, p.dup)).collect::<Vec<_>>(),
        vec![(QoS::AtLeastOnce, true), (QoS::ExactlyOnce, true)],
        "a restored message may have been sent before: DUP"
    );
}

#[test]
fn puback_waits_until_the_queued_copy_is_durable() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    device.finish();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    store.hold();
    publisher.publish("cmd/x", b"x", QoS::AtLeastOnce).unwrap();
    assert!(publisher.received().is_empty(), "PUBACK before the store");
    // A crash now loses the message: the publisher was not told it was stored.
    assert!(fold(&store.durable_ops()).queues.is_empty());
    store.complete();
    assert!(publisher.woken());
    assert!(matches!(publisher.transmit()[..], [Packet::PubAck(_)]));
    // Publishing to nobody stored writes nothing and waits for nothing.
    publisher.publish("other", b"y", QoS::AtLeastOnce).unwrap();
    assert!(matches!(publisher.received()[..], [Packet::PubAck(_)]));
}

#[test]
fn a_qos2_publish_goes_out_only_once_stored_and_pubrel_only_once_released() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::ExactlyOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    store.hold();
    publisher.publish("cmd/x", b"x", QoS::ExactlyOnce).unwrap();
    assert!(
        device.transmit().is_empty(),
        "a QoS 2 PUBLISH whose entry is not stored could reuse its id after a restart"
    );
    store.complete();
    assert!(device.woken());
    let got = device.transmit_publishes();
    assert_eq!(payloads(&got), vec!["x"]);
    store.hold();
    device.send(pubrec(&got[0])).unwrap();
    assert!(
        device.transmit().is_empty(),
        "PUBREL before the release is stored"
    );
    // Crash now: the restored session sends the PUBLISH again under the same id, which the
    // client (still holding it) recognises.
    let (h2, _) = restart(&store.durable_ops());
    let mut again = persistent(&h2, "device");
    let resent = again.transmit_publishes();
    assert_eq!(resent.len(), 1);
    assert_eq!(
        (resent[0].packet_id, resent[0].dup),
        (got[0].packet_id, true)
    );
    // Without a crash, the PUBREL follows the store.
    store.complete();
    assert!(device.woken());
    assert!(
        matches!(&device.transmit()[..], [Packet::PubRel(rel)] if Some(rel.packet_id) == got[0].packet_id)
    );
    device
        .send(Packet::PubComp(PubResp::new(got[0].packet_id.unwrap())))
        .unwrap();
    let recovered = fold(&store.take());
    assert!(recovered.queues.is_empty(), "{:?}", recovered.queues);
}

#[test]
fn a_released_entry_sends_pubrel_again_after_a_restart() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::ExactlyOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.publish("cmd/x", b"x", QoS::ExactlyOnce).unwrap();
    let got = device.transmit_publishes();
    device.send(pubrec(&got[0])).unwrap();
    assert!(matches!(device.transmit()[..], [Packet::PubRel(_)]));
    let (h2, _) = restart(&store.take());
    let mut again = persistent(&h2, "device");
    let packets = again.transmit();
    assert!(
        matches!(&packets[..], [Packet::PubRel(rel)] if Some(rel.packet_id) == got[0].packet_id),
        "{packets:?}"
    );
}

#[test]
fn inbound_qos2_is_exactly_once_across_a_restart() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::ExactlyOnce);
    device.finish();
    let mut publisher = persistent(&h, "pub");
    let publish = hayate_testkit::publish_packet("cmd/x", b"x", QoS::ExactlyOnce, false, Some(7));
    publisher.send(Packet::Publish(publish.clone())).unwrap();
    assert!(matches!(publisher.received()[..], [Packet::PubRec(_)]));
    let (h2, store2) = restart(&store.take());
    // The publisher did not see PUBCOMP: it sends the PUBLISH again (DUP) after the restart.
    let mut publisher = persistent(&h2, "pub");
    let mut dup = publish;
    dup.dup = true;
    publisher.send(Packet::Publish(dup)).unwrap();
    assert!(matches!(publisher.received()[..], [Packet::PubRec(_)]));
    store2.hold();
    publisher
        .send(Packet::PubRel(PubResp::new(
            hayate_codec::PacketId::new(7).unwrap(),
        )))
        .unwrap();
    assert!(
        publisher.received().is_empty(),
        "PUBCOMP frees the id for reuse: not before the store forgot it"
    );
    store2.complete();
    assert!(publisher.woken());
    assert!(matches!(publisher.transmit()[..], [Packet::PubComp(_)]));
    let mut device = persistent(&h2, "device");
    assert_eq!(
        payloads(&device.transmit_publishes()),
        vec!["x"],
        "delivered once, not once per PUBLISH"
    );
}

#[test]
fn acknowledged_entries_leave_the_store() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    for n in 0..3 {
        publisher
            .publish(&format!("cmd/{n}"), b"x", QoS::AtLeastOnce)
            .unwrap();
    }
    let got = device.transmit_publishes();
    assert_eq!(got.len(), 3);
    device.puback(&got[0]).unwrap();
    device.puback(&got[2]).unwrap();
    let recovered = fold(&store.take());
    let queue = &recovered.queues[0];
    assert_eq!(queue.count, 1, "{queue:?}");
}

#[test]
fn while_the_store_cannot_write_qos1_and_qos2_publishes_are_refused_and_qos0_flows() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    store.set_accepting(false);
    let mut v5 = h.client(ConnectSpec::v5("pub5"));
    v5.publish("cmd/a", b"a", QoS::AtLeastOnce).unwrap();
    v5.publish("cmd/b", b"b", QoS::ExactlyOnce).unwrap();
    let codes: Vec<u8> = v5
        .received()
        .into_iter()
        .map(|packet| match packet {
            Packet::PubAck(ack) | Packet::PubRec(ack) => ack.reason_code.0,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(codes, vec![0x97, 0x97], "Quota exceeded, at once");
    v5.publish("cmd/c", b"c", QoS::AtMostOnce).unwrap();
    assert_eq!(
        payloads(&device.transmit_publishes()),
        vec!["c"],
        "QoS 0 keeps flowing, refused messages were not routed"
    );
    let mut v3 = h.client(ConnectSpec::v311("pub3"));
    let closed = v3.publish("cmd/d", b"d", QoS::AtLeastOnce).unwrap_err();
    assert_eq!(closed.reason, hayate_core::CloseReason::StoreUnavailable);
    assert_eq!(
        h.broker
            .stats
            .store_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    store.set_accepting(true);
    v5.publish("cmd/e", b"e", QoS::AtLeastOnce).unwrap();
    assert!(matches!(&v5.received()[..], [Packet::PubAck(ack)] if ack.reason_code.0 == 0));
}

#[test]
fn a_store_failure_closes_a_connection_whose_acknowledgements_are_held() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    device.finish();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    store.hold();
    publisher.publish("cmd/a", b"a", QoS::AtLeastOnce).unwrap();
    // The write of "a" fails: its PUBACK stays held, and a refusal cannot overtake it.
    store.set_accepting(false);
    let closed = publisher
        .publish("cmd/b", b"b", QoS::AtLeastOnce)
        .unwrap_err();
    assert_eq!(closed.reason, hayate_core::CloseReason::StoreUnavailable);
    assert!(
        matches!(&publisher.received()[..], [Packet::Disconnect(d)] if d.reason_code.0 == 0x97),
        "DISCONNECT Quota exceeded, and no PUBACK for what was not stored"
    );
}

/// A crash may keep any prefix of what was appended. For every prefix of the ops one QoS 2
/// PUBLISH makes, the publisher (which got no PUBREC unless all of it was kept) sends the
/// PUBLISH again after the restart, and each subscriber gets the message exactly once.
#[test]
fn every_crash_point_of_a_qos2_publish_delivers_it_exactly_once() {
    let h = CoreHarness::new();
    let store = attached(&h);
    for client in ["a", "b"] {
        let mut device = persistent(&h, client);
        device.subscribe("cmd/#", QoS::ExactlyOnce);
        device.finish();
    }
    let mut publisher = persistent(&h, "pub");
    let before = store.take();
    let base = store.appended();
    let publish = hayate_testkit::publish_packet("cmd/x", b"x", QoS::ExactlyOnce, false, Some(7));
    publisher.send(Packet::Publish(publish.clone())).unwrap();
    let during = store.take();
    assert!(
        matches!(
            during.last(),
            Some(StoreOp::InboundQos2 { awaiting: true, .. })
        ),
        "the id is stored after the entries: {during:?}"
    );
    let cuts: Vec<usize> = (0..=during.len())
        .filter(|cut| store.may_crash_after(base + *cut as u64))
        .collect();
    assert_eq!(cuts, vec![0, during.len()], "one group: all or nothing");
    for cut in cuts {
        let mut kept = before.clone();
        kept.extend_from_slice(&during[..cut]);
        let (h2, _) = restart(&kept);
        let mut publisher = persistent(&h2, "pub");
        let mut again = publish.clone();
        again.dup = true;
        publisher.send(Packet::Publish(again)).unwrap();
        assert!(matches!(publisher.received()[..], [Packet::PubRec(_)]));
        for client in ["a", "b"] {
            let mut device = persistent(&h2, client);
            assert_eq!(
                payloads(&device.transmit_publishes()),
                vec!["x"],
                "{client}, crash after {cut} of {} ops",
                during.len()
            );
        }
    }
}

/// Draws everything the broker sends `device`, acknowledging each QoS 1 PUBLISH, until it
/// sends nothing more; returns the payloads in order and the most messages the session held
/// in memory meanwhile.
fn drain_acking(device: &mut TestChannel) -> (Vec<String>, usize) {
    let mut got = Vec::new();
    let mut most_held = 0;
    loop {
        most_held = most_held.max(device.session().state.lock().session.held_messages());
        let batch = device.transmit_publishes();
        if batch.is_empty() {
            return (got, most_held);
        }
        for publish in &batch {
            device.puback(publish).unwrap();
        }
        got.extend(payloads(&batch));
    }
}

#[test]
fn an_offline_queue_lives_on_disk_and_comes_back_in_pages() {
    let h = CoreHarness::new();
    let store = attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    device.finish();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    let sent: Vec<String> = (0..2_500).map(|n| n.to_string()).collect();
    for n in &sent {
        publisher
            .publish("cmd/x", n.as_bytes(), QoS::AtLeastOnce)
            .unwrap();
    }
    let cell = h.session("device").unwrap();
    assert_eq!(
        cell.state.lock().session.held_messages(),
        0,
        "nothing in memory"
    );
    assert_eq!(cell.state.lock().session.spilled(), 2_500);
    let mut device = persistent(&h, "device");
    let (got, most_held) = drain_acking(&mut device);
    assert_eq!(got, sent, "all of it, in order");
    // Waiting in memory: at most RESIDENT_LIMIT; in flight: at most the window (1,024).
    assert!(most_held <= 1_000 + 1_024, "bounded in memory: {most_held}");
    let recovered = fold(&store.take());
    assert!(
        recovered.queues.is_empty(),
        "acknowledged: gone from the store"
    );
}

#[test]
fn a_disconnect_moves_waiting_messages_to_disk_and_a_reconnect_reads_them_back() {
    let h = CoreHarness::new();
    attached(&h);
    let connect = || {
        ConnectSpec::v5("device")
            .clean_start(false)
            .session_expiry(600)
            .receive_maximum(1)
    };
    let mut device = h.client(connect());
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    for n in 0..10 {
        publisher
            .publish("cmd/x", n.to_string().as_bytes(), QoS::AtLeastOnce)
            .unwrap();
    }
    let first = device.transmit_publishes();
    assert_eq!(payloads(&first), vec!["0"], "a window of one");
    device.finish();
    let cell = h.session("device").unwrap();
    {
        let state = cell.state.lock();
        assert_eq!(
            state.session.held_messages(),
            1,
            "only the one in flight stays"
        );
        assert_eq!(state.session.spilled(), 9);
    }
    let mut device = h.client(connect());
    let mut got = Vec::new();
    loop {
        let batch = device.transmit_publishes();
        let Some(publish) = batch.first() else { break };
        assert_eq!(batch.len(), 1);
        device.puback(publish).unwrap();
        got.push((
            String::from_utf8_lossy(&publish.payload).into_owned(),
            publish.dup,
        ));
    }
    let expected: Vec<(String, bool)> = (0..10).map(|n| (n.to_string(), n == 0)).collect();
    assert_eq!(
        got, expected,
        "the one in flight again (DUP), then the rest in order"
    );
}

#[test]
fn a_connected_subscriber_that_falls_behind_keeps_a_bounded_queue_in_memory() {
    let h = CoreHarness::new();
    attached(&h);
    let mut device = persistent(&h, "device");
    device.subscribe("cmd/#", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    let sent: Vec<String> = (0..3_000).map(|n| n.to_string()).collect();
    for n in &sent {
        publisher
            .publish("cmd/x", n.as_bytes(), QoS::AtLeastOnce)
            .unwrap();
    }
    let held = device.session().state.lock().session.held_messages();
    assert!(held <= 1_000, "{held} in memory");
    let (got, _) = drain_acking(&mut device);
    assert_eq!(got, sent);
}

/// A transport that says more input follows a PUBACK gets the transmit it allows as owed
/// (`has_more_to_send`) instead of at once, so a read of many PUBACKs transmits once; the
/// last PUBACK of a read, or any of a transport that never says so, transmits at once.
#[test]
fn a_puback_with_more_input_behind_it_leaves_the_transmit_to_the_transport() {
    let h = CoreHarness::new();
    let mut sub = h.client(ConnectSpec::v5("sub").receive_maximum(1));
    sub.subscribe("t/#", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    for n in 0..3 {
        publisher
            .publish("t/x", n.to_string().as_bytes(), QoS::AtLeastOnce)
            .unwrap();
    }
    let first = sub.transmit_publishes();
    assert_eq!(payloads(&first), vec!["0"], "a window of one");
    sub.channel.set_input_follows(true);
    sub.puback(&first[0]).unwrap();
    assert!(
        sub.received().is_empty(),
        "nothing written while input follows"
    );
    assert!(sub.channel.has_more_to_send(), "the transmit is owed");
    let second = sub.transmit_publishes();
    assert_eq!(payloads(&second), vec!["1"]);
    assert!(!sub.channel.has_more_to_send());
    sub.channel.set_input_follows(false);
    sub.puback(&second[0]).unwrap();
    assert_eq!(
        payloads(&sub.received_publishes()),
        vec!["2"],
        "the last PUBACK of a read transmits at once"
    );
}
