//! The session limits every session of a broker shares, changeable while the broker runs
//! (a configuration reload): each is an atomic read with a relaxed load where it is checked,
//! so a new value holds for every session from its next check on. Nothing already queued or
//! in flight is dropped when a limit is lowered: a session above a new limit takes no more
//! until it is below it again.

use crate::budget::MemoryBudget;
use crate::session::{QueueFull, SessionLimits};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;

/// [`SessionLimits`] shared by sessions and updated in place ([`SharedLimits::set`]).
#[derive(Debug)]
pub struct SharedLimits {
    max_queued_messages: AtomicUsize,
    max_queued_bytes: AtomicUsize,
    max_inflight: AtomicU16,
    queue_qos0_offline: AtomicBool,
    budget: Option<Arc<MemoryBudget>>,
    /// What a full queue drops; fixed at creation (a bridge's sessions get limits of their
    /// own, `hayate-core`'s `queues.rs`).
    queue_full: QueueFull,
}

impl SharedLimits {
    /// Limits with these values (and `limits.budget` as the broker-wide account for good).
    pub fn new(limits: SessionLimits) -> SharedLimits {
        SharedLimits {
            max_queued_messages: AtomicUsize::new(limits.max_queued_messages),
            max_queued_bytes: AtomicUsize::new(limits.max_queued_bytes),
            max_inflight: AtomicU16::new(limits.max_inflight),
            queue_qos0_offline: AtomicBool::new(limits.queue_qos0_offline),
            budget: limits.budget,
            queue_full: limits.queue_full,
        }
    }

    /// The values in force now, as plain limits.
    pub fn snapshot(&self) -> SessionLimits {
        SessionLimits {
            max_queued_messages: self.max_queued_messages(),
            max_queued_bytes: self.max_queued_bytes(),
            max_inflight: self.max_inflight(),
            queue_qos0_offline: self.queue_qos0_offline(),
            budget: self.budget.clone(),
            queue_full: self.queue_full.clone(),
        }
    }

    /// Applies new values to every session sharing these limits. The broker-wide budget
    /// account and the queue-full policy stay the ones given at creation (the budget's own
    /// limit is changed through [`MemoryBudget::set_limit`]).
    pub fn set(&self, limits: &SessionLimits) {
        let relaxed = Ordering::Relaxed;
        self.max_queued_messages
            .store(limits.max_queued_messages, relaxed);
        self.max_queued_bytes
            .store(limits.max_queued_bytes, relaxed);
        self.max_inflight.store(limits.max_inflight, relaxed);
        self.queue_qos0_offline
            .store(limits.queue_qos0_offline, relaxed);
    }

    /// Most messages held per session.
    pub fn max_queued_messages(&self) -> usize {
        self.max_queued_messages.load(Ordering::Relaxed)
    }

    /// Most payload + topic bytes held per session.
    pub fn max_queued_bytes(&self) -> usize {
        self.max_queued_bytes.load(Ordering::Relaxed)
    }

    /// Most outbound QoS 1/2 messages in flight per session.
    pub fn max_inflight(&self) -> u16 {
        self.max_inflight.load(Ordering::Relaxed)
    }

    /// Whether QoS 0 messages are queued for offline persistent sessions.
    pub fn queue_qos0_offline(&self) -> bool {
        self.queue_qos0_offline.load(Ordering::Relaxed)
    }

    /// The broker-wide account, if any.
    pub fn budget(&self) -> Option<&Arc<MemoryBudget>> {
        self.budget.as_ref()
    }

    /// What a full queue drops.
    pub fn queue_full(&self) -> &QueueFull {
        &self.queue_full
    }
}

impl From<SessionLimits> for SharedLimits {
    fn from(limits: SessionLimits) -> SharedLimits {
        SharedLimits::new(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_changes_every_value_but_the_budget() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let shared = SharedLimits::new(SessionLimits {
            budget: Some(budget.clone()),
            ..SessionLimits::default()
        });
        shared.set(&SessionLimits {
            max_queued_messages: 3,
            max_queued_bytes: 4,
            max_inflight: 5,
            queue_qos0_offline: true,
            budget: None,
            queue_full: QueueFull::DropNewest,
        });
        assert_eq!(shared.max_queued_messages(), 3);
        assert_eq!(shared.max_queued_bytes(), 4);
        assert_eq!(shared.max_inflight(), 5);
        assert!(shared.queue_qos0_offline());
        assert!(Arc::ptr_eq(shared.budget().unwrap(), &budget));
    }
}
