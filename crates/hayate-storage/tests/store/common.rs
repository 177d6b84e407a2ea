//! Helpers shared by the store tests: opening a store, building ops, reading back what it holds.

use bytes::Bytes;
use hayate_core::store::{
    MessageBody, PageEntry, QueueEntry, Recovered, SessionRecord, Store, StoreOp, StoredMessage,
    SubscriptionData,
};
use hayate_core::Message;
use hayate_storage::{FjallStore, OnCorruption, StorageConfig, SyncMode};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn open_with(dir: &Path, sync_interval: Duration) -> (Arc<FjallStore>, Recovered) {
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

pub fn open(dir: &Path) -> (Arc<FjallStore>, Recovered) {
    open_with(dir, StorageConfig::DEFAULT_SYNC_INTERVAL)
}

pub fn record(client_id: &str, expiry: u32, disconnected_at_ms: Option<u64>) -> SessionRecord {
    SessionRecord {
        client_id: client_id.into(),
        expiry_interval: expiry,
        protocol: 5,
        disconnected_at_ms,
        will: None,
    }
}

pub fn session(client_id: &str, expiry: u32) -> StoreOp {
    StoreOp::PutSession(record(client_id, expiry, Some(1_800_000_000_000)))
}

pub fn sub(filter: &str, options: u8, subscription_id: Option<u32>) -> SubscriptionData {
    SubscriptionData {
        filter: filter.into(),
        options,
        subscription_id,
    }
}

pub fn subscribe(client_id: &str, filter: &str, options: u8) -> StoreOp {
    StoreOp::PutSubscription {
        client_id: client_id.into(),
        subscription: sub(filter, options, Some(7)),
    }
}

pub fn retain(topic: &str, payload: &'static [u8]) -> StoreOp {
    StoreOp::PutRetained {
        topic: topic.into(),
        expires_at_ms: None,
        publish: Bytes::from_static(payload),
    }
}

pub fn delete_retained(topic: &str) -> StoreOp {
    StoreOp::DeleteRetained {
        topic: topic.into(),
    }
}

/// Waits until the store thread has committed `ops` ops in all.
pub fn wait_committed(store: &FjallStore, ops: u64) {
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
pub fn sorted(mut recovered: Recovered) -> Recovered {
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
pub fn body(id: u64) -> MessageBody {
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
pub fn stored_message(id: u64) -> StoredMessage {
    let body = body(id);
    StoredMessage {
        id,
        expires_at_ms: body.expires_at_ms,
        publish: body.encode().expect("encodes"),
    }
}

pub fn enqueue(client_id: &str, seq: u64, message_id: u64, qos: u8) -> StoreOp {
    StoreOp::Enqueue {
        client_id: client_id.into(),
        entry: entry(seq, message_id, qos),
        body: body(message_id),
    }
}

pub fn entry(seq: u64, message_id: u64, qos: u8) -> QueueEntry {
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
pub fn round_trip(dir: &Path, ops: Vec<StoreOp>) -> Recovered {
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

pub fn retained_topics(recovered: &Recovered) -> Vec<(&str, &[u8])> {
    recovered
        .retained
        .iter()
        .map(|(t, _, p)| (t.as_str(), &p[..]))
        .collect()
}

/// A page of `client`'s queue, as `read_page` hands it over.
pub fn page(store: &FjallStore, client: &str, from_seq: u64, max: usize) -> Vec<PageEntry> {
    let (tx, rx) = std::sync::mpsc::channel();
    store.read_page(
        client,
        from_seq,
        max,
        Box::new(move |page| tx.send(page).expect("receiver waits")),
    );
    rx.recv_timeout(Duration::from_secs(10)).expect("a page")
}

pub fn wait_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}
