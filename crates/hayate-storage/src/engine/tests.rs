//! The counts kept beside the data: written for a store that predates them, and what a
//! restart reads from them.

use super::*;
use bytes::Bytes;
use hayate_core::store::{MessageBody, QueueEntry, SessionRecord};
use hayate_core::Message;
use std::sync::Arc;

fn enqueue(client_id: &str, seq: u64, message_id: u64) -> StoreOp {
    let message = Message::new(
        format!("m/{message_id}").as_str().into(),
        Bytes::from_static(b"payload"),
        hayate_codec::QoS::AtLeastOnce,
        false,
        Default::default(),
        None,
        Some(1),
    );
    StoreOp::Enqueue {
        client_id: client_id.into(),
        entry: QueueEntry {
            seq,
            message_id,
            qos: 1,
            retain: false,
            subscription_ids: Vec::new(),
            shared_group: None,
        },
        body: MessageBody {
            expires_at_ms: None,
            message: Arc::new(message),
        },
    }
}

fn session(client_id: &str) -> StoreOp {
    StoreOp::PutSession(SessionRecord {
        client_id: client_id.into(),
        expiry_interval: 3600,
        protocol: 5,
        disconnected_at_ms: None,
        will: None,
    })
}

fn dequeue(client_id: &str, seq: u64) -> StoreOp {
    StoreOp::Dequeue {
        client_id: client_id.into(),
        seq,
        released: false,
    }
}

fn write(engine: &mut Engine, ops: &[StoreOp]) {
    let mut pending = Pending::default();
    for op in ops {
        assert!(engine.apply(&mut pending, op).is_ok());
    }
    engine.commit(pending).expect("commit");
}

fn queues(recovered: &Recovered) -> Vec<(String, u64, u64, u64)> {
    let mut queues: Vec<_> = recovered
        .queues
        .iter()
        .map(|q| (q.client_id.clone(), q.count, q.first_seq, q.last_seq))
        .collect();
    queues.sort();
    queues
}

fn clear(keyspace: &Keyspace) {
    let keys: Vec<Vec<u8>> = keyspace
        .iter()
        .map(|item| item.key().expect("key").to_vec())
        .collect();
    for key in keys {
        keyspace.remove(key).expect("remove");
    }
}

/// A store written before the counts existed (simulated by removing them, and adding a body
/// no entry refers to) gets them counted once at open, with the orphan body removed.
#[test]
fn a_store_without_counts_gets_them_at_open() {
    let dir = tempfile::tempdir().expect("dir");
    let ops = [
        session("a"),
        session("b"),
        enqueue("a", 1, 1),
        enqueue("a", 2, 1),
        enqueue("b", 1, 2),
        enqueue("b", 2, 3),
        dequeue("b", 1),
    ];
    {
        let mut engine = Engine::open(dir.path()).expect("open");
        engine.read_all().expect("read");
        write(&mut engine, &ops);
        let [msgref, qmeta, meta] = engine.counts.keyspaces();
        for keyspace in [msgref, qmeta, meta] {
            clear(keyspace);
        }
        engine
            .msg
            .insert(record::message_key(9), b"orphan".to_vec())
            .expect("insert");
    }
    let mut engine = Engine::open(dir.path()).expect("open again");
    let recovered = engine.read_all().expect("read again");
    assert_eq!(
        queues(&recovered),
        vec![("a".into(), 2, 1, 2), ("b".into(), 1, 2, 2)]
    );
    assert_eq!((engine.queued(), engine.bodies()), (3, 2));
    assert!(engine
        .msg
        .get(record::message_key(9))
        .expect("get")
        .is_none());
    assert_eq!(engine.counts.layout().expect("layout"), counts::LAYOUT);
    // The last body id in use (3) decides the next one, not the removed orphan.
    assert_eq!(recovered.next_message_id, 4);
}

/// Counts survive a restart without any entry being read, and stay right as entries leave
/// out of order: the bounds stay bounds, the body goes with its last reference.
#[test]
fn counts_follow_entries_across_restarts() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let mut engine = Engine::open(dir.path()).expect("open");
        engine.read_all().expect("read");
        write(
            &mut engine,
            &[
                session("a"),
                session("b"),
                enqueue("a", 1, 1),
                enqueue("a", 2, 2),
                enqueue("a", 3, 3),
                enqueue("a", 4, 4),
                enqueue("b", 1, 4),
            ],
        );
        // Out of order: the middle, then the last.
        write(&mut engine, &[dequeue("a", 2), dequeue("a", 4)]);
        assert_eq!((engine.queued(), engine.bodies()), (3, 3));
    }
    let mut engine = Engine::open(dir.path()).expect("open again");
    let recovered = engine.read_all().expect("read again");
    assert_eq!(
        queues(&recovered),
        vec![("a".into(), 2, 1, 3), ("b".into(), 1, 1, 1)]
    );
    assert_eq!((engine.queued(), engine.bodies()), (3, 3));
    // Body 4 is still referred to by b's entry; its last reference takes it.
    assert!(engine
        .msg
        .get(record::message_key(4))
        .expect("get")
        .is_some());
    write(
        &mut engine,
        &[dequeue("b", 1), dequeue("a", 1), dequeue("a", 3)],
    );
    assert_eq!((engine.queued(), engine.bodies()), (0, 0));
    assert!(engine.msg.iter().next().is_none(), "every body removed");
    drop(engine);
    let mut engine = Engine::open(dir.path()).expect("open a third time");
    let recovered = engine.read_all().expect("read a third time");
    assert!(recovered.queues.is_empty(), "{:?}", recovered.queues);
    assert_eq!((engine.queued(), engine.bodies()), (0, 0));
}

/// An entry queued and removed again within one batch (its PUBACK came before the drain)
/// writes nothing, not even a removal, and neither does its body; one stored before is
/// removed for real, also when the session was deleted and its seq queued again in the batch.
#[test]
fn an_entry_queued_and_removed_in_one_batch_writes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let mut engine = Engine::open(dir.path()).expect("open");
    engine.read_all().expect("read");
    write(&mut engine, &[session("a"), enqueue("a", 1, 1)]);
    let mut pending = Pending::default();
    for op in [enqueue("a", 2, 2), dequeue("a", 2), dequeue("a", 1)] {
        assert!(engine.apply(&mut pending, &op).is_ok());
    }
    let key = |seq| record::seq_key("a", seq).expect("key");
    assert_eq!(
        pending.queue.keys().cloned().collect::<Vec<_>>(),
        vec![key(1)],
        "only the stored entry's removal"
    );
    assert_eq!(pending.queue[&key(1)], Change::removal());
    assert_eq!(pending.msg.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(pending.msg[&1], Change::removal());
    engine.commit(pending).expect("commit");
    assert_eq!((engine.queued(), engine.bodies()), (0, 0));

    // Stored, then in one batch: the session deleted and started again, the same seq queued
    // and removed. The stored entry and body must go.
    write(&mut engine, &[enqueue("a", 1, 3)]);
    let mut pending = Pending::default();
    for op in [
        StoreOp::DeleteSession {
            client_id: "a".into(),
        },
        session("a"),
        enqueue("a", 1, 4),
        dequeue("a", 1),
    ] {
        assert!(engine.apply(&mut pending, &op).is_ok());
    }
    assert_eq!(
        pending.queue.get(&key(1)),
        Some(&Change::removal()),
        "removed, not skipped"
    );
    assert_eq!(
        pending.msg.get(&3),
        Some(&Change::removal()),
        "the stored body removed"
    );
    assert_eq!(pending.msg.get(&4), None, "the new body never written");
    engine.commit(pending).expect("commit");
    assert_eq!((engine.queued(), engine.bodies()), (0, 0));
    assert!(engine.queue.iter().next().is_none());
    assert!(engine.msg.iter().next().is_none());
    drop(engine);
    let mut engine = Engine::open(dir.path()).expect("open again");
    let recovered = engine.read_all().expect("read again");
    assert!(recovered.queues.is_empty(), "{:?}", recovered.queues);
    assert_eq!((engine.queued(), engine.bodies()), (0, 0));
}
