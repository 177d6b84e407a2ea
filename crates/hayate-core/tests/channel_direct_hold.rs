//! A session taken over from another node holds back this node's own copies until the old
//! node's end of relaying them (`docs/CLUSTER.md`, "Direct copies after a take-over"), driven
//! with injected time: the relayed older copies go out first, the own ones after the end or
//! at the deadline.

use hayate_codec::{Properties, QoS};
use hayate_core::router::RouteOutcome;
use hayate_core::{Delivery, Message, PeerScope};
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use std::sync::Arc;
use std::time::Duration;

/// The claim's `at` of the take-over in these tests.
const AT: u64 = 7;

fn payloads(c: &mut TestChannel) -> Vec<String> {
    c.transmit_publishes()
        .iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect()
}

/// A QoS 1 delivery of `payload` on `topic`, come from another node with `scope`.
fn from_peer(topic: &str, payload: &'static str, scope: PeerScope) -> Delivery {
    let message = Message::new(
        topic.into(),
        bytes::Bytes::from_static(payload.as_bytes()),
        QoS::AtLeastOnce,
        false,
        Properties::default(),
        None,
        Some(0),
    )
    .forwarded_by_peer(Arc::new(scope));
    Delivery::new(Arc::new(message), QoS::AtLeastOnce, false)
}

/// A copy another node relayed for `c`'s session.
fn relay(harness: &CoreHarness, payload: &'static str) {
    let delivery = from_peer("o/r", payload, PeerScope::relayed());
    let mut wake = Vec::new();
    let queued = harness
        .broker
        .deliver_relayed("c", vec![delivery], harness.now(), &mut wake);
    assert_eq!(queued.ok(), Some(1));
}

/// A copy another node forwarded for `c`'s subscription here (not relayed).
fn forwarded(harness: &CoreHarness, payload: &'static str) {
    let scope = PeerScope {
        plain: true,
        ..PeerScope::default()
    };
    let delivery = from_peer("o/f", payload, scope);
    let cell = harness.session("c").expect("c's session");
    let (mut wake, mut outcome) = (Vec::new(), RouteOutcome::default());
    harness
        .broker
        .router
        .deliver(&cell, delivery, harness.now(), &mut wake, &mut outcome);
    assert_eq!(outcome.delivered, 1);
}

/// `c` subscribed to `o/#`, and a publisher on this node.
fn setup() -> (CoreHarness, TestChannel, TestChannel) {
    let (harness, _routes) = CoreHarness::clustered();
    let mut c = harness.client(ConnectSpec::v5("c").session_expiry(600));
    c.subscribe("o/#", QoS::AtLeastOnce);
    c.received();
    let mut publisher = harness.client(ConnectSpec::v5("p"));
    publisher.received();
    (harness, c, publisher)
}

/// As [`setup`], with `c`'s session holding its own copies (deadline 15 s) and one of them,
/// `own-1`, published.
fn holding_one_own_copy() -> (CoreHarness, TestChannel, TestChannel) {
    let (harness, c, mut publisher) = setup();
    let until = harness.now() + Duration::from_secs(15);
    assert!(harness.broker.hold_direct_copies("c", AT, until));
    publisher
        .publish("o/own", b"own-1", QoS::AtLeastOnce)
        .unwrap();
    (harness, c, publisher)
}

#[test]
fn own_copies_go_out_after_the_relayed_ones_once_the_old_nodes_end_is_here() {
    let (harness, mut c, mut publisher) = holding_one_own_copy();
    assert!(payloads(&mut c).is_empty(), "held for the relay end");
    relay(&harness, "relayed-1");
    relay(&harness, "relayed-2");
    publisher
        .publish("o/own", b"own-2", QoS::AtLeastOnce)
        .unwrap();
    assert_eq!(payloads(&mut c), ["relayed-1", "relayed-2"]);

    let mut wake = Vec::new();
    harness.broker.release_direct_copies("c", AT + 1, &mut wake);
    assert!(payloads(&mut c).is_empty(), "the end of another take-over");
    harness.broker.release_direct_copies("c", AT, &mut wake);
    assert_eq!(payloads(&mut c), ["own-1", "own-2"]);
    publisher
        .publish("o/own", b"own-3", QoS::AtLeastOnce)
        .unwrap();
    assert_eq!(payloads(&mut c), ["own-3"], "no hold any more");
}

/// A publisher that moved from this node to another while `c`'s session holds its own
/// copies: its next message, forwarded from there, waits behind its held ones instead of
/// overtaking them (the 30-minute kill soak of `4dffb30`, docs/CLUSTER.md "Own copies after a
/// take-over").
#[test]
fn a_forwarded_copy_waits_behind_the_held_own_ones() {
    let (harness, mut c, _publisher) = holding_one_own_copy();
    forwarded(&harness, "forwarded-2");
    relay(&harness, "relayed-0");
    assert_eq!(payloads(&mut c), ["relayed-0"]);
    let mut wake = Vec::new();
    harness.broker.release_direct_copies("c", AT, &mut wake);
    assert_eq!(payloads(&mut c), ["own-1", "forwarded-2"]);
}

#[test]
fn a_hold_whose_end_never_comes_ends_at_its_deadline() {
    let (harness, mut c, _publisher) = holding_one_own_copy();
    let mut wake = Vec::new();
    harness.advance(Duration::from_secs(14));
    harness.broker.expire_direct_holds(harness.now(), &mut wake);
    assert!(payloads(&mut c).is_empty(), "before the deadline");
    harness.advance(Duration::from_secs(1));
    harness.broker.expire_direct_holds(harness.now(), &mut wake);
    assert_eq!(payloads(&mut c), ["own-1"]);
}

#[test]
fn only_a_client_session_here_holds() {
    let (harness, _c, _publisher) = setup();
    let until = harness.now() + Duration::from_secs(15);
    assert!(!harness.broker.hold_direct_copies("nobody", AT, until));
    let single = CoreHarness::new();
    let mut c = single.client(ConnectSpec::v5("c"));
    c.received();
    assert!(
        !single.broker.hold_direct_copies("c", AT, until),
        "not in a cluster"
    );
}
