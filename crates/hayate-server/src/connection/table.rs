//! The open connections of one listener, as its shutdown and the connections' deadlines see
//! them: each connection's doorbell, rung when shutdown starts or when the connection's deadline
//! (connect timeout, keep alive) passes.
//!
//! Why not a `Notified` on a shared `Notify` for shutdown and a `Sleep` per connection: both live
//! as long as the connection, idle or not, and cost it 64 and 112 bytes. A connection waits on
//! its doorbell anyway; here it costs a slot (16 bytes) and an entry in the ordered set of
//! deadlines, and one task per listener sleeps until the earliest deadline.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A deadline as milliseconds after [`ListenerConnections`]' base, rounded up (a deadline never
/// fires early).
pub(crate) type Due = u64;

/// No deadline registered.
const NONE: Due = Due::MAX;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ListenerConnections {
    started: AtomicBool,
    /// The instant deadlines count from.
    base: Instant,
    table: Mutex<Table>,
    /// Wakes the deadline task: a deadline earlier than the ones it sleeps for was set, or
    /// shutdown started.
    changed: Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// Each open connection's doorbell and registered deadline ([`NONE`]), by slot; a closed
    /// connection's slot is reused.
    slots: Vec<Option<(Arc<Notify>, Due)>>,
    free: Vec<u32>,
    /// The registered deadlines, earliest first.
    due: BTreeSet<(Due, u32)>,
}

impl Default for ListenerConnections {
    fn default() -> Self {
        ListenerConnections {
            started: AtomicBool::new(false),
            base: Instant::now(),
            table: Mutex::default(),
            changed: Notify::new(),
        }
    }
}

impl ListenerConnections {
    /// A table whose deadlines are kept by a task of its own (until shutdown starts).
    pub fn start() -> Arc<ListenerConnections> {
        let this = Arc::new(ListenerConnections::default());
        tokio::spawn(this.clone().ring_when_due());
        this
    }

    /// Starts shutdown for every connection registered, now or later: sets the flag, then rings
    /// their doorbells.
    pub fn trigger(&self) {
        self.started.store(true, Ordering::SeqCst);
        for (doorbell, _) in self.table.lock().slots.iter().flatten() {
            doorbell.notify_one();
        }
        self.changed.notify_one();
    }

    /// True once shutdown has started. A connection registers before it first looks, so that
    /// a trigger in between rings its doorbell.
    pub fn started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// Rings `doorbell` at shutdown and at the deadlines set for the slot returned, until
    /// [`Self::unregister`].
    pub fn register(&self, doorbell: &Arc<Notify>) -> u32 {
        let mut table = self.table.lock();
        let entry = Some((doorbell.clone(), NONE));
        match table.free.pop() {
            Some(slot) => {
                table.slots[slot as usize] = entry;
                slot
            }
            None => {
                table.slots.push(entry);
                u32::try_from(table.slots.len() - 1).expect("fewer than 2^32 connections")
            }
        }
    }

    pub fn unregister(&self, slot: u32) {
        let mut table = self.table.lock();
        if let Some((_, due)) = table.slots[slot as usize].take() {
            table.due.remove(&(due, slot));
        }
        table.free.push(slot);
    }

    /// Rings the slot's doorbell once `deadline` has passed, in place of the deadline set
    /// before. Returns the deadline as registered, for [`Self::is_due`].
    pub fn set_deadline(&self, slot: u32, deadline: Instant) -> Due {
        let due = self.due(deadline);
        let earliest = {
            let mut table = self.table.lock();
            let Some((_, registered)) = table.slots[slot as usize].as_mut() else {
                return due;
            };
            let before = std::mem::replace(registered, due);
            table.due.remove(&(before, slot));
            table.due.insert((due, slot));
            table.due.first() == Some(&(due, slot))
        };
        if earliest {
            self.changed.notify_one();
        }
        due
    }

    /// True once `due` (from [`Self::set_deadline`]) has passed at `now`.
    pub fn is_due(&self, due: Due, now: Instant) -> bool {
        self.instant(due).is_some_and(|at| now >= at)
    }

    fn due(&self, deadline: Instant) -> Due {
        let after = deadline.saturating_duration_since(self.base);
        let millis = after.as_millis() + u128::from(after.subsec_nanos() % 1_000_000 != 0);
        Due::try_from(millis).unwrap_or(NONE - 1)
    }

    fn instant(&self, due: Due) -> Option<Instant> {
        self.base.checked_add(Duration::from_millis(due))
    }

    /// The deadline task: rings the doorbell of each connection whose deadline passed, then
    /// sleeps until the next one (or a change). Ends when shutdown starts.
    async fn ring_when_due(self: Arc<Self>) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.started() {
                return;
            }
            let next = self.ring_passed(Instant::now());
            match next.and_then(|due| self.instant(due)) {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = &mut changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Rings the doorbells whose deadline passed at `now` (their deadline is then cleared);
    /// returns the next deadline.
    fn ring_passed(&self, now: Instant) -> Option<Due> {
        let mut table = self.table.lock();
        loop {
            let &(due, slot) = table.due.first()?;
            if !self.is_due(due, now) {
                return Some(due);
            }
            table.due.pop_first();
            if let Some((doorbell, registered)) = table.slots[slot as usize].as_mut() {
                *registered = NONE;
                doorbell.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rings_at_the_deadline_and_at_shutdown_not_after_unregister() {
        let ms = Duration::from_millis;
        let table = ListenerConnections::start();
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (slot_a, slot_b) = (table.register(&a), table.register(&b));
        let start = Instant::now();
        let due = table.set_deadline(slot_a, start + ms(150));
        table.set_deadline(slot_b, start + ms(50));
        table.unregister(slot_b);
        assert!(!table.is_due(due, start + ms(149)));
        tokio::time::timeout(ms(5000), a.notified())
            .await
            .expect("rung at the deadline");
        assert!(Instant::now() >= start + ms(150));
        assert!(table.is_due(due, Instant::now()));
        // A later deadline replaces an earlier one.
        table.set_deadline(slot_a, Instant::now() + ms(50));
        let later = table.set_deadline(slot_a, Instant::now() + ms(400));
        let rung = tokio::time::timeout(ms(200), a.notified()).await;
        assert!(rung.is_err(), "rang for a replaced deadline");
        tokio::time::timeout(ms(5000), a.notified())
            .await
            .expect("rung at the later deadline");
        assert!(table.is_due(later, Instant::now()));
        // b was unregistered before its deadline: never rung (a ring would have left a permit).
        let rung_b = tokio::time::timeout(ms(1), b.notified()).await;
        assert!(rung_b.is_err(), "rang an unregistered doorbell");
        assert!(!table.started());
        table.trigger();
        assert!(table.started());
        tokio::time::timeout(ms(5000), a.notified())
            .await
            .expect("rung at shutdown");
    }
}
