//! `FjallStore` on a real directory: what is appended comes back after close and reopen, in
//! the order it was appended; a random op sequence ends as an in-memory model says; a writer
//! killed with SIGKILL after its batches were committed (and not fsynced) loses none of them.

use bytes::Bytes;
use hayate_core::store::{
    MessageBody, PageEntry, QueueEntry, Recovered, SessionRecord, Store, StoreOp, StoredMessage,
    StoredQueue, SubscriptionData,
};
use hayate_core::Message;
use hayate_storage::{Faults, FjallStore, OnCorruption, StorageConfig, StorageError, SyncMode};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open_with(dir: &Path, sync_interval: Duration) -> (Arc<FjallStore>, Recovered) {
    FjallStore::open(StorageConfig {
        dir: dir.to_path_buf(),
        sync_interval,
        mode: SyncMode::Batched,
        faults: None,
        on_corruption: OnCorruption::Fail,
        min_free_bytes: StorageConfig::DEFAULT_MIN_FREE_BYTES,
    })
    .expect("store opens")
}

fn open(dir: &Path) -> (Arc<FjallStore>, Recovered) {
    open_with(dir, StorageConfig::DEFAULT_SYNC_INTERVAL)
}

fn record(client_id: &str, expiry: u32, disconnected_at_ms: Option<u64>) -> SessionRecord {
    SessionRecord {
        client_id: client_id.into(),
        expiry_interval: expiry,
        protocol: 5,
        disconnected_at_ms,
        will: None,
    }
}

fn session(client_id: &str, expiry: u32) -> StoreOp {
    StoreOp::PutSession(record(client_id, expiry, Some(1_800_000_000_000)))
}

fn sub(filter: &str, options: u8, subscription_id: Option<u32>) -> SubscriptionData {
    SubscriptionData {
        filter: filter.into(),
        options,
        subscription_id,
    }
}

fn subscribe(client_id: &str, filter: &str, options: u8) -> StoreOp {
    StoreOp::PutSubscription {
        client_id: client_id.into(),
        subscription: sub(filter, options, Some(7)),
    }
}

fn retain(topic: &str, payload: &'static [u8]) -> StoreOp {
    StoreOp::PutRetained {
        topic: topic.into(),
        expires_at_ms: None,
        publish: Bytes::from_static(payload),
    }
}

fn delete_retained(topic: &str) -> StoreOp {
    StoreOp::DeleteRetained {
        topic: topic.into(),
    }
}

/// Waits until the store thread has committed `ops` ops in all.
fn wait_committed(store: &FjallStore, ops: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.stats().ops_committed < ops {
        assert!(
            Instant::now() < deadline,
            "not committed: {:?}",
            store.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sorts what a store gave back, so it can be compared.
fn sorted(mut recovered: Recovered) -> Recovered {
    recovered.retained.sort_by(|a, b| a.0.cmp(&b.0));
    recovered
        .sessions
        .sort_by(|a, b| a.0.client_id.cmp(&b.0.client_id));
    for (_, subs) in &mut recovered.sessions {
        subs.sort_by(|a, b| a.filter.cmp(&b.filter));
    }
    recovered
        .queues
        .sort_by(|a, b| a.client_id.cmp(&b.client_id));
    recovered.totals.sort();
    recovered
}

/// The body of message `id` in these tests: its topic and payload say which it is.
fn body(id: u64) -> MessageBody {
    let message = Message::new(
        format!("m/{id}").as_str().into(),
        Bytes::from(id.to_be_bytes().to_vec()),
        hayate_codec::QoS::AtLeastOnce,
        false,
        Default::default(),
        None,
        Some(1),
    );
    MessageBody {
        expires_at_ms: (id % 2 == 0).then_some(id),
        message: Arc::new(message),
    }
}

/// Message `id` as the store gives it back.
fn stored_message(id: u64) -> StoredMessage {
    let body = body(id);
    StoredMessage {
        id,
        expires_at_ms: body.expires_at_ms,
        publish: body.encode().expect("encodes"),
    }
}

fn enqueue(client_id: &str, seq: u64, message_id: u64, qos: u8) -> StoreOp {
    StoreOp::Enqueue {
        client_id: client_id.into(),
        entry: entry(seq, message_id, qos),
        body: body(message_id),
    }
}

fn entry(seq: u64, message_id: u64, qos: u8) -> QueueEntry {
    QueueEntry {
        seq,
        message_id,
        qos,
        retain: seq % 3 == 0,
        subscription_ids: if seq % 2 == 0 { vec![7] } else { vec![] },
        shared_group: (seq % 5 == 0).then(|| "$share/g/m/#".to_string()),
    }
}

/// Appends `ops` to a store on `dir`, closes it, reopens, and returns what came back (sorted).
fn round_trip(dir: &Path, ops: Vec<StoreOp>) -> Recovered {
    let (store, _) = open(dir);
    for op in ops {
        store.append(op);
    }
    store.close();
    assert_eq!(store.stats().write_errors, 0);
    drop(store);
    let (_store, recovered) = open(dir);
    sorted(recovered)
}

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

fn retained_topics(recovered: &Recovered) -> Vec<(&str, &[u8])> {
    recovered
        .retained
        .iter()
        .map(|(t, _, p)| (t.as_str(), &p[..]))
        .collect()
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

#[test]
fn a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let error = FjallStore::open(StorageConfig::new(dir.path())).expect_err("second open");
    assert!(matches!(error, StorageError::Locked(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    // Released on close.
    store.close();
    let (_again, _) = open(dir.path());
}

#[test]
fn a_directory_that_cannot_be_created_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let error = FjallStore::open(StorageConfig::new(file.join("data"))).expect_err("not a dir");
    assert!(matches!(error, StorageError::Dir { .. }), "{error:?}");
    assert!(error.to_string().contains("file/data"), "{error}");
}

/// `close` is idempotent, ops appended after it are dropped, and dropping a store that was
/// never closed writes and releases everything too.
#[test]
fn close_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    store.append(retain("before", b"x"));
    store.close();
    let stats = store.stats();
    assert_eq!((stats.ops_committed, stats.batches), (1, 1));
    assert!(stats.syncs >= 1, "close fsyncs: {stats:?}");
    // One commit and each fsync observed once in the latency histograms.
    assert_eq!(stats.commit_latency.count(), 1, "{stats:?}");
    assert_eq!(stats.sync_latency.count(), stats.syncs, "{stats:?}");
    assert_eq!(stats.sync_latency.sum_micros, stats.sync_micros);
    store.close();
    store.append(retain("after", b"x"));
    assert_eq!(store.queued(), 0);
    drop(store);

    let (store, recovered) = open(dir.path());
    assert_eq!(retained_topics(&recovered), vec![("before", &b"x"[..])]);
    store.append(retain("dropped-not-closed", b"y"));
    drop(store);
    let (_store, recovered) = open(dir.path());
    assert_eq!(recovered.retained.len(), 2);
}

/// Something committed is fsynced about one interval later, without a close.
#[test]
fn committed_ops_are_fsynced_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_with(dir.path(), Duration::from_millis(50));
    store.append(retain("t", b"x"));
    wait_committed(&store, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().syncs == 0 {
        assert!(Instant::now() < deadline, "never fsynced");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Nothing new: no more fsyncs.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(store.stats().syncs, 1);
}

/// What a sequence of ops leaves.
#[derive(Debug, Default)]
struct Model {
    retained: BTreeMap<String, (Option<u64>, Bytes)>,
    sessions: BTreeMap<String, SessionRecord>,
    subs: BTreeMap<(String, String), SubscriptionData>,
    queue: BTreeMap<(String, u64), QueueEntry>,
    rel: BTreeMap<(String, u64), ()>,
    inq2: BTreeMap<(String, u16), ()>,
    totals: Vec<(String, u64)>,
}

impl Model {
    fn apply(&mut self, op: &StoreOp) {
        match op {
            StoreOp::PutRetained {
                topic,
                expires_at_ms,
                publish,
            } => {
                self.retained
                    .insert(topic.clone(), (*expires_at_ms, publish.clone()));
            }
            StoreOp::DeleteRetained { topic } => {
                self.retained.remove(topic);
            }
            StoreOp::PutSession(r) => {
                self.sessions.insert(r.client_id.clone(), r.clone());
            }
            StoreOp::DeleteWill { client_id } => {
                if let Some(r) = self.sessions.get_mut(client_id) {
                    r.will = None;
                }
            }
            StoreOp::DeleteSession { client_id } => {
                self.sessions.remove(client_id);
                self.subs.retain(|(c, _), _| c != client_id);
                self.queue.retain(|(c, _), _| c != client_id);
                self.rel.retain(|(c, _), _| c != client_id);
                self.inq2.retain(|(c, _), _| c != client_id);
            }
            StoreOp::Enqueue {
                client_id, entry, ..
            } => {
                self.queue
                    .insert((client_id.clone(), entry.seq), entry.clone());
            }
            StoreOp::Release { client_id, seq } => {
                self.queue.remove(&(client_id.clone(), *seq));
                self.rel.insert((client_id.clone(), *seq), ());
            }
            StoreOp::Dequeue {
                client_id,
                seq,
                released,
            } => {
                let key = (client_id.clone(), *seq);
                if *released {
                    self.rel.remove(&key);
                } else {
                    self.queue.remove(&key);
                }
            }
            StoreOp::PutTotals { totals } => self.totals = totals.clone(),
            StoreOp::InboundQos2 {
                client_id,
                packet_id,
                awaiting,
            } => {
                let key = (client_id.clone(), *packet_id);
                if *awaiting {
                    self.inq2.insert(key, ());
                } else {
                    self.inq2.remove(&key);
                }
            }
            StoreOp::PutSubscription {
                client_id,
                subscription,
            } => {
                self.subs.insert(
                    (client_id.clone(), subscription.filter.clone()),
                    subscription.clone(),
                );
            }
            StoreOp::DeleteSubscription { client_id, filter } => {
                self.subs.remove(&(client_id.clone(), filter.clone()));
            }
        }
    }

    /// Whether the store may be given `op`: the core never queues two entries under one seq.
    fn allows(&self, op: &StoreOp) -> bool {
        match op {
            StoreOp::Enqueue {
                client_id, entry, ..
            } => !self.queue.contains_key(&(client_id.clone(), entry.seq)),
            _ => true,
        }
    }

    /// The entries of `client`, with their messages, in seq order (what pages give back).
    fn page(&self, client: &str) -> Vec<PageEntry> {
        self.queue
            .iter()
            .filter(|((c, _), _)| c == client)
            .map(|(_, e)| (e.clone(), stored_message(e.message_id)))
            .collect()
    }

    /// Message ids some entry refers to.
    fn bodies(&self) -> u64 {
        let ids: std::collections::BTreeSet<u64> =
            self.queue.values().map(|e| e.message_id).collect();
        ids.len() as u64
    }

    /// What a store holding this should give back (sorted; `next_message_id` left 0).
    /// Subscriptions and queues of a client without a session are not given back.
    fn recovered(&self) -> Recovered {
        let queues = self
            .sessions
            .keys()
            .map(|client| {
                let seqs: Vec<u64> = self
                    .queue
                    .keys()
                    .filter(|(c, _)| c == client)
                    .map(|(_, seq)| *seq)
                    .collect();
                StoredQueue {
                    client_id: client.clone(),
                    count: seqs.len() as u64,
                    first_seq: seqs.first().copied().unwrap_or(0),
                    last_seq: seqs.last().copied().unwrap_or(0),
                    released: self
                        .rel
                        .keys()
                        .filter(|(c, _)| c == client)
                        .map(|(_, seq)| *seq)
                        .collect(),
                    inbound_qos2: self
                        .inq2
                        .keys()
                        .filter(|(c, _)| c == client)
                        .map(|(_, id)| *id)
                        .collect(),
                }
            })
            .filter(|q| q.count > 0 || !q.released.is_empty() || !q.inbound_qos2.is_empty())
            .collect();
        Recovered {
            queues,
            next_message_id: 0,
            totals: {
                let mut totals = self.totals.clone();
                totals.sort();
                totals
            },
            retained: self
                .retained
                .iter()
                .map(|(t, (e, p))| (t.clone(), *e, p.clone()))
                .collect(),
            sessions: self
                .sessions
                .values()
                .map(|r| {
                    let subs = self
                        .subs
                        .iter()
                        .filter(|((c, _), _)| *c == r.client_id)
                        .map(|(_, s)| s.clone())
                        .collect();
                    (r.clone(), subs)
                })
                .collect(),
        }
    }
}

fn op_strategy() -> impl Strategy<Value = StoreOp> {
    let client = prop::sample::select(vec!["a", "ab", "a\0b", "b"]);
    let name = prop::sample::select(vec!["x", "x/y", "+/y", "#", "$share/g/x"]);
    prop_oneof![
        (
            name.clone(),
            any::<Option<u64>>(),
            prop::collection::vec(any::<u8>(), 0..8)
        )
            .prop_map(|(t, e, p)| StoreOp::PutRetained {
                topic: t.into(),
                expires_at_ms: e,
                publish: Bytes::from(p),
            }),
        name.clone().prop_map(delete_retained),
        (client.clone(), any::<u32>(), 3u8..6, any::<Option<u64>>()).prop_map(|(c, e, p, d)| {
            StoreOp::PutSession(SessionRecord {
                client_id: c.into(),
                expiry_interval: e,
                protocol: p,
                disconnected_at_ms: d,
                will: None,
            })
        }),
        client.clone().prop_map(|c| StoreOp::DeleteSession {
            client_id: c.into()
        }),
        (client.clone(), name.clone(), 0u8..64, any::<Option<u32>>()).prop_map(|(c, f, o, i)| {
            StoreOp::PutSubscription {
                client_id: c.into(),
                subscription: sub(f, o, i),
            }
        }),
        (client.clone(), name).prop_map(|(c, f)| StoreOp::DeleteSubscription {
            client_id: c.into(),
            filter: f.into(),
        }),
        (client.clone(), 1u64..6, 1u64..5, 1u8..3)
            .prop_map(|(c, seq, id, qos)| enqueue(c, seq, id, qos)),
        (client.clone(), 1u64..6).prop_map(|(c, seq)| StoreOp::Release {
            client_id: c.into(),
            seq,
        }),
        (client.clone(), 1u64..6, any::<bool>()).prop_map(|(c, seq, released)| {
            StoreOp::Dequeue {
                client_id: c.into(),
                seq,
                released,
            }
        }),
        (0u64..1_000).prop_map(|v| StoreOp::PutTotals {
            totals: vec![
                ("publish_received".into(), v),
                ("bytes_sent".into(), v * 10)
            ],
        }),
        (client, 1u16..4, any::<bool>()).prop_map(|(c, packet_id, awaiting)| {
            StoreOp::InboundQos2 {
                client_id: c.into(),
                packet_id,
                awaiting,
            }
        }),
    ]
}

/// `recovered` as the model gives it: sorted, and with `next_message_id` checked against
/// the store's queue and cleared (the store may have used ids no entry refers to any more).
/// Also checks every client's queue page by page, and the bodies on disk.
fn comparable(recovered: Recovered, store: &FjallStore, model: &Model) -> Recovered {
    let mut recovered = sorted(recovered);
    let highest = model
        .queue
        .values()
        .map(|e| e.message_id)
        .max()
        .unwrap_or(0);
    assert!(recovered.next_message_id > highest, "{recovered:?}");
    recovered.next_message_id = 0;
    let clients: std::collections::BTreeSet<&String> = model.queue.keys().map(|(c, _)| c).collect();
    for client in clients {
        let mut read = page(store, client, 0, 2);
        if let Some(next) = read.last().map(|(e, _)| e.seq + 1) {
            read.extend(page(store, client, next, 1_000));
        }
        assert_eq!(read, model.page(client), "{client}");
    }
    assert_eq!(store.stats().bodies, model.bodies(), "bodies on disk");
    // A queue's seqs are bounds (exact only while entries leave in queue order): check them as
    // bounds, then compare the rest exactly.
    for queue in &mut recovered.queues {
        let seqs: Vec<u64> = model
            .queue
            .keys()
            .filter(|(c, _)| *c == queue.client_id)
            .map(|(_, seq)| *seq)
            .collect();
        let (first, last) = match (seqs.first(), seqs.last()) {
            (Some(first), Some(last)) => (*first, *last),
            _ => (0, 0),
        };
        if seqs.is_empty() {
            assert_eq!((queue.first_seq, queue.last_seq), (0, 0), "{queue:?}");
        } else {
            assert!(
                queue.first_seq <= first && queue.last_seq >= last,
                "{queue:?} holds seqs {seqs:?}"
            );
        }
        (queue.first_seq, queue.last_seq) = (first, last);
    }
    recovered
}

/// A page of `client`'s queue, as `read_page` hands it over.
fn page(store: &FjallStore, client: &str, from_seq: u64, max: usize) -> Vec<PageEntry> {
    let (tx, rx) = std::sync::mpsc::channel();
    store.read_page(
        client,
        from_seq,
        max,
        Box::new(move |page| tx.send(page).expect("receiver waits")),
    );
    rx.recv_timeout(Duration::from_secs(10)).expect("a page")
}

proptest! {
    // No regression file: integration tests have no lib.rs for proptest to put it beside.
    #![proptest_config(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    /// Random ops, applied to the model and appended to the store with random pauses (so
    /// drains, hence batches, fall anywhere), with a close and reopen at a random point and at
    /// the end: the store gives back what the model holds.
    #[test]
    fn random_ops_end_as_the_model_says(
        ops in prop::collection::vec((op_strategy(), any::<bool>()), 0..80),
        reopen_at in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let reopen_at = reopen_at.index(ops.len() + 1);
        let mut model = Model::default();
        let (mut store, _) = open(dir.path());
        for (i, (op, pause)) in ops.iter().enumerate() {
            if i == reopen_at {
                store.close();
                drop(store);
                let recovered;
                (store, recovered) = open(dir.path());
                prop_assert_eq!(comparable(recovered, &store, &model), model.recovered());
            }
            if !model.allows(op) {
                continue;
            }
            model.apply(op);
            store.append(op.clone());
            if *pause {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        store.close();
        prop_assert_eq!(store.stats().write_errors, 0);
        drop(store);
        let (store, recovered) = open(dir.path());
        prop_assert_eq!(comparable(recovered, &store, &model), model.recovered());
    }
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

/// While writes fail nothing more becomes durable and the store says it is not accepting;
/// once they work again it writes everything appended meanwhile, in order, by itself.
#[test]
fn failed_writes_hold_durability_and_recover_by_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let open_faulty = || {
        let mut config = StorageConfig::new(dir.path());
        config.faults = Some(faults.clone());
        FjallStore::open(config).expect("store opens")
    };
    let (store, _) = open_faulty();
    store.append(retain("before", b"1"));
    wait_until(|| store.durable() == store.appended());
    faults.set_failing(true);
    store.append(retain("during", b"2"));
    let during = store.appended();
    wait_until(|| !store.accepting());
    assert!(store.durable() < during, "a failed write is not durable");
    assert!(!store.stats().healthy);
    store.append(enqueue("c", 1, 5, 1));
    store.append(session("c", 60));
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(store.durable() < during, "still failing: still not durable");
    faults.set_failing(false);
    wait_until(|| store.accepting() && store.durable() == store.appended());
    assert!(store.stats().healthy);
    store.close();
    drop(store);
    let (_store, recovered) = open(dir.path());
    let recovered = sorted(recovered);
    assert_eq!(
        recovered
            .retained
            .iter()
            .map(|r| r.0.as_str())
            .collect::<Vec<_>>(),
        vec!["before", "during"]
    );
    assert_eq!(
        recovered.queues.len(),
        1,
        "the backlog was written in order"
    );
    assert_eq!(
        page(&_store, "c", 1, 10),
        vec![(entry(1, 5, 1), stored_message(5))]
    );
}

/// Ops appended while a group is open are written together once it closes, never in part;
/// ops appended before it go on being written.
#[test]
fn a_group_is_written_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    store.append(retain("before", b"1"));
    let group = store.begin_group();
    store.append(enqueue("c", 1, 5, 2));
    wait_until(|| store.durable() == 1);
    store.append(enqueue("d", 1, 5, 2));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(store.durable(), 1, "nothing of an open group is written");
    let batches = store.stats().batches;
    store.end_group(group);
    wait_until(|| store.durable() == store.appended());
    assert_eq!(store.stats().batches, batches + 1, "in one batch");
}

fn wait_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Fills a store in `dir` with 200 retained messages and closes it.
fn filled(dir: &Path) {
    let (store, _) = open(dir);
    for i in 0..200 {
        store.append(StoreOp::PutRetained {
            topic: format!("t/{i}"),
            expires_at_ms: None,
            publish: Bytes::from(vec![i as u8; 100]),
        });
    }
    store.close();
}

/// The files fjall keeps in `dir` (not its lock), with their sizes.
fn store_files(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files.push((entry.path(), meta.len()));
            }
        }
    }
    files.sort();
    files
}

/// The table files of a closed store (fjall writes the memtables out at close).
fn tables(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let tables: Vec<_> = store_files(dir)
        .into_iter()
        .filter(|(path, len)| *len > 0 && path.parent().is_some_and(|p| p.ends_with("tables")))
        .collect();
    assert!(!tables.is_empty(), "a closed store has a table file");
    tables
}

/// A bit flipped in a table file, or a table file cut short, is damage: the store does not
/// open, and the error names the directory and the way out; with `OnCorruption::MoveAside`
/// the directory is renamed and the broker gets an empty store.
#[test]
fn a_damaged_store_is_refused_or_moved_aside() {
    for damage in ["bit flip", "truncated"] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        filled(&data);
        for (path, len) in tables(&data) {
            let mut bytes = std::fs::read(&path).unwrap();
            match damage {
                "bit flip" => bytes[(len / 2) as usize] ^= 0x10,
                _ => bytes.truncate((len / 2) as usize),
            }
            std::fs::write(&path, bytes).unwrap();
        }
        let error = FjallStore::open(StorageConfig::new(&data))
            .err()
            .unwrap_or_else(|| panic!("{damage}: a damaged store opened"));
        assert!(error.is_corruption(), "{damage}: {error}");
        let message = error.to_string();
        assert!(
            message.contains(&data.display().to_string()) && message.contains("move_aside"),
            "{damage}: {message}"
        );
        let mut config = StorageConfig::new(&data);
        config.on_corruption = OnCorruption::MoveAside;
        let (store, recovered) = FjallStore::open(config).expect("moved aside, opened empty");
        assert!(recovered.retained.is_empty(), "{damage}: starts empty");
        store.close();
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("data.corrupt-"))
            .collect();
        assert_eq!(
            aside.len(),
            1,
            "{damage}: the damaged store is kept beside it"
        );
    }
}

const CHILD_ENV: &str = "HAYATE_STORAGE_KILL9_DIR";
const CHILD_OPS: u64 = 3_000;

/// The ops of the kill -9 writer: retained messages, sessions and their subscriptions, some
/// deleted again.
fn child_op(i: u64) -> StoreOp {
    match i % 3 {
        0 => StoreOp::PutRetained {
            topic: format!("t/{i}"),
            expires_at_ms: Some(i),
            publish: Bytes::from(i.to_be_bytes().to_vec()),
        },
        1 => session(&format!("c{i}"), 60),
        _ => subscribe(&format!("c{}", i - 1), &format!("f/{i}"), 1),
    }
}

/// The writer process of `committed_batches_survive_kill_9` (does nothing in a normal run):
/// appends, waits until the store thread has committed everything, says so, and waits to be
/// killed, never closing the store. Its fsync interval is an hour: nothing it commits is
/// fsynced by it.
#[test]
fn kill_9_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (store, _) = open_with(Path::new(&dir), Duration::from_secs(3600));
    for i in 0..CHILD_OPS {
        store.append(child_op(i));
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    wait_committed(&store, CHILD_OPS);
    let stats = store.stats();
    println!(
        "committed ops={} batches={} syncs={}",
        stats.ops_committed, stats.batches, stats.syncs
    );
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn committed_batches_survive_kill_9() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_9_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("child");
    // libtest prints "test kill_9_child ... " before the child's own output, on that line.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("committed ops=") {
                let _ = tx.send(line[at..].to_string());
                break;
            }
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(line) => line,
        Err(error) => {
            let _ = child.kill();
            panic!(
                "the child never said it committed ({error}): {:?}",
                child.wait()
            );
        }
    };
    eprintln!("child: {line}");
    assert!(line.ends_with("syncs=0"), "the child fsynced: {line}");
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");

    let (store, recovered) = open(dir.path());
    let mut model = Model::default();
    for i in 0..CHILD_OPS {
        model.apply(&child_op(i));
    }
    assert_eq!(recovered.retained.len(), 1_000);
    assert_eq!(recovered.sessions.len(), 1_000);
    assert_eq!(
        comparable(recovered, &store, &model),
        model.recovered(),
        "every committed op survived"
    );
}

/// Held acknowledgements rely on this: an appended op gets the next ticket, the ticket becomes
/// durable once its batch is committed, and a doorbell registered for it is rung then.
#[test]
fn appended_ops_become_durable_and_ring_their_doorbell() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let dir = tempfile::tempdir().unwrap();
    // An fsync interval of an hour: durable in `batched` means committed, not fsynced.
    let (store, _) = open_with(dir.path(), Duration::from_secs(3600));
    assert_eq!((store.appended(), store.durable()), (0, 0));
    store.append(retain("t/1", b"a"));
    store.append(retain("t/2", b"b"));
    let ticket = store.appended();
    assert_eq!(ticket, 2);
    let doorbell = Arc::new(tokio::sync::Notify::new());
    store.notify_when_durable(ticket, doorbell.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.durable() < ticket {
        assert!(Instant::now() < deadline, "never durable");
        std::thread::sleep(Duration::from_millis(1));
    }
    let rung = std::pin::pin!(doorbell.notified())
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    assert!(rung, "the doorbell was rung when the ticket became durable");
    assert_eq!(store.stats().syncs, 0, "committed, not yet fsynced");
    // Asking for a ticket that is already durable rings at once.
    let late = Arc::new(tokio::sync::Notify::new());
    store.notify_when_durable(1, late.clone());
    let rung = std::pin::pin!(late.notified())
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    assert!(rung);
}
