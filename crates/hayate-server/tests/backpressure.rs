//! Back-pressure: a slow subscriber slows its publishers down instead of losing messages, and
//! a stalled subscriber holds nobody back (its own queue fills and drops, counted).

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{publish_packet, Received, TestBroker};
use std::sync::atomic::Ordering;
use std::time::Duration;

const PAYLOAD: usize = 10 * 1024;

/// 2,000 × 10 KiB QoS 0 messages from a publisher that never waits, to a subscriber that reads
/// slowly, with a per-session queue of 100 messages: every message arrives, none is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscriber_slows_the_publisher_instead_of_losing_messages() {
    let broker = TestBroker::start_with(|config| config.broker.max_queued_messages = 100).await;
    let mut subscriber = broker.client(ProtocolVersion::V311, "slow-sub").await;
    subscriber.subscribe("bp/slow", QoS::AtMostOnce, 1).await;
    let mut publisher = broker.client(ProtocolVersion::V311, "fast-pub").await;
    let total = 2_000;
    let sender = tokio::spawn(async move {
        let payload = vec![7u8; PAYLOAD];
        for _ in 0..total {
            let packet = publish_packet("bp/slow", &payload, QoS::AtMostOnce, false, None);
            publisher.send(Packet::Publish(packet)).await;
        }
        publisher
    });
    for received in 0..total {
        let publish = subscriber.recv_publish().await;
        assert_eq!(publish.payload.len(), PAYLOAD, "message {received}");
        if received % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    sender.await.expect("publisher task");
    let dropped = broker
        .handle
        .broker
        .stats
        .publish_dropped
        .load(Ordering::Relaxed);
    assert_eq!(
        dropped, 0,
        "no message may be dropped for a slow but reading subscriber"
    );
}

/// A subscriber that never reads does not stop a publisher (QoS 1, every PUBACK arrives) or
/// another subscriber (gets every message); its own queue overflows and the drops are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_subscriber_blocks_nobody() {
    let broker = TestBroker::start_with(|config| config.broker.max_queued_messages = 100).await;
    let mut stalled = broker.client(ProtocolVersion::V311, "stalled-sub").await;
    stalled.subscribe("bp/stall", QoS::AtLeastOnce, 1).await;
    let mut healthy = broker.client(ProtocolVersion::V311, "healthy-sub").await;
    healthy.subscribe("bp/stall", QoS::AtLeastOnce, 1).await;
    let mut publisher = broker.client(ProtocolVersion::V311, "pub").await;
    let total = 1_000u16;
    let reader = tokio::spawn(async move {
        for _ in 0..total {
            healthy.recv_publish().await;
        }
        healthy
    });
    let payload = vec![1u8; PAYLOAD];
    let started = std::time::Instant::now();
    for id in 1..=total {
        publisher
            .publish("bp/stall", &payload, QoS::AtLeastOnce, false, id)
            .await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "publisher held back for {:?}",
        started.elapsed()
    );
    let mut healthy = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("healthy reader")
        .expect("task");
    healthy.expect_nothing(Duration::from_millis(100)).await;
    let dropped = broker
        .handle
        .broker
        .stats
        .publish_dropped
        .load(Ordering::Relaxed);
    assert!(
        dropped > 0,
        "the stalled subscriber's queue must overflow and count drops"
    );
    // The stalled client is still connected and gets what its queue kept once it reads.
    match stalled.recv_timeout(Duration::from_secs(5)).await {
        Received::Packet(Packet::Publish(_)) => {}
        other => panic!("stalled subscriber should still get its queued messages: {other:?}"),
    }
}
