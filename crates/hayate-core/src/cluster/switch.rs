//! The switch lock of a cluster node: routing a message, and the few changes that move where a
//! client's messages go between nodes, exclude each other (`docs/CLUSTER.md`, "Relay after a
//! handover", "The switch").
//!
//! A mark tells another node where, in the stream of messages this node routed to it, a
//! client's messages stopped going one way and started going another. That only holds if no
//! message is routed half before and half after the change: matched against the old
//! subscriptions and queued behind the mark, or queued for the old node before the mark and
//! for the new one after it. So every route takes the lock shared, and a change (a session
//! taken over with its mark, a session handed over, a mark routed to the peer sessions, a
//! fenced SUBSCRIBE with its marks) takes it exclusively. A broker that is not in a cluster
//! never takes it.
//!
//! The lock is not reentrant, and a change may route (a will published when a session is
//! handed over): a thread that holds it in either mode routes without taking it again.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::cell::Cell;

thread_local! {
    /// This thread holds the switch lock (shared or exclusive).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct SwitchLock(RwLock<()>);

/// Held while routing one message, or while changing where messages go; released on drop.
/// Nested in a guard this thread already holds, it holds nothing.
pub struct Switch<'a> {
    guard: Option<Guard<'a>>,
}

enum Guard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl std::fmt::Debug for Switch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.guard {
            None => "nested",
            Some(Guard::Shared(_)) => "shared",
            Some(Guard::Exclusive(_)) => "exclusive",
        };
        write!(f, "Switch({mode})")
    }
}

impl SwitchLock {
    /// Takes the lock shared (`exclusive` false: routing) or exclusively (a change), unless this
    /// thread holds it already.
    pub(crate) fn take(&self, exclusive: bool) -> Switch<'_> {
        if HELD.with(Cell::get) {
            return Switch { guard: None };
        }
        let guard = if exclusive {
            Guard::Exclusive(self.0.write())
        } else {
            Guard::Shared(self.0.read())
        };
        HELD.with(|held| held.set(true));
        Switch { guard: Some(guard) }
    }
}

impl Drop for Switch<'_> {
    fn drop(&mut self) {
        if self.guard.take().is_some() {
            HELD.with(|held| held.set(false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_thread_holding_the_lock_takes_it_again_without_waiting() {
        let lock = SwitchLock::default();
        let outer = lock.take(true);
        let inner = lock.take(false);
        assert!(inner.guard.is_none());
        drop(inner);
        // Still held: the inner guard did not release the outer one.
        assert!(HELD.with(Cell::get));
        drop(outer);
        assert!(!HELD.with(Cell::get));
        let again = lock.take(true);
        assert!(again.guard.is_some());
    }

    #[test]
    fn routing_waits_while_another_thread_changes() {
        let lock = Arc::new(SwitchLock::default());
        let change = lock.take(true);
        let routed = Arc::new(AtomicBool::new(false));
        let handle = std::thread::spawn({
            let (lock, routed) = (lock.clone(), routed.clone());
            move || {
                let _routing = lock.take(false);
                routed.store(true, Ordering::SeqCst);
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!routed.load(Ordering::SeqCst), "routed during a change");
        drop(change);
        handle.join().unwrap();
        assert!(routed.load(Ordering::SeqCst));
    }
}
