//! Back-pressure transitions (`hayate_core::flow`) through the sans-IO channel, with injected
//! time: a subscriber session is Clear, Congested or Stalled; a publisher whose messages reach
//! a Congested session stops being read (`accepts_input`, `poll_gate`) until it drains, stalls
//! or goes away.
//!
//! Every test uses a queue of 8 messages per session (Congested from 4 held, drained at 1) and
//! a stall window of 2 s.

use hayate_codec::QoS;
use hayate_core::{ReadGate, Stats};
use hayate_testkit::core::{gate_released, paused_until, ConnectSpec, CoreHarness, TestChannel};
use std::time::Duration;

const STALL_MS: u64 = 2_000;
const STALL: Duration = Duration::from_millis(STALL_MS);

const fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn harness() -> CoreHarness {
    CoreHarness::with_config(|config| {
        config.max_queued_messages = 8;
        config.backpressure_stall_timeout_ms = STALL_MS;
    })
}

fn stat(h: &CoreHarness, counter: fn(&Stats) -> &std::sync::atomic::AtomicU64) -> u64 {
    Stats::get(counter(&h.broker.stats))
}

fn pauses(h: &CoreHarness) -> u64 {
    stat(h, |s| &s.backpressure_pauses)
}

fn stalls(h: &CoreHarness) -> u64 {
    stat(h, |s| &s.backpressure_stalls)
}

fn dropped(h: &CoreHarness) -> u64 {
    stat(h, |s| &s.publish_dropped)
}

/// Messages the session holds (waiting and in flight).
fn held(client: &TestChannel) -> usize {
    client.session().state.lock().session.held_messages()
}

fn assert_open(gate: ReadGate) {
    assert!(
        matches!(gate, ReadGate::Open),
        "expected Open, got {gate:?}"
    );
}

fn numbered(publishes: &[hayate_codec::Publish]) -> Vec<u8> {
    publishes.iter().map(|p| p.payload[0]).collect()
}

/// QoS 0: the publisher is paused by the message that takes the subscriber to its high-water
/// mark, with `until` = that moment + the stall window; a second publisher's PUBLISH is held
/// before routing. The subscriber draining releases both, the held PUBLISH is routed, nothing
/// is dropped.
#[test]
fn publisher_pauses_at_the_high_mark_and_resumes_when_the_subscriber_drains() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v311("bp-sub"));
    sub.subscribe("bp/t", QoS::AtMostOnce);
    let mut publisher = h.client(ConnectSpec::v311("bp-pub"));
    for n in 0..3u8 {
        publisher.publish("bp/t", &[n], QoS::AtMostOnce).unwrap();
        assert!(publisher.accepts_input(), "below the high mark after {n}");
    }
    assert_eq!(h.broker.router.congested_count(), 0);
    h.set_time(ms(1_000));
    publisher.publish("bp/t", &[3], QoS::AtMostOnce).unwrap();
    assert!(!publisher.accepts_input(), "paused at 4 of 8");
    assert_eq!(pauses(&h), 1);
    assert_eq!(h.broker.router.congested_count(), 1);
    assert!(sub.session().state.lock().congestion.is_congested());

    h.set_time(ms(1_500));
    let mut gate = publisher.poll_gate().unwrap();
    assert_eq!(paused_until(&gate), h.at(ms(1_000) + STALL));
    assert!(!gate_released(&mut gate));

    // Another publisher's PUBLISH to the congested subscriber is held back before routing.
    let mut second = h.client(ConnectSpec::v311("bp-pub2"));
    second.publish("bp/t", &[4], QoS::AtMostOnce).unwrap();
    assert!(!second.accepts_input());
    assert_eq!(pauses(&h), 2);
    assert_eq!(held(&sub), 4, "the held PUBLISH is not queued");
    let mut second_gate = second.poll_gate().unwrap();
    assert_eq!(paused_until(&second_gate), h.at(ms(1_000) + STALL));

    // The subscriber's socket takes everything: drained, both released.
    h.set_time(ms(1_800));
    assert_eq!(numbered(&sub.transmit_publishes()), [0, 1, 2, 3]);
    assert_eq!(h.broker.router.congested_count(), 0);
    assert!(gate_released(&mut gate), "the release signal fires");
    assert!(gate_released(&mut second_gate));
    assert_open(publisher.poll_gate().unwrap());
    assert!(publisher.accepts_input());
    assert_open(second.poll_gate().unwrap());
    assert!(second.accepts_input());
    assert_eq!(
        numbered(&sub.transmit_publishes()),
        [4],
        "the held one routed"
    );
    assert_eq!(dropped(&h), 0);
    assert_eq!(stalls(&h), 0);
}

/// A subscriber that makes progress, however slowly (here one acknowledgement every 1.5 s with
/// a window of one QoS 1 message), keeps its publisher paused past the stall window and loses
/// nothing: each step of progress moves `until`.
#[test]
fn slow_subscriber_keeps_the_publisher_paused_and_loses_nothing() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v5("slow-sub").receive_maximum(1));
    sub.subscribe("bp/slow", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("slow-pub"));
    for n in 0..4u8 {
        publisher
            .publish("bp/slow", &[n], QoS::AtLeastOnce)
            .unwrap();
    }
    assert!(!publisher.accepts_input());
    assert_eq!(paused_until(&publisher.poll_gate().unwrap()), h.at(STALL));

    // Sending is not progress; an acknowledgement is.
    h.set_time(ms(1_500));
    let mut in_flight = sub.transmit_publishes();
    assert_eq!(numbered(&in_flight), [0]);
    assert_eq!(paused_until(&publisher.poll_gate().unwrap()), h.at(STALL));

    let mut received = Vec::new();
    let mut progress_at = Vec::new();
    for step in 1..=3u64 {
        h.set_time(ms(1_500 * step + 400));
        let publish = in_flight.pop().expect("one in flight");
        received.push(publish.payload[0]);
        sub.puback(&publish).unwrap();
        progress_at.push(h.now());
        in_flight = sub.received_publishes();
        if held(&sub) > 1 {
            h.advance(ms(1_000));
            let gate = publisher.poll_gate().unwrap();
            assert_eq!(
                paused_until(&gate),
                progress_at[progress_at.len() - 1] + STALL,
                "progress at step {step} moves the deadline"
            );
            assert!(!publisher.accepts_input());
        }
    }
    // Three acknowledgements left one message held: drained.
    assert_eq!(held(&sub), 1);
    assert!(
        h.now() > h.at(STALL * 2),
        "paused well past one stall window"
    );
    assert_open(publisher.poll_gate().unwrap());
    let last = in_flight.pop().expect("the last one in flight");
    received.push(last.payload[0]);
    sub.puback(&last).unwrap();
    assert_eq!(received, [0, 1, 2, 3]);
    assert_eq!(stalls(&h), 0, "slow is not stalled");
    assert_eq!(dropped(&h), 0);
}

/// No progress for the stall window: the subscriber is Stalled (counted), the publisher is
/// released and its further messages overflow the stalled queue (counted in
/// `publish_dropped`) without pausing it. Progress again makes the session Congested again and
/// the next PUBLISH to it is held.
#[test]
fn stalled_subscriber_releases_the_publisher_until_it_progresses_again() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v5("stuck-sub").receive_maximum(1));
    sub.subscribe("bp/stuck", QoS::AtLeastOnce);
    let mut publisher = h.client(ConnectSpec::v5("stuck-pub"));
    for n in 0..4u8 {
        publisher
            .publish("bp/stuck", &[n], QoS::AtLeastOnce)
            .unwrap();
    }
    assert!(!publisher.accepts_input());
    h.set_time(ms(1_000));
    let in_flight = sub.transmit_publishes();
    assert_eq!(numbered(&in_flight), [0], "sent, never acknowledged");

    h.set_time(STALL - ms(1));
    let gate = publisher.poll_gate().unwrap();
    assert_eq!(paused_until(&gate), h.at(STALL));
    assert_eq!(stalls(&h), 0);

    h.set_time(STALL);
    assert_open(publisher.poll_gate().unwrap());
    assert!(publisher.accepts_input());
    assert_eq!(stalls(&h), 1);
    assert_eq!(h.broker.router.congested_count(), 0);
    assert!(sub.session().state.lock().congestion.is_stalled());

    // Nobody waits on a stalled session: it fills up, then overflows, counted.
    for n in 4..10u8 {
        publisher
            .publish("bp/stuck", &[n], QoS::AtLeastOnce)
            .unwrap();
        assert!(
            publisher.accepts_input(),
            "not paused by a stalled session ({n})"
        );
    }
    assert_eq!(held(&sub), 8);
    assert_eq!(dropped(&h), 2, "messages 8 and 9 overflowed");
    assert_eq!(pauses(&h), 1);

    // Progress (an acknowledgement) while still above the mark: Congested again.
    h.set_time(ms(3_000));
    sub.puback(&in_flight[0]).unwrap();
    assert!(sub.session().state.lock().congestion.is_congested());
    assert_eq!(h.broker.router.congested_count(), 1);
    publisher
        .publish("bp/stuck", &[10], QoS::AtLeastOnce)
        .unwrap();
    assert!(!publisher.accepts_input(), "held again");
    assert_eq!(pauses(&h), 2);
    assert_eq!(
        paused_until(&publisher.poll_gate().unwrap()),
        h.at(ms(3_000)) + STALL
    );

    // The subscriber catches up: the held one is routed, no further drop.
    let mut received = vec![0];
    let mut in_flight = sub.received_publishes();
    while let Some(publish) = in_flight.pop() {
        received.push(publish.payload[0]);
        sub.puback(&publish).unwrap();
        if publisher
            .poll_gate()
            .is_ok_and(|g| matches!(g, ReadGate::Open))
        {
            in_flight.extend(sub.transmit_publishes());
        }
        in_flight.extend(sub.received_publishes());
    }
    assert_eq!(received, [0, 1, 2, 3, 4, 5, 6, 7, 10]);
    assert_eq!(dropped(&h), 2);
    assert!(publisher.accepts_input());
}

/// Two publishers wait on one subscriber that stops: the stall is counted once, both are
/// released at the deadline, and the PUBLISH held before routing is queued, not dropped.
#[test]
fn a_stall_releases_every_waiting_publisher_and_is_counted_once() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v311("stall-once-sub"));
    sub.subscribe("bp/once", QoS::AtMostOnce);
    let mut first = h.client(ConnectSpec::v311("stall-once-1"));
    for n in 0..4u8 {
        first.publish("bp/once", &[n], QoS::AtMostOnce).unwrap();
    }
    h.set_time(ms(500));
    let mut second = h.client(ConnectSpec::v311("stall-once-2"));
    second.publish("bp/once", &[4], QoS::AtMostOnce).unwrap();
    let mut first_gate = first.poll_gate().unwrap();
    let mut second_gate = second.poll_gate().unwrap();
    assert_eq!(paused_until(&first_gate), h.at(STALL));
    assert_eq!(paused_until(&second_gate), h.at(STALL), "the same deadline");

    h.set_time(STALL);
    assert_open(first.poll_gate().unwrap());
    assert!(
        gate_released(&mut second_gate),
        "released by the first one's finding"
    );
    assert!(gate_released(&mut first_gate));
    assert_open(second.poll_gate().unwrap());
    assert_eq!(stalls(&h), 1, "one stall, however many waited");
    assert_eq!(held(&sub), 5, "the held PUBLISH was queued");
    assert_eq!(dropped(&h), 0);
    assert_eq!(numbered(&sub.transmit_publishes()), [0, 1, 2, 3, 4]);
}

/// A client subscribed to its own topic is never paused by its own session (it must go on
/// reading its acknowledgements); another publisher is.
#[test]
fn publisher_never_waits_on_its_own_session() {
    let h = harness();
    let mut own = h.client(ConnectSpec::v311("self-sub"));
    own.subscribe("own/t", QoS::AtMostOnce);
    for n in 0..10u8 {
        own.publish("own/t", &[n], QoS::AtMostOnce).unwrap();
        assert!(own.accepts_input(), "message {n}");
    }
    assert!(own.session().state.lock().congestion.is_congested());
    assert_open(own.poll_gate().unwrap());
    assert_eq!(pauses(&h), 0);
    assert_eq!(dropped(&h), 2, "its own queue overflowed");

    let mut other = h.client(ConnectSpec::v311("other-pub"));
    other.publish("own/t", &[99], QoS::AtMostOnce).unwrap();
    assert!(!other.accepts_input(), "a different publisher waits");
    assert_eq!(pauses(&h), 1);
}

/// The subscriber's connection ends while publishers wait on it: they are released at once
/// (not at the stall deadline), and a detached session is never congested, so the held
/// PUBLISH, routed now, is queued for it without pausing anybody.
#[test]
fn detaching_the_subscriber_releases_its_publishers() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v5("leaving-sub").session_expiry(60));
    sub.subscribe("bp/leave", QoS::AtLeastOnce);
    let cell = sub.session();
    let mut publisher = h.client(ConnectSpec::v5("leave-pub"));
    for n in 0..4u8 {
        publisher
            .publish("bp/leave", &[n], QoS::AtLeastOnce)
            .unwrap();
    }
    let mut gate = publisher.poll_gate().unwrap();
    let mut second = h.client(ConnectSpec::v5("leave-pub2"));
    second.publish("bp/leave", &[4], QoS::AtLeastOnce).unwrap();
    assert!(!second.accepts_input());

    h.set_time(ms(500));
    sub.finish();
    assert!(gate_released(&mut gate), "released by the detach");
    assert_eq!(h.broker.router.congested_count(), 0);
    assert_open(publisher.poll_gate().unwrap());
    assert_open(second.poll_gate().unwrap());
    assert!(second.accepts_input());
    assert_eq!(
        cell.state.lock().session.held_messages(),
        5,
        "queued offline"
    );
    assert!(!cell.state.lock().congestion.is_congested());
    assert_eq!(stalls(&h), 0);
    assert_eq!(dropped(&h), 0);
}

/// While a publisher is held back its silence is the broker's doing: keep alive does not close
/// it, even when asked with `reading == true`.
#[test]
fn paused_publisher_is_not_closed_for_silence() {
    let h = harness();
    let mut sub = h.client(ConnectSpec::v311("ka-bp-sub"));
    sub.subscribe("bp/ka", QoS::AtMostOnce);
    let mut publisher = h.client(ConnectSpec::v5("ka-bp-pub").keep_alive(1));
    for n in 0..4u8 {
        publisher.publish("bp/ka", &[n], QoS::AtMostOnce).unwrap();
    }
    assert!(!publisher.accepts_input());
    h.set_time(ms(1_600));
    assert_eq!(publisher.handle_timeout(true), Ok(()), "paused, not silent");
    assert!(publisher.received().is_empty(), "no DISCONNECT");
    assert_eq!(publisher.poll_timeout(), h.at(ms(1_600 + 1_500)));
}
