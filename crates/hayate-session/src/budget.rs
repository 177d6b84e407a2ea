//! The broker-wide budget for queued messages: the bytes held in every session's queue
//! together. Per-session limits bound one slow client; this bounds the sum, so that many
//! moderately slow clients (or many offline persistent sessions) cannot take the process's
//! memory between them.
//!
//! Each delivery is charged its payload and topic bytes plus a fixed overhead for the queue
//! entry. A message shared by many subscribers is charged once per subscriber, so the count is
//! an upper bound on what the queues really hold.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What one queued delivery costs besides its payload and topic: the queue entry, the shared
/// message header and the allocator's overhead, rounded up.
pub const DELIVERY_OVERHEAD_BYTES: usize = 128;

/// The shared account; one per broker, referenced by every session's limits.
#[derive(Debug)]
pub struct MemoryBudget {
    held: AtomicUsize,
    /// `usize::MAX` when unlimited; changed by a configuration reload.
    limit: AtomicUsize,
    refused: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes; 0 means unlimited (the sum is still counted).
    pub fn new(limit: usize) -> MemoryBudget {
        MemoryBudget {
            held: AtomicUsize::new(0),
            limit: AtomicUsize::new(Self::effective(limit)),
            refused: AtomicU64::new(0),
        }
    }

    fn effective(limit: usize) -> usize {
        if limit == 0 {
            usize::MAX
        } else {
            limit
        }
    }

    /// Sets a new limit (0: unlimited) for every charge from now on. Nothing charged is
    /// returned when it is lowered below what is held: further charges are refused until
    /// enough is released.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(Self::effective(limit), Ordering::Relaxed);
    }

    /// Bytes charged now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The limit in bytes (`usize::MAX` when unlimited).
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Deliveries refused because the budget was used up.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// True once half of the budget is used: sessions holding a noticeable share then count
    /// as congested, so publishers feeding them pause before the budget runs out.
    pub fn is_under_pressure(&self) -> bool {
        self.held() >= self.limit() / 2
    }

    /// Charges `bytes` if they fit. Concurrent callers may overshoot the limit by at most one
    /// delivery each; that slack is bounded by the number of worker threads.
    pub(crate) fn try_charge(&self, bytes: usize) -> bool {
        if self.held().saturating_add(bytes) > self.limit() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.held.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    /// Returns `bytes` charged earlier.
    pub(crate) fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.held.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget::new(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_until_the_limit_and_releases() {
        let budget = MemoryBudget::new(1000);
        assert!(budget.try_charge(600));
        assert!(!budget.try_charge(401));
        assert_eq!(budget.refused(), 1);
        assert!(budget.try_charge(400));
        assert_eq!(budget.held(), 1000);
        assert!(budget.is_under_pressure());
        budget.release(1000);
        assert_eq!(budget.held(), 0);
        assert!(!budget.is_under_pressure());
    }

    #[test]
    fn zero_means_unlimited() {
        let budget = MemoryBudget::new(0);
        assert!(budget.try_charge(usize::MAX / 4));
        assert!(!budget.is_under_pressure());
    }

    #[test]
    fn a_lowered_limit_refuses_until_enough_is_released() {
        let budget = MemoryBudget::new(1000);
        assert!(budget.try_charge(600));
        budget.set_limit(500);
        assert_eq!(budget.held(), 600, "nothing held is given back");
        assert!(!budget.try_charge(1));
        budget.release(200);
        assert!(budget.try_charge(100));
        budget.set_limit(0);
        assert_eq!(budget.limit(), usize::MAX);
        assert!(budget.try_charge(10_000));
    }
}
