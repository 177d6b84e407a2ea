//! Holding back a session's direct copies (published on this node or forwarded by another,
//! not relayed by the old node) after it moved between the nodes of a cluster
//! (`docs/CLUSTER.md`, "Direct copies after a take-over"). The node that takes a session over
//! sends its own publishers' messages to it directly from then on, while the ones it routed to
//! the old node before come back relayed, later. Until the old node says it has relayed them
//! all, deliveries of messages published on this node wait at the back of the queue, and so
//! do those another node forwards (a publisher that moved from here to that node meanwhile
//! would otherwise overtake its own held copies); those the old node relays or hands over
//! (`PeerScope::relayed`), older than all of them, go in ahead:
//!
//! ```text
//! pending: [ sendable ..................... | held (own and forwarded copies since the hold) ]
//!            ^ relayed copies are inserted here ^                         the others: push_back
//! ```
//!
//! States: no hold; holding (`RareState::direct_held` is the number of held deliveries at the
//! back). A hold ends when the broker releases it, and whenever the queue is rearranged
//! otherwise (spilled to disk, read back, handed over, shared deliveries taken, oldest
//! dropped): what is queued then goes out in queue order, as without a hold.

use super::*;

impl Session {
    /// Holds back, from now on, the deliveries of messages published on this node or
    /// forwarded by another one; deliveries relayed or handed over (`PeerScope::relayed`) go
    /// ahead of them. A hold in place stays. No hold while part of the queue is on disk only (it is read back behind
    /// what is in memory).
    pub fn hold_direct(&mut self) {
        if self.spilled() > 0 {
            return;
        }
        let rare = self.rare();
        if rare.direct_held.is_none() {
            rare.direct_held = Some(0);
        }
    }

    /// Ends the hold. True when the connection has something to send now that it had not
    /// (ring its doorbell).
    pub fn release_direct(&mut self) -> bool {
        let held = self.rare.as_mut().and_then(|rare| rare.direct_held.take());
        held.is_some_and(|held| held > 0) && self.wants_transmit()
    }

    /// Whether direct copies are held back.
    pub fn holds_direct(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|rare| rare.direct_held.is_some())
    }

    /// How many deliveries at the back of the queue are held back (0 without a hold).
    pub(super) fn direct_held(&self) -> usize {
        self.rare
            .as_ref()
            .and_then(|rare| rare.direct_held)
            .unwrap_or(0)
    }

    /// The queue is rearranged otherwise: the hold ends, without a wake-up (the caller
    /// transmits or is about to).
    pub(super) fn drop_direct_hold(&mut self) {
        if let Some(rare) = self.rare.as_mut() {
            rare.direct_held = None;
        }
    }

    /// Queues `delivery` in memory: while holding, behind what may be sent and ahead of the
    /// held copies when it is relayed or handed over, at the back (held) otherwise. True when
    /// the session had nothing it could send before and has now.
    pub(super) fn push_pending(&mut self, delivery: Delivery) -> bool {
        let Session { rare, pending, .. } = self;
        match rare.as_mut().and_then(|rare| rare.direct_held.as_mut()) {
            None => {
                let was_idle = pending.is_empty();
                pending.push_back(delivery);
                was_idle
            }
            Some(held)
                if !delivery
                    .message
                    .from_peer
                    .as_ref()
                    .is_some_and(|scope| scope.relayed) =>
            {
                *held += 1;
                pending.push_back(delivery);
                false
            }
            Some(held) => {
                let at = pending.len().saturating_sub(*held);
                pending.insert(at, delivery);
                at == 0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)]

    use super::super::tests::{drain, params};
    use super::*;
    use crate::message::{Message, PeerScope};
    use bytes::Bytes;
    use std::sync::Arc;

    /// Where a test delivery's message comes from.
    #[derive(Clone, Copy)]
    enum Origin {
        /// Published on this node.
        Here,
        /// Forwarded by another node for a subscription here.
        Forwarded,
        /// Relayed or handed over by the node that had the session.
        Relayed,
    }

    fn delivery(payload: &'static str, from: Origin) -> Delivery {
        let mut message = Message::new(
            ByteStr::from("t"),
            Bytes::from_static(payload.as_bytes()),
            QoS::AtLeastOnce,
            false,
            Properties::default(),
            None,
            None,
        );
        match from {
            Origin::Here => {}
            Origin::Forwarded => {
                message.from_peer = Some(Arc::new(PeerScope {
                    plain: true,
                    ..PeerScope::default()
                }))
            }
            Origin::Relayed => message.from_peer = Some(Arc::new(PeerScope::relayed())),
        }
        Delivery::new(Arc::new(message), QoS::AtLeastOnce, false)
    }

    fn payloads(packets: &[Packet]) -> Vec<String> {
        packets
            .iter()
            .filter_map(|p| match p {
                Packet::Publish(p) => Some(String::from_utf8_lossy(&p.payload).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn own_copies_wait_behind_relayed_ones_until_released() {
        let now = Instant::now();
        let mut session = Session::new(SessionLimits::default());
        session.attach(params(ProtocolVersion::V5, 100));
        session.hold_direct();
        assert!(session.holds_direct());
        // Handed over with the session: ahead of everything, sendable at once.
        assert_eq!(
            session.enqueue(delivery("handed", Origin::Relayed)),
            EnqueueOutcome::Queued { wake: true }
        );
        assert_eq!(
            session.enqueue(delivery("own-1", Origin::Here)),
            EnqueueOutcome::Queued { wake: false },
            "held: nothing to wake for"
        );
        session.enqueue(delivery("own-2", Origin::Here));
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["handed"]
        );
        assert!(!session.wants_transmit(), "only held copies are queued");
        // Relayed by the old node: before the own copies queued since the hold.
        assert_eq!(
            session.enqueue(delivery("relayed-1", Origin::Relayed)),
            EnqueueOutcome::Queued { wake: true }
        );
        session.enqueue(delivery("relayed-2", Origin::Relayed));
        session.enqueue(delivery("own-3", Origin::Here));
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["relayed-1", "relayed-2"]
        );
        assert!(session.release_direct(), "the held copies can go now");
        assert!(!session.holds_direct());
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["own-1", "own-2", "own-3"]
        );
        assert!(!session.release_direct(), "no hold any more");
        assert_eq!(
            session.enqueue(delivery("own-4", Origin::Here)),
            EnqueueOutcome::Queued { wake: true }
        );
    }

    /// A publisher that moved from this node to another while the hold is on: its copies
    /// forwarded from there wait behind its own held copies from here (the 30-minute kill
    /// soak of `4dffb30`: the first message published after the move came after the next
    /// one). Relayed copies still go ahead of both.
    #[test]
    fn forwarded_copies_wait_with_the_own_ones() {
        let now = Instant::now();
        let mut session = Session::new(SessionLimits::default());
        session.attach(params(ProtocolVersion::V5, 100));
        session.hold_direct();
        session.enqueue(delivery("own-1", Origin::Here));
        assert_eq!(
            session.enqueue(delivery("forwarded-2", Origin::Forwarded)),
            EnqueueOutcome::Queued { wake: false },
            "held: nothing to wake for"
        );
        session.enqueue(delivery("relayed-0", Origin::Relayed));
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["relayed-0"]
        );
        assert!(session.release_direct());
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["own-1", "forwarded-2"]
        );
    }

    #[test]
    fn handing_the_session_on_takes_the_queue_in_its_order_and_ends_the_hold() {
        let mut session = Session::new(SessionLimits::default());
        session.hold_direct();
        session.enqueue(delivery("own-1", Origin::Here));
        session.enqueue(delivery("relayed-1", Origin::Relayed));
        let taken: Vec<String> = session
            .take_all_deliveries()
            .iter()
            .map(|d| String::from_utf8_lossy(&d.message.payload).into_owned())
            .collect();
        assert_eq!(taken, ["relayed-1", "own-1"]);
        assert!(!session.holds_direct());
    }

    #[test]
    fn dropping_the_oldest_ends_the_hold() {
        let now = Instant::now();
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut session = Session::new(SessionLimits {
            max_queued_messages: 2,
            queue_full: QueueFull::DropOldest(dropped.clone()),
            ..SessionLimits::default()
        });
        session.attach(params(ProtocolVersion::V5, 100));
        session.hold_direct();
        session.enqueue(delivery("own-1", Origin::Here));
        session.enqueue(delivery("own-2", Origin::Here));
        assert!(!session.wants_transmit());
        session.enqueue(delivery("own-3", Origin::Here));
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(
            !session.holds_direct(),
            "the queue lost an entry: no hold counts it any more"
        );
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["own-2", "own-3"]
        );
    }

    #[test]
    fn a_hold_with_nothing_held_wakes_no_one_when_released() {
        let now = Instant::now();
        let mut session = Session::new(SessionLimits::default());
        session.attach(params(ProtocolVersion::V5, 100));
        session.hold_direct();
        session.enqueue(delivery("relayed", Origin::Relayed));
        assert!(!session.release_direct(), "nothing was held back");
        assert_eq!(
            payloads(&drain(&mut session, ProtocolVersion::V5, now)),
            ["relayed"]
        );
    }
}
