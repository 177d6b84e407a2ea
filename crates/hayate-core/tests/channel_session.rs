//! Sessions across connections with injected time: session expiry, will delay and takeover,
//! driven through `Channel` and `Broker::run_timers` without sockets or sleeps.

use hayate_codec::{Disconnect, Packet, Properties, ProtocolVersion, Publish, QoS, ReasonCode};
use hayate_core::CloseReason;
use hayate_testkit::core::{ConnectSpec, CoreHarness, TestChannel};
use std::sync::Arc;
use std::time::Duration;

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn payloads(publishes: &[Publish]) -> Vec<&[u8]> {
    publishes.iter().map(|p| &p.payload[..]).collect()
}

/// A v5 client subscribed to `will/#`, to see wills arrive.
fn watcher(h: &CoreHarness) -> TestChannel {
    let mut watcher = h.client(ConnectSpec::v5("watcher"));
    assert_eq!(watcher.subscribe("will/#", QoS::AtMostOnce), vec![0]);
    watcher
}

// ----- session expiry ------------------------------------------------------------------------

/// A session with expiry 30 s, detached at 5 s, is still there at 34.999 s and gone at 35 s,
/// subscriptions and all.
#[test]
fn session_expires_at_its_interval_not_before() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("expiring").session_expiry(30));
    client.subscribe("exp/t", QoS::AtLeastOnce);
    let cell = client.session();
    h.set_time(secs(5));
    client.finish();
    assert!(
        h.session("expiring").is_some(),
        "kept while it has not expired"
    );
    assert!(h.broker.pending_timers() >= 1, "an expiry deadline is set");

    h.set_time(ms(34_999));
    h.run_timers();
    assert!(h.session("expiring").is_some(), "not before the interval");
    assert_eq!(h.broker.router.subscription_count(), 1);

    h.set_time(secs(35));
    h.run_timers();
    assert!(h.session("expiring").is_none(), "gone at the interval");
    assert_eq!(h.broker.router.subscription_count(), 0);
    assert!(cell.state.lock().ended);
    assert_eq!(h.broker.pending_timers(), 0);
}

/// Reconnecting before expiry resumes the session (Session Present, same session, messages
/// queued while offline delivered) and cancels its expiry; the next detach starts a new one.
#[test]
fn reconnect_before_expiry_resumes_the_session_and_cancels_the_expiry() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("resumed").session_expiry(30));
    client.subscribe("res/t", QoS::AtLeastOnce);
    let cell = client.session();
    h.set_time(secs(5));
    client.finish();

    h.set_time(secs(10));
    let mut publisher = h.client(ConnectSpec::v5("res-pub"));
    publisher
        .publish("res/t", b"while offline", QoS::AtLeastOnce)
        .expect("published");

    h.set_time(secs(20));
    let mut again = h.channel();
    let connack = again.connect(
        ConnectSpec::v5("resumed")
            .clean_start(false)
            .session_expiry(30),
    );
    assert!(connack.session_present, "resumed [MQTT-3.2.2-3]");
    assert!(Arc::ptr_eq(&again.session(), &cell), "the same session");
    let resumed = again.received_publishes();
    assert_eq!(payloads(&resumed), [b"while offline"]);
    again.puback(&resumed[0]).expect("acknowledged");

    // The first detach's deadline (35 s) passes: the session stays, subscribed.
    h.set_time(secs(36));
    h.run_timers();
    assert!(
        h.session("resumed").is_some(),
        "expiry cancelled by the reconnect"
    );
    publisher
        .publish("res/t", b"after", QoS::AtMostOnce)
        .expect("published");
    assert_eq!(payloads(&again.transmit_publishes()), [b"after"]);

    // Detached again at 40 s: expires at 70 s.
    h.set_time(secs(40));
    again.finish();
    h.set_time(ms(69_999));
    h.run_timers();
    assert!(h.session("resumed").is_some());
    h.set_time(secs(70));
    h.run_timers();
    assert!(h.session("resumed").is_none());
}

/// Session expiry 0 (the v5 default): the session ends with the connection.
#[test]
fn session_without_expiry_ends_with_the_connection() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ephemeral"));
    client.subscribe("eph/t", QoS::AtMostOnce);
    client.finish();
    assert!(h.session("ephemeral").is_none());
    assert_eq!(h.broker.router.subscription_count(), 0);
    assert_eq!(h.broker.pending_timers(), 0);
}

// ----- will delay ----------------------------------------------------------------------------

/// Will delay 5 s, session expiry 60 s, connection lost at 2 s: the will reaches a subscriber
/// only once 7 s have passed, exactly once.
#[test]
fn delayed_will_is_published_once_the_delay_passes() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    let mut client = h.client(
        ConnectSpec::v5("willing")
            .session_expiry(60)
            .will("will/willing", b"gone", QoS::AtMostOnce)
            .will_delay(5),
    );
    h.set_time(secs(2));
    client.finish();
    h.run_timers();
    assert!(watcher.transmit().is_empty(), "not at the disconnect");

    h.set_time(ms(6_999));
    h.run_timers();
    assert!(!watcher.woken());
    assert!(watcher.transmit().is_empty(), "not before the delay");

    h.set_time(secs(7));
    h.run_timers();
    assert!(watcher.woken(), "the subscriber's doorbell rings");
    let wills = watcher.transmit_publishes();
    assert_eq!(wills.len(), 1);
    assert_eq!(&*wills[0].topic, "will/willing");
    assert_eq!(&wills[0].payload[..], b"gone");

    // Later timers, the session's end included, do not send it again.
    h.set_time(secs(62));
    h.run_timers();
    assert!(h.session("willing").is_none(), "expired at 2 + 60 s");
    assert!(watcher.transmit().is_empty(), "published once");
}

/// Reconnecting to the session within the will delay cancels the will [MQTT-3.1.3-9].
#[test]
fn reconnect_within_the_will_delay_cancels_the_will() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    let mut client = h.client(
        ConnectSpec::v5("returning")
            .session_expiry(60)
            .will("will/returning", b"gone", QoS::AtMostOnce)
            .will_delay(5),
    );
    h.set_time(secs(2));
    client.finish();
    h.set_time(secs(4));
    let mut again = h.channel();
    assert!(
        again
            .connect(
                ConnectSpec::v5("returning")
                    .clean_start(false)
                    .session_expiry(60)
            )
            .session_present
    );
    for t in [7, 30, 100] {
        h.set_time(secs(t));
        h.run_timers();
        assert!(watcher.transmit().is_empty(), "no will at {t} s");
    }
    assert!(h.session("returning").is_some(), "still attached");
}

/// A clean-start reconnect within the delay does not return to the session: it ends the old
/// one, and a will still pending is sent as the session ends [MQTT-3.1.3-9].
#[test]
fn clean_start_within_the_will_delay_ends_the_session_and_sends_the_will() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    let mut client = h.client(
        ConnectSpec::v5("restarting")
            .session_expiry(60)
            .will("will/restarting", b"gone", QoS::AtMostOnce)
            .will_delay(5),
    );
    let old = client.session();
    h.set_time(secs(2));
    client.finish();
    h.set_time(secs(3));
    let again = h.client(ConnectSpec::v5("restarting").session_expiry(60));
    assert!(!Arc::ptr_eq(&again.session(), &old), "a new session");
    assert!(old.state.lock().ended);
    assert_eq!(payloads(&watcher.transmit_publishes()), [b"gone"]);
    h.set_time(secs(10));
    h.run_timers();
    assert!(watcher.transmit().is_empty(), "not a second time");
}

/// Session expiry 2 s with will delay 5 s: the will goes out when the session ends, at 2 s.
#[test]
fn will_is_published_at_session_end_when_expiry_is_shorter_than_the_delay() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    let mut client = h.client(
        ConnectSpec::v5("short-lived")
            .session_expiry(2)
            .will("will/short-lived", b"gone", QoS::AtMostOnce)
            .will_delay(5),
    );
    h.set_time(secs(1));
    client.finish();
    h.set_time(ms(2_999));
    h.run_timers();
    assert!(watcher.transmit().is_empty());
    assert!(h.session("short-lived").is_some());
    h.set_time(secs(3));
    h.run_timers();
    assert_eq!(payloads(&watcher.transmit_publishes()), [b"gone"]);
    assert!(h.session("short-lived").is_none(), "the session ended too");
    h.set_time(secs(10));
    h.run_timers();
    assert!(watcher.transmit().is_empty(), "once");
}

/// A normal DISCONNECT discards the will [MQTT-3.1.2-10]; 0x04 asks for it.
#[test]
fn normal_disconnect_discards_the_will_and_0x04_keeps_it() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    for (id, code, expected) in [
        ("polite", ReasonCode::NORMAL_DISCONNECTION, 0),
        ("with-will", ReasonCode::DISCONNECT_WITH_WILL, 1),
    ] {
        let mut client = h.client(
            ConnectSpec::v5(id)
                .session_expiry(60)
                .will("will/x", b"gone", QoS::AtMostOnce)
                .will_delay(1),
        );
        let close = client
            .send(Packet::Disconnect(Disconnect {
                reason_code: code,
                properties: Properties::default(),
            }))
            .expect_err("DISCONNECT ends the connection");
        assert_eq!(close.reason, CloseReason::ClientDisconnect);
        client.finish();
        h.advance(secs(2));
        h.run_timers();
        assert_eq!(watcher.transmit_publishes().len(), expected, "{id}");
    }
}

// ----- takeover ------------------------------------------------------------------------------

/// A second connection with the same client id takes the session over: the first is told
/// (doorbell), its next call fails with SessionTakenOver and writes DISCONNECT 0x8E; the new
/// one gets the message in flight again (DUP) and the one still queued; the first one's end
/// leaves the session alone.
#[test]
fn takeover_closes_the_first_connection_and_moves_the_session() {
    let h = CoreHarness::new();
    let mut first = h.client(ConnectSpec::v5("device").session_expiry(60));
    first.subscribe("tk/t", QoS::AtLeastOnce);
    let cell = first.session();
    let mut publisher = h.client(ConnectSpec::v5("tk-pub"));
    publisher
        .publish("tk/t", b"m1", QoS::AtLeastOnce)
        .expect("published");
    let in_flight = first.transmit_publishes();
    assert_eq!(payloads(&in_flight), [b"m1"]);
    // m2 is queued: the first connection does not transmit again.
    publisher
        .publish("tk/t", b"m2", QoS::AtLeastOnce)
        .expect("published");
    assert!(first.woken());

    h.set_time(secs(1));
    let mut second = h.channel();
    let connack = second.connect(
        ConnectSpec::v5("device")
            .clean_start(false)
            .session_expiry(60),
    );
    assert!(connack.session_present);
    assert!(Arc::ptr_eq(&second.session(), &cell));
    let moved = second.received_publishes();
    assert_eq!(payloads(&moved), [&b"m1"[..], &b"m2"[..]]);
    assert!(moved[0].dup, "the unacknowledged one is resent with DUP");
    assert_eq!(moved[0].packet_id, in_flight[0].packet_id);
    assert!(!moved[1].dup);

    assert!(first.woken(), "the first connection's doorbell rings");
    let close = first.poll_transmit().expect_err("taken over");
    assert_eq!(close.reason, CloseReason::SessionTakenOver);
    assert_eq!(close.code, ReasonCode::SESSION_TAKEN_OVER);
    match first.received().as_slice() {
        [Packet::Disconnect(d)] => assert_eq!(d.reason_code, ReasonCode::SESSION_TAKEN_OVER),
        other => panic!("expected DISCONNECT 0x8E, got {other:?}"),
    }
    first.finish();

    // The session is the second connection's, untouched by the first one's end.
    assert!(h.session("device").is_some_and(|c| Arc::ptr_eq(&c, &cell)));
    assert_eq!(h.broker.pending_timers(), 0, "no expiry started");
    for publish in &moved {
        second.puback(publish).expect("acknowledged");
    }
    publisher
        .publish("tk/t", b"m3", QoS::AtLeastOnce)
        .expect("published");
    assert_eq!(payloads(&second.transmit_publishes()), [b"m3"]);
}

/// v3.1.1 takeover: the first connection closes with SessionTakenOver, without DISCONNECT.
#[test]
fn v3_takeover_closes_without_disconnect() {
    let h = CoreHarness::new();
    let mut first = h.client(ConnectSpec::v311("v3-device").clean_start(false));
    let _second = h.client(ConnectSpec::v311("v3-device").clean_start(false));
    assert!(first.woken());
    let close = first.poll_transmit().expect_err("taken over");
    assert_eq!(close.reason, CloseReason::SessionTakenOver);
    assert!(first.received().is_empty());
    assert_eq!(first.channel.version(), ProtocolVersion::V311);
}

/// The replaced connection's will (no delay) is published at the takeover, once; a will with
/// a delay is not (the client is back before it ran out).
#[test]
fn takeover_publishes_the_old_connections_will_unless_delayed() {
    let h = CoreHarness::new();
    let mut watcher = watcher(&h);
    for (id, delay, expected) in [("no-delay", 0, 1), ("delayed", 5, 0)] {
        let mut first = h.client(
            ConnectSpec::v5(id)
                .session_expiry(60)
                .will("will/takeover", b"old", QoS::AtMostOnce)
                .will_delay(delay),
        );
        let _second = h.client(ConnectSpec::v5(id).clean_start(false).session_expiry(60));
        assert!(first.poll_transmit().is_err());
        first.finish();
        h.advance(secs(10));
        h.run_timers();
        assert_eq!(watcher.transmit_publishes().len(), expected, "{id}");
    }
}
