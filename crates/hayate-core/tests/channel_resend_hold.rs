//! A QoS 2 PUBLISH sent again (DUP) by a client that resumed its session here while the node
//! that had it was away: held, unacknowledged, until that node answers or the hold's time runs
//! out (`channel/resend_hold.rs`; docs/CLUSTER.md, "A QoS 2 message sent again past the wait").
//! Sans IO, with an injected clock.

use hayate_codec::{Packet, QoS};
use hayate_core::cluster::ClusterRoutes;
use hayate_core::handoff::HandedOver;
use hayate_core::ReadGate;
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use hayate_testkit::publish_packet;
use std::sync::Arc;
use std::time::Duration;

const HOLD: Duration = Duration::from_secs(30);

/// A subscriber to `q/#`, and publisher `p`, which resumed its session here while node `n9`
/// (which had it) was away.
fn served_while_n9_is_away() -> (CoreHarness, Arc<ClusterRoutes>, TestChannel, TestChannel) {
    let (harness, routes) = CoreHarness::clustered();
    let mut subscriber = harness.client(ConnectSpec::v5("s"));
    subscriber.subscribe("q/#", QoS::ExactlyOnce);
    subscriber.received();
    let mut publisher = harness.client(ConnectSpec::v5("p").clean_start(false).session_expiry(600));
    publisher.received();
    routes.await_inbound_qos2_ids(Arc::from("p"), vec![Arc::from("n9")], harness.now() + HOLD);
    (harness, routes, subscriber, publisher)
}

/// [`served_while_n9_is_away`], `p` sending message `m` again with packet id 5 and DUP.
fn resent_while_n9_is_away() -> (CoreHarness, Arc<ClusterRoutes>, TestChannel, TestChannel) {
    let (harness, routes, mut subscriber, mut publisher) = served_while_n9_is_away();
    let mut again = publish_packet("q/x", b"m", QoS::ExactlyOnce, false, Some(5));
    again.dup = true;
    publisher.send(Packet::Publish(again)).unwrap();
    assert!(publisher.received().is_empty(), "no PUBREC yet");
    assert!(
        !publisher.accepts_input(),
        "the client is not read meanwhile"
    );
    assert!(subscriber.transmit_publishes().is_empty(), "not routed yet");
    let deadline = harness.now() + HOLD;
    harness.advance(Duration::from_secs(1));
    // Paused until the hold's time: the answer wakes the connection before that.
    assert!(matches!(
        publisher.poll_gate().unwrap(),
        ReadGate::Paused { until, .. } if until == deadline
    ));
    (harness, routes, subscriber, publisher)
}

fn pubrec_ids(packets: &[Packet]) -> Vec<u16> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::PubRec(rec) => Some(rec.packet_id.get()),
            _ => None,
        })
        .collect()
}

/// The old session had routed it: once n9's answer is merged, it is acknowledged and not
/// routed again [MQTT-4.3.3-10] (the long-down soak delivered such a window twice).
#[test]
fn a_resend_the_old_session_had_routed_is_acknowledged_once_its_node_answers() {
    let (harness, _routes, mut subscriber, mut publisher) = resent_while_n9_is_away();
    let handed = HandedOver {
        inbound_qos2: vec![5],
        ..HandedOver::default()
    };
    let mut wake = Vec::new();
    assert!(harness
        .broker
        .take_over("p", handed, harness.now(), &mut wake));
    harness.broker.inbound_qos2_ids_answered("p", "n9");
    assert!(matches!(publisher.poll_gate().unwrap(), ReadGate::Open));
    assert_eq!(pubrec_ids(&publisher.received()), vec![5]);
    assert!(
        subscriber.transmit_publishes().is_empty(),
        "routed once, by the old node"
    );
    assert!(publisher.accepts_input());
}

/// The old node had nothing of it (or no session): routed once its answer says so.
#[test]
fn a_resend_the_old_node_never_had_is_routed_once_it_answers() {
    let (harness, _routes, mut subscriber, mut publisher) = resent_while_n9_is_away();
    assert!(!publisher.woken());
    harness.broker.inbound_qos2_ids_answered("p", "n9");
    assert!(publisher.woken(), "the answer wakes the held connection");
    assert!(matches!(publisher.poll_gate().unwrap(), ReadGate::Open));
    assert_eq!(pubrec_ids(&publisher.received()), vec![5]);
    let got = subscriber.transmit_publishes();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload.as_ref(), b"m");
}

/// The old node never answers: the hold ends at its time and the message is routed (at least
/// once); meanwhile silence does not count against the client's keep alive.
#[test]
fn a_resend_is_routed_when_the_hold_runs_out() {
    let (harness, _routes, mut subscriber, mut publisher) = resent_while_n9_is_away();
    harness.advance(HOLD - Duration::from_secs(2));
    assert!(matches!(
        publisher.poll_gate().unwrap(),
        ReadGate::Paused { .. }
    ));
    assert!(publisher.handle_timeout(false).is_ok());
    harness.advance(Duration::from_secs(2));
    assert!(matches!(publisher.poll_gate().unwrap(), ReadGate::Open));
    assert_eq!(pubrec_ids(&publisher.received()), vec![5]);
    assert_eq!(subscriber.transmit_publishes().len(), 1);
}

/// The client's input ends while it is held: dropped unacknowledged and unrouted (the client
/// still has it, and sends it again on its next connection), its id not taken.
#[test]
fn a_held_resend_is_dropped_when_the_input_ends() {
    let (harness, _routes, mut subscriber, mut publisher) = resent_while_n9_is_away();
    publisher.end_input().unwrap();
    harness.broker.inbound_qos2_ids_answered("p", "n9");
    assert!(matches!(publisher.poll_gate().unwrap(), ReadGate::Open));
    assert!(pubrec_ids(&publisher.received()).is_empty());
    assert!(subscriber.transmit_publishes().is_empty());
    let cell = harness.session("p").expect("the session stays");
    assert!(
        cell.state.lock().session.inbound_qos2_ids().is_empty(),
        "id 5 is free for the resend"
    );
}

/// Only QoS 2 resends (DUP) are held: a new QoS 2 message, a QoS 1 resend, and everything
/// after the record ended go through at once.
#[test]
fn only_qos2_resends_of_a_client_served_past_the_wait_are_held() {
    let (harness, _routes, mut subscriber, mut publisher) = served_while_n9_is_away();
    let fresh = publish_packet("q/new", b"1", QoS::ExactlyOnce, false, Some(7));
    publisher.send(Packet::Publish(fresh)).unwrap();
    let mut qos1 = publish_packet("q/one", b"2", QoS::AtLeastOnce, false, Some(8));
    qos1.dup = true;
    publisher.send(Packet::Publish(qos1)).unwrap();
    assert!(publisher.accepts_input());
    assert_eq!(subscriber.transmit_publishes().len(), 2);

    harness.advance(HOLD);
    let mut late = publish_packet("q/late", b"3", QoS::ExactlyOnce, false, Some(9));
    late.dup = true;
    publisher.send(Packet::Publish(late)).unwrap();
    assert!(publisher.accepts_input(), "past the record's time");
    assert_eq!(subscriber.transmit_publishes().len(), 1);
}
