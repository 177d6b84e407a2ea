//! The core's cluster rules, sans IO with an injected clock (docs/CLUSTER.md): a peer session
//! gets one copy per message with the subscription identifiers that scope it, a message from
//! the ingress goes to local clients within its scope and never back to a peer, retained
//! messages go to every peer, a resumed session's CONNACK waits for the handover, and a
//! session is handed over whole.

use hayate_codec::{Packet, Properties, PubResp, QoS, Subscribe, SubscriptionOptions};
use hayate_core::cluster::{ClusterRoutes, RouteDelta, PLAIN_ID};
use hayate_core::{ListenerInfo, ListenerRole};
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::publish_packet;
use std::sync::Arc;
use std::time::Duration;

fn cluster_harness() -> (CoreHarness, Arc<ClusterRoutes>) {
    CoreHarness::clustered()
}

fn on_role(harness: &CoreHarness, role: ListenerRole) -> TestChannel {
    harness.channel_on(ListenerInfo {
        name: Arc::from("cluster-test"),
        role,
        ..ListenerInfo::default()
    })
}

/// Hands `client_id`'s session over as on a claim made `at` (not a clean start), to the peer
/// session of node `to` here when given.
fn hand_over(
    harness: &CoreHarness,
    client_id: &str,
    at: hayate_core::Arrival,
    to: Option<&str>,
    wake: &mut hayate_core::WakeList,
) -> Option<hayate_core::handoff::HandedOver> {
    let to = to.and_then(|node| harness.session(&format!("$cluster/{node}")));
    harness.broker.hand_over(
        client_id,
        hayate_core::handoff::Claiming {
            clean_start: false,
            at,
            to: to.as_ref(),
            upstream: Vec::new(),
        },
        harness.now(),
        wake,
    )
}

/// A peer node's session here, subscribed to `filters` with their identifiers.
fn peer(harness: &CoreHarness, name: &str, filters: &[(&str, u32)]) -> TestChannel {
    let mut peer = on_role(harness, ListenerRole::Cluster);
    peer.connect(ConnectSpec::v5(&format!("$cluster/{name}")).session_expiry(600));
    for (i, (filter, id)) in filters.iter().enumerate() {
        let subscribe = Subscribe {
            packet_id: hayate_codec::PacketId::new(i as u16 + 1).unwrap(),
            filters: vec![(
                (*filter).into(),
                SubscriptionOptions {
                    qos: QoS::ExactlyOnce,
                    no_local: false,
                    retain_as_published: true,
                    retain_handling: 2,
                },
            )],
            properties: Properties {
                subscription_identifiers: vec![*id],
                ..Properties::default()
            },
        };
        peer.send(Packet::Subscribe(subscribe)).unwrap();
    }
    peer.received();
    peer
}

#[test]
fn a_peer_gets_one_scoped_copy_and_forwarded_messages_stay_local() {
    let (harness, routes) = cluster_harness();
    let (_, mut feed) = routes.snapshot();
    let mut local = harness.client(ConnectSpec::v5("local"));
    local.subscribe("a/#", QoS::AtLeastOnce);
    local.received();
    assert!(
        matches!(feed.try_recv(), Ok(RouteDelta::Add(r)) if &*r.filter == "a/#" && r.id == PLAIN_ID)
    );
    let mut peer2 = peer(
        &harness,
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
    let mut ingress = on_role(&harness, ListenerRole::PeerIngress);
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
    let (harness, _) = cluster_harness();
    let mut peer2 = peer(&harness, "n2", &[]);
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
    let (harness, routes) = cluster_harness();
    let _peer2 = peer(&harness, "n2", &[]);
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
    let (harness, _) = cluster_harness();
    let mut peer2 = peer(&harness, "n2", &[]);
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
    let handed = hand_over(
        &harness,
        "c",
        hayate_core::Arrival::UNKNOWN,
        Some("n2"),
        &mut wake,
    )
    .expect("a session here");
    assert_eq!(handed.subscriptions.len(), 1);
    let payloads: Vec<(&[u8], bool)> = handed
        .deliveries
        .iter()
        .map(|d| (d.message.payload.as_ref(), d.maybe_sent))
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
    let _peer2 = peer(&harness, "n2", &[("slow/#", PLAIN_ID)]);
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
    let (harness, routes) = cluster_harness();
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
    let (harness, _) = cluster_harness();
    let mut subscriber = harness.client(ConnectSpec::v5("s"));
    subscriber.subscribe("q2/#", QoS::ExactlyOnce);
    let mut publisher = harness.client(ConnectSpec::v5("p").session_expiry(600));
    let publish = publish_packet("q2/x", b"once", QoS::ExactlyOnce, false, Some(5));
    publisher.send(Packet::Publish(publish.clone())).unwrap();
    assert!(matches!(publisher.received()[..], [Packet::PubRec(_)]));
    assert_eq!(subscriber.transmit_publishes().len(), 1);

    let mut wake = Vec::new();
    let handed = hand_over(
        &harness,
        "p",
        hayate_core::Arrival::UNKNOWN,
        None,
        &mut wake,
    )
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
    let (harness, _) = cluster_harness();
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
    let handed = hand_over(
        &harness,
        "s",
        hayate_core::Arrival::UNKNOWN,
        None,
        &mut wake,
    )
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

/// A stored session that is offline keeps its queue on disk only; handed over to another
/// node, it goes whole: read back first (`prepare_hand_over`), in order, with what arrived
/// while it was being read (docs/CLUSTER.md, "Sessions").
#[test]
fn a_stored_sessions_queue_on_disk_is_handed_over_too() {
    let (harness, _) = cluster_harness();
    let store = Arc::new(hayate_testkit::store::MemoryStore::default());
    assert!(harness
        .broker
        .attach_store(store, harness.now(), 1_700_000_000_000));
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
    let handed = hand_over(
        &harness,
        "c",
        hayate_core::Arrival::UNKNOWN,
        None,
        &mut wake,
    )
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
    let (harness, _) = cluster_harness();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    harness.broker.prepare_hand_over(
        "nobody",
        Box::new(move || flag.store(true, std::sync::atomic::Ordering::SeqCst)),
    );
    assert!(done.load(std::sync::atomic::Ordering::SeqCst));
}

/// A cluster harness whose sessions relay after a handover, with an encoder that carries the
/// delivery's payload on `$cluster/relay` (the real format is `hayate-cluster`'s).
fn relaying_harness(timeout: Duration) -> (CoreHarness, Arc<ClusterRoutes>) {
    let (harness, routes) = cluster_harness();
    routes.set_relay_timeout(timeout);
    assert!(
        routes.set_relay_encoder(hayate_core::cluster::RelayEncoder(Box::new(
            |client_id, delivery, _now| {
                hayate_core::Message::new(
                    "$cluster/relay".into(),
                    delivery.message.payload.clone(),
                    QoS::AtLeastOnce,
                    false,
                    Properties {
                        user_properties: vec![("client_id".into(), client_id.into())],
                        ..Properties::default()
                    },
                    None,
                    None,
                )
            }
        )))
    );
    (harness, routes)
}

/// When n2's claim for `c` was made.
const CLAIM: hayate_core::Arrival = hayate_core::Arrival::from_nanos(1_000);

/// Hands client `c` (subscribed to `o/#` and a shared group) over to node n2, with n3 known.
fn hand_c_over(
    harness: &CoreHarness,
    routes: &ClusterRoutes,
) -> (TestChannel, TestChannel, TestChannel) {
    let peer2 = peer(harness, "n2", &[]);
    let peer3 = peer(harness, "n3", &[]);
    // n3 is known even if its link here were not up: it marks too.
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.subscribe("$share/g/s/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    let handed = hand_over(harness, "c", CLAIM, Some("n2"), &mut wake).expect("a session here");
    assert_eq!(handed.subscriptions.len(), 2);
    let mut ingress = on_role(harness, ListenerRole::PeerIngress);
    ingress.connect(ConnectSpec::v5("$cluster/in/n3"));
    (peer2, peer3, ingress)
}

fn forward(ingress: &mut TestChannel, topic: &str, payload: &[u8], id: u16) {
    let mut forwarded = publish_packet(topic, payload, QoS::AtLeastOnce, false, Some(id));
    forwarded.properties.subscription_identifiers = vec![PLAIN_ID];
    ingress.send(Packet::Publish(forwarded)).unwrap();
}

/// The rolling-restart gap (docs/CLUSTER.md, "Relay after a handover"): after a node handed a
/// session over, what other nodes had already routed to it for the session (queued for it
/// while it was away, or in flight) still arrives there. It is relayed to the node that has
/// the session, exactly once, until every linked node has marked the end of it; what is
/// published on this node goes there through the claiming node's own subscription instead.
#[test]
fn a_session_handed_over_relays_forwarded_messages_until_every_node_marked() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (_, mut feed) = routes.snapshot();
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    assert!(
        harness.session("c").is_none(),
        "the session left the registry"
    );
    while let Ok(delta) = feed.try_recv() {
        // Only the shared group left the route set: `o/#` stays while relaying.
        if let RouteDelta::Remove(filter) = delta {
            assert_eq!(&*filter, "$share/g/s/#");
        }
    }
    assert_eq!(routes.len(), 1);

    // Forwarded by n3 after the handover: relayed to n2 for `c`, once.
    forward(&mut ingress, "o/5", b"5", 1);
    let relayed = peer2.transmit_publishes();
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0].topic.as_str(), "$cluster/relay");
    assert_eq!(relayed[0].payload.as_ref(), b"5");
    // Published here: n2's peer session took `o/#` at the handover; no relay copy on top.
    let mut publisher = harness.client(ConnectSpec::v5("pub"));
    publisher.publish("o/6", b"6", QoS::AtLeastOnce).unwrap();
    let direct = peer2.transmit_publishes();
    assert_eq!(direct.len(), 1);
    assert_eq!(
        (direct[0].topic.as_str(), direct[0].payload.as_ref()),
        ("o/6", &b"6"[..])
    );

    // A late mark of an earlier take-over counts not; n2 marks; n3 has not yet: relaying.
    let mut wake = Vec::new();
    let earlier = hayate_core::Arrival::from_nanos(500);
    assert!(
        harness
            .broker
            .relay_marked("c", "n3", earlier, harness.now(), &mut wake)
            .is_none(),
        "a late mark ends no relaying"
    );
    harness
        .broker
        .relay_marked("c", "n2", CLAIM, harness.now(), &mut wake);
    forward(&mut ingress, "o/7", b"7", 2);
    assert_eq!(peer2.transmit_publishes().len(), 1);
    assert_eq!(routes.len(), 1);
    // n3 marks: relaying ends, `o/#` leaves the route set, nothing more is relayed.
    harness
        .broker
        .relay_marked("c", "n3", CLAIM, harness.now(), &mut wake);
    assert_eq!(routes.len(), 0);
    assert!(matches!(feed.try_recv(), Ok(RouteDelta::Remove(f)) if &*f == "o/#"));
    forward(&mut ingress, "o/8", b"8", 3);
    assert!(peer2.transmit_publishes().is_empty());
}

/// Once a node has marked, what it forwards after its mark is not relayed, though the session
/// goes on relaying for the nodes that have not marked yet: the claiming node receives that
/// node's copies directly from its mark on (relayed as well, they arrived twice).
#[test]
fn a_nodes_copies_after_its_mark_are_not_relayed() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    forward(&mut ingress, "o/1", b"1", 1);
    assert_eq!(peer2.transmit_publishes().len(), 1, "before n3's mark");
    let mut wake = Vec::new();
    let to = harness
        .broker
        .relay_marked("c", "n3", CLAIM, harness.now(), &mut wake)
        .expect("n3's mark ends what is relayed of its copies");
    assert_eq!(
        &*to.client_id, "$cluster/n2",
        "the end goes behind the relayed copies, to the node that has the session"
    );
    assert!(
        harness
            .broker
            .relay_marked("c", "n3", CLAIM, harness.now(), &mut wake)
            .is_none(),
        "ended once"
    );
    forward(&mut ingress, "o/2", b"2", 2);
    assert!(
        peer2.transmit_publishes().is_empty(),
        "n3's copy after its mark was relayed"
    );
    assert_eq!(routes.len(), 1, "still relaying: n2 has not marked");
    harness
        .broker
        .relay_marked("c", "n2", CLAIM, harness.now(), &mut wake);
    assert_eq!(routes.len(), 0);
}

/// After a kill -9 the claimant marked when its client subscribed (a fence), before its claim
/// was answered here: it is not waited for again at the handover (it marks nothing more for
/// this claim), so relaying ends with the other nodes' marks, not at the deadline while
/// relaying the claimant's own copies back to it.
#[test]
fn a_claimant_that_marked_before_the_handover_is_not_waited_for() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let _peer2 = peer(&harness, "n2", &[]);
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    harness
        .broker
        .relay_marked("c", "n2", CLAIM, harness.now(), &mut wake);
    let handed = hand_over(&harness, "c", CLAIM, Some("n2"), &mut wake).expect("a session here");
    assert_eq!(routes.len(), 1, "relaying for n3");
    assert_eq!(
        handed.relaying_for,
        vec![std::sync::Arc::<str>::from("n3")],
        "the answer names the nodes whose copies are relayed"
    );
    harness
        .broker
        .relay_marked("c", "n3", CLAIM, harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "n2 is not waited for");
}

/// When every node marked before the handover (the answer waited for the session's stored
/// queue meanwhile), there is nothing left to relay: the session ends at once instead of
/// relaying until `handover_relay_secs`.
#[test]
fn a_session_every_node_marked_for_ends_at_the_handover() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let _peer2 = peer(&harness, "n2", &[]);
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    for node in ["n3", "n2"] {
        harness
            .broker
            .relay_marked("c", node, CLAIM, harness.now(), &mut wake);
    }
    hand_over(&harness, "c", CLAIM, Some("n2"), &mut wake).expect("a session here");
    assert_eq!(routes.len(), 0, "not relaying");
    assert_eq!(routes.relaying_count(), 0);
}

/// A node that never marks (its link to the claiming node is down) leaves the session relaying
/// only until `handover_relay_secs`.
#[test]
fn relaying_ends_at_its_deadline_when_a_node_never_marks() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    harness
        .broker
        .relay_marked("c", "n2", CLAIM, harness.now(), &mut wake);
    harness.advance(Duration::from_secs(29));
    harness.broker.expire_relays(harness.now(), &mut wake);
    forward(&mut ingress, "o/1", b"1", 1);
    assert_eq!(
        peer2.transmit_publishes().len(),
        1,
        "still relaying at 29 s"
    );
    harness.advance(Duration::from_secs(1));
    harness.broker.expire_relays(harness.now(), &mut wake);
    assert_eq!(routes.len(), 0);
    forward(&mut ingress, "o/2", b"2", 2);
    assert!(peer2.transmit_publishes().is_empty());
}

/// Relayed deliveries go into the session that took over, as they are.
#[test]
fn relayed_deliveries_are_queued_in_the_session_that_took_over() {
    let (harness, _) = cluster_harness();
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.received();
    let message = hayate_core::Message::new(
        "o/9".into(),
        bytes::Bytes::from_static(b"9"),
        QoS::AtLeastOnce,
        false,
        Properties::default(),
        None,
        Some(0),
    );
    let delivery = hayate_core::Delivery::new(Arc::new(message), QoS::AtLeastOnce, false);
    let mut wake = Vec::new();
    let queued = harness
        .broker
        .deliver_relayed("c", vec![delivery], harness.now(), &mut wake);
    assert_eq!(queued.ok(), Some(1));
    let sent = client.transmit_publishes();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload.as_ref(), b"9");
    let gone = Arc::new(hayate_core::Message::new(
        "o/10".into(),
        bytes::Bytes::from_static(b"10"),
        QoS::AtLeastOnce,
        false,
        Properties::default(),
        None,
        Some(0),
    ));
    let returned = harness
        .broker
        .deliver_relayed(
            "gone",
            vec![hayate_core::Delivery::new(gone, QoS::AtLeastOnce, false)],
            harness.now(),
            &mut wake,
        )
        .expect_err("no session for `gone`: the deliveries come back");
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0].message.payload.as_ref(), b"10");
}

/// The claiming node's side: from before it takes a session over until a node's mark comes
/// back, what that node forwards does not reach the session (the old node relays it), so
/// nothing arrives twice; other sessions and other nodes' copies are not affected.
#[test]
fn a_session_taken_over_skips_a_nodes_copies_until_its_mark_comes_back() {
    let (harness, routes) = cluster_harness();
    let mut c = harness.client(ConnectSpec::v5("c").session_expiry(600));
    c.subscribe("o/#", QoS::AtLeastOnce);
    let mut other = harness.client(ConnectSpec::v5("other"));
    other.subscribe("o/#", QoS::AtLeastOnce);
    c.received();
    other.received();
    let until = harness.now() + Duration::from_secs(15);
    routes.suppress("c".into(), CLAIM, vec!["n3".into(), "n4".into()], until);
    let mut from_n3 = on_role(&harness, ListenerRole::PeerIngress);
    from_n3.connect(ConnectSpec::v5("$cluster/in/n3"));
    let mut from_n5 = on_role(&harness, ListenerRole::PeerIngress);
    from_n5.connect(ConnectSpec::v5("$cluster/in/n5"));

    forward(&mut from_n3, "o/1", b"1", 1);
    assert!(
        c.transmit_publishes().is_empty(),
        "n3's copy is relayed instead"
    );
    assert_eq!(other.transmit_publishes().len(), 1);
    forward(&mut from_n5, "o/2", b"2", 1);
    assert_eq!(c.transmit_publishes().len(), 1, "n5 is not suppressed");
    other.transmit_publishes();

    // A mark of another take-over changes nothing; n3's own mark lets its copies through.
    routes.unsuppress("c", hayate_core::Arrival::from_nanos(7), "n3");
    forward(&mut from_n3, "o/3", b"3", 2);
    assert!(c.transmit_publishes().is_empty());
    routes.unsuppress("c", CLAIM, "n3");
    forward(&mut from_n3, "o/4", b"4", 3);
    assert_eq!(c.transmit_publishes()[0].payload.as_ref(), b"4");

    // n4 never marks: its copies reach the session again at the deadline.
    let mut from_n4 = on_role(&harness, ListenerRole::PeerIngress);
    from_n4.connect(ConnectSpec::v5("$cluster/in/n4"));
    forward(&mut from_n4, "o/5", b"5", 1);
    assert!(c.transmit_publishes().is_empty());
    harness.advance(Duration::from_secs(15));
    forward(&mut from_n4, "o/6", b"6", 2);
    assert_eq!(c.transmit_publishes()[0].payload.as_ref(), b"6");
}

/// A fence (a session started while the node that had it could not be asked) runs at the
/// client's first SUBSCRIBE, before its subscriptions are in place and with routing on this
/// node held off, and once only; the cluster task hears of it afterwards.
#[test]
fn a_fence_runs_once_at_the_first_subscribe_before_its_subscriptions() {
    let (harness, routes) = cluster_harness();
    let mut events = routes.take_events().expect("events");
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = ran.clone();
    assert!(
        routes.set_fence_hook(hayate_core::cluster::FenceHook(Box::new(
            move |broker, client_id, fence, _now, _wake| {
                let subscribed = broker
                    .router
                    .subscribers("f/1")
                    .iter()
                    .any(|(id, _, _)| id == client_id);
                hook.lock()
                    .unwrap()
                    .push((client_id.to_string(), fence.away.clone(), subscribed));
            }
        )))
    );
    let fence = hayate_core::cluster::Fence {
        away: vec![Arc::from("n1")],
        at: CLAIM,
        until: harness.now() + Duration::from_secs(60),
    };
    routes.await_fence(Arc::from("c"), fence.clone());
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("f/#", QoS::ExactlyOnce);
    client.subscribe("g/#", QoS::ExactlyOnce);
    client.received();
    assert_eq!(
        *ran.lock().unwrap(),
        vec![("c".to_string(), vec![Arc::from("n1")], false)],
        "once, before the subscription"
    );
    assert!(matches!(
        events.try_recv(),
        Ok(hayate_core::cluster::ClusterEvent::ClientConnected { .. })
    ));
    match events.try_recv() {
        Ok(hayate_core::cluster::ClusterEvent::Fenced {
            client_id,
            fence: sent,
        }) => assert_eq!((&*client_id, sent), ("c", fence)),
        other => panic!("expected the fence event, got {other:?}"),
    }
    assert!(events.try_recv().is_err(), "one event for one fence");
}
