//! Arrival order across connections: the messages routed in the last moments, so that a
//! subscription whose SUBSCRIBE arrived before a PUBLISH but was put in place after it was
//! routed (another worker thread handled the PUBLISH first) still receives that message.
//! See `docs/design/arrival-order.md` for the rule, its bounds and its trade-off.
//!
//! Each routed message is recorded with its [`Arrival`] and the version of the subscription
//! index it was matched against. A new subscription with arrival `a` put in place as index
//! version `v` missed exactly the recorded messages that arrived after `a` and were matched
//! against a version before `v`. Recording happens under the index's read lock and the
//! version is bumped under its write lock, so "matched before the subscription existed" is
//! exact; the record is bounded by a time window and a byte budget.

use hayate_session::{Arrival, Message};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Shards of the record, chosen by publishing session, so publishers on different threads
/// rarely share a lock. A new subscription reads them all.
const SHARDS: usize = 8;

/// How far out of order the kernel's receive stamps of two sockets can be: a message stamped
/// up to this long *before* a SUBSCRIBE is caught up on too. Without it, on loopback with 2 to
/// 4 workers, about 1 round in 4,000 of `arrival_order.rs` lost a PUBLISH written after the
/// SUBSCRIBE but stamped before it. 200 µs covered that on the first machine (none in over
/// 100,000 rounds); on a second (2 vCPU Intel Xeon, Linux 6.18) the 4-worker test still lost
/// about 1 round in 10,000, one PUBLISH stamped 2.97 ms before the SUBSCRIBE written before it
/// (`docs/design/arrival-order.md`, "Stamp slack"). Catching up on a message that really
/// arrived that little before the SUBSCRIBE is harmless: it is delivered once (only messages
/// routed without seeing the subscription are caught up), as if the subscription had been in
/// place a moment earlier. Not for the subscriber's own messages (one socket's stamps are in
/// order), nor for messages that arrived before the subscriber's CONNECT.
const STAMP_SLACK_NANOS: u64 = 5_000_000;

/// Bytes charged for one record besides its topic and payload.
const RECORD_OVERHEAD: usize = 64;

/// The least a record is charged for its topic and payload: a small message's topic and
/// payload are slices of its publisher's read buffer (up to 16 KiB in `hayate-server`), which
/// the record keeps alive with them. Copying small messages out instead cost more CPU than the
/// whole rest of the record (measured: docs/design/arrival-order.md).
const MIN_CHARGE: usize = 16 * 1024;

/// The recently routed messages. See the module docs.
#[derive(Debug)]
pub(crate) struct RecentPublishes {
    /// Both changeable while the broker runs (a configuration reload, [`Self::set`]).
    window_nanos: AtomicU64,
    shard_bytes: AtomicUsize,
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Debug, Default)]
struct Shard {
    records: VecDeque<Record>,
    bytes: usize,
}

#[derive(Debug)]
struct Record {
    arrival: Arrival,
    version: u64,
    message: Arc<Message>,
}

fn nanos(window: Duration) -> u64 {
    u64::try_from(window.as_nanos()).unwrap_or(u64::MAX)
}

fn cost(message: &Message) -> usize {
    RECORD_OVERHEAD + (message.topic.len() + message.payload.len()).max(MIN_CHARGE)
}

impl RecentPublishes {
    /// A record that keeps messages for `window` after their arrival, within `max_bytes`
    /// (topic, payload and a fixed overhead per message). A zero window records nothing.
    pub(crate) fn new(window: Duration, max_bytes: usize) -> RecentPublishes {
        RecentPublishes {
            window_nanos: AtomicU64::new(nanos(window)),
            shard_bytes: AtomicUsize::new(max_bytes / SHARDS),
            shards: Default::default(),
        }
    }

    /// New bounds from the next message on (records beyond them are trimmed as messages are
    /// recorded; a zero window drops the record at once).
    pub(crate) fn set(&self, window: Duration, max_bytes: usize) {
        self.window_nanos.store(nanos(window), Ordering::Relaxed);
        self.shard_bytes
            .store(max_bytes / SHARDS, Ordering::Relaxed);
        if window.is_zero() {
            for shard in &self.shards {
                *shard.lock() = Shard::default();
            }
        }
    }

    fn window_nanos(&self) -> u64 {
        self.window_nanos.load(Ordering::Relaxed)
    }

    /// Records `message`, matched against index version `version`. Messages of unknown
    /// arrival (broker-made) are not recorded. Called with the index's read lock held.
    pub(crate) fn record(&self, message: &Arc<Message>, version: u64) {
        let window_nanos = self.window_nanos();
        if window_nanos == 0 || !message.arrival.is_known() {
            return;
        }
        let shard_bytes = self.shard_bytes.load(Ordering::Relaxed);
        let slot = message.publisher.unwrap_or(0) as usize % SHARDS;
        let mut shard = self.shards[slot].lock();
        let size = cost(message);
        shard.bytes += size;
        shard.records.push_back(Record {
            arrival: message.arrival,
            version,
            message: message.clone(),
        });
        let horizon = message.arrival.as_nanos().saturating_sub(window_nanos);
        while let Some(oldest) = shard.records.front() {
            if oldest.arrival.as_nanos() >= horizon && shard.bytes <= shard_bytes {
                break;
            }
            let size = cost(&oldest.message);
            shard.bytes -= size;
            shard.records.pop_front();
        }
    }

    /// The recorded messages that arrived after `after` and were matched against an index
    /// version before `version`, for which `wanted` holds, in arrival order.
    pub(crate) fn missed(
        &self,
        after: Arrival,
        version: u64,
        subscriber: u64,
        mut wanted: impl FnMut(&Message) -> bool,
    ) -> Vec<Arc<Message>> {
        let window_nanos = self.window_nanos();
        if window_nanos == 0 || !after.is_known() {
            return Vec::new();
        }
        let mut found: Vec<(Arrival, Arc<Message>)> = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            let start = found.len();
            for record in shard.records.iter().rev() {
                if record.arrival.as_nanos() + window_nanos.max(STAMP_SLACK_NANOS)
                    < after.as_nanos()
                {
                    // Older records arrived before `after` too (each shard is in routing
                    // order, which follows arrival order within the window).
                    break;
                }
                // The subscriber's own messages came on its own connection: their stamps are
                // in order, no slack.
                let slack = if record.message.publisher == Some(subscriber) {
                    0
                } else {
                    STAMP_SLACK_NANOS
                };
                if record.arrival.as_nanos() + slack > after.as_nanos()
                    && record.version < version
                    && wanted(&record.message)
                {
                    found.push((record.arrival, record.message.clone()));
                }
            }
            // Found newest first: back to routing order, which the stable sort below keeps
            // for messages with one stamp (one read of a publisher's socket brings many).
            found[start..].reverse();
        }
        found.sort_by_key(|(arrival, _)| *arrival);
        found.into_iter().map(|(_, message)| message).collect()
    }

    /// Messages held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().records.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hayate_codec::QoS;

    fn message(topic: &str, arrival: u64, payload: usize) -> Arc<Message> {
        Arc::new(
            Message::new(
                topic.into(),
                Bytes::from(vec![0u8; payload]),
                QoS::AtMostOnce,
                false,
                Default::default(),
                None,
                Some(1),
            )
            .with_arrival(Arrival::from_nanos(arrival)),
        )
    }

    #[test]
    fn finds_messages_routed_before_and_arrived_after() {
        let recent = RecentPublishes::new(Duration::from_millis(100), 1 << 20);
        recent.record(&message("a", 1_000, 1), 5);
        recent.record(&message("a", 2_000, 1), 5);
        recent.record(&message("b", 3_000, 1), 5);
        recent.record(&message("a", 4_000, 1), 6);
        let after = STAMP_SLACK_NANOS + 1_500;
        let missed = recent.missed(Arrival::from_nanos(after), 6, 9, |m| &*m.topic == "a");
        let arrivals: Vec<u64> = missed.iter().map(|m| m.arrival.as_nanos()).collect();
        // Not 1_000 (arrived before, beyond the slack), not 3_000 (other topic), not 4_000
        // (saw version 6).
        assert_eq!(arrivals, vec![2_000]);
    }

    /// One read of a publisher's socket stamps all its packets alike: they are caught up in
    /// the order they were routed. The newest-first scan of the record gave them in reverse
    /// (a kill soak of 2026-11-30 saw a publisher's 20 resent messages reach a subscriber
    /// that way).
    #[test]
    fn messages_with_one_stamp_are_caught_up_in_routing_order() {
        let recent = RecentPublishes::new(Duration::from_millis(100), 1 << 20);
        let at = 10 * STAMP_SLACK_NANOS;
        for topic in ["m1", "m2", "m3"] {
            recent.record(&message(topic, at, 1), 1);
        }
        let missed = recent.missed(Arrival::from_nanos(at - 1), 2, 9, |_| true);
        let topics: Vec<&str> = missed.iter().map(|m| &*m.topic).collect();
        assert_eq!(topics, vec!["m1", "m2", "m3"]);
    }

    #[test]
    fn a_message_stamped_a_little_before_the_subscribe_is_caught_up_too() {
        let recent = RecentPublishes::new(Duration::from_millis(100), 1 << 20);
        let after = 10 * STAMP_SLACK_NANOS;
        recent.record(&message("a", after - STAMP_SLACK_NANOS / 2, 1), 1);
        recent.record(&message("a", after - 2 * STAMP_SLACK_NANOS, 1), 1);
        let missed = recent.missed(Arrival::from_nanos(after), 2, 9, |_| true);
        let arrivals: Vec<u64> = missed.iter().map(|m| m.arrival.as_nanos()).collect();
        assert_eq!(arrivals, vec![after - STAMP_SLACK_NANOS / 2]);
        // The same message from the subscriber itself (session 1 published it) came on its
        // own connection, before the SUBSCRIBE: not caught up.
        assert!(recent
            .missed(Arrival::from_nanos(after), 2, 1, |_| true)
            .is_empty());
    }

    #[test]
    fn keeps_only_the_window_and_the_byte_budget() {
        let recent = RecentPublishes::new(Duration::from_nanos(1_000), 1 << 20);
        let slot = |n| message("t", n, 1);
        recent.record(&slot(1_000), 1);
        recent.record(&slot(1_500), 1);
        recent.record(&slot(2_600), 1);
        assert_eq!(recent.len(), 1, "records older than the window go");

        let charge = RECORD_OVERHEAD + MIN_CHARGE + 100;
        let small = RecentPublishes::new(Duration::from_secs(1), SHARDS * 3 * charge);
        for n in 1..=10 {
            small.record(&message("t", n, MIN_CHARGE + 99), 1);
        }
        assert_eq!(
            small.len(),
            3,
            "a shard keeps what its share of the budget holds"
        );
    }

    #[test]
    fn unknown_arrivals_and_a_zero_window_record_nothing() {
        let off = RecentPublishes::new(Duration::ZERO, 1 << 20);
        off.record(&message("t", 10, 1), 1);
        assert_eq!(off.len(), 0);
        let on = RecentPublishes::new(Duration::from_secs(1), 1 << 20);
        on.record(&message("t", 0, 1), 1);
        assert_eq!(on.len(), 0);
        assert!(on.missed(Arrival::UNKNOWN, 9, 0, |_| true).is_empty());
    }
}
