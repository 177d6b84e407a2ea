//! The core's cluster rules, sans IO with an injected clock (docs/CLUSTER.md): a peer session
//! gets one copy per message with the subscription identifiers that scope it, a message from
//! the ingress goes to local clients within its scope and never back to a peer, retained
//! messages go to every peer, a resumed session's CONNACK waits for the handover, and a
//! session is handed over whole.

use hayate_codec::{Packet, PubResp, QoS, SubscriptionOptions};
use hayate_core::cluster::{ClusterRoutes, RouteDelta, PLAIN_ID};
use hayate_core::ListenerRole;
use hayate_testkit::core::{ConnectSpec, CoreHarness};
use hayate_testkit::publish_packet;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_peer_gets_one_scoped_copy_and_forwarded_messages_stay_local() {
    let (harness, routes) = CoreHarness::clustered();
    let (_, mut feed) = routes.snapshot();
    let mut local = harness.client(ConnectSpec::v5("local"));
    local.subscribe("a/#", QoS::AtLeastOnce);
    local.received();
    assert!(
        matches!(feed.try_recv(), Ok(RouteDelta::Add(r)) if &*r.filter == "a/#" && r.id == PLAIN_ID)
    );
    let mut peer2 = harness.peer(
        "n2",
        &[("a/#", PLAIN_ID), ("a/+", PLAIN_ID), ("$share/g/a/#", 7)],
    );
    // Peer subscriptions are not this node's routes.
    assert!(feed.try_recv().is_err());

    // A local publish: one plain copy for n2 (two matching filters merged), one for its group.
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    publisher.publish("a/1", b"x", QoS::AtLeastOnce).unwrap();
    let copies = peer2.transmit_publishes();
    let mut ids: Vec<Vec<u32>> = copies
        .iter()
        .map(|p| p.properties.subscription_identifiers.clone())
        .collect();
    ids.sort();
    assert_eq!(ids, vec![vec![PLAIN_ID, PLAIN_ID], vec![7]]);
    assert_eq!(local.transmit_publishes().len(), 1);

    // What n3's link hands in goes to the plain local subscriber only, never to n2.
    let mut ingress = harness.channel_with_role(ListenerRole::PeerIngress);
    ingress.connect(ConnectSpec::v5("$cluster/in/n3"));
    let mut forwarded = publish_packet("a/2", b"y", QoS::AtLeastOnce, false, Some(9));
    forwarded.properties.subscription_identifiers = vec![PLAIN_ID];
    ingress.send(Packet::Publish(forwarded)).unwrap();
    assert!(matches!(ingress.received()[..], [Packet::PubAck(ref a)] if a.packet_id.get() == 9));
    assert_eq!(local.transmit_publishes()[0].payload.as_ref(), b"y");
    assert!(peer2.transmit_publishes().is_empty());

    // A copy scoped to a group this node does not have goes nowhere.
    let mut elsewhere = publish_packet("a/3", b"z", QoS::AtLeastOnce, false, Some(10));
    elsewhere.properties.subscription_identifiers = vec![12345];
    ingress.send(Packet::Publish(elsewhere)).unwrap();
    assert!(local.transmit_publishes().is_empty());
}

#[test]
fn retained_messages_go_to_every_peer_but_sys_topics_do_not() {
    let (harness, _) = CoreHarness::clustered();
    let mut peer2 = harness.peer("n2", &[]);
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    publisher
        .send(Packet::Publish(publish_packet(
            "cfg/1",
            b"v",
            QoS::AtLeastOnce,
            true,
            Some(1),
        )))
        .unwrap();
    let copies = peer2.transmit_publishes();
    assert_eq!(copies.len(), 1);
    assert!(copies[0].retain && copies[0].properties.subscription_identifiers.is_empty());
    harness.broker.publish_internal(
        "$SYS/broker/x",
        bytes::Bytes::from_static(b"1"),
        true,
        harness.now(),
    );
    assert!(peer2.transmit_publishes().is_empty());
}

#[test]
fn a_resumed_sessions_connack_waits_for_the_handover() {
    let (harness, routes) = CoreHarness::clustered();
    let _peer2 = harness.peer("n2", &[]);
    let mut events = routes.take_events().unwrap();
    while events.try_recv().is_ok() {}

    let mut client = harness.channel();
    client
        .send(Packet::Connect(Box::new(
            ConnectSpec::v5("mover")
                .clean_start(false)
                .session_expiry(600)
                .into(),
        )))
        .unwrap();
    assert!(
        client.received().is_empty(),
        "no CONNACK before the handover"
    );
    assert!(!client.channel.accepts_input());
    match events.try_recv() {
        Ok(hayate_core::cluster::ClusterEvent::ClientConnected {
            await_handover,
            clean_start,
            ..
        }) => {
            assert!(await_handover && !clean_start)
        }
        other => panic!("expected ClientConnected, got {other:?}"),
    }
    // Another node hands over a subscription: CONNACK says Session Present.
    let handed = hayate_core::handoff::HandedOver {
        subscriptions: vec![(
            "t/#".into(),
            hayate_core::registry::SubscriptionRecord {
                options: SubscriptionOptions::with_qos(QoS::AtLeastOnce),
                subscription_id: None,
            },
        )],
        ..Default::default()
    };
    let mut wake = Vec::new();
    assert!(harness
        .broker
        .take_over("mover", handed, harness.now(), &mut wake));
    harness.broker.release_handover("mover");
    client.poll_transmit().unwrap();
    match &client.received()[..] {
        [Packet::ConnAck(connack)] => assert!(connack.session_present),
        other => panic!("expected CONNACK, got {other:?}"),
    }
    assert!(client.channel.accepts_input());

    // Without answers, CONNACK goes out at the timeout, Session Present 0.
    let mut late = harness.channel();
    late.send(Packet::Connect(Box::new(
        ConnectSpec::v5("lonely")
            .clean_start(false)
            .session_expiry(600)
            .into(),
    )))
    .unwrap();
    late.poll_transmit().unwrap();
    assert!(late.received().is_empty());
    harness.advance(Duration::from_secs(3));
    late.poll_transmit().unwrap();
    match &late.received()[..] {
        [Packet::ConnAck(connack)] => assert!(!connack.session_present),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

#[test]
fn a_session_is_handed_over_whole_and_its_routes_go_with_it() {
    let (harness, _) = CoreHarness::clustered();
    let mut peer2 = harness.peer("n2", &[]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    publisher.publish("o/1", b"1", QoS::AtLeastOnce).unwrap();
    publisher.publish("o/2", b"2", QoS::AtLeastOnce).unwrap();
    // Both go out; o/1 is acknowledged, o/2 stays in flight, then o/3 is queued.
    let sent = client.transmit_publishes();
    assert_eq!(sent.len(), 2);
    client
        .send(Packet::PubAck(PubResp::new(sent[0].packet_id.unwrap())))
        .unwrap();
    publisher.publish("o/3", b"3", QoS::AtLeastOnce).unwrap();

    let mut wake = Vec::new();
    let handed = harness
        .hand_over("c", hayate_core::Arrival::UNKNOWN, Some("n2"), &mut wake)
        .expect("a session here");
    assert_eq!(handed.subscriptions.len(), 1);
    let payloads: Vec<(&[u8], bool)> = handed
        .deliveries
        .iter()
        .map(|d| (d.message.payload.as_ref(), d.maybe_sent()))
        .collect();
    assert_eq!(payloads, vec![(&b"2"[..], true), (&b"3"[..], false)]);
    assert!(harness.session("c").is_none(), "the session ended here");
    // Its connection is told it was taken over.
    assert!(client.poll_transmit().is_err());
    // What is published here from now on goes to the claiming node (its peer session took the
    // plain filters before the client's left).
    publisher.publish("o/4", b"4", QoS::AtLeastOnce).unwrap();
    let forwarded = peer2.transmit_publishes();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].payload.as_ref(), b"4");
    assert_eq!(
        forwarded[0].properties.subscription_identifiers,
        vec![PLAIN_ID]
    );
}

/// A slow node slows the publishers that feed it exactly as a slow local subscriber does: its
/// peer session here fills, turns Congested at half its queue, and the publisher stops being
/// read; memory stays within the session's limits.
#[test]
fn a_slow_node_holds_back_its_publishers_like_a_slow_subscriber() {
    let harness = CoreHarness::with_config(|config| {
        config.max_queued_messages = 8;
    });
    let routes = Arc::new(ClusterRoutes::new(true));
    assert!(harness.broker.router.attach_cluster(routes));
    let _peer2 = harness.peer("n2", &[("slow/#", PLAIN_ID)]);
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    for n in 0..3u8 {
        publisher.publish("slow/t", &[n], QoS::AtMostOnce).unwrap();
        assert!(publisher.accepts_input(), "below the high mark after {n}");
    }
    publisher.publish("slow/t", &[3], QoS::AtMostOnce).unwrap();
    assert!(!publisher.accepts_input(), "paused at 4 of 8 held for n2");
    let peer = harness.session("$cluster/n2").unwrap();
    assert!(peer.state.lock().congestion.is_congested());
    assert!(peer.state.lock().session.held_messages() <= 8);
}

#[test]
fn sys_subscriptions_stay_on_their_node() {
    let (harness, routes) = CoreHarness::clustered();
    let mut local = harness.client(ConnectSpec::v5("watcher"));
    local.subscribe("$SYS/broker/cluster/nodes", QoS::AtMostOnce);
    local.subscribe("$share/g/$SYS/#", QoS::AtMostOnce);
    local.subscribe("plain/#", QoS::AtMostOnce);
    let (set, _) = routes.snapshot();
    let filters: Vec<&str> = set.iter().map(|r| &*r.filter).collect();
    assert_eq!(filters, vec!["plain/#"]);
}

/// A QoS 2 message routed on the old node and retransmitted to the new one (its PUBREL not
/// yet sent) is acknowledged there, not routed again [MQTT-4.3.3-10].
#[test]
fn inbound_qos2_ids_move_with_the_session() {
    let (harness, _) = CoreHarness::clustered();
    let mut subscriber = harness.client(ConnectSpec::v5("s"));
    subscriber.subscribe("q2/#", QoS::ExactlyOnce);
    let mut publisher = harness.client(ConnectSpec::v5("p").session_expiry(600));
    let publish = publish_packet("q2/x", b"once", QoS::ExactlyOnce, false, Some(5));
    publisher.send(Packet::Publish(publish.clone())).unwrap();
    assert!(matches!(publisher.received()[..], [Packet::PubRec(_)]));
    assert_eq!(subscriber.transmit_publishes().len(), 1);

    let mut wake = Vec::new();
    let handed = harness
        .hand_over("p", hayate_core::Arrival::UNKNOWN, None, &mut wake)
        .expect("a session");
    assert_eq!(handed.inbound_qos2, vec![5]);
    let mut moved = harness.client(ConnectSpec::v5("p").clean_start(false).session_expiry(600));
    assert!(harness
        .broker
        .take_over("p", handed, harness.now(), &mut wake));
    let mut again = publish;
    again.dup = true;
    moved.send(Packet::Publish(again)).unwrap();
    assert!(matches!(moved.received()[..], [Packet::PubRec(_)]));
    assert!(
        subscriber.transmit_publishes().is_empty(),
        "routed once only"
    );
}

/// A QoS 2 message to the client whose PUBREC came but whose PUBCOMP has not goes with the
/// session as its packet id: the new node sends the PUBREL again, with that id
/// [MQTT-4.4.0-1]. paho hands a QoS 2 message to its application at PUBREL; dropping it at the
/// handover lost the message (two or three per rolling-restart soak).
#[test]
fn a_released_qos2_message_moves_as_its_pubrel() {
    let (harness, _) = CoreHarness::clustered();
    let mut subscriber = harness.client(ConnectSpec::v5("s").session_expiry(600));
    subscriber.subscribe("q2/#", QoS::ExactlyOnce);
    subscriber.received();
    let mut publisher = harness.client(ConnectSpec::v5("p"));
    publisher
        .publish("q2/x", b"once", QoS::ExactlyOnce)
        .unwrap();
    let sent = subscriber.transmit_publishes();
    assert_eq!(sent.len(), 1);
    let id = sent[0].packet_id.expect("QoS 2");
    subscriber.send(Packet::PubRec(PubResp::new(id))).unwrap();
    assert!(matches!(subscriber.received()[..], [Packet::PubRel(ref rel)] if rel.packet_id == id));

    let mut wake = Vec::new();
    let handed = harness
        .hand_over("s", hayate_core::Arrival::UNKNOWN, None, &mut wake)
        .expect("a session");
    assert_eq!(handed.released, vec![id.get()]);
    assert!(handed.deliveries.is_empty(), "not sent again as a PUBLISH");
    let mut moved = harness.client(ConnectSpec::v5("s").clean_start(false).session_expiry(600));
    assert!(harness
        .broker
        .take_over("s", handed, harness.now(), &mut wake));
    assert!(
        matches!(moved.transmit()[..], [Packet::PubRel(ref rel)] if rel.packet_id == id),
        "the PUBREL again, same id"
    );
    moved.send(Packet::PubComp(PubResp::new(id))).unwrap();
    assert_eq!(
        harness.session("s").unwrap().snapshot().inflight,
        0,
        "complete after PUBCOMP"
    );
}

/// Messages in flight when a session moves go out again from the new node under the packet
/// ids they had, with DUP [MQTT-4.4.0-1]: a client that hands a QoS 2 message to its
/// application at PUBLISH keeps its id until the PUBREL and takes the resend for the same
/// message. With new ids it took the resends for new messages (and kept the old ids for
/// ever). Without and with a store (a stored session derives ids from queue positions).
#[test]
fn messages_in_flight_go_out_again_under_their_packet_ids_after_a_handover() {
    for stored in [false, true] {
        let (harness, _) = CoreHarness::clustered();
        if stored {
            harness.attach_memory_store(1_700_000_000_000);
        }
        let session = || ConnectSpec::v5("c").clean_start(false).session_expiry(600);
        let mut client = harness.client(session());
        client.subscribe("o/#", QoS::ExactlyOnce);
        client.received();
        let mut publisher = harness.client(ConnectSpec::v5("pub"));
        for n in 0..3u8 {
            publisher.publish("o/x", &[n], QoS::ExactlyOnce).unwrap();
        }
        let sent = client.transmit_publishes();
        assert_eq!(sent.len(), 3, "stored: {stored}");
        // The first completes; the PUBRECs of the other two are lost with the old node.
        let first = sent[0].packet_id.unwrap();
        client.send(Packet::PubRec(PubResp::new(first))).unwrap();
        client.send(Packet::PubComp(PubResp::new(first))).unwrap();
        let before: Vec<(u8, Option<u16>)> = sent[1..]
            .iter()
            .map(|p| (p.payload[0], p.packet_id.map(|id| id.get())))
            .collect();

        let mut wake = Vec::new();
        let handed = harness
            .hand_over("c", hayate_core::Arrival::UNKNOWN, None, &mut wake)
            .expect("a session here");
        let mut moved = harness.client(session());
        assert!(harness
            .broker
            .take_over("c", handed, harness.now(), &mut wake));
        let again = moved.transmit_publishes();
        assert!(again.iter().all(|p| p.dup), "stored: {stored}: {again:?}");
        let after: Vec<(u8, Option<u16>)> = again
            .iter()
            .map(|p| (p.payload[0], p.packet_id.map(|id| id.get())))
            .collect();
        assert_eq!(after, before, "stored: {stored}");
    }
}

/// A stored session that is offline keeps its queue on disk only; handed over to another
/// node, it goes whole: read back first (`prepare_hand_over`), in order, with what arrived
/// while it was being read (docs/CLUSTER.md, "Sessions").
#[test]
fn a_stored_sessions_queue_on_disk_is_handed_over_too() {
    let (harness, _) = CoreHarness::clustered();
    harness.attach_memory_store(1_700_000_000_000);
    let connect = || ConnectSpec::v5("c").clean_start(false).session_expiry(600);
    let mut client = harness.client(connect());
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.finish();
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    // More than a page (500) and than the resident limit (1,000).
    let sent: Vec<String> = (0..1_200).map(|n| n.to_string()).collect();
    for n in &sent {
        publisher
            .publish("o/x", n.as_bytes(), QoS::AtLeastOnce)
            .unwrap();
    }
    let cell = harness.session("c").unwrap();
    assert_eq!(cell.state.lock().session.spilled(), 1_200, "all on disk");

    // MemoryStore answers at once, so `done` runs before `prepare_hand_over` returns.
    let prepared = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = prepared.clone();
    harness.broker.prepare_hand_over(
        "c",
        Box::new(move || flag.store(true, std::sync::atomic::Ordering::SeqCst)),
    );
    assert!(prepared.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(cell.state.lock().session.spilled(), 0, "read back");
    // Arriving now, while the session waits to be handed over: kept in memory, behind.
    publisher.publish("o/x", b"late", QoS::AtLeastOnce).unwrap();
    assert_eq!(cell.state.lock().session.spilled(), 0);

    let mut wake = Vec::new();
    let handed = harness
        .hand_over("c", hayate_core::Arrival::UNKNOWN, None, &mut wake)
        .expect("a session here");
    let got: Vec<String> = handed
        .deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(&d.message.payload).into_owned())
        .collect();
    let mut expected = sent.clone();
    expected.push("late".to_string());
    assert_eq!(got, expected, "everything, in order");
}

/// Without a store, or without the session, preparing a handover has nothing to read.
#[test]
fn preparing_a_handover_without_a_store_is_immediate() {
    let (harness, _) = CoreHarness::clustered();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    harness.broker.prepare_hand_over(
        "nobody",
        Box::new(move || flag.store(true, std::sync::atomic::Ordering::SeqCst)),
    );
    assert!(done.load(std::sync::atomic::Ordering::SeqCst));
}

/// The answer to a claim leaves only once the session's removal is durable
/// (docs/CLUSTER.md, "A handover that outlives a kill"): a node killed between the two would
/// restore the session from its store and hand it over a second time, with everything the
/// client received elsewhere meanwhile. The peer session's other output waits with it; once
/// the store has written the removal, the answer goes out.
#[test]
fn the_answer_to_a_claim_waits_for_the_sessions_removal_on_disk() {
    use hayate_core::store::Store as _;
    let (harness, _) = CoreHarness::clustered();
    let store = harness.attach_memory_store(1_700_000_000_000);
    let mut client = harness.client(ConnectSpec::v5("c").clean_start(false).session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.finish();
    let mut peer2 = harness.peer("n2", &[]);
    peer2.received();

    store.hold();
    let mut wake = Vec::new();
    harness
        .hand_over("c", hayate_core::Arrival::UNKNOWN, Some("n2"), &mut wake)
        .expect("a session here");
    let removal = store.appended();
    assert!(
        store.take().iter().any(|op| matches!(
            op,
            hayate_core::store::StoreOp::DeleteSession { client_id } if client_id == "c"
        )),
        "the handover removes the session from the store"
    );
    let peer = harness.session("$cluster/n2").expect("n2's peer session");
    let answer = hayate_core::Delivery::new(
        Arc::new(hayate_core::Message::new(
            "$cluster/session".into(),
            bytes::Bytes::from_static(b"answer"),
            QoS::AtLeastOnce,
            false,
            Default::default(),
            None,
            None,
        )),
        QoS::AtLeastOnce,
        false,
    );
    harness
        .broker
        .deliver_behind_store(&peer, answer, harness.now(), &mut wake);
    assert!(
        peer2.transmit_publishes().is_empty(),
        "nothing leaves before the removal is durable"
    );

    store.complete();
    assert!(store.durable() >= removal);
    let sent = peer2.transmit_publishes();
    assert_eq!(
        sent.iter().map(|p| p.topic.as_str()).collect::<Vec<_>>(),
        ["$cluster/session"],
        "the answer goes out once it is"
    );
}
