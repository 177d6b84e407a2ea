//! `--targets`, `--pub-targets`, `--sub-targets`: clients spread round robin per role over
//! several brokers. Two independent brokers (no cluster) make the assignment visible: only
//! the messages of publishers on the subscriber's broker arrive.

mod common;

use common::{run, run_err};
use hayate_testkit::TestBroker;

const Q: &str = "--version-wait-ms 0 --progress 0 --drain-timeout 1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishers_and_subscribers_go_round_robin_over_the_targets() {
    let a = TestBroker::start().await;
    let b = TestBroker::start().await;
    // Publishers p0 and p2 on A, p1 and p3 on B; the one subscriber (s0) on A. With the paho
    // shape every connection sends the same share: 100 each.
    let r = run(&format!(
        "fan-in {Q} --targets {},{} --shape paho -c 4 -w 4 -n 400 -q 1 --sub-qos 1",
        a.addr, b.addr
    ))
    .await;
    let m = r.messages.as_ref().unwrap();
    assert_eq!(r.connections.established, 4);
    assert_eq!(m.sent, 400);
    assert_eq!(m.acknowledged, 400, "B acknowledges its publishers too");
    assert_eq!(
        m.received, 200,
        "only A's publishers reach the subscriber on A: {m:?}"
    );
    assert_eq!(m.lost, 200);
    assert_eq!(r.target.address, a.addr.to_string());
    let targets = vec![a.addr.to_string(), b.addr.to_string()];
    assert_eq!(r.config.publisher_targets, targets);
    assert_eq!(r.config.subscriber_targets, targets);
    assert_eq!(r.config.cross_target_fraction, Some(0.5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_role_list_leaves_the_other_role_on_host_and_port() {
    let a = TestBroker::start().await;
    let b = TestBroker::start().await;
    // Subscribers on B, publishers on --port (A): nothing arrives.
    let r = run(&format!(
        "fan-in {Q} --port {} --sub-targets {} --shape paho -c 2 -w 2 -n 100 -q 1 --sub-qos 1",
        a.addr.port(),
        b.addr
    ))
    .await;
    let m = r.messages.as_ref().unwrap();
    assert_eq!((m.sent, m.received, m.lost), (100, 0, 100));
    assert_eq!(r.config.publisher_targets, vec![a.addr.to_string()]);
    assert_eq!(r.config.subscriber_targets, vec![b.addr.to_string()]);
    assert_eq!(r.config.cross_target_fraction, Some(1.0));
    // The same brokers for both roles: everything arrives, nothing crosses.
    let r = run(&format!(
        "latency {Q} --pub-targets {0} --sub-targets {0} --interval-ms 10 -d 0.3",
        b.addr
    ))
    .await;
    assert_eq!(r.messages.as_ref().unwrap().lost, 0);
    assert_eq!(r.config.cross_target_fraction, None);
    // Without any list, results show none.
    let r = run(&format!(
        "latency {Q} --port {} --interval-ms 10 -d 0.2",
        a.addr.port()
    ))
    .await;
    assert!(r.config.publisher_targets.is_empty() && r.config.subscriber_targets.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_is_probed_and_bad_lists_are_refused() {
    let a = TestBroker::start().await;
    let dead = hayate_testkit::free_port();
    let e = run_err(&format!(
        "fan-in {Q} --targets {},127.0.0.1:{dead} -c 2 -n 10",
        a.addr
    ))
    .await;
    assert!(e.to_string().contains(&dead.to_string()), "{e}");
    let e = run_err(&format!(
        "fan-in {Q} --targets {},nonsense -c 2 -n 10",
        a.addr
    ))
    .await;
    assert!(e.to_string().contains("HOST:PORT"), "{e}");
    let e = run_err(&format!(
        "compare --target x={0} --repeat 1 fan-in {Q} --targets {0} -c 2 -n 10",
        a.addr
    ))
    .await;
    assert!(e.to_string().contains("single runs only"), "{e}");
}
