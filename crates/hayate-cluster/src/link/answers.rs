//! Which of the ingress's acknowledgements a link's current connection may carry.
//!
//! The ingress answers what the other node forwards (PUBACK / PUBREC for a PUBLISH, PUBCOMP
//! for a PUBREL), and may hold an answer until this node's store has what it acknowledges.
//! An answer that comes out after the connection it answers has dropped must not go out on the
//! next one: the other node, restarted, holds the message in its queue to send again and does
//! not know the packet id yet, so it takes a PUBREC for it as one for an unknown id and answers
//! PUBREL 0x92 (Packet Identifier not found); the ingress took that PUBREL as the release and
//! forgot the id, and the PUBLISH sent again right after was routed a second time. That was
//! every QoS 2 duplicate of the kill soaks traced on 2026-11-29 (docs/CLUSTER.md, "Messages
//! in flight between nodes"). Only the resending side resends after a reconnection
//! [MQTT-4.4.0-1]; an acknowledgement answers a packet of the same connection, and the
//! ingress answers the PUBLISH or PUBREL sent again.

use hayate_codec::{Packet, QoS};
use std::collections::HashSet;

/// The packet ids this connection brought that the ingress has not answered yet.
#[derive(Debug, Default)]
pub(crate) struct Unanswered {
    /// QoS 1/2 PUBLISHes, awaiting PUBACK / PUBREC.
    publishes: HashSet<u16>,
    /// PUBRELs, awaiting PUBCOMP.
    releases: HashSet<u16>,
    /// Answers dropped since the last report (for the log).
    dropped: u64,
}

impl Unanswered {
    /// A new connection: nothing it brought is unanswered yet.
    pub(crate) fn new_connection(&mut self) {
        self.publishes.clear();
        self.releases.clear();
    }

    /// A packet from the other node, about to be handed to the ingress.
    pub(crate) fn received(&mut self, packet: &Packet) {
        match packet {
            Packet::Publish(publish) if publish.qos != QoS::AtMostOnce => {
                if let Some(id) = publish.packet_id {
                    self.publishes.insert(id.get());
                }
            }
            Packet::PubRel(rel) => {
                self.releases.insert(rel.packet_id.get());
            }
            _ => {}
        }
    }

    /// True when `answer` (from the ingress) answers a packet of this connection; it is then
    /// no longer unanswered. False for an answer to a packet of an earlier connection.
    pub(crate) fn answers(&mut self, answer: &Packet) -> bool {
        let answered = match answer {
            Packet::PubAck(ack) | Packet::PubRec(ack) => {
                self.publishes.remove(&ack.packet_id.get())
            }
            Packet::PubComp(comp) => self.releases.remove(&comp.packet_id.get()),
            _ => true,
        };
        if !answered {
            self.dropped += 1;
        }
        answered
    }

    /// Answers dropped since the last call.
    pub(crate) fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_codec::{PacketId, PubResp, Publish};

    fn id(n: u16) -> PacketId {
        PacketId::new(n).expect("non-zero")
    }

    fn publish(n: u16, qos: QoS) -> Packet {
        Packet::Publish(Publish {
            dup: false,
            qos,
            retain: false,
            topic: "t".into(),
            packet_id: (qos != QoS::AtMostOnce).then(|| id(n)),
            properties: hayate_codec::Properties::default(),
            payload: bytes::Bytes::new(),
        })
    }

    /// The traced duplicate: a PUBREC the ingress gave after the connection that brought the
    /// PUBLISH dropped does not go out on the next one; the PUBLISH sent again there is
    /// answered.
    #[test]
    fn an_answer_to_an_earlier_connection_is_dropped() {
        let mut unanswered = Unanswered::default();
        unanswered.new_connection();
        unanswered.received(&publish(4023, QoS::ExactlyOnce));
        unanswered.new_connection();
        let late = Packet::PubRec(PubResp::new(id(4023)));
        assert!(!unanswered.answers(&late));
        assert_eq!(unanswered.take_dropped(), 1);
        unanswered.received(&publish(4023, QoS::ExactlyOnce));
        assert!(unanswered.answers(&Packet::PubRec(PubResp::new(id(4023)))));
        // One answer per packet: a second PUBREC (the held one and the repeat's) is dropped.
        assert!(!unanswered.answers(&Packet::PubRec(PubResp::new(id(4023)))));
    }

    #[test]
    fn each_answer_matches_its_own_kind_of_packet() {
        let mut unanswered = Unanswered::default();
        unanswered.received(&publish(1, QoS::AtLeastOnce));
        unanswered.received(&publish(2, QoS::AtMostOnce));
        unanswered.received(&Packet::PubRel(PubResp::new(id(3))));
        assert!(unanswered.answers(&Packet::PubAck(PubResp::new(id(1)))));
        // No QoS 0 PUBLISH is answered; a PUBCOMP answers a PUBREL, not a PUBLISH.
        assert!(!unanswered.answers(&Packet::PubAck(PubResp::new(id(2)))));
        assert!(!unanswered.answers(&Packet::PubComp(PubResp::new(id(1)))));
        assert!(unanswered.answers(&Packet::PubComp(PubResp::new(id(3)))));
        assert!(!unanswered.answers(&Packet::PubRec(PubResp::new(id(3)))));
        assert_eq!(unanswered.take_dropped(), 3);
        assert_eq!(unanswered.take_dropped(), 0);
    }
}
