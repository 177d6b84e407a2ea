//! Unit tests of the store thread's writer (one batch per drain, same-key order, prefixes).
use super::*;
use bytes::Bytes;
use hayate_core::store::Recovered;
use hayate_core::store::{SessionRecord, SubscriptionData};
use std::path::Path;
use std::sync::atomic::Ordering;

fn retain(topic: &str, payload: &'static [u8]) -> StoreOp {
    StoreOp::PutRetained {
        topic: topic.into(),
        expires_at_ms: None,
        publish: Bytes::from_static(payload),
    }
}

fn session(client_id: &str) -> StoreOp {
    StoreOp::PutSession(SessionRecord {
        client_id: client_id.into(),
        expiry_interval: 60,
        protocol: 5,
        disconnected_at_ms: None,
        will: None,
    })
}

fn subscribe(client_id: &str, filter: &str) -> StoreOp {
    StoreOp::PutSubscription {
        client_id: client_id.into(),
        subscription: SubscriptionData {
            filter: filter.into(),
            options: 1,
            subscription_id: None,
        },
    }
}

fn writer(dir: &Path) -> Writer {
    Writer::new(
        dir.to_path_buf(),
        Engine::open(dir).unwrap(),
        SyncMode::Batched,
        None,
        0,
    )
}

fn write(w: &mut Writer, ops: Vec<StoreOp>, counters: &Counters) {
    assert!(w.write(&ops, counters).is_ok(), "the batch is written");
}

fn sync(w: &mut Writer, counters: &Counters) {
    assert!(w.sync(PersistMode::SyncData, counters).is_ok(), "fsynced");
}

fn topics(recovered: &Recovered) -> Vec<(&str, &[u8])> {
    recovered
        .retained
        .iter()
        .map(|(t, _, p)| (t.as_str(), &p[..]))
        .collect()
}

/// Ops on one key inside one batch: the last one wins, whatever fjall does with two
/// writes of one key under one sequence number.
#[test]
fn within_one_batch_the_last_op_on_a_key_wins() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    let counters = Counters::default();
    write(
        &mut w,
        vec![
            retain("put-then-delete", b"x"),
            StoreOp::DeleteRetained {
                topic: "put-then-delete".into(),
            },
            StoreOp::DeleteRetained {
                topic: "delete-then-put".into(),
            },
            retain("delete-then-put", b"y"),
            retain("put-put", b"old"),
            retain("put-put", b"new"),
        ],
        &counters,
    );
    assert_eq!(
        counters.batches.load(Ordering::Relaxed),
        1,
        "one drain, one batch"
    );
    assert_eq!(counters.ops_committed.load(Ordering::Relaxed), 6);
    let recovered = w.engine.as_mut().unwrap().read_all().ok().unwrap();
    assert_eq!(
        topics(&recovered),
        vec![("delete-then-put", &b"y"[..]), ("put-put", &b"new"[..])]
    );
    drop(w);
    // The same after the journal is replayed.
    let recovered = writer(dir.path())
        .engine
        .as_mut()
        .unwrap()
        .read_all()
        .ok()
        .unwrap();
    assert_eq!(topics(&recovered).len(), 2);
}

/// `DeleteSession` removes subscriptions committed earlier and those added earlier in
/// its own batch, never another client's (`a` is a prefix of `ab`).
#[test]
fn delete_session_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    let counters = Counters::default();
    write(
        &mut w,
        vec![
            session("a"),
            subscribe("a", "old"),
            session("ab"),
            subscribe("ab", "x"),
        ],
        &counters,
    );
    write(
        &mut w,
        vec![
            subscribe("a", "new"),
            StoreOp::DeleteSession {
                client_id: "a".into(),
            },
            subscribe("ab", "y"),
        ],
        &counters,
    );
    assert_eq!(counters.batches.load(Ordering::Relaxed), 2);
    drop(w);
    let mut engine = Engine::open(dir.path()).unwrap();
    assert_eq!(engine.subs.iter().count(), 2, "no stray keys of `a` left");
    let recovered = engine.read_all().ok().unwrap();
    assert_eq!(recovered.sessions.len(), 1);
    let (record, subs) = &recovered.sessions[0];
    assert_eq!(record.client_id, "ab");
    let filters: Vec<&str> = subs.iter().map(|s| s.filter.as_str()).collect();
    assert_eq!(filters, vec!["x", "y"]);
}

/// Keys fjall cannot hold are refused and counted; the rest of the batch is written and
/// nothing panics.
#[test]
fn unstorable_keys_are_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    let counters = Counters::default();
    let long = "x".repeat(70_000);
    write(
        &mut w,
        vec![
            session(""),
            StoreOp::DeleteSession {
                client_id: String::new(),
            },
            retain("", b"x"),
            retain(&long, b"x"),
            subscribe(&long, "f"),
            subscribe(&"c".repeat(40_000), &"f".repeat(40_000)),
            retain("ok", b"x"),
        ],
        &counters,
    );
    assert_eq!(counters.write_errors.load(Ordering::Relaxed), 6);
    assert_eq!(counters.ops_committed.load(Ordering::Relaxed), 1);
    assert_eq!(
        topics(&w.engine.as_mut().unwrap().read_all().ok().unwrap()),
        vec![("ok", &b"x"[..])]
    );
}

/// Not an assertion: how long one batch of 1000 small ops takes to commit and to fsync
/// here (`cargo test -p hayate-storage -- --nocapture timing`).
#[test]
fn timing_of_a_batch_of_1000_ops() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    let counters = Counters::default();
    // Warm up: the first commit creates the journal.
    write(&mut w, vec![retain("warm", b"x")], &counters);
    sync(&mut w, &counters);
    let ops: Vec<StoreOp> = (0..1000)
        .map(|i| StoreOp::PutRetained {
            topic: format!("sensors/{i}/temperature"),
            expires_at_ms: Some(1_800_000_000_000),
            publish: Bytes::from(vec![0x31; 40]),
        })
        .collect();
    let start = Instant::now();
    write(&mut w, ops, &counters);
    let committed = start.elapsed();
    let start = Instant::now();
    sync(&mut w, &counters);
    let synced = start.elapsed();
    assert_eq!(counters.ops_committed.load(Ordering::Relaxed), 1001);
    assert_eq!(counters.write_errors.load(Ordering::Relaxed), 0);
    eprintln!(
        "timing: 1000 ops (~70 B key+value each): apply+commit {committed:?}, \
         persist(SyncData) {synced:?}"
    );
}

/// Free space below the threshold stops writing as a write error does: the drain joins the
/// backlog, the store stops accepting and nothing more is reported durable; retained ops
/// published meanwhile fold by topic; once there is room the retry writes the backlog in
/// order and the store is healthy again.
#[test]
fn low_free_space_holds_writes_until_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::default();
    let mut w = writer(dir.path());
    w.space = SpaceGuard::new(dir.path().to_path_buf(), u64::MAX);
    w.drain(vec![session("c"), retain("t", b"1")], 2, &shared);
    assert!(shared.is_failing(), "not accepting");
    assert_eq!(shared.durable_now(), 0);
    for ticket in 3..1_000u64 {
        w.drain(vec![retain("t", b"2")], ticket, &shared);
    }
    assert_eq!(
        w.backlog.as_ref().map(Backlog::len),
        Some(2),
        "one session, one topic"
    );
    // Still no room: the retry leaves everything held.
    w.next_retry = Instant::now();
    w.tick(Duration::from_secs(1), &shared);
    assert!(shared.is_failing());
    w.space = SpaceGuard::new(dir.path().to_path_buf(), 0);
    w.next_retry = Instant::now();
    w.tick(Duration::from_secs(1), &shared);
    assert!(!shared.is_failing(), "healthy again");
    assert_eq!(shared.durable_now(), 999);
    let recovered = w.engine.as_mut().unwrap().read_all().ok().unwrap();
    assert_eq!(topics(&recovered), vec![("t", &b"2"[..])]);
    assert_eq!(recovered.sessions.len(), 1);
}
