//! A stored session's journal (`journal.rs`): what waits for the store, and what is read back.
#![allow(clippy::disallowed_methods)]

use super::journal::RESIDENT_LIMIT;
use super::tests::{delivery, drain, params};
use super::*;

fn with_seq(topic: &str, seq: u64) -> Delivery {
    let mut d = delivery(topic, QoS::ExactlyOnce);
    d.seq = seq;
    d
}

/// A QoS 2 entry queued while attached waits for the store (its gate); the connection goes, it
/// goes to disk with the entries queued after it (durable as they are written). Back, the
/// store confirms the first entry's gate: that must not make the later ones look not durable
/// again. It did (a "durable up to" mark set back to the gate's seq, below the spilled
/// entries'), and every QoS 2 entry after the first waited for a confirmation that never came:
/// a node link's backlog stuck after one message (`hayate/tests/cluster_order.rs`, 2026-11-29).
#[test]
fn a_confirmed_gate_leaves_later_spilled_entries_durable() {
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(1);
    session.attach(params(ProtocolVersion::V5, 10));
    session.enqueue(delivery("t/0", QoS::ExactlyOnce));
    session.take_journal();
    session.journal_flushed(1);
    // Not durable yet: nothing goes out.
    assert_eq!(session.confirm(0), Some(1));
    assert!(drain(&mut session, ProtocolVersion::V5, Instant::now()).is_empty());
    session.detach();
    session.enqueue(delivery("t/1", QoS::ExactlyOnce));
    session.enqueue(delivery("t/2", QoS::ExactlyOnce));
    assert_eq!(session.spilled(), 3);
    session.take_journal();
    session.journal_flushed(2);

    session.attach(params(ProtocolVersion::V5, 10));
    assert_eq!(session.confirm(2), None);
    let (from, _) = session.take_page_request().expect("the queue is on disk");
    assert_eq!(from, 1);
    let page = vec![with_seq("t/0", 1), with_seq("t/1", 2), with_seq("t/2", 3)];
    assert!(session.apply_page(from, page, true));
    let sent: Vec<String> = drain(&mut session, ProtocolVersion::V5, Instant::now())
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.topic.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(sent, ["t/0", "t/1", "t/2"]);
}

/// A connected session holding its resident limit spills what comes next to disk; that entry
/// is durable when read back, but the ones in memory before it still wait for the store (with
/// a "durable up to" mark, the spilled entry's seq let them all out unconfirmed: a crash then
/// could give their packet ids to other messages the client would take for duplicates).
#[test]
fn an_entry_spilled_past_the_resident_limit_lets_no_unconfirmed_one_out() {
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(1);
    session.attach(params(ProtocolVersion::V5, 10));
    for n in 0..=RESIDENT_LIMIT {
        session.enqueue(delivery(&format!("t/{n}"), QoS::ExactlyOnce));
    }
    assert_eq!(session.spilled(), 1);
    session.take_journal();
    session.journal_flushed(1);
    assert_eq!(session.confirm(0), Some(1));
    assert!(drain(&mut session, ProtocolVersion::V5, Instant::now()).is_empty());
    assert_eq!(session.confirm(1), None);
    assert_eq!(
        drain(&mut session, ProtocolVersion::V5, Instant::now()).len(),
        10
    );
}

/// Inbound QoS 2 ids taken on from another node's session are written to this node's store
/// (a restart before the PUBREL must still know the message was routed); ids read back from
/// this node's own store are not written again.
#[test]
fn adopted_inbound_qos2_ids_are_recorded_and_restored_ones_are_not() {
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(1);
    session.restore_inbound_qos2(7);
    assert!(session.take_journal().is_empty());
    session.adopt_inbound_qos2(9);
    session.adopt_inbound_qos2(7);
    let events = session.take_journal();
    assert!(
        matches!(
            events.as_slice(),
            [JournalEvent::InboundQos2 {
                packet_id: 9,
                awaiting: true
            }]
        ),
        "{events:?}"
    );
    let mut ids = session.inbound_qos2_ids();
    ids.sort_unstable();
    assert_eq!(ids, [7, 9]);
}

/// A stored session's packet ids are derived from its entries' seqs: a delivery handed over
/// from another node with the id it went out under there gets the seq that derives that id
/// (the seqs between stay unused), and the entries after it follow on [MQTT-4.4.0-1].
#[test]
fn a_handed_over_delivery_keeps_its_packet_id_in_a_stored_session() {
    let now = Instant::now();
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(70_000);
    session.attach(params(ProtocolVersion::V5, 10));
    let mut moved = delivery("t/moved", QoS::AtLeastOnce);
    moved.sent_as = PacketId::new(9);
    session.enqueue(moved);
    session.enqueue(delivery("t/next", QoS::AtLeastOnce));
    let seqs: Vec<u64> = session
        .take_journal()
        .iter()
        .filter_map(|event| match event {
            JournalEvent::Queued(d) => Some(d.seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, vec![2 * 65_535 + 9, 2 * 65_535 + 10]);
    assert_eq!(
        super::tests::publish_ids(&drain(&mut session, ProtocolVersion::V5, now)),
        vec![(9, true), (10, false)]
    );
}

/// A session being handed over to another node keeps its queue in memory when its connection
/// goes meanwhile: the handover takes what is in memory, so entries sent back to disk after the
/// handover's read would stay behind (`Session::spill_resident`).
#[test]
fn a_detach_during_a_handover_keeps_the_queue_in_memory() {
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(1);
    session.attach(params(ProtocolVersion::V5, 10));
    session.enqueue(delivery("t/0", QoS::ExactlyOnce));
    session.enqueue(delivery("t/1", QoS::ExactlyOnce));
    assert_eq!(
        session.take_handover_page_request(),
        None,
        "nothing on disk"
    );
    session.detach();
    assert_eq!(session.spilled(), 0);
    session.enqueue(delivery("t/2", QoS::ExactlyOnce));
    assert_eq!(session.spilled(), 0, "offline, but handing over: in memory");
    let topics: Vec<String> = session
        .take_all_deliveries()
        .iter()
        .map(|d| d.message.topic.to_string())
        .collect();
    assert_eq!(topics, ["t/0", "t/1", "t/2"]);

    // Without a handover the same detach sends the queue to disk only.
    let mut session = Session::new(SessionLimits::default());
    session.enable_journal(1);
    session.attach(params(ProtocolVersion::V5, 10));
    session.enqueue(delivery("t/0", QoS::ExactlyOnce));
    session.detach();
    assert_eq!(session.spilled(), 1);
}
