//! What an operator may ask of a running broker (the admin API's core side, served over HTTP
//! by `hayate-http`): a snapshot of one session, closing a client's connection, deleting a
//! retained message. Small, read-mostly, and free of I/O: each takes the locks it needs for
//! one session or one topic at a time, in the documented lock order.

use crate::broker::Broker;
use crate::registry::SessionCell;
use hayate_codec::QoS;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::Arc;

/// A session as the admin API shows it, copied out under its lock.
#[derive(Debug, Clone)]
pub struct ClientSnapshot {
    /// Client identifier.
    pub client_id: Arc<str>,
    /// A connection is attached.
    pub online: bool,
    /// User name of the connection attached (or the last one).
    pub username: Option<Arc<str>>,
    /// Name of the listener it connected through (attached or last).
    pub listener: Option<Arc<str>>,
    /// Remote address of the connection (attached or last).
    pub peer: Option<SocketAddr>,
    /// Protocol level of the last connection (3, 4 or 5).
    pub protocol: u8,
    /// Session Expiry Interval in seconds (0: ends with its connection).
    pub expiry_interval: u32,
    /// Subscriptions: filter (with `$share/...`) and granted QoS, sorted by filter.
    pub subscriptions: Vec<(Box<str>, QoS)>,
    /// Messages held in memory: waiting plus in flight.
    pub queued: usize,
    /// Outbound QoS 1/2 messages in flight.
    pub inflight: usize,
    /// The session is congested as a subscriber (back-pressure).
    pub congested: bool,
}

impl SessionCell {
    /// A copy of what the admin API shows of this session (takes its lock briefly).
    pub fn snapshot(&self) -> ClientSnapshot {
        let state = self.state.lock();
        let client = state.client.as_ref();
        let mut subscriptions: Vec<(Box<str>, QoS)> = state
            .subscriptions
            .iter()
            .map(|(filter, record)| (filter.clone(), record.options.qos))
            .collect();
        subscriptions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ClientSnapshot {
            client_id: self.client_id.clone(),
            online: state.owner != 0,
            username: client.and_then(|c| c.username.clone()),
            listener: client.map(|c| c.listener.name.clone()),
            peer: client.and_then(|c| c.peer),
            protocol: state.protocol,
            expiry_interval: state.expiry_interval,
            subscriptions,
            queued: state.session.held_messages(),
            inflight: state.session.inflight_len(),
            congested: self.congested.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl Broker {
    /// Closes the connection attached to `client_id`'s session, as the server would on an
    /// error: a v5 client gets DISCONNECT 0x98 (Administrative action), the will is published,
    /// and the session ends or is kept by its expiry interval. Returns false when no
    /// connection is attached. The connection closes on its own task, woken here.
    pub fn kick(&self, client_id: &str) -> bool {
        let Some(cell) = self.registry.get(client_id) else {
            return false;
        };
        let doorbell = {
            let mut state = cell.state.lock();
            if state.owner == 0 {
                return false;
            }
            state.kick = state.owner;
            state.doorbell.clone()
        };
        if let Some(doorbell) = doorbell {
            doorbell.notify_one();
        }
        true
    }

    /// Deletes the retained message of `topic` (also from the store) without publishing
    /// anything to subscribers. Returns whether there was one.
    pub fn delete_retained(&self, topic: &str) -> bool {
        let removed = self.router.remove_retained(topic, self.attached());
        self.stats.retained.store(
            self.router.retained_count() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        removed
    }
}

/// The `k` smallest of the values offered, kept in a max-heap of at most `k` (a page of a
/// listing in order, without sorting or copying everything).
#[derive(Debug)]
pub(crate) struct SmallestK<T: Ord> {
    heap: BinaryHeap<T>,
    k: usize,
}

impl<T: Ord> SmallestK<T> {
    pub(crate) fn new(k: usize) -> Self {
        SmallestK {
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
            k,
        }
    }

    /// Would `value` be kept? (Lets a caller skip building values that would not.)
    pub(crate) fn wants(&self, value: &T) -> bool {
        self.k > 0 && (self.heap.len() < self.k || self.heap.peek().is_some_and(|max| value < max))
    }

    pub(crate) fn offer(&mut self, value: T) {
        if !self.wants(&value) {
            return;
        }
        if self.heap.len() == self.k {
            self.heap.pop();
        }
        self.heap.push(value);
    }

    /// The values kept, smallest first.
    pub(crate) fn into_sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}
