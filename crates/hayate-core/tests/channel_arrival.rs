//! Arrival order across connections (`docs/design/arrival-order.md`): a SUBSCRIBE that reached
//! the broker before another client's PUBLISH gets that message even when the PUBLISH was
//! routed first (as when two worker threads handle the two connections at once). Each test
//! stamps input with explicit arrivals and handles it in the "wrong" order.

use hayate_codec::{Packet, QoS};
use hayate_core::Arrival;
use hayate_testkit::core::{ConnectSpec, CoreHarness};
use hayate_testkit::publish_packet;

fn at(nanos: u64) -> Arrival {
    Arrival::from_nanos(nanos)
}

#[test]
fn a_subscription_gets_a_message_that_arrived_after_it_but_was_routed_first() {
    let h = CoreHarness::new();
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    // The PUBLISH arrived at 2_000 and is routed first; the SUBSCRIBE arrived at 1_000.
    publisher.arriving_at(at(2_000));
    publisher
        .publish("order/x", b"late", QoS::AtLeastOnce)
        .expect("publish");
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtLeastOnce), vec![1]);
    let got = subscriber.received_publishes();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(&*got[0].topic, "order/x");
    assert_eq!(&got[0].payload[..], b"late");
    assert_eq!(got[0].qos, QoS::AtLeastOnce);
    assert!(!got[0].retain);
    assert_eq!(
        hayate_core::Stats::get(&h.broker.stats.arrival_catch_up),
        1,
        "counted"
    );
    // Later messages arrive the usual way, once.
    publisher.arriving_at(at(3_000));
    publisher
        .publish("order/y", b"next", QoS::AtMostOnce)
        .expect("publish");
    let got = subscriber.transmit_publishes();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(&*got[0].topic, "order/y");
}

#[test]
fn a_message_that_arrived_before_the_subscribe_is_not_delivered() {
    let h = CoreHarness::new();
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(1_000));
    publisher
        .publish("order/x", b"early", QoS::AtMostOnce)
        .expect("publish");
    // 10 ms later: beyond the 5 ms by which two sockets' stamps may be out of order.
    subscriber.arriving_at(at(10_001_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert!(subscriber.received_publishes().is_empty());
}

#[test]
fn a_message_stamped_within_the_slack_before_the_subscribe_is_caught_up() {
    let h = CoreHarness::new();
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(1_000));
    publisher
        .publish("order/x", b"same moment", QoS::AtMostOnce)
        .expect("publish");
    // 3 ms later: the stamps of two sockets can be this far out of order (arrival.rs).
    subscriber.arriving_at(at(3_001_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert_eq!(subscriber.received_publishes().len(), 1);
}

#[test]
fn a_message_routed_after_the_subscription_is_delivered_once() {
    let h = CoreHarness::new();
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    publisher.arriving_at(at(2_000));
    publisher
        .publish("order/x", b"m", QoS::AtMostOnce)
        .expect("publish");
    assert_eq!(subscriber.transmit_publishes().len(), 1);
    // A second, overlapping subscription that arrived before the message does not bring it
    // again: the first one already delivered it.
    subscriber.arriving_at(at(1_500));
    assert_eq!(subscriber.subscribe("order/x", QoS::AtMostOnce), vec![0]);
    assert!(subscriber.received_publishes().is_empty());
}

#[test]
fn a_retained_message_comes_once_as_retained() {
    let h = CoreHarness::new();
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(2_000));
    publisher
        .send(Packet::Publish(publish_packet(
            "order/r",
            b"kept",
            QoS::AtMostOnce,
            true,
            None,
        )))
        .expect("publish");
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    let got = subscriber.received_publishes();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].retain, "sent from the retained store");
}

#[test]
fn the_record_is_bounded_by_its_window() {
    let h = CoreHarness::with_config(|config| config.arrival_window_ms = 100);
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(2_000));
    publisher
        .publish("order/x", b"m", QoS::AtMostOnce)
        .expect("publish");
    // A message 200 ms later pushes the first one out of the record.
    publisher.arriving_at(at(2_000 + 200_000_000));
    publisher
        .publish("elsewhere", b"m", QoS::AtMostOnce)
        .expect("publish");
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert!(subscriber.received_publishes().is_empty());
}

#[test]
fn a_zero_window_turns_the_catch_up_off() {
    let h = CoreHarness::with_config(|config| config.arrival_window_ms = 0);
    let mut subscriber = h.client(ConnectSpec::v5("sub"));
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(2_000));
    publisher
        .publish("order/x", b"m", QoS::AtMostOnce)
        .expect("publish");
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert!(subscriber.received_publishes().is_empty());
}

#[test]
fn a_clients_own_message_from_just_before_its_subscribe_is_not_delivered() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("self"));
    client.arriving_at(at(1_000));
    client
        .publish("order/x", b"mine, earlier", QoS::AtMostOnce)
        .expect("publish");
    // 100 µs later on the same connection: its own stamps are in order, no slack.
    client.arriving_at(at(101_000));
    assert_eq!(client.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert!(client.received_publishes().is_empty());
}

/// A message that arrived before the subscriber's CONNECT is never caught up, even within the
/// stamps' slack of its SUBSCRIBE: its client could not have expected it (a publisher got its
/// PUBACK, then another client connected and subscribed, all within 200 µs). One that arrived
/// after the CONNECT still is.
#[test]
fn a_message_that_arrived_before_the_subscribers_connect_is_not_caught_up() {
    let h = CoreHarness::new();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(1_000));
    publisher
        .publish("order/x", b"before the connect", QoS::AtMostOnce)
        .expect("publish");
    let mut late = h.channel();
    late.arriving_at(at(50_000));
    late.connect(ConnectSpec::v5("late"));
    late.arriving_at(at(101_000));
    assert_eq!(late.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert!(late.received_publishes().is_empty());

    let mut early = h.channel();
    early.arriving_at(at(500));
    early.connect(ConnectSpec::v5("early"));
    early.arriving_at(at(101_000));
    assert_eq!(early.subscribe("order/#", QoS::AtMostOnce), vec![0]);
    assert_eq!(early.received_publishes().len(), 1, "within the slack");
}

/// A SUBSCRIBE that runs a cluster fence (the client's session started while the node that had
/// its old one was away) catches up on nothing: what was routed here before it also went to
/// the away node's queue, into the old session that comes back merged; caught up as well, the
/// long-down soak delivered it twice (docs/CLUSTER.md, "After a kill -9, past the wait"). The
/// same order without a fence catches up (the first test of this file).
#[test]
fn a_fenced_subscribe_catches_up_on_nothing() {
    let (h, routes) = CoreHarness::clustered();
    routes.await_fence(
        std::sync::Arc::from("sub"),
        hayate_core::cluster::Fence {
            away: vec![std::sync::Arc::from("n1")],
            at: at(500),
            until: h.now() + std::time::Duration::from_secs(60),
        },
    );
    let mut subscriber = h.client(
        ConnectSpec::v5("sub")
            .clean_start(false)
            .session_expiry(600),
    );
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    publisher.arriving_at(at(2_000));
    publisher
        .publish("order/x", b"late", QoS::AtLeastOnce)
        .expect("publish");
    subscriber.arriving_at(at(1_000));
    assert_eq!(subscriber.subscribe("order/#", QoS::AtLeastOnce), vec![1]);
    assert!(subscriber.received_publishes().is_empty());
    assert_eq!(hayate_core::Stats::get(&h.broker.stats.arrival_catch_up), 0);
}
