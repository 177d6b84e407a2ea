//! The relay after a handover, sans IO with an injected clock (docs/CLUSTER.md, "Relay after
//! a handover"): a session handed over relays what other nodes still forward for it until each
//! node's mark, a node's copies after its mark are not relayed, the claiming node skips a node's
//! copies until its mark comes back, and a fence marks at the client's first SUBSCRIBE.

use hayate_codec::{Packet, Properties, QoS};
use hayate_core::cluster::{ClusterRoutes, RouteDelta, PLAIN_ID};
use hayate_core::ListenerRole;
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::publish_packet;
use std::sync::Arc;
use std::time::Duration;

/// A cluster harness whose sessions relay after a handover, with an encoder that carries the
/// delivery's payload on `$cluster/relay` (the real format is `hayate-cluster`'s).
fn relaying_harness(timeout: Duration) -> (CoreHarness, Arc<ClusterRoutes>) {
    let (harness, routes) = CoreHarness::clustered();
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
    let peer2 = harness.peer("n2", &[]);
    let peer3 = harness.peer("n3", &[]);
    // n3 is known even if its link here were not up: it marks too.
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.subscribe("$share/g/s/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    let handed = harness
        .hand_over("c", CLAIM, Some("n2"), &mut wake)
        .expect("a session here");
    assert_eq!(handed.subscriptions.len(), 2);
    let mut ingress = harness.channel_with_role(ListenerRole::PeerIngress);
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
            .relay_marked("c", "n3", (earlier, "n2"), harness.now(), &mut wake)
            .is_none(),
        "a late mark ends no relaying"
    );
    harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    forward(&mut ingress, "o/7", b"7", 2);
    assert_eq!(peer2.transmit_publishes().len(), 1);
    assert_eq!(routes.len(), 1);
    // n3 marks: relaying ends, `o/#` leaves the route set, nothing more is relayed.
    harness
        .broker
        .relay_marked("c", "n3", (CLAIM, "n2"), harness.now(), &mut wake);
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
    let (to, relay_at) = harness
        .broker
        .relay_marked("c", "n3", (CLAIM, "n2"), harness.now(), &mut wake)
        .expect("n3's mark ends what is relayed of its copies");
    assert_eq!(relay_at, CLAIM, "the end names the relay's claim");
    assert_eq!(
        &*to.client_id, "$cluster/n2",
        "the end goes behind the relayed copies, to the node that has the session"
    );
    assert!(
        harness
            .broker
            .relay_marked("c", "n3", (CLAIM, "n2"), harness.now(), &mut wake)
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
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 0);
}

/// After a kill -9 the claimant marked when its client subscribed (a fence), before its claim
/// was answered here: it is not waited for again at the handover (it marks nothing more for
/// this claim), so relaying ends with the other nodes' marks, not at the deadline while
/// relaying the claimant's own copies back to it.
#[test]
fn a_claimant_that_marked_before_the_handover_is_not_waited_for() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let _peer2 = harness.peer("n2", &[]);
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    let handed = harness
        .hand_over("c", CLAIM, Some("n2"), &mut wake)
        .expect("a session here");
    assert_eq!(routes.len(), 1, "relaying for n3");
    assert_eq!(
        handed.relaying_for,
        vec![std::sync::Arc::<str>::from("n3")],
        "the answer names the nodes whose copies are relayed"
    );
    harness
        .broker
        .relay_marked("c", "n3", (CLAIM, "n2"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "n2 is not waited for");
}

/// Client `c` subscribed here, n2 and n3 known; `marks`: n3 and n2 marked for the claim made
/// then by n2, before the handover on `CLAIM`. Asserts the session ends at the handover,
/// relaying nothing.
fn every_node_marked_before_the_handover(marks: hayate_core::Arrival) {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let _peer2 = harness.peer("n2", &[]);
    routes.set_nodes(vec!["n2".into(), "n3".into()]);
    let mut client = harness.client(ConnectSpec::v5("c").session_expiry(600));
    client.subscribe("o/#", QoS::AtLeastOnce);
    client.received();
    let mut wake = Vec::new();
    for node in ["n3", "n2"] {
        harness
            .broker
            .relay_marked("c", node, (marks, "n2"), harness.now(), &mut wake);
    }
    harness
        .hand_over("c", CLAIM, Some("n2"), &mut wake)
        .expect("a session here");
    assert_eq!(routes.len(), 0, "not relaying");
    assert_eq!(routes.relaying_count(), 0);
}

/// When every node marked before the handover (the answer waited for the session's stored
/// queue meanwhile), there is nothing left to relay: the session ends at once instead of
/// relaying until `handover_relay_secs`.
#[test]
fn a_session_every_node_marked_for_ends_at_the_handover() {
    every_node_marked_before_the_handover(CLAIM);
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
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
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
    let (harness, _) = CoreHarness::clustered();
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
    let (harness, routes) = CoreHarness::clustered();
    let mut c = harness.client(ConnectSpec::v5("c").session_expiry(600));
    c.subscribe("o/#", QoS::AtLeastOnce);
    let mut other = harness.client(ConnectSpec::v5("other"));
    other.subscribe("o/#", QoS::AtLeastOnce);
    c.received();
    other.received();
    let until = harness.now() + Duration::from_secs(15);
    let session = harness.session("c").expect("c's session").id;
    routes.suppress(
        "c".into(),
        session,
        CLAIM,
        vec!["n3".into(), "n4".into()],
        until,
    );
    let mut from_n3 = harness.channel_with_role(ListenerRole::PeerIngress);
    from_n3.connect(ConnectSpec::v5("$cluster/in/n3"));
    let mut from_n5 = harness.channel_with_role(ListenerRole::PeerIngress);
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
    let mut from_n4 = harness.channel_with_role(ListenerRole::PeerIngress);
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
    let (harness, routes) = CoreHarness::clustered();
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

/// When n2's second claim for `c` was made: its client gave up on the first one's CONNACK,
/// connected to n2 again and subscribed there (a fence, for this node, away meanwhile).
const LATER_CLAIM: hayate_core::Arrival = hayate_core::Arrival::from_nanos(2_000);

/// The long-down soak's QoS 2 duplicates (docs/CLUSTER.md, "A fence of a later claim"): this
/// node, back, answered n2's first claim and relays; the marks the other nodes sent when `c`
/// subscribed on n2 under its second claim come after. They count for the relay: what a node
/// forwards after its mark reaches `c` on n2 directly, and relayed too it arrived twice.
#[test]
fn the_marks_of_a_later_claims_fence_count_for_the_relay() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    forward(&mut ingress, "o/1", b"1", 1);
    assert_eq!(peer2.transmit_publishes().len(), 1, "before n3's mark");

    let mut wake = Vec::new();
    let (to, relay_at) = harness
        .broker
        .relay_marked("c", "n3", (LATER_CLAIM, "n2"), harness.now(), &mut wake)
        .expect("n3's mark of the later claim ends what is relayed of its copies");
    assert_eq!(&*to.client_id, "$cluster/n2");
    assert_eq!(relay_at, CLAIM, "the end names the claim n2 took over on");
    forward(&mut ingress, "o/2", b"2", 2);
    assert!(
        peer2.transmit_publishes().is_empty(),
        "n3's copy after its mark was relayed"
    );
    harness
        .broker
        .relay_marked("c", "n2", (LATER_CLAIM, "n2"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "every node marked: relaying ended");
}

/// A later claim's mark counts only when it names the node the session went to (same node,
/// same clock): a mark of another node's claim, or of an earlier one, ends nothing.
#[test]
fn a_later_mark_for_another_node_or_an_earlier_one_counts_not() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    for mark in [
        (LATER_CLAIM, "n4"),
        (hayate_core::Arrival::from_nanos(500), "n2"),
    ] {
        assert!(harness
            .broker
            .relay_marked("c", "n3", mark, harness.now(), &mut wake)
            .is_none());
    }
    forward(&mut ingress, "o/1", b"1", 1);
    assert_eq!(peer2.transmit_publishes().len(), 1, "still relayed");
    assert_eq!(routes.len(), 1, "still relaying");
}

/// The later claim's marks came while the session was still here (before the earlier claim's
/// answer): at the handover those nodes count as marked, and with every node marked the
/// session ends instead of relaying until `handover_relay_secs` (`handover_relay_expired`).
#[test]
fn a_later_claims_marks_before_the_handover_count_at_it() {
    every_node_marked_before_the_handover(LATER_CLAIM);
}

/// The long-down soak of `08d7cf5` (docs/CLUSTER.md, "A claim answered while relaying"): this
/// node, back, answered n2's old claim with the session and relays to n2; then n3's claim of
/// the same client (it had moved on to n3, which fenced while this node was down) finds the
/// session gone. The marks of n3's claim count for the relay: what a node forwards after
/// such a mark reaches the client on n3 directly, and relayed to n2 (which passes it on to
/// n3) it arrived twice. A mark of a claim this node was never asked still counts not.
#[test]
fn the_marks_of_a_claim_answered_while_relaying_count() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut ingress) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    assert!(
        harness
            .broker
            .relay_marked("c", "n3", (LATER_CLAIM, "n3"), harness.now(), &mut wake)
            .is_none(),
        "n3's mark of a claim never made here counts not"
    );
    forward(&mut ingress, "o/1", b"1", 1);
    assert_eq!(peer2.transmit_publishes().len(), 1, "relayed");

    assert!(
        harness
            .hand_over("c", LATER_CLAIM, Some("n3"), &mut wake)
            .is_none(),
        "n3's claim: the session left already"
    );
    let (to, relay_at) = harness
        .broker
        .relay_marked("c", "n3", (LATER_CLAIM, "n3"), harness.now(), &mut wake)
        .expect("the mark of the claim answered while relaying counts");
    assert_eq!((&*to.client_id, relay_at), ("$cluster/n2", CLAIM));
    forward(&mut ingress, "o/2", b"2", 2);
    assert!(
        peer2.transmit_publishes().is_empty(),
        "n3's copy after its mark was relayed"
    );
    assert_eq!(routes.len(), 1, "still relaying: n2 has not marked");
    harness
        .broker
        .relay_marked("c", "n2", (LATER_CLAIM, "n3"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "every node marked");
}

/// The long-down soak's relay loop (docs/CLUSTER.md, "Not built yet": "A session that comes
/// back to a node still relaying it"): `c` handed to n2, n2 marks, n3 (dead) does not, so
/// this node relays for n3; `c` comes back here. A copy n2 forwards must reach `c` here once
/// and not be relayed to n2 (which passes it back). Fails today: the known fault, reproduced.
#[test]
fn a_session_back_on_its_relaying_node_gets_the_marked_nodes_copies_once() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, _ingress3) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    assert!(harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake)
        .is_some());
    peer2.transmit();
    let mut back = harness.channel();
    back.send(Packet::Connect(Box::new(
        ConnectSpec::v5("c")
            .clean_start(false)
            .session_expiry(600)
            .into(),
    )))
    .unwrap();
    let handed = hayate_core::handoff::HandedOver::default();
    harness
        .broker
        .take_over("c", handed, harness.now(), &mut wake);
    harness.broker.release_handover("c");
    back.poll_gate().unwrap();
    back.received();
    back.subscribe("o/#", QoS::AtLeastOnce);
    back.received();
    let mut ingress2 = harness.channel_with_role(ListenerRole::PeerIngress);
    ingress2.connect(ConnectSpec::v5("$cluster/in/n2"));
    forward(&mut ingress2, "o/7", b"7", 1);
    let relayed: Vec<_> = peer2
        .transmit_publishes()
        .into_iter()
        .filter(|p| p.topic.as_str() == "$cluster/relay")
        .collect();
    assert!(relayed.is_empty(), "relayed back to n2: {relayed:?}");
    assert_eq!(back.transmit_publishes().len(), 1);
}

/// Past its deadline a relay passes nothing on, though `expire_relays` has not ended it yet:
/// the suppression of a node that marked ends at the deadline, and its copies (which reach
/// the session on the new node directly) went on to that node a second time until the relay
/// was expired (the lose-node soak of `aa0d107`: 3 and 6 QoS 2 messages twice, each at a
/// relay's deadline).
#[test]
fn a_relay_past_its_deadline_passes_nothing_on_before_it_is_expired() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut from_n3) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    peer2.transmit();
    let mut from_n2 = harness.channel_with_role(ListenerRole::PeerIngress);
    from_n2.connect(ConnectSpec::v5("$cluster/in/n2"));
    forward(&mut from_n2, "o/1", b"1", 1);
    assert!(peer2.transmit_publishes().is_empty(), "n2 marked");
    harness.advance(Duration::from_secs(30));
    forward(&mut from_n2, "o/2", b"2", 2);
    forward(&mut from_n3, "o/3", b"3", 1);
    let relayed = peer2.transmit_publishes();
    assert!(relayed.is_empty(), "relayed past the deadline: {relayed:?}");
    assert_eq!(routes.len(), 1, "not expired yet: `o/#` still routed here");
}

/// A node forgotten (or gone for good) marks nothing: a relay that waited only for it ends
/// then, not at its deadline; one that waits for another node too goes on.
#[test]
fn a_relay_waiting_only_for_a_node_gone_for_good_ends_then() {
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (mut peer2, _peer3, mut from_n3) = hand_c_over(&harness, &routes);
    let mut wake = Vec::new();
    harness
        .broker
        .relay_node_gone("n3", harness.now(), &mut wake);
    forward(&mut from_n3, "o/1", b"1", 1);
    assert_eq!(
        peer2.transmit_publishes().len(),
        1,
        "n2 has not marked yet: still relaying"
    );
    harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "every node left marked: the relay ended");

    // Gone before the other node marked: the relay ends at that node's mark.
    let (harness, routes) = relaying_harness(Duration::from_secs(30));
    let (_peer2, _peer3, _from_n3) = hand_c_over(&harness, &routes);
    harness
        .broker
        .relay_marked("c", "n2", (CLAIM, "n2"), harness.now(), &mut wake);
    assert_eq!(routes.len(), 1, "waiting for n3");
    harness
        .broker
        .relay_node_gone("n3", harness.now(), &mut wake);
    assert_eq!(routes.len(), 0, "n3 gone: nothing left to wait for");
}
