//! Back-pressure: a slow subscriber slows its publishers down instead of losing messages, and
//! a stalled subscriber holds nobody back (its own queue fills and drops, counted).

use hayate_codec::{Packet, ProtocolVersion, QoS};
use hayate_testkit::{connect_packet, publish_packet, Received, TestBroker};
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
    // A 1 s stall window: the healthy subscriber may wait that long once (the test client's
    // receive timeout is 5 s, the default window).
    let broker = TestBroker::start_with(|config| {
        config.broker.max_queued_messages = 100;
        config.broker.backpressure_stall_timeout_ms = 1000;
    })
    .await;
    let mut stalled = broker.client(ProtocolVersion::V311, "stalled-sub").await;
    stalled.subscribe("bp/stall", QoS::AtLeastOnce, 1).await;
    let mut healthy = broker.client(ProtocolVersion::V311, "healthy-sub").await;
    healthy.subscribe("bp/stall", QoS::AtLeastOnce, 1).await;
    let mut publisher = broker.client(ProtocolVersion::V311, "pub").await;
    let total = 1_000u16;
    // The longest the healthy subscriber waits between two messages: at most one stall window
    // (the stalled subscriber never makes progress, so it is found stalled once).
    let reader = tokio::spawn(async move {
        let mut last = std::time::Instant::now();
        let mut longest = Duration::ZERO;
        for _ in 0..total {
            healthy.recv_publish().await;
            longest = longest.max(last.elapsed());
            last = std::time::Instant::now();
        }
        (healthy, longest)
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
    let (mut healthy, longest) = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("healthy reader")
        .expect("task");
    assert!(
        longest < Duration::from_millis(2500),
        "the healthy subscriber waited {longest:?} between two messages; the stall window is 1 s"
    );
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

/// The broker-wide budget (`max_queued_bytes_total`) bounds what all sessions hold together:
/// three offline persistent sessions, each allowed 64 MiB on its own, share a 1 MiB budget.
/// The publisher is never held back (offline sessions are not waited on), deliveries past the
/// budget are refused and counted, what was kept is delivered on reconnect, and ending the
/// sessions returns every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_wide_budget_bounds_all_queues_together() {
    const BUDGET: usize = 1024 * 1024;
    let broker =
        TestBroker::start_with(|config| config.broker.max_queued_bytes_total = BUDGET).await;
    let version = ProtocolVersion::V311;
    for name in ["offline-1", "offline-2", "offline-3"] {
        let mut client = broker.raw(version).await;
        let connack = client.connect(connect_packet(version, name, false)).await;
        assert_eq!(connack.reason_code.0, 0);
        client.subscribe("budget/t", QoS::AtLeastOnce, 1).await;
        client.send(Packet::Disconnect(Default::default())).await;
        client.expect_closed().await;
    }
    let memory = broker.handle.broker.memory.clone();
    let mut publisher = broker.client(version, "budget-pub").await;
    let payload = vec![3u8; PAYLOAD];
    let total = 300u16; // 3 sessions × 300 × 10 KiB ≈ 9 MiB offered, 1 MiB allowed
    for id in 1..=total {
        publisher
            .publish("budget/t", &payload, QoS::AtLeastOnce, false, id)
            .await;
        let held = memory.held();
        assert!(
            held <= BUDGET,
            "{held} bytes held, over the {BUDGET}-byte budget"
        );
    }
    let refused = memory.refused();
    assert!(refused > 0, "deliveries past the budget must be refused");
    let held = memory.held();
    assert!(
        held > BUDGET - 2 * (PAYLOAD + 256),
        "the budget should be used up, {held} bytes held"
    );
    let per_delivery =
        (PAYLOAD + "budget/t".len() + hayate_session::DELIVERY_OVERHEAD_BYTES) as u64;
    let kept = held as u64 / per_delivery;
    assert_eq!(kept + refused, 3 * u64::from(total));

    // One session comes back and gets exactly what it kept.
    let mut back = broker.raw(version).await;
    let connack = back
        .connect(connect_packet(version, "offline-1", false))
        .await;
    assert!(connack.session_present);
    let mut received = 0;
    loop {
        match back.recv_timeout(Duration::from_millis(500)).await {
            Received::Packet(Packet::Publish(publish)) => {
                back.ack(&publish).await;
                received += 1;
            }
            Received::Timeout => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        received > 0 && received < u64::from(total),
        "received {received}"
    );
    // Ending every session returns its charge.
    drop(back);
    for name in ["offline-1", "offline-2", "offline-3"] {
        let mut client = broker.raw(version).await;
        client.connect(connect_packet(version, name, true)).await;
        client.send(Packet::Disconnect(Default::default())).await;
        client.expect_closed().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(memory.held(), 0, "every charge returned");
}

/// Many publishers of large messages at once: 200 publishers each send 10 × 10 KiB to one
/// subscriber whose queue holds 512 KiB. Pausing a publisher only after its message went into
/// the congested queue would let each of the 200 add one more (2 MB, four times the queue) and
/// lose most of them; publishers hold a PUBLISH back *before* routing it while a session it
/// would reach is congested, so nothing is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_publishers_of_large_messages_lose_nothing() {
    const PUBLISHERS: usize = 200;
    const EACH: usize = 10;
    let broker = TestBroker::start_with(|config| {
        config.broker.max_queued_bytes = 512 * 1024;
    })
    .await;
    let mut subscriber = broker.client(ProtocolVersion::V311, "big-sub").await;
    subscriber.subscribe("big/#", QoS::AtMostOnce, 1).await;
    let mut senders = Vec::new();
    for p in 0..PUBLISHERS {
        let mut publisher = broker
            .client(ProtocolVersion::V311, &format!("big-pub-{p}"))
            .await;
        senders.push(tokio::spawn(async move {
            let payload = vec![p as u8; PAYLOAD];
            for _ in 0..EACH {
                let packet =
                    publish_packet(&format!("big/{p}"), &payload, QoS::AtMostOnce, false, None);
                publisher.send(Packet::Publish(packet)).await;
            }
            publisher
        }));
    }
    let mut per_publisher = vec![0usize; PUBLISHERS];
    for received in 0..PUBLISHERS * EACH {
        let publish = tokio::time::timeout(Duration::from_secs(20), subscriber.recv_publish())
            .await
            .unwrap_or_else(|_| panic!("only {received} of {} arrived", PUBLISHERS * EACH));
        per_publisher[publish.payload[0] as usize] += 1;
        if received % 50 == 0 {
            // A subscriber that reads, but not as fast as 200 publishers write.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for sender in senders {
        sender.await.expect("publisher task");
    }
    assert!(
        per_publisher.iter().all(|&n| n == EACH),
        "{per_publisher:?}"
    );
    let dropped = broker
        .handle
        .broker
        .stats
        .publish_dropped
        .load(Ordering::Relaxed);
    assert_eq!(dropped, 0, "no message may be dropped");
}
