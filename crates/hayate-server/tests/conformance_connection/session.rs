//! Session state: Clean Session / Clean Start, Session Present, queued and in-flight messages,
//! Session Expiry Interval, session takeover.

use crate::common::*;
use hayate_codec::{Disconnect, Packet, ProtocolVersion, PubResp, QoS};
use hayate_testkit::{connect_packet, TestBroker};
use std::time::Duration;

/// Connects with a persistent session, subscribes to `filter` at `qos` and disconnects
/// normally, leaving the session (and subscription) on the broker.
async fn park_session(
    broker: &TestBroker,
    version: ProtocolVersion,
    id: &str,
    filter: &str,
    qos: QoS,
) {
    let (mut client, _) = connect_ok(broker, persistent_connect(version, id)).await;
    assert_eq!(client.subscribe(filter, qos, 1).await, vec![qos as u8]);
    disconnect(&mut client).await;
}

/// v5 [MQTT-3.2.2-2] / [3.1.1: MQTT-3.2.2-1] If the Server accepts a connection with Clean
/// Start / CleanSession set to 1, it MUST set Session Present to 0 in the CONNACK; v5
/// [MQTT-3.1.2-4] / [3.1.1: MQTT-3.1.2-6] any existing Session MUST be discarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_2_clean_start_session_present_0_and_old_session_discarded() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let id = cid("clean", version);
        let filter = topic("clean", version);
        park_session(&broker, version, &id, &filter, QoS::AtLeastOnce).await;

        let (mut client, ack) = connect_ok(&broker, connect_packet(version, &id, true)).await;
        assert!(
            !ack.session_present,
            "{version:?}: Clean Start 1 must give Session Present 0"
        );
        // The old subscription is gone with the old session.
        let mut publisher = broker.client(version, &cid("clean-pub", version)).await;
        publisher
            .publish(&filter, b"x", QoS::AtLeastOnce, false, 1)
            .await;
        expect_no_publish(&mut client, QUIET).await;
        disconnect(&mut client).await;

        // The clean session ended with the connection: nothing to resume.
        let (mut client, ack) = connect_ok(&broker, persistent_connect(version, &id)).await;
        assert!(
            !ack.session_present,
            "{version:?}: a clean session must not outlive its connection"
        );
        disconnect(&mut client).await;
        disconnect(&mut publisher).await;
    }
}

/// v5 [MQTT-3.2.2-3] / [3.1.1: MQTT-3.2.2-3] If the Server accepts a connection with Clean
/// Start 0 and has no Session State for the ClientID, it MUST set Session Present to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_3_no_stored_session_session_present_0() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let (mut client, ack) =
            connect_ok(&broker, persistent_connect(version, &cid("fresh", version))).await;
        assert!(!ack.session_present, "{version:?}");
        disconnect(&mut client).await;
    }
}

/// v5 [MQTT-3.2.2-3] / [3.1.1: MQTT-3.2.2-2] With Clean Start 0 and stored Session State the
/// Server MUST set Session Present to 1; v5 [MQTT-3.1.2-5] / [3.1.1: MQTT-3.1.2-4] it MUST
/// resume the session, subscriptions included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_2_2_3_persistent_session_resumed_with_subscriptions() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let id = cid("resume", version);
        let filter = topic("resume", version);
        park_session(&broker, version, &id, &filter, QoS::AtLeastOnce).await;

        let (mut client, ack) = connect_ok(&broker, persistent_connect(version, &id)).await;
        assert!(
            ack.session_present,
            "{version:?}: stored session must give Session Present 1"
        );
        // The subscription is still there.
        let mut publisher = broker.client(version, &cid("resume-pub", version)).await;
        publisher
            .publish(&filter, b"after resume", QoS::AtLeastOnce, false, 1)
            .await;
        let publish = client.recv_publish().await;
        assert_eq!(&publish.payload[..], b"after resume", "{version:?}");
        assert_eq!(publish.qos, QoS::AtLeastOnce);
        disconnect(&mut client).await;
        disconnect(&mut publisher).await;
    }
}

/// [MQTT-4.5.0-1] (v5 §4.1: part of the Session State) / [3.1.1: MQTT-3.1.2-5] After the
/// disconnection of a Session that had CleanSession 0, the Server MUST store further QoS 1 and
/// QoS 2 messages that match any subscriptions the client had at the time of disconnection and
/// deliver them when the client reconnects. QoS 0 messages are optional and not stored by
/// default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_5_0_1_qos1_qos2_queued_while_offline_qos0_not() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let id = cid("offline", version);
        let filter = topic("offline", version);
        park_session(&broker, version, &id, &filter, QoS::ExactlyOnce).await;

        let mut publisher = broker.client(version, &cid("offline-pub", version)).await;
        publisher
            .publish(&filter, b"q0", QoS::AtMostOnce, false, 0)
            .await;
        publisher
            .publish(&filter, b"q1", QoS::AtLeastOnce, false, 1)
            .await;
        publisher
            .publish(&filter, b"q2", QoS::ExactlyOnce, false, 2)
            .await;
        ping(&mut publisher).await;

        let (mut client, ack) = connect_ok(&broker, persistent_connect(version, &id)).await;
        assert!(ack.session_present, "{version:?}");
        let first = client.recv_publish().await;
        assert_eq!(
            (&first.payload[..], first.qos),
            (&b"q1"[..], QoS::AtLeastOnce),
            "{version:?}"
        );
        let second = client.recv_publish().await;
        assert_eq!(
            (&second.payload[..], second.qos),
            (&b"q2"[..], QoS::ExactlyOnce),
            "{version:?}"
        );
        // The QoS 0 message was not kept for the offline client.
        expect_no_publish(&mut client, QUIET).await;
        disconnect(&mut client).await;
        disconnect(&mut publisher).await;
    }
}

/// v5 [MQTT-4.4.0-1] / [3.1.1: MQTT-4.4.0-1] When a Client reconnects with Clean Start 0 the
/// Server MUST resend any unacknowledged PUBLISH packets (QoS > 0) using their original Packet
/// Identifiers; [MQTT-3.3.1-1] the DUP flag MUST be set to 1 on a re-delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_4_0_1_unacknowledged_publish_redelivered_with_dup_and_same_id() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        for qos in [QoS::AtLeastOnce, QoS::ExactlyOnce] {
            let id = cid(&format!("redeliver-q{}", qos as u8), version);
            let filter = topic(&format!("redeliver/q{}", qos as u8), version);
            let (mut client, _) = connect_ok(&broker, persistent_connect(version, &id)).await;
            assert_eq!(client.subscribe(&filter, qos, 1).await, vec![qos as u8]);

            let mut publisher = broker.client(version, &cid("redeliver-pub", version)).await;
            publisher.publish(&filter, b"unacked", qos, false, 1).await;
            let original = recv_publish_noack(&mut client).await;
            assert!(
                !original.dup,
                "{version:?} {qos:?}: first delivery must have DUP 0"
            );
            // Leave without acknowledging.
            disconnect(&mut client).await;

            let (mut client, ack) = connect_ok(&broker, persistent_connect(version, &id)).await;
            assert!(ack.session_present, "{version:?} {qos:?}");
            let again = recv_publish_noack(&mut client).await;
            assert!(again.dup, "{version:?} {qos:?}: redelivery must have DUP 1");
            assert_eq!(
                again.packet_id, original.packet_id,
                "{version:?} {qos:?}: same packet id"
            );
            assert_eq!(again.qos, qos);
            assert_eq!(&again.payload[..], b"unacked");
            client.ack(&again).await;
            expect_no_publish(&mut client, QUIET).await;
            disconnect(&mut client).await;
            disconnect(&mut publisher).await;
        }
    }
}

/// v5 [MQTT-4.4.0-1] / [3.1.1: MQTT-4.4.0-1] On reconnection with Clean Start 0 the Server MUST
/// resend any unacknowledged PUBREL packets using their original Packet Identifiers (the
/// PUBLISH itself is not sent again once PUBREL was sent, [MQTT-4.3.3-6]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_4_0_1_pubrel_resent_after_reconnect() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        let id = cid("pubrel", version);
        let filter = topic("pubrel", version);
        let (mut client, _) = connect_ok(&broker, persistent_connect(version, &id)).await;
        assert_eq!(
            client.subscribe(&filter, QoS::ExactlyOnce, 1).await,
            vec![2]
        );
        let mut publisher = broker.client(version, &cid("pubrel-pub", version)).await;
        publisher
            .publish(&filter, b"exactly once", QoS::ExactlyOnce, false, 1)
            .await;

        let publish = recv_publish_noack(&mut client).await;
        let packet_id = publish.packet_id.expect("QoS 2 has a packet id");
        client.send(Packet::PubRec(PubResp::new(packet_id))).await;
        match client.recv().await {
            Packet::PubRel(rel) => assert_eq!(rel.packet_id, packet_id),
            other => panic!("{version:?}: expected PUBREL, got {other:?}"),
        }
        // Leave without PUBCOMP.
        disconnect(&mut client).await;

        let (mut client, ack) = connect_ok(&broker, persistent_connect(version, &id)).await;
        assert!(ack.session_present, "{version:?}");
        match client.recv().await {
            Packet::PubRel(rel) => {
                assert_eq!(rel.packet_id, packet_id, "{version:?}: same packet id")
            }
            other => panic!("{version:?}: expected PUBREL to be resent, got {other:?}"),
        }
        client.send(Packet::PubComp(PubResp::new(packet_id))).await;
        expect_no_publish(&mut client, QUIET).await;
        disconnect(&mut client).await;
        disconnect(&mut publisher).await;
    }
}

/// v5 [MQTT-3.1.2-23] The Server MUST store the Session State after the Network Connection is
/// closed if the Session Expiry Interval is greater than 0 — it is kept before the interval
/// elapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_2_23_session_kept_before_expiry_interval() {
    let broker = TestBroker::start().await;
    let version = ProtocolVersion::V5;
    let mut connect = connect_packet(version, "expiry-kept", false);
    connect.properties.session_expiry_interval = Some(3);
    let filter = "conf/expiry-kept";
    let (mut client, _) = connect_ok(&broker, connect.clone()).await;
    assert_eq!(client.subscribe(filter, QoS::AtLeastOnce, 1).await, vec![1]);
    disconnect(&mut client).await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut publisher = broker.client(version, "expiry-kept-pub").await;
    publisher
        .publish(filter, b"queued", QoS::AtLeastOnce, false, 1)
        .await;
    let (mut client, ack) = connect_ok(&broker, connect).await;
    assert!(
        ack.session_present,
        "session must survive within its expiry interval"
    );
    assert_eq!(&client.recv_publish().await.payload[..], b"queued");
    disconnect(&mut client).await;
    disconnect(&mut publisher).await;
}

/// v5 [MQTT-4.1.0-2] The Server MUST discard the Session State when the Network Connection is
/// closed and the Session Expiry Interval has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_4_1_0_2_session_discarded_after_expiry_interval() {
    let broker = TestBroker::start().await;
    let version = ProtocolVersion::V5;
    let mut connect = connect_packet(version, "expiry-gone", false);
    connect.properties.session_expiry_interval = Some(1);
    let filter = "conf/expiry-gone";
    let (mut client, _) = connect_ok(&broker, connect.clone()).await;
    assert_eq!(client.subscribe(filter, QoS::AtLeastOnce, 1).await, vec![1]);
    disconnect(&mut client).await;

    tokio::time::sleep(Duration::from_millis(2000)).await;
    // The subscription went with the session: this message is not kept for it.
    let mut publisher = broker.client(version, "expiry-gone-pub").await;
    publisher
        .publish(filter, b"too late", QoS::AtLeastOnce, false, 1)
        .await;
    let (mut client, ack) = connect_ok(&broker, connect).await;
    assert!(
        !ack.session_present,
        "session must be gone after its expiry interval"
    );
    expect_no_publish(&mut client, QUIET).await;
    disconnect(&mut client).await;
    disconnect(&mut publisher).await;
}

/// v5 §3.14.2.2.2: If the Session Expiry Interval in the CONNECT packet was zero, then it is
/// a Protocol Error to set a non-zero Session Expiry Interval in the DISCONNECT packet sent by
/// the Client (the Server answers DISCONNECT 0x82 and closes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_14_2_2_2_disconnect_cannot_raise_zero_session_expiry() {
    let broker = TestBroker::start().await;
    let (mut client, _) = connect_ok(
        &broker,
        connect_packet(ProtocolVersion::V5, "expiry-raise", false),
    )
    .await;
    let mut disconnect_packet = Disconnect::default();
    disconnect_packet.properties.session_expiry_interval = Some(60);
    client.send(Packet::Disconnect(disconnect_packet)).await;
    assert_closed_with(&mut client, Some(0x82)).await;

    // The session still ended with the connection.
    let mut connect = connect_packet(ProtocolVersion::V5, "expiry-raise", false);
    connect.properties.session_expiry_interval = Some(60);
    let (mut client, ack) = connect_ok(&broker, connect).await;
    assert!(
        !ack.session_present,
        "a session with expiry 0 must not persist"
    );
    disconnect(&mut client).await;
}

/// v5 §3.14.2.2.2: the Client may change a non-zero Session Expiry Interval in
/// DISCONNECT; the new value governs the session (raised: still present later; lowered to 0:
/// ends now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_14_2_2_2_disconnect_changes_nonzero_session_expiry() {
    let broker = TestBroker::start().await;
    let version = ProtocolVersion::V5;

    // 1 s → 300 s: still there after 1.8 s.
    let mut connect = connect_packet(version, "expiry-longer", false);
    connect.properties.session_expiry_interval = Some(1);
    let (mut client, _) = connect_ok(&broker, connect.clone()).await;
    let mut longer = Disconnect::default();
    longer.properties.session_expiry_interval = Some(300);
    client.send(Packet::Disconnect(longer)).await;
    assert!(client.expect_closed().await.is_empty());

    // 300 s → 0: gone at once.
    let mut connect_b = connect_packet(version, "expiry-shorter", false);
    connect_b.properties.session_expiry_interval = Some(300);
    let (mut client, _) = connect_ok(&broker, connect_b.clone()).await;
    let mut shorter = Disconnect::default();
    shorter.properties.session_expiry_interval = Some(0);
    client.send(Packet::Disconnect(shorter)).await;
    assert!(client.expect_closed().await.is_empty());
    let (mut client, ack) = connect_ok(&broker, connect_b).await;
    assert!(
        !ack.session_present,
        "DISCONNECT with expiry 0 must end the session"
    );
    disconnect(&mut client).await;

    tokio::time::sleep(Duration::from_millis(1800)).await;
    let (mut client, ack) = connect_ok(&broker, connect).await;
    assert!(
        ack.session_present,
        "DISCONNECT raised the expiry to 300 s; session must remain"
    );
    disconnect(&mut client).await;
}

/// v5 [MQTT-3.1.4-3] / [3.1.1: MQTT-3.1.4-2] If the ClientID represents a Client already
/// connected to the Server, the Server sends the existing Client DISCONNECT 0x8E (Session taken
/// over, v5) and MUST close its Network Connection; the new connection works normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_4_3_session_takeover_closes_old_connection() {
    let broker = TestBroker::start().await;
    for version in VERSIONS {
        for clean in [true, false] {
            let id = cid(&format!("takeover-{clean}"), version);
            let filter = topic(&format!("takeover-{clean}"), version);
            let first_connect = if clean {
                connect_packet(version, &id, true)
            } else {
                persistent_connect(version, &id)
            };
            let (mut old, _) = connect_ok(&broker, first_connect).await;
            assert_eq!(old.subscribe(&filter, QoS::AtLeastOnce, 1).await, vec![1]);

            let second_connect = if clean {
                connect_packet(version, &id, true)
            } else {
                persistent_connect(version, &id)
            };
            let (mut new, ack) = connect_ok(&broker, second_connect).await;
            assert_eq!(ack.session_present, !clean, "{version:?} clean={clean}");
            assert_closed_with(&mut old, Some(0x8E)).await;

            ping(&mut new).await;
            if !clean {
                // The persistent session (and its subscription) moved to the new connection.
                let mut publisher = broker.client(version, &cid("takeover-pub", version)).await;
                publisher
                    .publish(&filter, b"to new owner", QoS::AtLeastOnce, false, 1)
                    .await;
                assert_eq!(&new.recv_publish().await.payload[..], b"to new owner");
                disconnect(&mut publisher).await;
            }
            assert_eq!(
                new.subscribe(&format!("{filter}/x"), QoS::AtMostOnce, 2)
                    .await,
                vec![0]
            );
            disconnect(&mut new).await;
        }
    }
}
