//! Deadlines that outlive a connection: delayed wills and session expiry.
//!
//! Entries carry the session epoch they were set in; when they come due after the session was
//! attached again (or already ended) they are stale and ignored, so nothing needs cancelling.

use crate::registry::SessionCell;
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

/// What comes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// Publish the will of a disconnected session (v5 Will Delay Interval).
    Will,
    /// End a disconnected session (Session Expiry Interval).
    Expiry,
}

#[derive(Debug)]
pub(crate) struct TimerEntry {
    pub at: Instant,
    pub kind: TimerKind,
    pub epoch: u64,
    pub cell: Arc<SessionCell>,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.kind, self.cell.id) == (other.at, other.kind, other.cell.id)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.kind, self.cell.id).cmp(&(other.at, other.kind, other.cell.id))
    }
}

/// A min-heap of deadlines.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: Mutex<BinaryHeap<Reverse<TimerEntry>>>,
}

impl Timers {
    pub fn schedule(&self, entry: TimerEntry) {
        self.heap.lock().push(Reverse(entry));
    }

    /// Removes and returns every entry due at `now`.
    pub fn take_due(&self, now: Instant) -> Vec<TimerEntry> {
        let mut heap = self.heap.lock();
        let mut due = Vec::new();
        while heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(entry)) = heap.pop() {
                due.push(entry);
            }
        }
        due
    }

    pub fn len(&self) -> usize {
        self.heap.lock().len()
    }
}
