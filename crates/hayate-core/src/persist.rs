//! The broker's side of persistence (`docs/design/persistence.md`): turning changes to retained
//! messages and persistent sessions into [`StoreOp`]s, and rebuilding them from a
//! [`Recovered`] store at start.
//!
//! Rules (the states of one client id's record):
//! - a session is written (`PutSession`, `persisted` set) when a connection takes it with a
//!   non-zero Session Expiry Interval, and written again with its disconnection time when the
//!   connection leaves it;
//! - its subscriptions are written as they change while `persisted` is set;
//! - it is deleted (`DeleteSession`, subscriptions included) when it ends while it is still the
//!   registry's session for its client id, or when a clean start replaces it;
//! - retained messages are written when stored or removed, except broker-made ones (`$SYS`),
//!   which are made again after a restart. Expired retained messages are dropped at restore;
//! - a persisted session keeps a journal (`hayate_session`'s `JournalEvent`s) of its queued
//!   QoS 1/2 messages, their acknowledgements and its inbound QoS 2 ids, written by
//!   `Attached::flush` under the session's lock after every change. Each queued message gets
//!   an id for good (`Message::store_id`); the store writes its body once, with the first
//!   entry that refers to it, and removes it with the last;
//! - the ops of one QoS 2 PUBLISH (its queue entries, then its inbound id) form one store
//!   group, written all or none.
//!
//! The store keeps its order, so ops are appended while the lock that orders the change in
//! memory is held (the session's lock, the retained tree's lock).

use crate::broker::Broker;
use crate::hooks::{ClientInfo, ListenerInfo};
use crate::registry::{PendingWill, SessionCell, SessionState, SubscriptionRecord};
use crate::router::{SubEntry, WakeList};
use crate::store::{
    MessageBody, PageEntry, QueueEntry, Recovered, SessionRecord, Store, StoreOp, StoredMessage,
    StoredQueue, StoredWill, SubscriptionData, Ticket,
};
use bytes::{Bytes, BytesMut};
use hayate_codec::{Packet, ProtocolVersion, QoS, SubscriptionOptions, Will};
use hayate_session::{Delivery, JournalEvent, Message};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A store attached to a broker, with the broker clock's relation to the wall clock (stored
/// times are milliseconds since the Unix epoch; the core only has `Instant`s).
#[derive(Debug)]
pub struct Attached {
    pub(crate) store: Arc<dyn Store>,
    base: Instant,
    base_unix_ms: u64,
    /// The next id for a stored message body.
    next_message_id: AtomicU64,
    /// Message bodies read back from the store and still in use, by id: sessions reading the
    /// same message share one copy.
    bodies: Mutex<HashMap<u64, Weak<Message>>>,
}

impl Attached {
    /// `at` on the wall clock, in milliseconds since the Unix epoch.
    pub(crate) fn unix_ms(&self, at: Instant) -> u64 {
        let offset = at.saturating_duration_since(self.base).as_millis() as u64;
        let before = self.base.saturating_duration_since(at).as_millis() as u64;
        (self.base_unix_ms + offset).saturating_sub(before)
    }

    /// Writes what `state`'s journal recorded since the last flush (call with the session's
    /// lock held, so the store gets each session's changes in order). Returns the ticket that
    /// covers them, `None` when there was nothing to write.
    pub(crate) fn flush(&self, client_id: &str, state: &mut SessionState) -> Option<Ticket> {
        if !state.session.journal_pending() {
            return None;
        }
        let events = state.session.take_journal();
        let ticket = if events.is_empty() {
            self.store.appended()
        } else {
            let ops = events
                .into_iter()
                .map(|event| self.op_for(client_id, event))
                .collect();
            self.store.append_all(ops)
        };
        state.session.journal_flushed(ticket);
        Some(ticket)
    }

    fn op_for(&self, client_id: &str, event: JournalEvent) -> StoreOp {
        let client_id = client_id.to_string();
        match event {
            JournalEvent::Queued(delivery) => {
                let (entry, body) = self.queue_entry(&delivery);
                StoreOp::Enqueue {
                    client_id,
                    entry,
                    body,
                }
            }
            JournalEvent::Released { seq } => StoreOp::Release { client_id, seq },
            JournalEvent::Removed { seq, released } => StoreOp::Dequeue {
                client_id,
                seq,
                released,
            },
            JournalEvent::InboundQos2 {
                packet_id,
                awaiting,
            } => StoreOp::InboundQos2 {
                client_id,
                packet_id,
                awaiting,
            },
        }
    }

    /// The stored form of `delivery` and its message (the id is the message's for good).
    fn queue_entry(&self, delivery: &Delivery) -> (QueueEntry, MessageBody) {
        let message = &delivery.message;
        let message_id = *message
            .store_id
            .get_or_init(|| self.next_message_id.fetch_add(1, Ordering::Relaxed));
        let entry = QueueEntry {
            seq: delivery.seq,
            message_id,
            qos: delivery.qos as u8,
            retain: delivery.retain,
            subscription_ids: delivery.subscription_ids.clone(),
            shared_group: delivery.shared_group.as_deref().map(str::to_string),
        };
        let body = MessageBody {
            expires_at_ms: message.expires_at.map(|at| self.unix_ms(at)),
            message: message.clone(),
        };
        (entry, body)
    }

    /// Asks the store for a page of `cell`'s queue from `from_seq` on; when it comes, the page
    /// goes into the session ([`hayate_session::Session::apply_page`]) and the connection is
    /// woken. Runs the reply on the store's thread.
    pub(crate) fn read_page(self: &Arc<Self>, cell: &Arc<SessionCell>, from_seq: u64, max: usize) {
        let attached = self.clone();
        let target = cell.clone();
        let reply = Box::new(move |entries: Vec<PageEntry>| {
            if !attached.apply_page(&target, from_seq, max, entries) {
                return;
            }
            // A drop-oldest queue is read back whole, attached or not (`crate::queues`);
            // an attached session asks for its next page as it drains.
            let next = {
                let mut state = target.state.lock();
                (!state.ended && !state.session.is_attached())
                    .then(|| state.session.take_page_request())
                    .flatten()
            };
            if let Some((from_seq, max)) = next {
                attached.read_page(&target, from_seq, max);
            }
        });
        self.store.read_page(&cell.client_id, from_seq, max, reply);
    }

    /// Reads the part of `cell`'s queue that is on disk only back into memory, page after
    /// page, then calls `done` (at once when nothing is on disk; else on the store's thread).
    /// From now on the session keeps new entries in memory (see
    /// [`hayate_session::Session::take_handover_page_request`]), so that
    /// [`crate::Broker::hand_over`] finds the whole queue there. Gives up, leaving the rest
    /// on disk (logged), when a page adds nothing: the memory budget is exhausted.
    pub(crate) fn load_for_handover(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        done: Box<dyn FnOnce() + Send>,
    ) {
        let request = {
            let mut state = cell.state.lock();
            if state.ended {
                None
            } else {
                state.session.take_handover_page_request()
            }
        };
        let Some((from_seq, max)) = request else {
            done();
            return;
        };
        let attached = self.clone();
        let target = cell.clone();
        let reply = Box::new(move |entries: Vec<PageEntry>| {
            let read = entries.len();
            let added = attached.apply_page(&target, from_seq, max, entries);
            // No progress: this page had entries, added none (the memory budget), and no other
            // read moved the disk part on. (An empty page settles the count; read again.)
            let stuck = !added && read > 0 && {
                let state = target.state.lock();
                !state.ended && state.session.spilled_from() == Some(from_seq)
            };
            if !stuck {
                attached.load_for_handover(&target, done);
            } else {
                let left = target.state.lock().session.spilled();
                tracing::warn!(client_id = %target.client_id, left, "handover_queue_left_on_disk");
                done();
            }
        });
        self.store.read_page(&cell.client_id, from_seq, max, reply);
    }

    /// A page read from `from_seq` goes into `cell`'s session; wakes its connection when
    /// anything was added, and returns whether anything was.
    fn apply_page(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        from_seq: u64,
        max: usize,
        entries: Vec<PageEntry>,
    ) -> bool {
        let exhausted = entries.len() < max;
        let mut unreadable = Vec::new();
        let mut page = Vec::with_capacity(entries.len());
        for (entry, body) in entries {
            match self.delivery(entry, body) {
                Ok(delivery) => page.push(delivery),
                Err(seq) => unreadable.push(seq),
            }
        }
        let mut state = cell.state.lock();
        if state.ended {
            return false;
        }
        let added = state.session.apply_page(from_seq, page, exhausted);
        for seq in unreadable {
            tracing::warn!(client_id = %cell.client_id, seq, "stored_message_unreadable");
            state.session.forget_restored(seq);
        }
        self.flush(&cell.client_id, &mut state);
        if added {
            if let Some(doorbell) = &state.doorbell {
                doorbell.notify_one();
            }
        }
        added
    }

    /// A delivery from a stored entry and its message (decoded once while any session holds
    /// it); `Err(seq)` when the message cannot be read.
    fn delivery(&self, entry: QueueEntry, body: StoredMessage) -> Result<Delivery, u64> {
        let qos = match entry.qos {
            1 => QoS::AtLeastOnce,
            2 => QoS::ExactlyOnce,
            _ => return Err(entry.seq),
        };
        let message = {
            let mut bodies = self.bodies.lock();
            match bodies.get(&body.id).and_then(Weak::upgrade) {
                Some(message) => message,
                None => {
                    let expires_at = body.expires_at_ms.map(|at| self.instant(at));
                    let message =
                        Arc::new(decode_publish(&body.publish, expires_at).ok_or(entry.seq)?);
                    let _ = message.store_id.set(body.id);
                    if bodies.len() >= 4096 {
                        bodies.retain(|_, weak| weak.strong_count() > 0);
                    }
                    bodies.insert(body.id, Arc::downgrade(&message));
                    message
                }
            }
        };
        Ok(Delivery {
            message,
            qos,
            retain: entry.retain,
            subscription_ids: entry.subscription_ids,
            shared_group: entry.shared_group.map(Arc::from),
            seq: entry.seq,
            sent_as: None,
        })
    }

    /// Opens a store group ([`Store::begin_group`]), closed when the guard drops.
    pub(crate) fn group(&self) -> Group<'_> {
        Group {
            store: &*self.store,
            id: self.store.begin_group(),
        }
    }

    /// The broker-clock instant of `unix_ms`.
    fn instant(&self, unix_ms: u64) -> Instant {
        if unix_ms >= self.base_unix_ms {
            self.base + Duration::from_millis(unix_ms - self.base_unix_ms)
        } else {
            self.base
                .checked_sub(Duration::from_millis(self.base_unix_ms - unix_ms))
                .unwrap_or(self.base)
        }
    }
}

/// An open store group; closes it when dropped (also on a panic, so the store never waits on
/// a group nobody will close).
pub(crate) struct Group<'a> {
    store: &'a dyn Store,
    id: u64,
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        self.store.end_group(self.id);
    }
}

/// What [`Broker::restore`] rebuilt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Retained messages put back.
    pub retained: usize,
    /// Retained messages dropped: expired, or unreadable.
    pub retained_dropped: usize,
    /// Sessions put back (disconnected, expiry clock running).
    pub sessions: usize,
    /// Sessions that expired while the broker was down (deleted from the store).
    pub sessions_expired: usize,
    /// Subscriptions put back.
    pub subscriptions: usize,
    /// Queued QoS 1/2 messages put back (left on disk until their client reads them, or
    /// awaiting PUBCOMP).
    pub queued: usize,
    /// Wills published at restore: their delay passed, or their session expired, while the
    /// broker was down.
    pub wills_published: usize,
}

impl Broker {
    /// Attaches `store`: from now on changes to retained messages and persistent sessions are
    /// appended to it. `now` and `now_unix_ms` are the same moment on the broker's clock and
    /// on the wall clock. Returns false (and attaches nothing) when a store is already attached.
    pub fn attach_store(&self, store: Arc<dyn Store>, now: Instant, now_unix_ms: u64) -> bool {
        let attached = Arc::new(Attached {
            store,
            base: now,
            base_unix_ms: now_unix_ms,
            next_message_id: AtomicU64::new(1),
            bodies: Mutex::new(HashMap::new()),
        });
        if self.persistence.set(attached.clone()).is_err() {
            return false;
        }
        let _ = self.router.persistence.set(attached);
        true
    }

    pub(crate) fn attached(&self) -> Option<&Attached> {
        self.persistence.get().map(|attached| &**attached)
    }

    /// For a diagnostic log line: what holds `cell`'s output back now, and how far the store
    /// is durable (`None` without a store).
    pub fn output_state(
        &self,
        cell: &SessionCell,
    ) -> (hayate_session::OutputState, Option<Ticket>) {
        let durable = self.attached().map(|attached| attached.store.durable());
        (cell.state.lock().session.output_state(), durable)
    }

    /// Rebuilds retained messages and disconnected persistent sessions from `recovered` (call
    /// once, after [`Broker::attach_store`] and before serving). Time a session spent with the
    /// broker down counts against its expiry; a session whose connection was still open when
    /// the broker stopped counts as disconnected at restart.
    pub fn restore(&self, recovered: Recovered, now: Instant) -> Restored {
        let mut report = Restored::default();
        let Some(attached) = self.attached() else {
            return report;
        };
        let now_ms = attached.unix_ms(now);
        attached
            .next_message_id
            .store(recovered.next_message_id.max(1), Ordering::Relaxed);
        self.stats.restore_totals(&recovered.totals);
        let mut queues: HashMap<String, StoredQueue> = recovered
            .queues
            .into_iter()
            .map(|queue| (queue.client_id.clone(), queue))
            .collect();
        for (topic, expires_at_ms, publish) in recovered.retained {
            if expires_at_ms.is_some_and(|at| at <= now_ms) {
                report.retained_dropped += 1;
                attached.store.append(StoreOp::DeleteRetained { topic });
                continue;
            }
            match decode_publish(&publish, expires_at_ms.map(|at| attached.instant(at))) {
                Some(message) => {
                    let _ = self.router.retain(&Arc::new(message), None);
                    report.retained += 1;
                }
                None => {
                    tracing::warn!(topic, "stored_retained_unreadable");
                    report.retained_dropped += 1;
                }
            }
        }
        self.stats.retained.store(
            self.router.retained_count() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        // Wills due now go out once every session is back, so that they reach them.
        let mut due: Vec<(Arc<str>, Box<PendingWill>)> = Vec::new();
        for (record, subscriptions) in recovered.sessions {
            let down_ms = now_ms.saturating_sub(record.disconnected_at_ms.unwrap_or(now_ms));
            let client_id: Arc<str> = Arc::from(record.client_id.as_str());
            let left = match record.expiry_interval {
                u32::MAX => None,
                secs => match (u64::from(secs) * 1000).checked_sub(down_ms) {
                    Some(left) if left > 0 => Some(Duration::from_millis(left)),
                    _ => {
                        // Ended while the broker was down: a will still pending goes out now
                        // [MQTT-3.1.3-9].
                        report.sessions_expired += 1;
                        let will = record
                            .will
                            .as_ref()
                            .and_then(|w| pending_will(&client_id, w, 0));
                        due.extend(will.map(|will| (client_id.clone(), Box::new(will))));
                        attached.store.append(StoreOp::DeleteSession {
                            client_id: record.client_id,
                        });
                        continue;
                    }
                },
            };
            let cell = self.restore_session(&record, subscriptions, left, now, &mut report);
            let mut state = cell.state.lock();
            match queues.remove(&record.client_id) {
                Some(queue) => restore_queue(&mut state, queue, &mut report),
                // Messages queued from now on are stored too.
                None => state.session.enable_journal(1),
            }
            if let Some(stored) = &record.will {
                self.restore_will(&cell, &mut state, stored, &record, now, &mut due);
            }
            attached.flush(&cell.client_id, &mut state);
            drop(state);
            report.sessions += 1;
        }
        report.wills_published = due.len();
        let mut wake = WakeList::new();
        for (client_id, will) in due {
            self.publish_will(&client_id, will, now, &mut wake);
        }
        report
    }

    /// Puts a stored session's pending will back: its delay runs from the disconnection (from
    /// now for a session whose connection was open when the broker stopped: that connection
    /// failed), at most until the session expires; a will already due goes to `due`.
    fn restore_will(
        &self,
        cell: &Arc<SessionCell>,
        state: &mut SessionState,
        stored: &StoredWill,
        record: &SessionRecord,
        now: Instant,
        due: &mut Vec<(Arc<str>, Box<PendingWill>)>,
    ) {
        let Some(attached) = self.attached() else {
            return;
        };
        let Some(will) = pending_will(&cell.client_id, stored, cell.id) else {
            tracing::warn!(client_id = %cell.client_id, "stored_will_unreadable");
            return;
        };
        let since = record
            .disconnected_at_ms
            .map_or(now, |at| attached.instant(at));
        let delay = stored.delay.min(record.expiry_interval);
        let at = since + Duration::from_secs(u64::from(delay));
        if at <= now {
            due.push((cell.client_id.clone(), Box::new(will)));
            attached.store.append(StoreOp::DeleteWill {
                client_id: cell.client_id.to_string(),
            });
            return;
        }
        state.will = Some(Box::new(will));
        state.will_due = Some(at);
        self.schedule_will(cell, state.epoch, at);
    }

    /// Puts one disconnected session back with its subscriptions.
    fn restore_session(
        &self,
        record: &SessionRecord,
        subscriptions: Vec<SubscriptionData>,
        left: Option<Duration>,
        now: Instant,
        report: &mut Restored,
    ) -> Arc<SessionCell> {
        let client_id: Arc<str> = Arc::from(record.client_id.as_str());
        let limits = self.session_limits_for(&client_id);
        let cell = self
            .registry
            .open(&client_id, true, || {
                hayate_session::Session::with_shared_limits(limits)
            })
            .cell;
        let mut installed = 0;
        for data in subscriptions {
            let Some(record) = subscription_record(&data) else {
                continue;
            };
            let entry = SubEntry {
                cell: cell.clone(),
                record,
            };
            if !self.router.subscribe(&data.filter, entry).replaced {
                installed += 1;
            }
            cell.state
                .lock()
                .subscriptions
                .insert(data.filter.as_str().into(), record);
        }
        crate::stats::Stats::add(&self.stats.subscriptions, installed as u64);
        let mut state = cell.state.lock();
        state.expiry_interval = record.expiry_interval;
        state.persisted = true;
        if let Some(left) = left {
            self.schedule_expiry(&cell, state.epoch, now + left);
        }
        report.subscriptions += installed;
        drop(state);
        cell
    }

    /// Appends a `PutSession` for `cell` (called with its state locked). `disconnected_at`:
    /// when its connection left, `None` while connected.
    pub(crate) fn persist_session(
        &self,
        cell: &SessionCell,
        state: &mut SessionState,
        disconnected_at: Option<Instant>,
    ) {
        let Some(attached) = self.attached() else {
            return;
        };
        state.persisted = true;
        state.session.enable_journal(1);
        attached.store.append(StoreOp::PutSession(SessionRecord {
            client_id: cell.client_id.to_string(),
            expiry_interval: state.expiry_interval,
            protocol: state.protocol,
            disconnected_at_ms: disconnected_at.map(|at| attached.unix_ms(at)),
            will: state.will.as_deref().and_then(stored_will),
        }));
    }

    /// Appends `op` for a persisted session (called with its state locked).
    /// Stores the lifetime counters as they stand (called every `$SYS` interval and at
    /// shutdown; a crash loses what they counted since the last call). Nothing without a store.
    pub fn persist_totals(&self) {
        if let Some(attached) = self.attached() {
            attached.store.append(StoreOp::PutTotals {
                totals: self.stats.totals(),
            });
        }
    }

    pub(crate) fn persist_for(&self, state: &SessionState, op: impl FnOnce() -> StoreOp) {
        if state.persisted {
            if let Some(attached) = self.attached() {
                attached.store.append(op());
            }
        }
    }
}

/// The stored form of a pending will; `None` if it cannot be encoded.
fn stored_will(will: &PendingWill) -> Option<StoredWill> {
    let mut properties = will.will.properties.clone();
    let delay = properties.will_delay_interval.take().unwrap_or(0);
    let message = Message::new(
        will.will.topic.clone(),
        will.will.payload.clone(),
        will.will.qos,
        will.will.retain,
        properties,
        None,
        None,
    );
    Some(StoredWill {
        publish: encode_message(&message)?,
        delay,
        username: will.client.username.as_deref().map(str::to_string),
        listener: will.client.listener.name.to_string(),
        transport_identity: will.client.transport_identity().map(|id| id.to_string()),
    })
}

/// A pending will from its stored form, set by session `publisher`; `None` if unreadable.
fn pending_will(client_id: &Arc<str>, stored: &StoredWill, publisher: u64) -> Option<PendingWill> {
    let mut buf = BytesMut::from(&stored.publish[..]);
    let Ok(Some(Packet::Publish(p))) =
        hayate_codec::decode(&mut buf, ProtocolVersion::V5, u32::MAX)
    else {
        return None;
    };
    let mut properties = p.properties;
    properties.will_delay_interval = (stored.delay > 0).then_some(stored.delay);
    let listener = ListenerInfo {
        name: Arc::from(stored.listener.as_str()),
        ..ListenerInfo::default()
    };
    Some(PendingWill {
        will: Will {
            topic: p.topic,
            payload: p.payload,
            qos: p.qos,
            retain: p.retain,
            properties,
        },
        publisher,
        client: Arc::new({
            let mut client = ClientInfo::new(client_id.clone(), Arc::new(listener));
            client.username = stored.username.as_deref().map(Arc::from);
            client.set_transport_identity(stored.transport_identity.as_deref().map(Arc::from));
            client
        }),
    })
}

/// Puts a session's stored queue back: released entries (their PUBREL is sent again) and
/// inbound QoS 2 ids in memory, queued entries left on disk to be read back in pages.
fn restore_queue(state: &mut SessionState, queue: StoredQueue, report: &mut Restored) {
    let last_seq = queue
        .released
        .iter()
        .copied()
        .chain([queue.last_seq])
        .max()
        .unwrap_or(0);
    let session = &mut state.session;
    session.enable_journal(last_seq + 1);
    report.queued += queue.released.len() + queue.count as usize;
    for seq in queue.released {
        session.restore_released(seq);
    }
    session.restore_spilled(queue.first_seq, queue.count);
    for packet_id in queue.inbound_qos2 {
        session.restore_inbound_qos2(packet_id);
    }
}

/// A message as an MQTT 5 PUBLISH (the stored form of message bodies and retained
/// messages); `None` if it cannot be encoded.
pub(crate) fn encode_message(message: &Message) -> Option<Bytes> {
    let mut buf = BytesMut::new();
    encode_message_into(message, &mut buf)?;
    Some(buf.freeze())
}

/// Appends `message` as an MQTT 5 PUBLISH packet (the stored form, as [`encode_message`]
/// makes it) to `buf`; `None`, with nothing appended, if it cannot be encoded.
pub(crate) fn encode_message_into(message: &Message, buf: &mut BytesMut) -> Option<()> {
    let packet_id = (message.qos != QoS::AtMostOnce).then_some(hayate_codec::PacketId::MIN);
    buf.reserve(message.topic.len() + message.payload.len() + 16);
    hayate_codec::encode_publish_header(
        ProtocolVersion::V5,
        false,
        message.qos,
        message.retain,
        message.topic.as_bytes(),
        packet_id,
        &message.properties,
        message.payload.len(),
        buf,
    )
    .ok()?;
    buf.extend_from_slice(&message.payload);
    Some(())
}

/// The store op for a retained message being stored (or removed, empty payload), or `None`
/// for broker-made messages.
pub(crate) fn retained_op(attached: &Attached, message: &Message) -> Option<StoreOp> {
    message.publisher?;
    let topic = message.topic.to_string();
    if message.payload.is_empty() {
        return Some(StoreOp::DeleteRetained { topic });
    }
    Some(StoreOp::PutRetained {
        topic,
        expires_at_ms: message.expires_at.map(|at| attached.unix_ms(at)),
        publish: encode_message(message)?,
    })
}

/// A message from its stored PUBLISH.
fn decode_publish(publish: &[u8], expires_at: Option<Instant>) -> Option<Message> {
    let mut buf = BytesMut::from(publish);
    match hayate_codec::decode(&mut buf, ProtocolVersion::V5, u32::MAX) {
        Ok(Some(Packet::Publish(p))) => Some(Message::new(
            p.topic,
            p.payload,
            p.qos,
            p.retain,
            p.properties,
            expires_at,
            // Not broker-made: a message a client published (No Local never matches it now).
            Some(0),
        )),
        _ => None,
    }
}

/// The SUBSCRIBE options byte (§3.8.3.1) of `options`.
pub(crate) fn options_byte(options: SubscriptionOptions) -> u8 {
    options.qos as u8
        | u8::from(options.no_local) << 2
        | u8::from(options.retain_as_published) << 3
        | (options.retain_handling & 0b11) << 4
}

/// The stored subscription `data` as the core holds it; `None` if its options are invalid.
fn subscription_record(data: &SubscriptionData) -> Option<SubscriptionRecord> {
    let qos = match data.options & 0b11 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        2 => QoS::ExactlyOnce,
        _ => return None,
    };
    Some(SubscriptionRecord {
        options: SubscriptionOptions {
            qos,
            no_local: data.options & 0b100 != 0,
            retain_as_published: data.options & 0b1000 != 0,
            retain_handling: (data.options >> 4) & 0b11,
        },
        subscription_id: data.subscription_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_byte_round_trips() {
        for byte in 0u8..0b11_1111 {
            if byte & 0b11 == 3 || byte >> 4 == 3 {
                continue;
            }
            let data = SubscriptionData {
                filter: "a/#".into(),
                options: byte,
                subscription_id: None,
            };
            let record = subscription_record(&data).expect("valid");
            assert_eq!(options_byte(record.options), byte);
        }
    }
}
