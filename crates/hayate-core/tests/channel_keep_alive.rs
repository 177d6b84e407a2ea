//! The channel's clocks with injected time: the connect timeout and keep alive (1.5 × Keep
//! Alive, v5 [MQTT-3.1.2-22]). No sockets, no runtime, no sleeps: the harness moves the clock.

use hayate_codec::{Packet, ReasonCode};
use hayate_core::{CloseReason, ConnectionLimits};
use hayate_testkit::core::{ConnectSpec, CoreHarness};
use std::time::Duration;

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// No CONNECT: the connection is closed at the listener's connect timeout, not a moment before,
/// with nothing written (a connect timeout owes the client nothing).
#[test]
fn connect_timeout_closes_at_the_deadline_not_before() {
    let h = CoreHarness::new();
    let mut conn = h.channel_with(ConnectionLimits {
        connect_timeout: secs(3),
        ..ConnectionLimits::default()
    });
    assert_eq!(conn.poll_timeout(), h.at(secs(3)));
    h.set_time(ms(2_999));
    assert_eq!(conn.handle_timeout(true), Ok(()), "not before the deadline");
    h.set_time(secs(3));
    let close = conn
        .handle_timeout(true)
        .expect_err("closed at the deadline");
    assert_eq!(close.reason, CloseReason::ConnectTimeout);
    assert_eq!(close.code, ReasonCode::MAXIMUM_CONNECT_TIME);
    assert!(!close.lingers());
    assert!(conn.received().is_empty(), "nothing is written");
}

/// Bytes of an incomplete CONNECT do not move the connect deadline (a slowloris client
/// trickling bytes is still cut off), and the default timeout is 10 s.
#[test]
fn connect_timeout_is_not_moved_by_partial_input() {
    let h = CoreHarness::new();
    let mut conn = h.channel();
    assert_eq!(
        conn.poll_timeout(),
        h.at(secs(10)),
        "default connect timeout"
    );
    for second in 1..10 {
        h.set_time(secs(second));
        conn.on_input(1);
        assert_eq!(conn.handle_timeout(true), Ok(()));
    }
    assert_eq!(conn.poll_timeout(), h.at(secs(10)));
    h.set_time(secs(10));
    let close = conn.handle_timeout(true).expect_err("closed");
    assert_eq!(close.reason, CloseReason::ConnectTimeout);
}

/// v5, keep alive 10 s: closed at 15 s of silence with DISCONNECT 0x8D, not at 14.999 s.
#[test]
fn v5_keep_alive_closes_after_one_and_a_half_periods_with_disconnect() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ka-v5").keep_alive(10));
    assert_eq!(client.channel.keep_alive_timeout(), Some(secs(15)));
    assert_eq!(client.poll_timeout(), h.at(secs(15)));
    h.set_time(ms(14_999));
    assert_eq!(client.handle_timeout(true), Ok(()));
    assert!(client.received().is_empty(), "nothing written before");
    h.set_time(secs(15));
    let close = client.handle_timeout(true).expect_err("closed");
    assert_eq!(close.reason, CloseReason::KeepAliveTimeout);
    assert_eq!(close.code, ReasonCode::KEEP_ALIVE_TIMEOUT);
    match client.received().as_slice() {
        [Packet::Disconnect(disconnect)] => {
            assert_eq!(disconnect.reason_code, ReasonCode::KEEP_ALIVE_TIMEOUT)
        }
        other => panic!("expected one DISCONNECT 0x8D, got {other:?}"),
    }
    assert!(!client.channel.is_connected());
}

/// v3.1.1: the same deadline, but v3 has no server DISCONNECT: nothing is written.
#[test]
fn v3_keep_alive_closes_without_disconnect() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v311("ka-v3").keep_alive(10));
    h.set_time(ms(14_999));
    assert_eq!(client.handle_timeout(true), Ok(()));
    h.set_time(secs(15));
    let close = client.handle_timeout(true).expect_err("closed");
    assert_eq!(close.reason, CloseReason::KeepAliveTimeout);
    assert!(client.received().is_empty(), "no DISCONNECT for v3");
}

/// Input at 9 s moves the deadline to 9 + 15 s; the old deadline passes harmlessly.
#[test]
fn input_moves_the_keep_alive_deadline() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ka-input").keep_alive(10));
    h.set_time(secs(9));
    client.send(Packet::PingReq).expect("PINGREQ handled");
    assert!(matches!(client.received().as_slice(), [Packet::PingResp]));
    assert_eq!(client.poll_timeout(), h.at(secs(24)));
    h.set_time(secs(15));
    assert_eq!(client.handle_timeout(true), Ok(()), "the old deadline");
    // Bytes without a whole packet count as input too.
    h.set_time(ms(23_999));
    client.on_input(3);
    assert_eq!(client.handle_timeout(true), Ok(()));
    assert_eq!(client.poll_timeout(), h.at(ms(38_999)));
    h.set_time(ms(38_998));
    assert_eq!(client.handle_timeout(true), Ok(()));
    h.set_time(ms(38_999));
    let close = client.handle_timeout(true).expect_err("closed");
    assert_eq!(close.reason, CloseReason::KeepAliveTimeout);
}

/// While the transport is not reading (its own output is backlogged) silence is not the
/// client's: the deadline restarts from then instead of closing.
#[test]
fn silence_while_not_reading_does_not_count() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ka-not-reading").keep_alive(10));
    h.set_time(secs(15));
    assert_eq!(client.handle_timeout(false), Ok(()), "not reading: kept");
    assert!(client.received().is_empty());
    assert_eq!(client.poll_timeout(), h.at(secs(30)));
    h.set_time(ms(29_999));
    assert_eq!(client.handle_timeout(true), Ok(()));
    h.set_time(secs(30));
    let close = client
        .handle_timeout(true)
        .expect_err("closed once reading again");
    assert_eq!(close.reason, CloseReason::KeepAliveTimeout);
}

/// Keep alive 0 turns the mechanism off: no deadline within a day, and the channel stays
/// open through hours of silence.
#[test]
fn keep_alive_zero_does_not_time_out() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ka-zero").keep_alive(0));
    assert_eq!(client.channel.keep_alive_timeout(), None);
    assert!(client.poll_timeout() >= h.at(secs(24 * 3600)));
    for hours in [1, 6, 23] {
        h.set_time(secs(hours * 3600));
        assert_eq!(client.handle_timeout(true), Ok(()), "{hours} h");
    }
    assert!(client.channel.is_connected());
    assert!(client.received().is_empty());
}

/// Keep alive 0 must never close, however long the silence. The channel's "never" is a
/// deadline 24 h after the last input, and `handle_timeout` at that deadline closes the
/// connection with Keep Alive Timeout (0x8D) although the client turned keep alive off
/// (v5 3.1.2.10: "A Keep Alive value of 0 has the effect of turning off the Keep Alive
/// mechanism"). The server arms its timer at `poll_timeout()`, so it does this to every idle
/// keep-alive-0 client after a day.
#[test]
fn keep_alive_zero_never_times_out_even_after_a_day() {
    let h = CoreHarness::new();
    let mut client = h.client(ConnectSpec::v5("ka-zero-day").keep_alive(0));
    h.set_time(client.poll_timeout() - h.clock.t0());
    assert_eq!(client.handle_timeout(true), Ok(()), "at the far deadline");
    h.advance(secs(24 * 3600));
    assert_eq!(client.handle_timeout(true), Ok(()), "two days");
    assert!(client.received().is_empty(), "no DISCONNECT");
}

/// The keep-alive period runs from the last packet received, and CONNECT is one: a client
/// whose CONNECT arrives 8 s after the TCP connection opened, with keep alive 5, may stay
/// silent until 8 + 7.5 s. The channel's keep-alive clock still stands at the moment the
/// connection opened (`on_input` does not move it before CONNECT completes, and
/// `complete_connect` does not set it), so the deadline is 0 + 7.5 s, already past: the
/// server's first timer after CONNACK closes the client with 0x8D.
#[test]
fn keep_alive_runs_from_connect_not_from_the_connection_opening() {
    let h = CoreHarness::new();
    let mut conn = h.channel();
    h.set_time(secs(8));
    conn.connect(ConnectSpec::v5("ka-late-connect").keep_alive(5));
    assert_eq!(
        conn.poll_timeout(),
        h.at(ms(15_500)),
        "deadline 7.5 s after CONNECT"
    );
    assert_eq!(conn.handle_timeout(true), Ok(()), "just connected");
    assert!(
        conn.received().is_empty(),
        "no DISCONNECT right after CONNACK"
    );
}
