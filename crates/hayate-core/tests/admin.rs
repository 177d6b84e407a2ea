//! The admin queries and actions (`hayate_core::admin`, `Registry::page`, the router's
//! retained pages and subscriber look-up), driven through real channels with injected time.

use hayate_codec::{Packet, QoS, ReasonCode};
use hayate_core::CloseReason;
use hayate_testkit::core::{ConnectSpec, CoreHarness};
use std::collections::HashSet;

fn ids(cells: &[std::sync::Arc<hayate_core::SessionCell>]) -> Vec<String> {
    cells.iter().map(|c| c.client_id.to_string()).collect()
}

/// Pages walk every session once, in client id order, whatever the page size; a prefix keeps
/// only matching ids.
#[test]
fn registry_pages_cover_every_session_in_order() {
    let h = CoreHarness::new();
    let mut clients: Vec<_> = [
        "b-2", "a-1", "c-1", "b-1", "a-10", "a-2", "z", "b-3", "a-3", "m",
    ]
    .iter()
    .map(|id| h.client(ConnectSpec::v5(id)))
    .collect();
    let mut expected: Vec<String> = clients
        .iter()
        .map(|c| c.session().client_id.to_string())
        .collect();
    expected.sort();
    for size in [1, 3, 4, 10, 100] {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = h.broker.registry.page(after.as_deref(), None, size);
            assert!(page.len() <= size);
            if page.is_empty() {
                break;
            }
            after = Some(page.last().unwrap().client_id.to_string());
            seen.extend(ids(&page));
        }
        assert_eq!(seen, expected, "page size {size}");
    }
    let a = h.broker.registry.page(None, Some("a-"), 100);
    assert_eq!(ids(&a), ["a-1", "a-10", "a-2", "a-3"]);
    let after = h.broker.registry.page(Some("a-10"), Some("a-"), 1);
    assert_eq!(ids(&after), ["a-2"]);
    assert!(h.broker.registry.page(None, None, 0).is_empty());
    clients.clear();
}

/// A snapshot shows the session's subscriptions, its user and listener, and what it holds.
#[test]
fn snapshot_shows_subscriptions_and_queue_depth() {
    let h = CoreHarness::new();
    let mut sub = h.client(ConnectSpec::v5("sub").session_expiry(60));
    sub.subscribe("q/#", QoS::AtLeastOnce);
    sub.subscribe("$share/g/s", QoS::AtMostOnce);
    sub.finish();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    for _ in 0..3 {
        publisher.publish("q/1", b"x", QoS::AtLeastOnce).unwrap();
    }
    let snapshot = h.session("sub").unwrap().snapshot();
    assert!(!snapshot.online);
    assert_eq!(snapshot.queued, 3, "three QoS 1 messages wait offline");
    assert_eq!(snapshot.expiry_interval, 60);
    assert_eq!(snapshot.protocol, 5);
    let filters: Vec<_> = snapshot
        .subscriptions
        .iter()
        .map(|(f, q)| (f.to_string(), *q))
        .collect();
    assert_eq!(
        filters,
        [
            ("$share/g/s".to_string(), QoS::AtMostOnce),
            ("q/#".to_string(), QoS::AtLeastOnce)
        ]
    );
    let online = h.session("pub").unwrap().snapshot();
    assert!(online.online);
    assert!(online.listener.is_some());
}

/// Kicking a connected v5 client closes its connection at its next transmit with DISCONNECT
/// 0x98, publishes its will, and ends a session without expiry; an offline or unknown client
/// cannot be kicked.
#[test]
fn kick_closes_the_connection_with_administrative_action() {
    let h = CoreHarness::new();
    let mut watcher = h.client(ConnectSpec::v5("watcher"));
    watcher.subscribe("will/#", QoS::AtMostOnce);
    let mut victim =
        h.client(ConnectSpec::v5("victim").will("will/victim", b"gone", QoS::AtMostOnce));
    assert!(h.broker.kick("victim"));
    let close = victim
        .poll_transmit()
        .expect_err("the kicked connection closes");
    assert_eq!(close.reason, CloseReason::AdministrativeAction);
    let packets = victim.received();
    assert!(
        matches!(packets.as_slice(), [Packet::Disconnect(d)] if d.reason_code == ReasonCode::ADMINISTRATIVE_ACTION),
        "{packets:?}"
    );
    victim.finish();
    let wills = watcher.transmit_publishes();
    assert_eq!(wills.len(), 1);
    assert_eq!(&wills[0].payload[..], b"gone");
    assert!(h.session("victim").is_none(), "expiry 0: the session ended");
    assert!(!h.broker.kick("victim"));
    assert!(!h.broker.kick("nobody"));
}

/// A kick meant for one connection does not close the connection that took its session over
/// afterwards.
#[test]
fn kick_does_not_close_a_later_connection() {
    let h = CoreHarness::new();
    let mut first = h.client(ConnectSpec::v5("same").session_expiry(60));
    assert!(h.broker.kick("same"));
    let mut second = h.client(
        ConnectSpec::v5("same")
            .clean_start(false)
            .session_expiry(60),
    );
    assert!(first.poll_transmit().is_err(), "taken over");
    second.poll_transmit().expect("the new connection stays");
}

/// Retained messages are listed in topic order in pages, and deleted without a message to
/// subscribers.
#[test]
fn retained_pages_and_delete() {
    let h = CoreHarness::new();
    let mut publisher = h.client(ConnectSpec::v5("pub"));
    for topic in ["r/c", "r/a", "r/b", "other/x"] {
        publisher
            .send(Packet::Publish(hayate_testkit::publish_packet(
                topic,
                b"v",
                QoS::AtMostOnce,
                true,
                None,
            )))
            .unwrap();
    }
    let now = h.now();
    let topics = |after: Option<&str>, limit| -> Vec<String> {
        h.broker
            .router
            .retained_page("r/#", after, limit, now)
            .iter()
            .map(|m| m.topic.to_string())
            .collect()
    };
    assert_eq!(topics(None, 2), ["r/a", "r/b"]);
    assert_eq!(topics(Some("r/b"), 2), ["r/c"]);
    let all: HashSet<_> = h
        .broker
        .router
        .retained_page("#", None, 100, now)
        .iter()
        .map(|m| m.topic.to_string())
        .collect();
    assert_eq!(all.len(), 4);

    let mut watcher = h.client(ConnectSpec::v5("watcher"));
    watcher.subscribe("r/#", QoS::AtMostOnce);
    watcher.transmit();
    assert!(h.broker.delete_retained("r/a"));
    assert!(!h.broker.delete_retained("r/a"), "already gone");
    assert_eq!(topics(None, 10), ["r/b", "r/c"]);
    assert!(watcher.transmit().is_empty(), "deleting publishes nothing");
    assert_eq!(h.broker.router.retained_count(), 3);
}

/// The subscriptions matching a topic: plain, wildcard and shared, each with its session.
#[test]
fn subscribers_of_a_topic() {
    let h = CoreHarness::new();
    let mut a = h.client(ConnectSpec::v5("a"));
    a.subscribe("s/+/t", QoS::AtLeastOnce);
    let mut b = h.client(ConnectSpec::v5("b"));
    b.subscribe("s/1/t", QoS::AtMostOnce);
    b.subscribe("$share/g/s/#", QoS::ExactlyOnce);
    let mut c = h.client(ConnectSpec::v5("c"));
    c.subscribe("other", QoS::AtMostOnce);
    let mut found: Vec<_> = h
        .broker
        .router
        .subscribers("s/1/t")
        .into_iter()
        .map(|(filter, cell, qos)| (filter.to_string(), cell.client_id.to_string(), qos))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("$share/g/s/#".into(), "b".into(), QoS::ExactlyOnce),
            ("s/+/t".into(), "a".into(), QoS::AtLeastOnce),
            ("s/1/t".into(), "b".into(), QoS::AtMostOnce),
        ]
    );
    assert!(h.broker.router.subscribers("nothing").is_empty());
}
