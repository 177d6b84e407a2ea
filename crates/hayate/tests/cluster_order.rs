//! One publisher's messages in order across nodes (docs/CLUSTER.md, "A publisher that moves"),
//! with three real `hayate serve` processes on loopback.

use hayate_codec::QoS;
use hayate_testkit::cluster::{
    await_route, connect_persistent, drain, payloads, publish_numbered, reordered_first_copies,
    Cluster, Tally,
};
use std::path::Path;
use std::time::{Duration, Instant};

const HAYATE: &str = env!("CARGO_BIN_EXE_hayate");

/// Published on n2 while the subscriber's node n1 is dead: queued for n1 on n2.
const ON_N2: u16 = 1_000;
/// Published on n3 while n2 is frozen.
const ON_N3: u16 = 1_500;
/// All of them; those from `ON_N2` on are published on n3.
const TOTAL: u16 = 3_000;

/// The subscriber's node n1 is killed; its publisher publishes on n2 (queued there for n1),
/// then moves to n3 and goes on there, as in the kill soak's reordered blocks. n2 freezes as
/// n1 comes back, so n1 gets n3's newer messages before n2's older ones can come: n3's
/// take-over notice makes n1's link from n3 wait for n2's notice, behind n2's backlog. The
/// subscriber, back on n1, gets every QoS 2 message once, in order (without the wait, 1,000 of
/// 3,000 came after higher ones in 4 runs of 4; with it, none in 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_that_moves_while_its_subscribers_node_is_away_stays_in_order() {
    let mut cluster = Cluster::start_durable(Path::new(HAYATE), 3, &[]).await;
    let (mut sub, _) = connect_persistent(cluster.nodes[0].mqtt, "order-sub").await;
    sub.subscribe("roll/#", QoS::ExactlyOnce, 1).await;
    let (mut publisher, _) = connect_persistent(cluster.nodes[1].mqtt, "order-pub").await;
    await_route(&mut publisher, &mut sub, "roll/probe").await;

    cluster.nodes[0].kill();
    drop(sub);
    publish_numbered(&mut publisher, 0..ON_N2, Duration::ZERO).await;
    drop(publisher);
    // Its CONNACK on n3 waits for n1 (a durable node lost moments ago) to come back; n2
    // answers at once. Then n2 freezes: back, n1 gets n3's newer messages while n2's older
    // ones wait, as when n2's link to n1 comes up last.
    let moving = tokio::spawn(connect_persistent(cluster.nodes[2].mqtt, "order-pub"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.nodes[1].freeze();
    cluster.nodes[0].restart();
    let (mut publisher, connack) = moving.await.unwrap();
    assert!(
        connack.session_present,
        "n2 handed the publisher's session over"
    );
    publish_numbered(&mut publisher, ON_N2..ON_N3, Duration::ZERO).await;
    cluster.nodes[1].thaw();
    cluster.nodes[0].wait_listening().await;
    let (mut sub, connack) = connect_persistent(cluster.nodes[0].mqtt, "order-sub").await;
    assert!(connack.session_present, "the subscriber's session is on n1");
    let receiving = tokio::spawn(async move {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.iter().filter(|p: &&String| p.starts_with("m-")).count() < TOTAL as usize
            && Instant::now() < deadline
        {
            got.extend(payloads(&drain(&mut sub, Duration::from_millis(500)).await));
        }
        got
    });
    publish_numbered(&mut publisher, ON_N3..TOTAL, Duration::ZERO).await;
    let mut got = receiving.await.unwrap();
    got.retain(|p| p != "probe");

    let tally = Tally::of(&got);
    let missing = tally.missing(TOTAL);
    let (first_missing, missing) = (missing.first().cloned(), missing.len());
    let twice = tally.twice().len();
    assert_eq!(
        missing,
        0,
        "lost {missing} of {TOTAL} (from {first_missing:?})\n{}",
        cluster.logs()
    );
    assert_eq!(
        twice,
        0,
        "{twice} of {TOTAL} delivered twice\n{}",
        cluster.logs()
    );
    let reordered = reordered_first_copies(&got);
    assert_eq!(
        reordered,
        0,
        "first copies out of order\n{}",
        cluster.logs()
    );
}
