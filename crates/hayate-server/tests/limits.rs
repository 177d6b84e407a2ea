//! Per-client inbound rate limits: a client over its limit is slowed by not being read (its
//! bytes wait in TCP), never by dropping its messages.

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{publish_packet, TestBroker};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// 300 QoS 0 messages sent at once under a 100 messages/s limit: all arrive, in order, and
/// the last cannot arrive before the bucket (one second's worth) and two more seconds of
/// refill allowed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_rate_limit_delays_without_dropping() {
    let broker = TestBroker::start_with(|config| {
        config.server.max_inbound_messages_per_sec = 100;
    })
    .await;
    let mut subscriber = broker.client(ProtocolVersion::V5, "rl-sub").await;
    subscriber.subscribe("rl/m", QoS::AtMostOnce, 1).await;
    let mut publisher = broker.client(ProtocolVersion::V5, "rl-pub").await;
    let started = Instant::now();
    for i in 0..300u32 {
        let packet = publish_packet("rl/m", &i.to_be_bytes(), QoS::AtMostOnce, false, None);
        publisher.send(Packet::Publish(packet)).await;
    }
    for i in 0..300u32 {
        let publish = tokio::time::timeout(Duration::from_secs(10), subscriber.recv_publish())
            .await
            .expect("every message arrives");
        assert_eq!(&publish.payload[..], &i.to_be_bytes(), "in order");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1800),
        "300 messages at 100/s (100 burst) took only {elapsed:?}"
    );
    let dropped = broker
        .handle
        .broker
        .stats
        .publish_dropped
        .load(Ordering::Relaxed);
    assert_eq!(dropped, 0);
}

/// A bytes-per-second limit set on one `[[listener]]` applies there and not on the plain
/// listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_rate_limit_per_listener() {
    let broker = TestBroker::start_with(|config| {
        let mut limited =
            hayate_server::config::ListenerConfig::tcp("127.0.0.1:0".parse().unwrap());
        limited.max_inbound_bytes_per_sec = Some(50_000);
        config.listeners.push(limited);
    })
    .await;
    let limited_addr = broker.handle.local_addrs()[1];
    let mut subscriber = broker.client(ProtocolVersion::V311, "bl-sub").await;
    subscriber.subscribe("bl/#", QoS::AtMostOnce, 1).await;
    let payload = vec![9u8; 1000];
    let send_all = |mut client: hayate_testkit::RawClient, topic: &'static str| {
        let payload = payload.clone();
        async move {
            for _ in 0..150 {
                let packet = publish_packet(topic, &payload, QoS::AtMostOnce, false, None);
                client.send(Packet::Publish(packet)).await;
            }
            client
        }
    };
    // Unlimited listener: 150 KB arrive quickly.
    let started = Instant::now();
    let _fast = send_all(
        broker.client(ProtocolVersion::V311, "bl-fast").await,
        "bl/fast",
    )
    .await;
    for _ in 0..150 {
        subscriber.recv_publish().await;
    }
    let fast = started.elapsed();
    // Limited listener: 150 KB at 50 KB/s (one second's burst) need about two seconds.
    let mut slow =
        hayate_testkit::RawClient::connect_tcp(limited_addr, ProtocolVersion::V311).await;
    let connack = slow
        .connect(hayate_testkit::connect_packet(
            ProtocolVersion::V311,
            "bl-slow",
            true,
        ))
        .await;
    assert_eq!(connack.reason_code.0, 0);
    let started = Instant::now();
    let _slow = send_all(slow, "bl/slow").await;
    for _ in 0..150 {
        tokio::time::timeout(Duration::from_secs(10), subscriber.recv_publish())
            .await
            .expect("every message arrives");
    }
    let limited = started.elapsed();
    assert!(
        limited >= Duration::from_millis(1400),
        "150 KB at 50 KB/s took only {limited:?} (unlimited: {fast:?})"
    );
}
