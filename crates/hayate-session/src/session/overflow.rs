//! What a full queue drops. A client's session drops the new message (drop-newest, what MQTT
//! brokers do: the client's queue keeps what it was promised first). A bridge's session drops
//! the oldest queued messages instead (drop-oldest), so that after an outage the remote broker
//! gets the latest state, and counts them.
//!
//! Only messages **waiting** in the queue are dropped: a message in flight (sent, not
//! acknowledged) stays, so that its QoS 1/2 flow completes, and a QoS 2 message that may have
//! been sent before a restart or a handover (`Delivery::sent_as`) is never dropped either: the
//! receiver may hold its packet id, which would make a later message under that id a
//! "duplicate". When nothing can be dropped the new message is (as with drop-newest).
//!
//! A drop-oldest queue of a stored session stays in memory as well as on disk (it is bounded
//! by its own limits), so dropping is exact in bytes and messages; only after a restart are
//! its entries on disk first, read back page by page, attached or not, and trimmed to the
//! limits as they come in.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a session does with a message that does not fit its queue.
#[derive(Debug, Clone, Default)]
pub enum QueueFull {
    /// The new message is dropped (counted by the caller).
    #[default]
    DropNewest,
    /// The oldest waiting messages are dropped to make room, counted in this counter.
    DropOldest(Arc<AtomicU64>),
}

impl Session {
    /// True when a full queue drops its oldest messages.
    pub fn drops_oldest(&self) -> bool {
        matches!(self.limits.queue_full(), QueueFull::DropOldest(_))
    }

    /// Payload + topic bytes of the messages held in memory (waiting and in flight).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Replaces the session's limits (a bridge's own queue limits and policy). A drop-oldest
    /// queue over its new limits is trimmed at once.
    pub fn set_limits(&mut self, limits: Arc<crate::SharedLimits>) {
        self.limits = limits;
        if self.drops_oldest() {
            self.trim();
        }
    }

    /// Drops the oldest waiting messages until one more of `weight` bytes fits. `spills`: it
    /// goes to disk only (its bytes are not held in memory).
    pub(super) fn make_room(&mut self, weight: usize, spills: bool) {
        if spills || weight > self.limits.max_queued_bytes() {
            // Behind a restored queue still on disk: it is trimmed as it is read back. Or it
            // never fits: it is dropped, and nothing older is dropped for it.
            return;
        }
        while self.held_messages() + self.spilled() as usize >= self.limits.max_queued_messages()
            || self.held_bytes + weight > self.limits.max_queued_bytes()
        {
            if !self.drop_oldest() {
                break;
            }
        }
    }

    /// True when a new message (going to disk only: `spills`) cannot be queued by count.
    /// Behind a drop-oldest queue restored on disk, new messages wait on disk too, up to twice
    /// the limit (the restored part, at most the limit unless it was lowered, and as many new
    /// ones), while the restored entries are read back and trimmed (a moment after a restart).
    pub(super) fn is_full(&self, spills: bool) -> bool {
        let max = self.limits.max_queued_messages();
        if spills && self.drops_oldest() {
            return self.spilled() as usize >= max.saturating_mul(2);
        }
        self.held_messages() + self.spilled() as usize >= max
    }

    /// Drops the oldest waiting messages while the queue is over its limits.
    pub(super) fn trim(&mut self) {
        while self.held_messages() + self.spilled() as usize > self.limits.max_queued_messages()
            || self.held_bytes > self.limits.max_queued_bytes()
        {
            if !self.drop_oldest() {
                break;
            }
        }
    }

    /// Drops the oldest waiting message that may be dropped (not a QoS 2 message that may have
    /// been sent); false when there is none.
    fn drop_oldest(&mut self) -> bool {
        // The queue loses an entry anywhere: a hold (`hold.rs`) would count its back wrong.
        self.drop_direct_hold();
        let Some(index) = self
            .pending
            .iter()
            .position(|d| !(d.qos == QoS::ExactlyOnce && d.maybe_sent()))
        else {
            return false;
        };
        let Some(delivery) = self.pending.remove(index) else {
            return false;
        };
        self.unhold(delivery.weight());
        self.forget_stored(&delivery);
        if let QueueFull::DropOldest(dropped) = self.limits.queue_full() {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
        true
    }
}
