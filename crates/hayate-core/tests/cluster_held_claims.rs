//! A claim from another node for a session whose own CONNACK still waits for the cluster's
//! answers (docs/CLUSTER.md, "A claim that comes while the session waits for its own"), sans IO
//! with an injected clock: the answer is held until that wait ends, and then hands over what the
//! wait brought in; the wait ends at the answers, at its deadline, or later when the cluster
//! extends it.

use hayate_codec::Packet;
use hayate_core::handoff::{Claiming, HandedOver};
use hayate_core::{Arrival, CloseReason};
use hayate_testkit::core::{handed_subscription, CoreHarness, TestChannel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What another node's claim of `client_id` got, once answered: `Some(None)` when nothing was
/// here to hand over.
type Answer = Arc<Mutex<Option<Option<HandedOver>>>>;

/// Another node claims `client_id` (a later connection than the one here): the answer is
/// prepared, and recorded in the returned slot when it is given.
fn claim(harness: &CoreHarness, client_id: &'static str) -> Answer {
    let answer: Answer = Arc::default();
    let slot = answer.clone();
    let broker = harness.broker.clone();
    let now = harness.now();
    harness.broker.prepare_hand_over(
        client_id,
        Box::new(move || {
            let mut wake = Vec::new();
            let handed = broker.hand_over(
                client_id,
                Claiming {
                    clean_start: false,
                    at: Arrival::UNKNOWN,
                    to: None,
                    upstream: Vec::new(),
                },
                now,
                &mut wake,
            );
            *slot.lock().unwrap() = Some(handed);
        }),
    );
    answer
}

/// A node with a peer (n2) where `client_id` resumes its session (its CONNACK waits) and
/// another node claims it: the harness, the waiting client and the claim's answer slot.
fn claimed_while_waiting(
    client_id: &'static str,
) -> (CoreHarness, TestChannel, TestChannel, Answer) {
    let (harness, _routes) = CoreHarness::clustered();
    let n2 = harness.peer("n2", &[]);
    let client = harness.resume_waiting(client_id);
    let answer = claim(&harness, client_id);
    (harness, n2, client, answer)
}

/// The CONNACK's Session Present, if it went out, and whether the connection then closed as
/// taken over (the held claim, answered, handed its session over).
fn connack(client: &mut TestChannel) -> (Option<bool>, bool) {
    let taken_over = match client.poll_transmit() {
        Ok(()) => false,
        Err(close) => {
            assert_eq!(close.reason, CloseReason::SessionTakenOver);
            true
        }
    };
    let present = client.received().iter().find_map(|packet| match packet {
        Packet::ConnAck(connack) => Some(connack.session_present),
        _ => None,
    });
    (present, taken_over)
}

/// The soak's lost session: the node the client resumed on was still waiting for the node
/// that had its session when a third node claimed it. Answered at once, the claim got an
/// empty session, and the real one, arriving after, found nothing to go into.
#[test]
fn a_held_claim_gets_what_the_wait_brought_in() {
    let (harness, _n2, mut client, answer) = claimed_while_waiting("mover");
    assert!(
        answer.lock().unwrap().is_none(),
        "not answered while the session waits for its own claim"
    );
    let mut wake = Vec::new();
    assert!(harness.broker.take_over(
        "mover",
        handed_subscription("t/#"),
        harness.now(),
        &mut wake
    ));
    harness.broker.release_handover("mover");

    let handed = answer
        .lock()
        .unwrap()
        .take()
        .expect("answered when the wait ended")
        .expect("a session to hand over");
    let filters: Vec<&str> = handed.subscriptions.iter().map(|(f, _)| &**f).collect();
    assert_eq!(filters, ["t/#"], "what n2 handed over goes on with it");
    assert_eq!(connack(&mut client), (Some(true), true));
    assert!(harness.session("mover").is_none(), "handed over");
}

/// Nobody answers: the claim is answered when the CONNACK goes out at the deadline.
#[test]
fn a_held_claim_is_answered_at_the_wait_deadline() {
    let (harness, _n2, mut client, answer) = claimed_while_waiting("lonely");

    harness.advance(Duration::from_millis(2_900));
    assert_eq!(connack(&mut client), (None, false));
    assert!(answer.lock().unwrap().is_none());
    harness.advance(Duration::from_millis(200));
    assert_eq!(connack(&mut client), (Some(false), true));
    let handed = answer
        .lock()
        .unwrap()
        .take()
        .expect("answered at the deadline");
    assert!(handed.is_some_and(|h| h.is_empty()), "an empty session");
}

/// The cluster waits longer (a node it waits for is back, its link reconnecting): the CONNACK
/// and the held claim wait with it.
#[test]
fn an_extended_wait_holds_the_connack_and_the_claim_longer() {
    let (harness, _n2, mut client, answer) = claimed_while_waiting("patient");

    harness
        .broker
        .extend_handover("patient", harness.at(Duration::from_secs(10)));
    harness.advance(Duration::from_secs(5));
    assert_eq!(
        connack(&mut client),
        (None, false),
        "past the 3 s default, still held"
    );
    assert!(answer.lock().unwrap().is_none());
    harness.set_time(Duration::from_secs(10));
    assert_eq!(connack(&mut client), (Some(false), true));
    assert!(answer.lock().unwrap().is_some());
}
