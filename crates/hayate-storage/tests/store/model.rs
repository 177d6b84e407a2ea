//! An in-memory model of what a sequence of ops leaves, and random op sequences checked against it.

use crate::common::*;
use bytes::Bytes;
use hayate_core::store::{
    PageEntry, QueueEntry, Recovered, SessionRecord, Store, StoreOp, StoredQueue, SubscriptionData,
};
use hayate_storage::FjallStore;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a sequence of ops leaves.
#[derive(Debug, Default)]
pub struct Model {
    retained: BTreeMap<String, (Option<u64>, Bytes)>,
    sessions: BTreeMap<String, SessionRecord>,
    subs: BTreeMap<(String, String), SubscriptionData>,
    queue: BTreeMap<(String, u64), QueueEntry>,
    rel: BTreeMap<(String, u64), ()>,
    inq2: BTreeMap<(String, u16), ()>,
    totals: Vec<(String, u64)>,
}

impl Model {
    pub fn apply(&mut self, op: &StoreOp) {
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
    pub fn recovered(&self) -> Recovered {
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
pub fn comparable(recovered: Recovered, store: &FjallStore, model: &Model) -> Recovered {
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
