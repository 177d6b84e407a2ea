//! The fjall side of the store: its keyspaces, reading everything back at open, and turning
//! one drained run of [`StoreOp`]s into one write batch. Owned by the store thread.

mod counts;
mod recent;

pub(crate) use counts::QueueMeta;

use crate::record::{self, Unreadable};
use counts::{Counts, PendingCounts};
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use hayate_core::store::{
    PageEntry, Recovered, StoreOp, StoredMessage, StoredQueue, SubscriptionData,
};
use recent::Recent;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

#[derive(Debug)]
pub(crate) enum ReadError {
    Engine(fjall::Error),
    Record(Unreadable),
}

impl From<fjall::Error> for ReadError {
    fn from(error: fjall::Error) -> Self {
        ReadError::Engine(error)
    }
}

impl From<Unreadable> for ReadError {
    fn from(what: Unreadable) -> Self {
        ReadError::Record(what)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Engine(error) => error.fmt(f),
            ReadError::Record(what) => what.fmt(f),
        }
    }
}

impl From<OpError> for ReadError {
    fn from(error: OpError) -> Self {
        match error {
            OpError::Read(error) => ReadError::Engine(error),
            OpError::Key(what) => ReadError::Record(Unreadable(what)),
        }
    }
}

/// Why an op cannot be part of a batch.
#[derive(Debug)]
pub(crate) enum OpError {
    /// Its key cannot be stored; the op is skipped, the rest of the batch goes on.
    Key(&'static str),
    /// Reading committed keys failed; the whole batch is dropped.
    Read(fjall::Error),
}

impl From<fjall::Error> for OpError {
    fn from(error: fjall::Error) -> Self {
        OpError::Read(error)
    }
}

/// fjall keys are 1 to 65,535 bytes (it asserts this; we check first).
fn checked_key(key: Vec<u8>, what: &'static str) -> Result<Vec<u8>, OpError> {
    if key.is_empty() || key.len() > usize::from(u16::MAX) {
        Err(OpError::Key(what))
    } else {
        Ok(key)
    }
}

/// The last value (`None`: removed) of every key a batch touches, per keyspace.
type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The effect of one drained batch. Applying ops here, in order, makes a later op win over an
/// earlier one on the same key without relying on how fjall orders two writes of one key in
/// one batch (they share a sequence number), and lets `DeleteSession` and `Dequeue` see what
/// was written earlier in the batch.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    retained: Changes,
    sessions: Changes,
    subs: Changes,
    queue: BTreeMap<Vec<u8>, Change>,
    rel: Changes,
    inq2: Changes,
    /// Message bodies, by id.
    msg: BTreeMap<u64, Change>,
    counts: PendingCounts,
}

/// The last value a batch gives a key of `queue` or `msg` (`None`: removed), and whether the
/// key is new to the store in this batch. A new key that the batch removes again (an entry
/// whose PUBACK came before the drain, and its body) is dropped from the batch: nothing is
/// written for it, not even a removal. A queue key is new when the batch had not touched it
/// before its `Enqueue`: the core never queues a seq a session has stored (its seqs increase,
/// and a deleted session's keys are removed before, or earlier in the same batch, which
/// touches them). A body is new when no entry referred to it and the batch had not touched
/// it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) new: bool,
}

impl Change {
    fn removal() -> Change {
        Change {
            value: None,
            new: false,
        }
    }
}

/// Records the removal of `key` in `changes`, or drops the key if the batch made it.
fn remove_change<K: Ord>(changes: &mut BTreeMap<K, Change>, key: K) {
    match changes.get_mut(&key) {
        Some(change) if change.new => {
            changes.remove(&key);
        }
        Some(change) => change.value = None,
        None => {
            changes.insert(key, Change::removal());
        }
    }
}

impl Pending {
    /// About how many bytes of keys and values the batch writes.
    pub(crate) fn approx_bytes(&self) -> u64 {
        [
            &self.retained,
            &self.sessions,
            &self.subs,
            &self.rel,
            &self.inq2,
            &self.counts.msgref,
            &self.counts.qmeta,
            &self.counts.meta,
        ]
        .iter()
        .flat_map(|changes| changes.iter())
        .map(|(key, value)| (key.len() + value.as_ref().map_or(0, Vec::len)) as u64)
        .chain(
            self.queue.iter().map(|(key, change)| {
                (key.len() + change.value.as_ref().map_or(0, Vec::len)) as u64
            }),
        )
        .chain(
            self.msg
                .values()
                .map(|change| 8 + change.value.as_ref().map_or(0, Vec::len) as u64),
        )
        .sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.counts.is_empty()
            && self.retained.is_empty()
            && self.sessions.is_empty()
            && self.subs.is_empty()
            && self.queue.is_empty()
            && self.rel.is_empty()
            && self.inq2.is_empty()
            && self.msg.is_empty()
    }
}

/// The engine's handles, and the counts kept beside the data (`counts.rs`).
pub(crate) struct Engine {
    pub(crate) db: Database,
    retained: Keyspace,
    sessions: Keyspace,
    pub(crate) subs: Keyspace,
    queue: Keyspace,
    rel: Keyspace,
    inq2: Keyspace,
    msg: Keyspace,
    /// How many entries refer to each message (a message whose count reaches zero is removed
    /// in the same batch), each session's queue length, the number of bodies.
    counts: Counts,
    /// The message ids of entries written lately (`recent.rs`).
    recent: Recent,
}

impl Engine {
    pub(crate) fn open(dir: &Path) -> fjall::Result<Engine> {
        // Memory that would otherwise grow with what is written (and replayed at start): at
        // most 16 MiB of memtable per keyspace and 128 MiB of journal before memtables are
        // written out (fjall's defaults: 64 MiB and 512 MiB).
        let db = Database::builder(dir)
            .max_journaling_size(128 * 1024 * 1024)
            .open()?;
        let options = || KeyspaceCreateOptions::default().max_memtable_size(16 * 1024 * 1024);
        let keyspace = |name: &str| db.keyspace(name, options);
        Ok(Engine {
            retained: keyspace("retained")?,
            sessions: keyspace("sessions")?,
            subs: keyspace("subs")?,
            queue: keyspace("queue")?,
            rel: keyspace("rel")?,
            inq2: keyspace("inq2")?,
            msg: keyspace("msg")?,
            counts: Counts::new(
                keyspace("msg")?,
                keyspace("msgref")?,
                keyspace("qmeta")?,
                keyspace("meta")?,
            ),
            recent: Recent::default(),
            db: db.clone(),
        })
    }

    /// Everything the keyspaces hold. Subscriptions and queues whose session is not stored
    /// are left out (logged); so are messages no entry refers to, which are removed.
    pub(crate) fn read_all(&mut self) -> Result<Recovered, ReadError> {
        let mut recovered = Recovered::default();
        for item in self.retained.iter() {
            let (key, value) = item.into_inner()?;
            let topic = std::str::from_utf8(&key).map_err(|_| Unreadable("retained"))?;
            let (expiry, publish) = record::read_retained(&value)?;
            recovered
                .retained
                .push((topic.to_string(), expiry, publish));
        }
        let mut subscriptions: BTreeMap<String, Vec<SubscriptionData>> = BTreeMap::new();
        for item in self.subs.iter() {
            let (key, value) = item.into_inner()?;
            let (client_id, subscription) = record::read_subscription(&key, &value)?;
            subscriptions
                .entry(client_id)
                .or_default()
                .push(subscription);
        }
        if self.counts.layout()? < counts::LAYOUT {
            self.count_once()?;
        }
        self.counts.reload()?;
        let mut queues = self.read_queues()?;
        for item in self.sessions.iter() {
            let (key, value) = item.into_inner()?;
            let session = record::read_session(&key, &value)?;
            let own = subscriptions.remove(&session.client_id).unwrap_or_default();
            if let Some(queue) = queues.remove(&session.client_id) {
                recovered.queues.push(queue);
            }
            recovered.sessions.push((session, own));
        }
        if !subscriptions.is_empty() || !queues.is_empty() {
            // The core writes a session before its subscriptions and queue, and removes all
            // of them in one batch, so this takes ops appended for a session never stored.
            tracing::warn!(
                subscriptions = subscriptions.len(),
                queues = queues.len(),
                "store_state_without_session"
            );
        }
        recovered.totals = self.counts.totals()?;
        recovered.next_message_id = match self.msg.last_key_value() {
            Some(last) => record::read_message_key(&last.key()?)? + 1,
            None => 1,
        };
        Ok(recovered)
    }

    /// Forgets cached counts and reads the totals again (after the engine was opened again).
    pub(crate) fn reload(&mut self) -> Result<(), ReadError> {
        self.counts.reload()
    }

    /// Message bodies some entry refers to.
    pub(crate) fn bodies(&self) -> u64 {
        self.counts.bodies()
    }

    /// Entries queued for sessions, on disk or about to be.
    pub(crate) fn queued(&self) -> u64 {
        self.counts.queued()
    }

    /// Every session's queue (from its summary: no entry is read), released entries and
    /// inbound QoS 2 ids.
    fn read_queues(&mut self) -> Result<BTreeMap<String, StoredQueue>, ReadError> {
        let mut queues: BTreeMap<String, StoredQueue> = BTreeMap::new();
        for (client_id, meta) in self.counts.queue_metas()? {
            let queue = queue_entry(&mut queues, client_id);
            queue.count = meta.count;
            queue.first_seq = meta.first_seq;
            queue.last_seq = meta.last_seq;
        }
        for item in self.rel.iter() {
            let (key, _) = item.into_inner()?;
            let (client_id, seq) = record::read_seq_key(&key)?;
            queue_entry(&mut queues, client_id).released.push(seq);
        }
        for item in self.inq2.iter() {
            let (key, _) = item.into_inner()?;
            let (client_id, packet_id) = record::read_packet_id_key(&key)?;
            queue_entry(&mut queues, client_id)
                .inbound_qos2
                .push(packet_id);
        }
        Ok(queues)
    }

    /// Once, for a store written before the counts existed: counts every queue entry and
    /// removes bodies no entry refers to, in one batch with the counts.
    fn count_once(&mut self) -> Result<(), ReadError> {
        let mut pending = Pending::default();
        let mut refs: HashMap<u64, u64> = HashMap::new();
        for item in self.queue.iter() {
            let (key, value) = item.into_inner()?;
            let (client_id, seq) = record::read_seq_key(&key)?;
            let entry = record::read_queue_entry(seq, &value)?;
            *refs.entry(entry.message_id).or_default() += 1;
            self.counts.queued_entry(&client_id, seq)?;
        }
        let mut orphans = 0usize;
        for item in self.msg.iter() {
            let key = item.key()?;
            let id = record::read_message_key(&key)?;
            if !refs.contains_key(&id) {
                pending.msg.insert(id, Change::removal());
                orphans += 1;
            }
        }
        for (id, count) in refs.iter().filter(|(_, count)| **count > 1) {
            pending.counts.msgref.insert(
                record::message_key(*id).to_vec(),
                Some(record::count_value(*count)),
            );
        }
        pending.counts.meta.insert(
            counts::BODIES_KEY.to_vec(),
            Some(record::count_value(refs.len() as u64)),
        );
        pending.counts.meta.insert(
            counts::LAYOUT_KEY.to_vec(),
            Some(record::count_value(counts::LAYOUT)),
        );
        tracing::info!(
            queued = self.counts.queued(),
            bodies = refs.len(),
            orphans,
            "store_counts_written"
        );
        self.commit(pending)?;
        Ok(())
    }

    /// Up to `max` queue entries of `client_id` from `from_seq` on, with their messages. An
    /// entry that cannot be read, or whose message is missing, is skipped (logged).
    pub(crate) fn read_page(
        &self,
        client_id: &str,
        from_seq: u64,
        max: usize,
    ) -> fjall::Result<Vec<PageEntry>> {
        let (Some(start), Some(end)) = (
            record::seq_key(client_id, from_seq),
            record::seq_key(client_id, u64::MAX),
        ) else {
            return Ok(Vec::new());
        };
        let mut page = Vec::new();
        for item in self.queue.range(start..=end).take(max) {
            let (key, value) = item.into_inner()?;
            let entry = match record::read_seq_key(&key)
                .and_then(|(_, seq)| record::read_queue_entry(seq, &value))
            {
                Ok(entry) => entry,
                Err(what) => {
                    tracing::warn!(client_id, %what, "store_entry_unreadable");
                    continue;
                }
            };
            let body = self.msg.get(record::message_key(entry.message_id))?;
            match body.as_deref().map(record::read_retained) {
                Some(Ok((expires_at_ms, publish))) => {
                    let id = entry.message_id;
                    page.push((
                        entry,
                        StoredMessage {
                            id,
                            expires_at_ms,
                            publish,
                        },
                    ));
                }
                _ => tracing::warn!(
                    client_id,
                    seq = entry.seq,
                    "store_message_missing_or_unreadable"
                ),
            }
        }
        Ok(page)
    }

    /// Applies one op to `pending`.
    pub(crate) fn apply(&mut self, pending: &mut Pending, op: &StoreOp) -> Result<(), OpError> {
        match op {
            StoreOp::PutRetained {
                topic,
                expires_at_ms,
                publish,
            } => {
                let key = checked_key(topic.as_bytes().to_vec(), "retained topic")?;
                let value = record::retained_value(*expires_at_ms, publish);
                pending.retained.insert(key, Some(value));
            }
            StoreOp::DeleteRetained { topic } => {
                let key = checked_key(topic.as_bytes().to_vec(), "retained topic")?;
                pending.retained.insert(key, None);
            }
            StoreOp::PutSession(session) => {
                let key = checked_key(session.client_id.as_bytes().to_vec(), "client id")?;
                pending
                    .sessions
                    .insert(key, Some(record::session_value(session)));
            }
            StoreOp::DeleteSession { client_id } => self.delete_session(pending, client_id)?,
            StoreOp::DeleteWill { client_id } => {
                let key = checked_key(client_id.as_bytes().to_vec(), "client id")?;
                let value = match pending.sessions.get(&key) {
                    Some(value) => value.clone(),
                    None => self.sessions.get(&key)?.map(|value| value.to_vec()),
                };
                if let Some(value) = value {
                    let mut record = record::read_session(&key, &value)
                        .map_err(|Unreadable(what)| OpError::Key(what))?;
                    record.will = None;
                    pending
                        .sessions
                        .insert(key, Some(record::session_value(&record)));
                }
            }
            StoreOp::PutSubscription {
                client_id,
                subscription,
            } => {
                let key = record::subscription_key(client_id, &subscription.filter)
                    .ok_or(OpError::Key("subscription"))?;
                let key = checked_key(key, "subscription")?;
                pending
                    .subs
                    .insert(key, Some(record::subscription_value(subscription)));
            }
            StoreOp::DeleteSubscription { client_id, filter } => {
                let key = record::subscription_key(client_id, filter)
                    .ok_or(OpError::Key("subscription"))?;
                let key = checked_key(key, "subscription")?;
                pending.subs.insert(key, None);
            }
            StoreOp::Enqueue {
                client_id,
                entry,
                body,
            } => {
                let key = seq_key(client_id, entry.seq)?;
                if !self.counts.is_referenced(entry.message_id)? {
                    let value = record::message_value(body).ok_or(OpError::Key("message"))?;
                    let new = !pending.msg.contains_key(&entry.message_id);
                    let value = Some(value);
                    pending.msg.insert(entry.message_id, Change { value, new });
                }
                self.counts.add_ref(&mut pending.counts, entry.message_id)?;
                self.counts.queued_entry(client_id, entry.seq)?;
                let new = !pending.queue.contains_key(&key);
                let value = Some(record::queue_entry_value(entry));
                pending.queue.insert(key, Change { value, new });
                self.recent.insert(client_id, entry.seq, entry.message_id);
            }
            StoreOp::Release { client_id, seq } => {
                let key = seq_key(client_id, *seq)?;
                self.remove_entry(pending, client_id, *seq, key.clone())?;
                pending.rel.insert(key, Some(record::marker_value()));
            }
            StoreOp::Dequeue {
                client_id,
                seq,
                released,
            } => {
                let key = seq_key(client_id, *seq)?;
                if *released {
                    pending.rel.insert(key, None);
                } else {
                    self.remove_entry(pending, client_id, *seq, key)?;
                }
            }
            StoreOp::PutTotals { totals } => {
                for (name, value) in totals {
                    self.counts.put_total(&mut pending.counts, name, *value);
                }
            }
            StoreOp::InboundQos2 {
                client_id,
                packet_id,
                awaiting,
            } => {
                let key = record::packet_id_key(client_id, *packet_id)
                    .ok_or(OpError::Key("client id"))?;
                let value = awaiting.then(record::marker_value);
                pending.inq2.insert(key, value);
            }
        }
        Ok(())
    }

    /// Removes queue entry `seq` of `client_id` (`key`; pending or committed) and drops its
    /// message's reference.
    fn remove_entry(
        &mut self,
        pending: &mut Pending,
        client_id: &str,
        seq: u64,
        key: Vec<u8>,
    ) -> Result<(), OpError> {
        let message_id = match self.recent.take(client_id, seq) {
            Some(message_id) => Some(message_id),
            None => {
                let value = match pending.queue.get(&key) {
                    Some(change) => change.value.clone(),
                    None => self.queue.get(&key)?.map(|value| value.to_vec()),
                };
                match value {
                    Some(value) => Some(
                        record::read_queue_entry(seq, &value)
                            .map_err(|Unreadable(what)| OpError::Key(what))?
                            .message_id,
                    ),
                    None => None,
                }
            }
        };
        if let Some(message_id) = message_id {
            if self.counts.drop_ref(&mut pending.counts, message_id)? {
                remove_change(&mut pending.msg, message_id);
            }
            self.counts.removed_entry(client_id, seq)?;
        }
        remove_change(&mut pending.queue, key);
        Ok(())
    }

    /// Removes a session with its subscriptions, queue, released entries and inbound QoS 2
    /// ids: committed keys under its prefix, then those written earlier in this batch.
    fn delete_session(&mut self, pending: &mut Pending, client_id: &str) -> Result<(), OpError> {
        let key = checked_key(client_id.as_bytes().to_vec(), "client id")?;
        // The prefix holds the id's length, so it never matches another client's keys.
        let prefix = record::subscription_prefix(client_id).ok_or(OpError::Key("client id"))?;
        for item in self.subs.prefix(&prefix) {
            pending.subs.insert(item.key()?.to_vec(), None);
        }
        for item in self.rel.prefix(&prefix) {
            pending.rel.insert(item.key()?.to_vec(), None);
        }
        for item in self.inq2.prefix(&prefix) {
            pending.inq2.insert(item.key()?.to_vec(), None);
        }
        let mut entries = Vec::new();
        for item in self.queue.prefix(&prefix) {
            entries.push(item.key()?.to_vec());
        }
        entries.extend(
            pending
                .queue
                .range(prefix.clone()..)
                .take_while(|(key, _)| key.starts_with(&prefix))
                .filter(|(_, change)| change.value.is_some())
                .map(|(key, _)| key.clone()),
        );
        for key in entries {
            let (_, seq) =
                record::read_seq_key(&key).map_err(|Unreadable(what)| OpError::Key(what))?;
            self.remove_entry(pending, client_id, seq, key)?;
        }
        self.recent.forget_client(client_id);
        for changes in [&mut pending.subs, &mut pending.rel, &mut pending.inq2] {
            for (_, value) in changes
                .range_mut(prefix.clone()..)
                .take_while(|(key, _)| key.starts_with(&prefix))
            {
                *value = None;
            }
        }
        pending.sessions.insert(key, None);
        Ok(())
    }

    /// Adds to `pending` the counts its ops changed that are written once per batch (also
    /// done by [`Engine::commit`]; call it first to see the batch's full size).
    pub(crate) fn finish(&mut self, pending: &mut Pending) {
        self.counts.finish(&mut pending.counts);
    }

    /// Writes `pending` as one fjall batch and commits it (written to the OS: survives a
    /// kill -9 of the process, not a power loss).
    pub(crate) fn commit(&mut self, mut pending: Pending) -> fjall::Result<()> {
        self.finish(&mut pending);
        let mut batch = self.db.batch();
        let [msgref, qmeta, meta] = self.counts.keyspaces();
        for (keyspace, entries) in [
            (&self.retained, pending.retained),
            (&self.sessions, pending.sessions),
            (&self.subs, pending.subs),
            (&self.rel, pending.rel),
            (&self.inq2, pending.inq2),
            (msgref, pending.counts.msgref),
            (qmeta, pending.counts.qmeta),
            (meta, pending.counts.meta),
        ] {
            for (key, value) in entries {
                match value {
                    Some(value) => batch.insert(keyspace, key, value),
                    None => batch.remove(keyspace, key),
                }
            }
        }
        for (key, change) in pending.queue {
            match change.value {
                Some(value) => batch.insert(&self.queue, key, value),
                None => batch.remove(&self.queue, key),
            }
        }
        for (id, change) in pending.msg {
            let key = record::message_key(id);
            match change.value {
                Some(value) => batch.insert(&self.msg, key, value),
                None => batch.remove(&self.msg, key),
            }
        }
        batch.commit()?;
        self.counts.committed();
        Ok(())
    }
}

fn seq_key(client_id: &str, seq: u64) -> Result<Vec<u8>, OpError> {
    record::seq_key(client_id, seq).ok_or(OpError::Key("client id"))
}

fn queue_entry(queues: &mut BTreeMap<String, StoredQueue>, client_id: String) -> &mut StoredQueue {
    queues
        .entry(client_id.clone())
        .or_insert_with(|| StoredQueue {
            client_id,
            ..StoredQueue::default()
        })
}

#[cfg(test)]
mod tests;
