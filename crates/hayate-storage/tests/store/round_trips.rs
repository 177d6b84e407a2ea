//! What is appended comes back after close and reopen: every op kind, later ops win, queues.

use crate::common::*;
use bytes::Bytes;
use hayate_core::store::{Recovered, Store, StoreOp, StoredQueue};

#[test]
fn every_op_kind_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let recovered = round_trip(
        dir.path(),
        vec![
            StoreOp::PutSession(record("dev-1", 3600, Some(1_800_000_000_000))),
            StoreOp::PutSession(record("dev-2", u32::MAX, None)),
            StoreOp::PutSession(record("gone", 10, None)),
            StoreOp::PutSubscription {
                client_id: "dev-1".into(),
                subscription: sub("cmd/#", 0b10_1101, Some(268_435_455)),
            },
            StoreOp::PutSubscription {
                client_id: "dev-1".into(),
                subscription: sub("$share/g/x", 1, None),
            },
            StoreOp::PutSubscription {
                client_id: "dev-1".into(),
                subscription: sub("dropped", 2, None),
            },
            StoreOp::DeleteSubscription {
                client_id: "dev-1".into(),
                filter: "dropped".into(),
            },
            subscribe("gone", "x", 0),
            StoreOp::DeleteSession {
                client_id: "gone".into(),
            },
            retain("state/a", b"publish-a"),
            StoreOp::PutRetained {
                topic: "state/b".into(),
                expires_at_ms: Some(42),
                publish: Bytes::from_static(b"publish-b"),
            },
            retain("state/c", b"publish-c"),
            delete_retained("state/c"),
        ],
    );
    let expected = Recovered {
        retained: vec![
            ("state/a".into(), None, Bytes::from_static(b"publish-a")),
            ("state/b".into(), Some(42), Bytes::from_static(b"publish-b")),
        ],
        sessions: vec![
            (
                record("dev-1", 3600, Some(1_800_000_000_000)),
                vec![
                    sub("$share/g/x", 1, None),
                    sub("cmd/#", 0b10_1101, Some(268_435_455)),
                ],
            ),
            (record("dev-2", u32::MAX, None), vec![]),
        ],
        queues: vec![],
        next_message_id: 1,
        totals: vec![],
    };
    assert_eq!(recovered, expected);
    // A second open changes nothing; a third sees the deletes of the second.
    let recovered = round_trip(dir.path(), vec![]);
    assert_eq!(recovered, expected);
    let recovered = round_trip(
        dir.path(),
        vec![
            delete_retained("state/a"),
            StoreOp::DeleteSession {
                client_id: "dev-1".into(),
            },
        ],
    );
    assert_eq!(recovered.retained.len(), 1);
    assert_eq!(
        recovered.sessions,
        vec![(record("dev-2", u32::MAX, None), vec![])]
    );
}

/// Put then delete ends deleted, delete then put ends present: appended together (most likely
/// one drain; `src/store.rs` tests the single batch exactly) and in separate batches.
#[test]
fn later_ops_win_within_and_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let recovered = round_trip(
        dir.path(),
        vec![
            retain("t/1", b"old"),
            retain("t/1", b"new"),
            retain("t/2", b"gone"),
            delete_retained("t/2"),
            delete_retained("t/3"),
            retain("t/3", b"back"),
        ],
    );
    assert_eq!(
        retained_topics(&recovered),
        vec![("t/1", &b"new"[..]), ("t/3", &b"back"[..])]
    );

    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let steps = [
        retain("put-then-delete", b"x"),
        delete_retained("put-then-delete"),
        delete_retained("delete-then-put"),
        retain("delete-then-put", b"y"),
    ];
    for (n, op) in steps.into_iter().enumerate() {
        store.append(op);
        wait_committed(&store, n as u64 + 1);
    }
    assert_eq!(store.stats().batches, 4, "one batch per op");
    store.close();
    drop(store);
    let (_store, recovered) = open(dir.path());
    assert_eq!(
        retained_topics(&recovered),
        vec![("delete-then-put", &b"y"[..])]
    );
}

#[test]
fn deleting_a_session_removes_its_subscriptions_only() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    for op in [
        session("a", 60),
        subscribe("a", "x/#", 0),
        session("ab", 60),
        subscribe("ab", "y/#", 0),
        session("a\0b", 60),
        subscribe("a\0b", "n", 0),
        session("", 60),
    ] {
        store.append(op);
    }
    store.close();
    assert_eq!(
        store.stats().write_errors,
        1,
        "an empty client id cannot be a key"
    );
    drop(store);
    let recovered = round_trip(
        dir.path(),
        vec![
            StoreOp::DeleteSession {
                client_id: "a".into(),
            },
            // A new session under the same id after the delete keeps what comes after it.
            session("a", 60),
            subscribe("a", "z", 1),
        ],
    );
    let got: Vec<(&str, Vec<&str>)> = recovered
        .sessions
        .iter()
        .map(|(r, s)| {
            (
                r.client_id.as_str(),
                s.iter().map(|s| s.filter.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![("a", vec!["z"]), ("a\0b", vec!["n"]), ("ab", vec!["y/#"])]
    );
}

/// A message queued for three sessions is stored once, stays while any entry refers to it,
/// and goes with the last; a released entry and inbound QoS 2 ids come back; a deleted
/// session takes its queue with it.
#[test]
fn queues_share_message_bodies_and_go_with_their_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut ops = vec![session("a", 60), session("b", 60), session("c", 60)];
    for client in ["a", "b", "c"] {
        ops.push(enqueue(client, 1, 10, 1));
        ops.push(enqueue(client, 2, 11, 2));
    }
    ops.extend([
        StoreOp::Release {
            client_id: "b".into(),
            seq: 2,
        },
        StoreOp::InboundQos2 {
            client_id: "b".into(),
            packet_id: 9,
            awaiting: true,
        },
        StoreOp::Dequeue {
            client_id: "a".into(),
            seq: 1,
            released: false,
        },
    ]);
    let recovered = round_trip(dir.path(), ops);
    assert_eq!(recovered.next_message_id, 12);
    let queue = |client: &str| {
        recovered
            .queues
            .iter()
            .find(|q| q.client_id == client)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!((queue("a").count, queue("a").first_seq), (1, 2));
    assert_eq!((queue("b").count, queue("b").first_seq), (1, 1));
    assert_eq!(
        (queue("b").released, queue("b").inbound_qos2),
        (vec![2], vec![9])
    );
    assert_eq!((queue("c").count, queue("c").last_seq), (2, 2));
    let (store, _) = open(dir.path());
    assert_eq!(store.stats().bodies, 2, "10 and 11, once each");
    assert_eq!(
        page(&store, "a", 0, 10),
        vec![(entry(2, 11, 2), stored_message(11))]
    );
    assert_eq!(
        page(&store, "c", 2, 10),
        vec![(entry(2, 11, 2), stored_message(11))]
    );
    store.close();
    drop(store);
    // The last entries referring to 10 go (one acknowledged, one with its session).
    let recovered = round_trip(
        dir.path(),
        vec![
            StoreOp::Dequeue {
                client_id: "b".into(),
                seq: 1,
                released: false,
            },
            StoreOp::DeleteSession {
                client_id: "c".into(),
            },
        ],
    );
    assert_eq!(recovered.queues.len(), 2, "{:?}", recovered.queues);
    let (store, _) = open(dir.path());
    assert_eq!(store.stats().bodies, 1, "10 went with its last entry");
    store.close();
    drop(store);
    // Once released and completed, `b` keeps only its inbound id.
    let recovered = round_trip(
        dir.path(),
        vec![
            StoreOp::Dequeue {
                client_id: "b".into(),
                seq: 2,
                released: true,
            },
            StoreOp::DeleteSession {
                client_id: "a".into(),
            },
        ],
    );
    let (store, _) = open(dir.path());
    assert_eq!(store.stats().bodies, 0);
    store.close();
    drop(store);
    assert_eq!(
        recovered.queues,
        vec![StoredQueue {
            client_id: "b".into(),
            inbound_qos2: vec![9],
            ..StoredQueue::default()
        }]
    );
}
