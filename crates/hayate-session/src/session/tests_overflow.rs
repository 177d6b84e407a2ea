//! Drop-oldest queues (`overflow.rs`).
#![allow(clippy::disallowed_methods)]

use super::tests::{delivery, drain, params, publish_ids};
use super::*;
use crate::message::Message;
use std::sync::atomic::{AtomicU64, Ordering};

fn numbered(n: usize, qos: QoS) -> Delivery {
    delivery(&format!("t/{n}"), qos)
}

fn drop_oldest(messages: usize, bytes: usize) -> (SessionLimits, Arc<AtomicU64>) {
    let dropped = Arc::new(AtomicU64::new(0));
    let limits = SessionLimits {
        max_queued_messages: messages,
        max_queued_bytes: bytes,
        queue_full: QueueFull::DropOldest(dropped.clone()),
        ..SessionLimits::default()
    };
    (limits, dropped)
}

fn topics(packets: &[Packet]) -> Vec<String> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.topic.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn drop_newest_is_the_default() {
    let limits = SessionLimits {
        max_queued_messages: 2,
        ..SessionLimits::default()
    };
    let mut session = Session::new(limits);
    assert!(!session.drops_oldest());
    session.enqueue(numbered(0, QoS::AtLeastOnce));
    session.enqueue(numbered(1, QoS::AtLeastOnce));
    assert_eq!(
        session.enqueue(numbered(2, QoS::AtLeastOnce)),
        EnqueueOutcome::DroppedQueueFull
    );
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/0", "t/1"]);
}

#[test]
fn drop_oldest_keeps_the_newest_messages_and_counts_the_others() {
    let (limits, dropped) = drop_oldest(3, usize::MAX);
    let mut session = Session::new(limits);
    for n in 0..10 {
        assert!(matches!(
            session.enqueue(numbered(n, QoS::AtLeastOnce)),
            EnqueueOutcome::Queued { .. }
        ));
    }
    assert_eq!(session.held_messages(), 3);
    assert_eq!(dropped.load(Ordering::Relaxed), 7);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/7", "t/8", "t/9"]);
}

#[test]
fn drop_oldest_by_bytes_and_a_message_larger_than_the_limit_drops_nothing_else() {
    // Each delivery weighs topic (3) + payload (7) = 10 bytes.
    let (limits, dropped) = drop_oldest(1000, 25);
    let mut session = Session::new(limits);
    for n in 0..5 {
        session.enqueue(numbered(n, QoS::AtLeastOnce));
    }
    assert_eq!(session.held_messages(), 2);
    assert_eq!(session.held_bytes(), 20);
    assert_eq!(dropped.load(Ordering::Relaxed), 3);
    let mut big = numbered(9, QoS::AtLeastOnce);
    big.message = Arc::new(Message::new(
        ByteStr::from("t/big"),
        bytes::Bytes::from(vec![0u8; 100]),
        QoS::AtLeastOnce,
        false,
        Properties::default(),
        None,
        None,
    ));
    assert_eq!(session.enqueue(big), EnqueueOutcome::DroppedQueueFull);
    assert_eq!(session.held_messages(), 2);
    assert_eq!(dropped.load(Ordering::Relaxed), 3);
}

#[test]
fn messages_in_flight_are_not_dropped() {
    let (limits, dropped) = drop_oldest(3, usize::MAX);
    let now = Instant::now();
    let mut session = Session::new(limits);
    session.attach(params(ProtocolVersion::V5, 2));
    for n in 0..3 {
        session.enqueue(numbered(n, QoS::ExactlyOnce));
    }
    // Two go in flight (window 2), then the link drops.
    assert_eq!(
        publish_ids(&drain(&mut session, ProtocolVersion::V5, now)).len(),
        2
    );
    session.detach();
    for n in 3..6 {
        session.enqueue(numbered(n, QoS::ExactlyOnce));
    }
    // Only one slot is left beside the two in flight: the newest waits there.
    assert_eq!(session.held_messages(), 3);
    assert_eq!(session.inflight_len(), 2);
    assert_eq!(dropped.load(Ordering::Relaxed), 3);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, now);
    // The two in flight are resent (DUP), then the newest.
    assert_eq!(topics(&sent), ["t/0", "t/1", "t/5"]);
    assert_eq!(
        publish_ids(&sent),
        [(1, true), (2, true), (3, false)],
        "resends keep their ids"
    );
}

#[test]
fn a_qos2_message_that_may_have_been_sent_is_not_dropped() {
    let (limits, dropped) = drop_oldest(2, usize::MAX);
    let mut session = Session::new(limits);
    let mut maybe = numbered(0, QoS::ExactlyOnce);
    maybe.sent_as = PacketId::new(7);
    session.enqueue(maybe);
    let mut qos1 = numbered(1, QoS::AtLeastOnce);
    qos1.sent_as = PacketId::new(8);
    session.enqueue(qos1);
    session.enqueue(numbered(2, QoS::AtLeastOnce));
    session.enqueue(numbered(3, QoS::AtLeastOnce));
    assert_eq!(dropped.load(Ordering::Relaxed), 2);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/0", "t/3"]);
}

#[test]
fn lower_limits_trim_the_oldest_at_once_and_budget_charges_return() {
    let budget = Arc::new(MemoryBudget::new(1 << 20));
    let mut session = Session::new(SessionLimits {
        budget: Some(budget.clone()),
        ..SessionLimits::default()
    });
    for n in 0..10 {
        session.enqueue(numbered(n, QoS::AtLeastOnce));
    }
    let per = 10 + DELIVERY_OVERHEAD_BYTES;
    assert_eq!(budget.held(), 10 * per);
    let (mut limits, dropped) = drop_oldest(4, usize::MAX);
    limits.budget = Some(budget.clone());
    session.set_limits(Arc::new(limits.into()));
    assert_eq!(session.held_messages(), 4);
    assert_eq!(dropped.load(Ordering::Relaxed), 6);
    assert_eq!(budget.held(), 4 * per);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/6", "t/7", "t/8", "t/9"]);
}

#[test]
fn a_stored_drop_oldest_queue_stays_in_memory_and_records_what_it_drops() {
    let (limits, dropped) = drop_oldest(2, usize::MAX);
    let mut session = Session::new(limits);
    session.enable_journal(1);
    for n in 0..4 {
        session.enqueue(numbered(n, QoS::AtLeastOnce));
    }
    // Offline, yet nothing went to disk only.
    assert_eq!(session.spilled(), 0);
    assert_eq!(session.held_messages(), 2);
    assert_eq!(dropped.load(Ordering::Relaxed), 2);
    let events = session.take_journal();
    let queued: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            JournalEvent::Queued(d) => Some(d.seq),
            _ => None,
        })
        .collect();
    let removed: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            JournalEvent::Removed { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(queued, [1, 2, 3, 4]);
    assert_eq!(removed, [1, 2]);
}

#[test]
fn a_restored_drop_oldest_queue_is_read_back_while_detached_and_trimmed() {
    let (limits, dropped) = drop_oldest(3, usize::MAX);
    let mut session = Session::new(limits);
    session.enable_journal(5);
    session.restore_spilled(1, 4);
    // A new message stays behind the restored ones (on disk too).
    session.enqueue(numbered(99, QoS::AtLeastOnce));
    assert_eq!(session.spilled(), 5);
    let (from, max) = session.take_page_request().expect("reads while detached");
    assert_eq!(from, 1);
    let page: Vec<Delivery> = (1..=4)
        .map(|seq| {
            let mut d = numbered(seq as usize, QoS::AtLeastOnce);
            d.seq = seq;
            d
        })
        .take(max)
        .collect();
    assert!(session.apply_page(from, page, false));
    assert_eq!(session.held_messages() + session.spilled() as usize, 3);
    let (from, _) = session.take_page_request().expect("the rest");
    assert_eq!(from, 5);
    let mut last = numbered(99, QoS::AtLeastOnce);
    last.seq = 5;
    session.apply_page(from, vec![last], true);
    assert_eq!(session.spilled(), 0);
    assert_eq!(dropped.load(Ordering::Relaxed), 2);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/3", "t/4", "t/99"]);
}

/// A page read after new entries were written holds some of them: they are not counted as
/// still on disk (which would make the queue look fuller than it is and drop too many).
#[test]
fn a_page_that_saw_entries_queued_while_it_was_read_drops_no_more_than_the_excess() {
    let (limits, dropped) = drop_oldest(3, usize::MAX);
    let mut session = Session::new(limits);
    session.enable_journal(4);
    session.restore_spilled(1, 3);
    let (from, _) = session.take_page_request().expect("reads while detached");
    // Two new entries (seqs 4 and 5) are queued while the page is read, and the read sees them.
    session.enqueue(numbered(4, QoS::AtLeastOnce));
    session.enqueue(numbered(5, QoS::AtLeastOnce));
    let page: Vec<Delivery> = (1..=5)
        .map(|seq| {
            let mut d = numbered(seq as usize, QoS::AtLeastOnce);
            d.seq = seq;
            d
        })
        .collect();
    session.apply_page(from, page, true);
    assert_eq!(session.spilled(), 0);
    assert_eq!(session.held_messages(), 3);
    assert_eq!(dropped.load(Ordering::Relaxed), 2);
    session.attach(params(ProtocolVersion::V5, 10));
    let sent = drain(&mut session, ProtocolVersion::V5, Instant::now());
    assert_eq!(topics(&sent), ["t/3", "t/4", "t/5"]);
}
