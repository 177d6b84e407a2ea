//! A session made only to wait for a claim (docs/CLUSTER.md, "A session made only to wait"),
//! sans IO with an injected clock: a client resumed here while another node it waited for was
//! away, and gave up before its CONNACK came. The session that wait made was never told to
//! any client; holding nothing, it is not present, neither to the client's next connection
//! here nor, handed on, to the node where it connects next.

use hayate_codec::Packet;
use hayate_core::handoff::HandedOver;
use hayate_core::Arrival;
use hayate_testkit::core::{handed_subscription, CoreHarness, TestChannel};
use std::time::Duration;

/// The CONNACK's Session Present, once the wait is over (at its 3 s deadline at the latest).
fn session_present(harness: &CoreHarness, client: &mut TestChannel) -> bool {
    harness.advance(Duration::from_secs(4));
    client.poll_transmit().unwrap();
    client
        .received()
        .iter()
        .find_map(|packet| match packet {
            Packet::ConnAck(connack) => Some(connack.session_present),
            _ => None,
        })
        .expect("CONNACK went out")
}

/// Another node claims `client_id` now: what this node hands over.
fn claim(harness: &CoreHarness, client_id: &str) -> HandedOver {
    let mut wake = Vec::new();
    harness
        .hand_over(client_id, Arrival::UNKNOWN, None, &mut wake)
        .expect("a session here")
}

/// The client connected, waited, and left before its CONNACK (paho gives up after its
/// keep-alive); the cluster then gave up waiting too.
fn waited_and_left(harness: &CoreHarness, client_id: &str) {
    let mut client = harness.resume_waiting(client_id);
    client.finish();
    harness.broker.release_handover(client_id);
}

/// The soak's subscriber that did not subscribe again: told Session Present 1 by the node it
/// went to next, from the empty session its first attempt had made.
#[test]
fn an_empty_session_made_only_to_wait_is_handed_on_as_none() {
    let (harness, _routes) = CoreHarness::clustered();
    let _n2 = harness.peer("n2", &[]);
    waited_and_left(&harness, "gone");

    let handed = claim(&harness, "gone");
    assert!(handed.is_empty());
    assert!(handed.unconfirmed);
    assert!(
        !handed.counts_as_present(),
        "the claiming node says Session Present 0"
    );
    assert!(harness.session("gone").is_none(), "ended here all the same");
}

/// Back on the same node, the client is told the same: no session was ever there for it.
#[test]
fn back_on_the_same_node_an_empty_session_made_only_to_wait_is_not_present() {
    let (harness, _routes) = CoreHarness::clustered();
    let _n2 = harness.peer("n2", &[]);
    waited_and_left(&harness, "again");

    let mut client = harness.resume_waiting("again");
    assert!(!session_present(&harness, &mut client));
    // Told now (Session Present 0, a new session, and the client answered): handed on, it
    // counts.
    client.send(Packet::PingReq).expect("PINGREQ handled");
    client.finish();
    let handed = claim(&harness, "again");
    assert!(!handed.unconfirmed);
    assert!(handed.counts_as_present());
}

/// What another node handed into the wait makes it a session, even an empty one: the client
/// had a session there.
#[test]
fn a_session_another_node_handed_into_the_wait_is_present() {
    let (harness, _routes) = CoreHarness::clustered();
    let _n2 = harness.peer("n2", &[]);
    let mut client = harness.resume_waiting("kept");
    let mut wake = Vec::new();
    assert!(harness
        .broker
        .take_over("kept", HandedOver::default(), harness.now(), &mut wake));
    client.finish();
    harness.broker.release_handover("kept");

    let handed = claim(&harness, "kept");
    assert!(handed.is_empty());
    assert!(handed.counts_as_present(), "n2 had a session, empty or not");

    // The same on this node's next connection.
    let mut client = harness.resume_waiting("kept-here");
    assert!(harness.broker.take_over(
        "kept-here",
        handed_subscription("t/#"),
        harness.now(),
        &mut wake
    ));
    client.finish();
    harness.broker.release_handover("kept-here");
    let mut client = harness.resume_waiting("kept-here");
    assert!(session_present(&harness, &mut client));
}

/// A session told to its client with CONNACK counts as present, empty or not (the client
/// knows of it): the client sent a packet after the CONNACK, so it got it.
#[test]
fn a_session_told_with_its_connack_is_present_when_empty() {
    let (harness, _routes) = CoreHarness::clustered();
    let _n2 = harness.peer("n2", &[]);
    let mut client = harness.resume_waiting("told");
    assert!(!session_present(&harness, &mut client), "new");
    client.send(Packet::PingReq).expect("PINGREQ handled");
    client.finish();

    let handed = claim(&harness, "told");
    assert!(handed.is_empty());
    assert!(handed.counts_as_present());
}

/// The CONNACK went out at the end of the wait, but the client had given up a moment before
/// (nothing is read during the wait, so its leaving was not seen) and sent nothing after it:
/// not told, handed on as none. The lose-node soak of `c710fdc`: told Session Present 1 by
/// the next node from such an empty session, the client never subscribed again and lost
/// every message for the remaining 5 minutes.
#[test]
fn a_connack_written_to_a_client_that_had_left_tells_nothing() {
    let (harness, _routes) = CoreHarness::clustered();
    let _n2 = harness.peer("n2", &[]);
    let mut client = harness.resume_waiting("left");
    assert!(!session_present(&harness, &mut client), "new");
    client.finish();

    let handed = claim(&harness, "left");
    assert!(handed.is_empty());
    assert!(handed.unconfirmed);
    assert!(
        !handed.counts_as_present(),
        "Session Present 0 where it goes"
    );
}
