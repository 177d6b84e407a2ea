//! Will messages (MQTT 3.1.1 section 3.1.2.5-3.1.2.7, MQTT 5.0 sections 3.1.2.5-3.1.2.7 and
//! 3.1.3.2).

use crate::common::*;
use hayate_codec::{Connect, Disconnect, Packet, ProtocolVersion, QoS, ReasonCode};
use hayate_testkit::{connect_packet, will, TestBroker};
use std::time::{Duration, Instant};

/// A clean-session CONNECT carrying a will on `will_topic`.
fn connect_with_will(
    version: ProtocolVersion,
    id: &str,
    will_topic: &str,
    qos: QoS,
    retain: bool,
) -> Connect {
    let mut connect = connect_packet(version, id, true);
    connect.will = Some(will(will_topic, b"last words", qos, retain));
    connect
}

/// A v5 CONNECT with a will, a Will Delay Interval and a Session Expiry Interval.
fn v5_delayed_will(id: &str, will_topic: &str, delay: u32, expiry: u32) -> Connect {
    let mut connect =
        connect_with_will(ProtocolVersion::V5, id, will_topic, QoS::AtLeastOnce, false);
    connect.clean_start = false;
    connect.properties.session_expiry_interval = Some(expiry);
    if let Some(will) = connect.will.as_mut() {
        will.properties.will_delay_interval = Some(delay);
    }
    connect
}

/// Asserts that the next message `observer` gets is the will on `will_topic`.
async fn expect_will(
    observer: &mut hayate_testkit::RawClient,
    will_topic: &str,
) -> hayate_codec::Publish {
    let publish = observer.recv_publish().await;
    assert_eq!(&*publish.topic, will_topic, "{publish:?}");
    assert_eq!(&publish.payload[..], b"last words", "{publish:?}");
    publish
}

/// v5 [MQTT-3.1.2-8] / [3.1.1: MQTT-3.1.2-8] The Will Message MUST be published when the
/// Network Connection is subsequently closed (here: the TCP connection drops without
/// DISCONNECT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_8_will_published_on_abnormal_close() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let will_topic = topic("will-drop", version);
        let mut watcher = observer(
            &broker,
            version,
            &cid("will-drop-obs", version),
            &will_topic,
        )
        .await;
        let (client, _) = connect_ok(
            &broker,
            connect_with_will(
                version,
                &cid("will-drop", version),
                &will_topic,
                QoS::AtMostOnce,
                false,
            ),
        )
        .await;
        client.drop_connection().await;
        expect_will(&mut watcher, &will_topic).await;
        disconnect(&mut watcher).await;
    }
}

/// v5 [MQTT-3.14.4-3] / [3.1.1: MQTT-3.14.4-3] On receipt of DISCONNECT (v5: with Reason Code
/// 0x00) the Server MUST discard any Will Message associated with the current Connection
/// without publishing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_14_4_3_will_not_published_after_normal_disconnect() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let will_topic = topic("will-normal", version);
        let mut watcher = observer(
            &broker,
            version,
            &cid("will-normal-obs", version),
            &will_topic,
        )
        .await;
        let (mut client, _) = connect_ok(
            &broker,
            connect_with_will(
                version,
                &cid("will-normal", version),
                &will_topic,
                QoS::AtLeastOnce,
                false,
            ),
        )
        .await;
        disconnect(&mut client).await;
        expect_no_publish(&mut watcher, QUIET).await;
        disconnect(&mut watcher).await;
    }
}

/// v5 section 3.14.2.1: DISCONNECT Reason Code 0x04 (Disconnect with Will Message) — the
/// Client wishes to disconnect but requires that the Server also publishes its Will Message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_14_2_1_disconnect_0x04_publishes_will() {
    let broker = TestBroker::start().await;
    let version = ProtocolVersion::V5;
    let will_topic = "conf/will-0x04";
    let mut watcher = observer(&broker, version, "will-0x04-obs", will_topic).await;
    let (mut client, _) = connect_ok(
        &broker,
        connect_with_will(version, "will-0x04", will_topic, QoS::AtLeastOnce, false),
    )
    .await;
    let disconnect_packet = Disconnect {
        reason_code: ReasonCode::DISCONNECT_WITH_WILL,
        ..Disconnect::default()
    };
    client.send(Packet::Disconnect(disconnect_packet)).await;
    assert!(client.expect_closed().await.is_empty());
    expect_will(&mut watcher, will_topic).await;
    disconnect(&mut watcher).await;
}

/// v5 [MQTT-3.1.2-15] / [3.1.1: MQTT-3.1.2-17] If Will Retain is set to 1, the Server MUST
/// publish the Will Message as a retained message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_15_will_retain_published_as_retained() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let will_topic = topic("will-retain", version);
        let mut watcher = observer(
            &broker,
            version,
            &cid("will-retain-obs", version),
            &will_topic,
        )
        .await;
        let (client, _) = connect_ok(
            &broker,
            connect_with_will(
                version,
                &cid("will-retain", version),
                &will_topic,
                QoS::AtLeastOnce,
                true,
            ),
        )
        .await;
        client.drop_connection().await;
        expect_will(&mut watcher, &will_topic).await;
        disconnect(&mut watcher).await;

        // A later subscriber gets it from the retained store, flagged as retained.
        let mut late = broker
            .client(version, &cid("will-retain-late", version))
            .await;
        assert_eq!(
            late.subscribe(&will_topic, QoS::AtLeastOnce, 1).await,
            vec![1]
        );
        let retained = late.recv_publish().await;
        assert_eq!(&*retained.topic, will_topic);
        assert_eq!(&retained.payload[..], b"last words");
        assert!(
            retained.retain,
            "{version:?}: will must be stored as a retained message"
        );
        disconnect(&mut late).await;
    }
}

/// 3.1.1 section 3.1.2.6 / v5 section 3.1.2.6: Will QoS specifies the QoS level to be used
/// when publishing the Will Message (delivered at min(will QoS, subscription QoS)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_6_will_qos_honoured() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            let name = format!("will-qos{}", qos as u8);
            let will_topic = topic(&name, version);
            let mut watcher = observer(
                &broker,
                version,
                &cid(&format!("{name}-obs"), version),
                &will_topic,
            )
            .await;
            let (client, _) = connect_ok(
                &broker,
                connect_with_will(version, &cid(&name, version), &will_topic, qos, false),
            )
            .await;
            client.drop_connection().await;
            let publish = expect_will(&mut watcher, &will_topic).await;
            assert_eq!(publish.qos, qos, "{version:?}: will QoS must be honoured");
            disconnect(&mut watcher).await;
        }
    }
}

/// v5 section 3.1.3.2.2 / [MQTT-3.1.2-8]: the Server delays publishing the Will Message until
/// the Will Delay Interval has passed or the Session ends, whichever happens first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_2_will_delay_interval_delays_will() {
    let broker = TestBroker::start().await;
    let will_topic = "conf/will-delay";
    let mut watcher = observer(&broker, ProtocolVersion::V5, "will-delay-obs", will_topic).await;
    let (client, _) = connect_ok(&broker, v5_delayed_will("will-delay", will_topic, 2, 60)).await;
    let dropped_at = Instant::now();
    client.drop_connection().await;
    expect_no_publish(&mut watcher, Duration::from_millis(1300)).await;
    expect_will(&mut watcher, will_topic).await;
    let elapsed = dropped_at.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1800),
        "will sent before its delay: {elapsed:?}"
    );
    disconnect(&mut watcher).await;
}

/// v5 [MQTT-3.1.3-9] If a new Network Connection to this Session is made before the Will Delay
/// Interval has passed, the Server MUST NOT send the Will Message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_9_will_not_sent_when_client_reconnects_within_delay() {
    let broker = TestBroker::start().await;
    let will_topic = "conf/will-reconnect";
    let mut watcher = observer(
        &broker,
        ProtocolVersion::V5,
        "will-reconnect-obs",
        will_topic,
    )
    .await;
    let (client, _) = connect_ok(
        &broker,
        v5_delayed_will("will-reconnect", will_topic, 2, 60),
    )
    .await;
    client.drop_connection().await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let mut back = connect_packet(ProtocolVersion::V5, "will-reconnect", false);
    back.properties.session_expiry_interval = Some(60);
    let (mut client, ack) = connect_ok(&broker, back).await;
    assert!(ack.session_present);
    expect_no_publish(&mut watcher, Duration::from_millis(2600)).await;
    disconnect(&mut client).await;
    expect_no_publish(&mut watcher, QUIET).await;
    disconnect(&mut watcher).await;
}

/// v5 section 3.1.2.5 / 3.1.3.2.2: the Will Message is published when the Will Delay Interval
/// has elapsed or the Session ends, whichever first — a Session Expiry Interval shorter than
/// the delay sends it when the session expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_5_will_sent_when_session_expires_before_delay() {
    let broker = TestBroker::start().await;
    let will_topic = "conf/will-expiry";
    let mut watcher = observer(&broker, ProtocolVersion::V5, "will-expiry-obs", will_topic).await;
    let (client, _) = connect_ok(&broker, v5_delayed_will("will-expiry", will_topic, 30, 1)).await;
    let dropped_at = Instant::now();
    client.drop_connection().await;
    expect_will(&mut watcher, will_topic).await;
    let elapsed = dropped_at.elapsed();
    assert!(
        elapsed >= Duration::from_millis(800),
        "will sent before the session ended: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(4),
        "will not sent when the session ended: {elapsed:?}"
    );
    disconnect(&mut watcher).await;
}

/// v5 [MQTT-3.1.2-22] / [3.1.1: MQTT-3.1.2-24] a keep-alive timeout closes the connection "as if
/// the network had failed", so v5 [MQTT-3.1.2-8] / [3.1.1: MQTT-3.1.2-8] the Will is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_8_will_published_on_keep_alive_timeout() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let will_topic = topic("will-keepalive", version);
        let mut watcher = observer(
            &broker,
            version,
            &cid("will-keepalive-obs", version),
            &will_topic,
        )
        .await;
        let mut connect = connect_with_will(
            version,
            &cid("will-keepalive", version),
            &will_topic,
            QoS::AtLeastOnce,
            false,
        );
        connect.keep_alive = 1;
        let (mut client, _) = connect_ok(&broker, connect).await;
        expect_will(&mut watcher, &will_topic).await;
        assert_closed_with(&mut client, Some(0x8D)).await;
        disconnect(&mut watcher).await;
    }
}

/// [MQTT-3.1.4-3] / [3.1.1: MQTT-3.1.4-2] the Server disconnects an existing Client whose
/// ClientId connects again; that is not a DISCONNECT from the client, so [MQTT-3.1.2-8] its Will
/// is published (v5 §3.1.4: with a Will Delay Interval of 0 the Will is sent because the
/// Network Connection is closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_4_3_will_published_on_takeover() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        for clean in [true, false] {
            let id = cid(&format!("will-takeover-{clean}"), version);
            let will_topic = topic(&format!("will-takeover-{clean}"), version);
            let mut watcher = observer(
                &broker,
                version,
                &cid("will-takeover-obs", version),
                &will_topic,
            )
            .await;
            let mut first = connect_with_will(version, &id, &will_topic, QoS::AtLeastOnce, false);
            first.clean_start = clean;
            if version.is_v5() && !clean {
                first.properties.session_expiry_interval = Some(60);
            }
            let (mut old, _) = connect_ok(&broker, first).await;
            let mut second = connect_packet(version, &id, clean);
            second.properties.session_expiry_interval = if version.is_v5() && !clean {
                Some(60)
            } else {
                None
            };
            let (mut new, _) = connect_ok(&broker, second).await;
            assert_closed_with(&mut old, Some(0x8E)).await;
            expect_will(&mut watcher, &will_topic).await;
            disconnect(&mut new).await;
            expect_no_publish(&mut watcher, QUIET).await;
            disconnect(&mut watcher).await;
        }
    }
}

/// v5 [MQTT-3.1.2-8] / [3.1.1: MQTT-3.1.2-8]: a connection the Server closes because of a
/// protocol violation was not ended by DISCONNECT, so its Will Message is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_8_will_published_when_server_closes_for_protocol_error() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let will_topic = topic("will-violation", version);
        let mut watcher = observer(
            &broker,
            version,
            &cid("will-violation-obs", version),
            &will_topic,
        )
        .await;
        let (mut client, _) = connect_ok(
            &broker,
            connect_with_will(
                version,
                &cid("will-violation", version),
                &will_topic,
                QoS::AtLeastOnce,
                false,
            ),
        )
        .await;
        // PUBLISH with QoS 3: malformed.
        client
            .send_raw(&raw_packet(
                0x36,
                &[
                    &field(b"x")[..],
                    &[0, 1],
                    if version.is_v5() { &[0][..] } else { &[] },
                ]
                .concat(),
            ))
            .await;
        assert_closed_with(&mut client, Some(0x81)).await;
        expect_will(&mut watcher, &will_topic).await;
        disconnect(&mut watcher).await;
    }
}

/// v5 section 3.1.4 / [MQTT-3.1.3-9]: on takeover with Clean Start 0 the session continues on
/// the new connection, so a will with a Will Delay Interval is not sent (the new connection
/// came before the delay passed); with Clean Start 1 the old session ends and its will is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_3_9_takeover_with_will_delay() {
    let broker = TestBroker::start().await;
    let will_topic = "conf/will-takeover-delay";
    let mut watcher = observer(
        &broker,
        ProtocolVersion::V5,
        "will-takeover-delay-obs",
        will_topic,
    )
    .await;

    let (mut old, _) = connect_ok(&broker, v5_delayed_will("wtd", will_topic, 2, 60)).await;
    let mut resume = connect_packet(ProtocolVersion::V5, "wtd", false);
    resume.properties.session_expiry_interval = Some(60);
    let (mut new, ack) = connect_ok(&broker, resume).await;
    assert!(ack.session_present);
    assert_closed_with(&mut old, Some(0x8E)).await;
    expect_no_publish(&mut watcher, Duration::from_millis(2600)).await;

    // New owner (no will) leaves; a fresh connection with a delayed will is taken over by a
    // Clean Start 1 connection: the old session ends, so its will goes out at once.
    disconnect(&mut new).await;
    let (mut old, _) = connect_ok(&broker, v5_delayed_will("wtd2", will_topic, 30, 60)).await;
    let taken_at = Instant::now();
    let (mut new, _) = connect_ok(&broker, connect_packet(ProtocolVersion::V5, "wtd2", true)).await;
    assert_closed_with(&mut old, Some(0x8E)).await;
    expect_will(&mut watcher, will_topic).await;
    assert!(taken_at.elapsed() < Duration::from_secs(5));
    disconnect(&mut new).await;
    disconnect(&mut watcher).await;
}
