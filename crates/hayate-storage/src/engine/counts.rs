//! Counts kept beside the data they count, so that opening the store reads neither every queue
//! entry nor every message body: how many queue entries refer to each stored body (`msgref`,
//! only for bodies shared by two entries or more: a stored body without a count has one, the
//! common case, which then costs no write),
//! each session's queue length and seq bounds (`qmeta`), and how many bodies are stored
//! (`meta`). Each count is written in the same batch as the change it counts, so the two can
//! never disagree on disk. In memory there is only a cache of the counts touched lately, which
//! holds every count changed by the batch being built (the keyspaces have the rest) and is
//! emptied after a commit once it grows past a bound: memory does not grow with what is
//! queued.
//!
//! Writes are kept to what changes on disk: a `msgref` record is written only when a count
//! goes above one or comes back from there (a count of one or zero is its absence, so most
//! bodies never have one, and never get a removal either); the number of bodies and each
//! session's summary are written once per batch, with their final value ([`Counts::finish`]).
//! An id at or above `fresh_from` that the cache does not hold has a count of zero, known
//! without a read; message ids are handed out in increasing order, so a new message's id is
//! there.

use super::{Changes, OpError};
use crate::record::{self, Unreadable};
use fjall::Keyspace;
use std::collections::HashMap;

/// Cached message counts kept across commits at most (about 40 bytes each).
const REFS_CACHED: usize = 100_000;
/// Cached queue summaries kept across commits at most.
const QUEUES_CACHED: usize = 10_000;

/// The `meta` key holding the number of stored bodies.
pub(super) const BODIES_KEY: &[u8] = b"bodies";
/// The prefix of the `meta` keys holding the broker's lifetime counters (`total/NAME`).
const TOTAL_PREFIX: &[u8] = b"total/";
/// The `meta` key holding the layout version of the keyspaces.
pub(super) const LAYOUT_KEY: &[u8] = b"layout";
/// Layout 2: the counts of this module exist. Stores written before them (no `layout` key)
/// get them counted once at open.
pub(super) const LAYOUT: u64 = 2;

/// One session's queue as `qmeta` keeps it. The bounds are cheap to keep exactly only for
/// removals in queue order, so they are bounds: no entry lies below `first_seq` or above
/// `last_seq`. Both are exact while entries are removed in the order they were queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueMeta {
    pub count: u64,
    pub first_seq: u64,
    pub last_seq: u64,
}

/// The changes of one batch to the counts (beside the engine's own [`super::Pending`]).
#[derive(Debug, Default)]
pub(super) struct PendingCounts {
    pub msgref: Changes,
    pub qmeta: Changes,
    pub meta: Changes,
}

impl PendingCounts {
    pub fn is_empty(&self) -> bool {
        self.msgref.is_empty() && self.qmeta.is_empty() && self.meta.is_empty()
    }
}

/// The counts' keyspaces and cache.
pub(super) struct Counts {
    /// The bodies (read only, to tell a body with one reference from none).
    msg: Keyspace,
    msgref: Keyspace,
    qmeta: Keyspace,
    meta: Keyspace,
    /// Counts of bodies touched since the cache was last emptied. A zero count is dropped
    /// from it when the id is at or above `fresh_from`.
    refs: HashMap<u64, u32>,
    /// An id at or above this one that `refs` does not hold has a count of zero: when it was
    /// set no body at or above it was stored (the highest stored id + 1 at open, the highest
    /// id touched + 1 when `refs` was emptied), and since then `refs` has held every id
    /// touched whose count is above zero.
    fresh_from: u64,
    /// The highest id touched since the cache was last emptied.
    max_touched: u64,
    /// Session summaries, each with whether the batch being built changed it.
    queues: HashMap<String, (QueueMeta, bool)>,
    /// The sessions whose summary the batch being built changed (written by
    /// [`Counts::finish`]).
    dirty_queues: Vec<String>,
    bodies: u64,
    /// The number of bodies changed in the batch being built.
    bodies_dirty: bool,
    queued: u64,
}

impl Counts {
    pub fn new(msg: Keyspace, msgref: Keyspace, qmeta: Keyspace, meta: Keyspace) -> Counts {
        Counts {
            msg,
            msgref,
            qmeta,
            meta,
            refs: HashMap::new(),
            fresh_from: u64::MAX,
            max_touched: 0,
            queues: HashMap::new(),
            dirty_queues: Vec::new(),
            bodies: 0,
            bodies_dirty: false,
            queued: 0,
        }
    }

    /// The keyspaces, for the batch that commits [`PendingCounts`].
    pub fn keyspaces(&self) -> [&Keyspace; 3] {
        [&self.msgref, &self.qmeta, &self.meta]
    }

    /// Bodies stored.
    pub fn bodies(&self) -> u64 {
        self.bodies
    }

    /// Queue entries stored.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// The layout version the store was written with (0: before these counts existed).
    pub fn layout(&self) -> fjall::Result<u64> {
        Ok(match self.meta.get(LAYOUT_KEY)? {
            Some(value) => record::read_count(&value).unwrap_or(0),
            None => 0,
        })
    }

    /// Forgets the cache and reads the totals again (at open, and after the engine was opened
    /// again following a failed write). One read per session with a queue, none per entry.
    pub fn reload(&mut self) -> Result<(), super::ReadError> {
        self.refs.clear();
        self.queues.clear();
        self.dirty_queues.clear();
        self.bodies_dirty = false;
        // No body is stored at or above the last one's id + 1, so no count either.
        self.fresh_from = match self.msg.last_key_value() {
            Some(last) => record::read_message_key(&last.key()?)?.saturating_add(1),
            None => 0,
        };
        self.max_touched = 0;
        self.bodies = match self.meta.get(BODIES_KEY)? {
            Some(value) => record::read_count(&value)?,
            None => 0,
        };
        let mut queued = 0u64;
        for item in self.qmeta.iter() {
            let value = item.value()?;
            queued += record::read_queue_meta(&value)?.count;
        }
        self.queued = queued;
        Ok(())
    }

    /// Stores lifetime counter `name` (replacing its value).
    pub fn put_total(&self, pending: &mut PendingCounts, name: &str, value: u64) {
        let key = [TOTAL_PREFIX, name.as_bytes()].concat();
        pending.meta.insert(key, Some(record::count_value(value)));
    }

    /// The lifetime counters stored (at open).
    pub fn totals(&self) -> Result<Vec<(String, u64)>, super::ReadError> {
        let mut totals = Vec::new();
        for item in self.meta.prefix(TOTAL_PREFIX) {
            let (key, value) = item.into_inner()?;
            let name = std::str::from_utf8(&key[TOTAL_PREFIX.len()..])
                .map_err(|_| Unreadable("counter name"))?;
            totals.push((name.to_string(), record::read_count(&value)?));
        }
        Ok(totals)
    }

    /// Every session's queue summary (at open).
    pub fn queue_metas(&self) -> Result<Vec<(String, QueueMeta)>, super::ReadError> {
        let mut metas = Vec::new();
        for item in self.qmeta.iter() {
            let (key, value) = item.into_inner()?;
            metas.push((
                record::read_client_key(&key)?,
                record::read_queue_meta(&value)?,
            ));
        }
        Ok(metas)
    }

    fn ref_count(&mut self, message_id: u64) -> Result<u32, OpError> {
        if let Some(count) = self.refs.get(&message_id) {
            return Ok(*count);
        }
        if message_id >= self.fresh_from {
            // Never stored (see `fresh_from`); not cached, as zero counts there are not.
            return Ok(0);
        }
        let count = match self.msgref.get(record::message_key(message_id))? {
            Some(value) => record::read_count(&value)
                .ok()
                .and_then(|count| u32::try_from(count).ok())
                .ok_or(OpError::Key("message reference count"))?,
            None => u32::from(self.msg.contains_key(record::message_key(message_id))?),
        };
        self.refs.insert(message_id, count);
        Ok(count)
    }

    /// Sets the count of `message_id` from `old` to `count`. On disk a count of one or zero is
    /// the absence of a `msgref` record, so only a change that involves a count above one
    /// writes it.
    fn set_ref_count(
        &mut self,
        pending: &mut PendingCounts,
        message_id: u64,
        old: u32,
        count: u32,
    ) {
        self.max_touched = self.max_touched.max(message_id);
        if count == 0 && message_id >= self.fresh_from {
            self.refs.remove(&message_id);
        } else {
            self.refs.insert(message_id, count);
        }
        if old > 1 || count > 1 {
            let value = (count > 1).then(|| record::count_value(u64::from(count)));
            pending
                .msgref
                .insert(record::message_key(message_id).to_vec(), value);
        }
    }

    fn set_bodies(&mut self, bodies: u64) {
        self.bodies = bodies;
        self.bodies_dirty = true;
    }

    /// True when some entry refers to `message_id` (its body is stored).
    pub fn is_referenced(&mut self, message_id: u64) -> Result<bool, OpError> {
        Ok(self.ref_count(message_id)? > 0)
    }

    /// One more entry refers to `message_id` (whose body the caller writes with the first).
    pub fn add_ref(&mut self, pending: &mut PendingCounts, message_id: u64) -> Result<(), OpError> {
        let count = self.ref_count(message_id)?;
        self.set_ref_count(pending, message_id, count, count.saturating_add(1));
        if count == 0 {
            self.set_bodies(self.bodies + 1);
        }
        Ok(())
    }

    /// One entry fewer refers to `message_id`. True when none is left: the body must be
    /// removed with it.
    pub fn drop_ref(
        &mut self,
        pending: &mut PendingCounts,
        message_id: u64,
    ) -> Result<bool, OpError> {
        let count = self.ref_count(message_id)?;
        if count == 0 {
            return Ok(false);
        }
        self.set_ref_count(pending, message_id, count, count - 1);
        if count == 1 {
            self.set_bodies(self.bodies.saturating_sub(1));
        }
        Ok(count == 1)
    }

    fn queue_meta(&mut self, client_id: &str) -> Result<QueueMeta, OpError> {
        if let Some((meta, _)) = self.queues.get(client_id) {
            return Ok(*meta);
        }
        let meta = match self.qmeta.get(queue_meta_key(client_id)?)? {
            Some(value) => {
                record::read_queue_meta(&value).map_err(|Unreadable(what)| OpError::Key(what))?
            }
            None => QueueMeta::default(),
        };
        self.queues.insert(client_id.to_string(), (meta, false));
        Ok(meta)
    }

    /// Sets `client_id`'s summary (cached by [`Counts::queue_meta`] just before); it is
    /// written once per batch, by [`Counts::finish`].
    fn set_queue_meta(&mut self, client_id: &str, meta: QueueMeta) {
        let dirty = match self.queues.get_mut(client_id) {
            Some((cached, _)) if *cached == meta => return,
            Some((cached, dirty)) => {
                *cached = meta;
                std::mem::replace(dirty, true)
            }
            None => {
                self.queues.insert(client_id.to_string(), (meta, true));
                false
            }
        };
        if !dirty {
            self.dirty_queues.push(client_id.to_string());
        }
    }

    /// Adds the counts the batch changed but has not written yet (the number of bodies and
    /// the sessions' summaries, once each with their final value) to `pending`.
    pub fn finish(&mut self, pending: &mut PendingCounts) {
        if std::mem::take(&mut self.bodies_dirty) {
            pending
                .meta
                .insert(BODIES_KEY.to_vec(), Some(record::count_value(self.bodies)));
        }
        for client_id in std::mem::take(&mut self.dirty_queues) {
            let Some((meta, dirty)) = self.queues.get_mut(&client_id) else {
                continue;
            };
            *dirty = false;
            let meta = *meta;
            let value = (meta.count > 0).then(|| record::queue_meta_value(&meta));
            // The key was made when the summary was read (`queue_meta`), so it can be made.
            if let Ok(key) = queue_meta_key(&client_id) {
                pending.qmeta.insert(key, value);
            }
        }
    }

    /// Entry `seq` was queued for `client_id`.
    pub fn queued_entry(&mut self, client_id: &str, seq: u64) -> Result<(), OpError> {
        let mut meta = self.queue_meta(client_id)?;
        if meta.count == 0 {
            meta.first_seq = seq;
            meta.last_seq = seq;
        } else {
            meta.first_seq = meta.first_seq.min(seq);
            meta.last_seq = meta.last_seq.max(seq);
        }
        meta.count += 1;
        self.queued += 1;
        self.set_queue_meta(client_id, meta);
        Ok(())
    }

    /// Entry `seq` of `client_id` (which was stored) was removed.
    pub fn removed_entry(&mut self, client_id: &str, seq: u64) -> Result<(), OpError> {
        let mut meta = self.queue_meta(client_id)?;
        if meta.count == 0 {
            return Ok(());
        }
        meta.count -= 1;
        self.queued = self.queued.saturating_sub(1);
        if meta.count == 0 {
            meta = QueueMeta::default();
        } else if seq == meta.first_seq {
            meta.first_seq = seq + 1;
        } else if seq == meta.last_seq {
            meta.last_seq = seq - 1;
        }
        self.set_queue_meta(client_id, meta);
        Ok(())
    }

    /// After a commit: every count is on disk, so a cache grown past its bound is emptied.
    pub fn committed(&mut self) {
        if self.refs.len() > REFS_CACHED {
            self.refs = HashMap::new();
            // Ids touched so far may be stored now: from here on they are read.
            self.fresh_from = self.fresh_from.max(self.max_touched.saturating_add(1));
        }
        if self.queues.len() > QUEUES_CACHED {
            self.queues = HashMap::new();
        }
    }
}

fn queue_meta_key(client_id: &str) -> Result<Vec<u8>, OpError> {
    record::subscription_prefix(client_id).ok_or(OpError::Key("client id"))
}
