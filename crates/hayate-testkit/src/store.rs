//! A store for sans-IO persistence tests: [`MemoryStore`] keeps the appended ops in memory and
//! lets the test decide when they are durable; [`fold`] turns ops into what an engine would
//! give back after a restart (the real engine, fjall, is tested in `hayate-storage` and end to
//! end in `hayate`'s kill -9 tests).

use hayate_core::store::{
    PageEntry, PageReply, Recovered, SessionRecord, Store, StoreOp, StoredMessage, StoredQueue,
    SubscriptionData, Ticket,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Everything appended is durable at once, unless the test holds it back ([`MemoryStore::hold`],
/// then [`MemoryStore::complete`]).
#[derive(Debug, Default)]
pub struct MemoryStore {
    ops: Mutex<Vec<StoreOp>>,
    /// Every op ever appended (and those it was made with), for pages.
    history: Mutex<Vec<StoreOp>>,
    appended: AtomicU64,
    held: AtomicBool,
    refusing: AtomicBool,
    durable: AtomicU64,
    waiting: Mutex<Vec<(Ticket, Arc<Notify>)>>,
    /// Groups: first ticket and, once closed, the last ticket appended while open.
    groups: Mutex<Vec<(Ticket, Option<Ticket>)>>,
}

impl Store for MemoryStore {
    fn append(&self, op: StoreOp) {
        let mut ops = self.ops.lock().expect("not poisoned");
        self.history.lock().expect("not poisoned").push(op.clone());
        ops.push(op);
        let ticket = self.appended.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.held.load(Ordering::SeqCst) {
            self.durable.store(ticket, Ordering::SeqCst);
        }
    }

    fn appended(&self) -> Ticket {
        self.appended.load(Ordering::SeqCst)
    }

    fn durable(&self) -> Ticket {
        self.durable.load(Ordering::SeqCst)
    }

    fn read_page(&self, client_id: &str, from_seq: u64, max: usize, reply: PageReply) {
        let history = self.history.lock().expect("not poisoned").clone();
        let page = state(&history)
            .queue
            .range((client_id.to_string(), from_seq)..=(client_id.to_string(), u64::MAX))
            .take(max)
            .map(|(_, entry)| entry.clone())
            .collect();
        reply(page);
    }

    fn begin_group(&self) -> u64 {
        let mut groups = self.groups.lock().expect("not poisoned");
        groups.push((self.appended() + 1, None));
        groups.len() as u64 - 1
    }

    fn end_group(&self, group: u64) {
        let mut groups = self.groups.lock().expect("not poisoned");
        groups[group as usize].1 = Some(self.appended());
    }

    fn accepting(&self) -> bool {
        !self.refusing.load(Ordering::SeqCst)
    }

    fn notify_when_durable(&self, ticket: Ticket, doorbell: Arc<Notify>) {
        if self.durable() >= ticket {
            doorbell.notify_one();
        } else {
            self.waiting
                .lock()
                .expect("not poisoned")
                .push((ticket, doorbell));
        }
    }
}

impl MemoryStore {
    /// A store that already holds `ops` (a restart on what an earlier store kept).
    pub fn with_history(ops: &[StoreOp]) -> MemoryStore {
        let store = MemoryStore::default();
        *store.history.lock().expect("not poisoned") = ops.to_vec();
        store
    }

    /// From now on, appended ops are durable only once [`MemoryStore::complete`] says so.
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    /// The store cannot write (`false`, as with a full disk) or can again.
    pub fn set_accepting(&self, accepting: bool) {
        self.refusing.store(!accepting, Ordering::SeqCst);
    }

    /// Everything appended so far is durable: rings those waiting.
    pub fn complete(&self) {
        let now = self.appended();
        self.durable.store(now, Ordering::SeqCst);
        self.waiting
            .lock()
            .expect("not poisoned")
            .retain(|(ticket, doorbell)| {
                let due = *ticket <= now;
                if due {
                    doorbell.notify_one();
                }
                !due
            });
    }

    /// Whether a crash may keep exactly the ops up to `ticket`: a real store writes a group
    /// in one batch, so it never keeps part of one.
    pub fn may_crash_after(&self, ticket: Ticket) -> bool {
        let groups = self.groups.lock().expect("not poisoned");
        groups.iter().all(|(start, last)| match last {
            Some(last) => ticket < *start || ticket >= *last,
            None => ticket < *start,
        })
    }

    /// Takes the ops appended since the last take.
    pub fn take(&self) -> Vec<StoreOp> {
        std::mem::take(&mut self.ops.lock().expect("not poisoned"))
    }

    /// The ops appended since the last take that are durable (a crash keeps exactly these).
    pub fn durable_ops(&self) -> Vec<StoreOp> {
        let ops = self.ops.lock().expect("not poisoned");
        let first = self.appended() - ops.len() as u64;
        let durable = self.durable().saturating_sub(first) as usize;
        ops[..durable.min(ops.len())].to_vec()
    }
}

/// Everything a store holds after some ops.
#[derive(Debug, Default)]
pub struct Held {
    retained: BTreeMap<String, (String, Option<u64>, bytes::Bytes)>,
    sessions: BTreeMap<String, SessionRecord>,
    subs: BTreeMap<(String, String), SubscriptionData>,
    /// Queued entries with their message, by client and seq.
    pub queue: BTreeMap<(String, u64), PageEntry>,
    rel: BTreeSet<(String, u64)>,
    inq2: BTreeSet<(String, u16)>,
    next_message_id: u64,
    totals: Vec<(String, u64)>,
}

/// What a store holds after `ops`.
pub fn state(ops: &[StoreOp]) -> Held {
    let Held {
        mut retained,
        mut sessions,
        mut subs,
        mut queue,
        mut rel,
        mut inq2,
        mut next_message_id,
        mut totals,
    } = Held {
        next_message_id: 1,
        ..Held::default()
    };
    let mut bodies: HashMap<u64, StoredMessage> = HashMap::new();
    for op in ops {
        match op.clone() {
            StoreOp::PutRetained {
                topic,
                expires_at_ms,
                publish,
            } => {
                retained.insert(topic.clone(), (topic, expires_at_ms, publish));
            }
            StoreOp::DeleteRetained { topic } => {
                retained.remove(&topic);
            }
            StoreOp::PutSession(record) => {
                sessions.insert(record.client_id.clone(), record);
            }
            StoreOp::DeleteWill { client_id } => {
                if let Some(record) = sessions.get_mut(&client_id) {
                    record.will = None;
                }
            }
            StoreOp::DeleteSession { client_id } => {
                sessions.remove(&client_id);
                subs.retain(|(id, _), _| *id != client_id);
                queue.retain(|(id, _), _| *id != client_id);
                rel.retain(|(id, _)| *id != client_id);
                inq2.retain(|(id, _)| *id != client_id);
            }
            StoreOp::PutSubscription {
                client_id,
                subscription,
            } => {
                subs.insert((client_id, subscription.filter.clone()), subscription);
            }
            StoreOp::DeleteSubscription { client_id, filter } => {
                subs.remove(&(client_id, filter));
            }
            StoreOp::Enqueue {
                client_id,
                entry,
                body,
            } => {
                next_message_id = next_message_id.max(entry.message_id + 1);
                let stored = bodies
                    .entry(entry.message_id)
                    .or_insert_with(|| StoredMessage {
                        id: entry.message_id,
                        expires_at_ms: body.expires_at_ms,
                        publish: body.encode().expect("a queued message encodes"),
                    })
                    .clone();
                queue.insert((client_id, entry.seq), (entry, stored));
            }
            StoreOp::Release { client_id, seq } => {
                queue.remove(&(client_id.clone(), seq));
                rel.insert((client_id, seq));
            }
            StoreOp::Dequeue {
                client_id,
                seq,
                released,
            } => {
                if released {
                    rel.remove(&(client_id, seq));
                } else {
                    queue.remove(&(client_id, seq));
                }
            }
            StoreOp::InboundQos2 {
                client_id,
                packet_id,
                awaiting,
            } => {
                if awaiting {
                    inq2.insert((client_id, packet_id));
                } else {
                    inq2.remove(&(client_id, packet_id));
                }
            }
            StoreOp::PutTotals { totals: now } => totals = now,
        }
    }
    Held {
        retained,
        sessions,
        subs,
        queue,
        rel,
        inq2,
        next_message_id,
        totals,
    }
}

/// What a store holds after `ops`, as an engine gives it back at open: subscriptions and
/// queues only for stored sessions (queued entries counted, not read).
pub fn fold(ops: &[StoreOp]) -> Recovered {
    let Held {
        retained,
        sessions,
        subs,
        queue,
        rel,
        inq2,
        next_message_id,
        totals,
    } = state(ops);
    let queues = sessions
        .keys()
        .map(|client| {
            let seqs: Vec<u64> = queue
                .keys()
                .filter(|(id, _)| id == client)
                .map(|(_, seq)| *seq)
                .collect();
            StoredQueue {
                client_id: client.clone(),
                count: seqs.len() as u64,
                first_seq: seqs.first().copied().unwrap_or(0),
                last_seq: seqs.last().copied().unwrap_or(0),
                released: rel
                    .iter()
                    .filter(|(id, _)| id == client)
                    .map(|(_, seq)| *seq)
                    .collect(),
                inbound_qos2: inq2
                    .iter()
                    .filter(|(id, _)| id == client)
                    .map(|(_, packet_id)| *packet_id)
                    .collect(),
            }
        })
        .filter(|q| q.count > 0 || !q.released.is_empty() || !q.inbound_qos2.is_empty())
        .collect();
    Recovered {
        retained: retained.into_values().collect(),
        sessions: sessions
            .into_values()
            .map(|record| {
                let own = subs
                    .iter()
                    .filter(|((id, _), _)| *id == record.client_id)
                    .map(|(_, sub)| sub.clone())
                    .collect();
                (record, own)
            })
            .collect(),
        queues,
        next_message_id,
        totals,
    }
}
