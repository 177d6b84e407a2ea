//! Acknowledgements held until the store has what they acknowledge (`crate::persist`,
//! `docs/DURABILITY.md`). A PUBACK or PUBREC whose PUBLISH changed stored state (a retained
//! message), and the SUBACK or UNSUBACK of a stored session, wait for their store ticket to
//! be durable. Every acknowledgement after one that waits goes behind it, because PUBACKs and
//! PUBRECs go out in the order their PUBLISH packets arrived [MQTT-4.6.0-2]
//! [MQTT-4.6.0-3].

use super::Channel;
use crate::store::Ticket;
use hayate_codec::{
    encode_pub_resp, Packet, PacketId, PacketType, Properties, PubResp, ReasonCode,
};
use hayate_session::OutBuf;
use std::collections::VecDeque;

/// Acknowledgements waiting, in order, each with the ticket it waits for (0: none of its own).
#[derive(Debug, Default)]
pub(super) struct HeldAcks(VecDeque<(Ticket, Packet)>);

impl Channel {
    /// Sends `ack` now, or holds it while `ticket` is not durable or an earlier one is held.
    pub(super) fn send_ack(&mut self, ticket: Option<Ticket>, ack: Packet, out: &mut OutBuf) {
        let durable = |ticket: Ticket| {
            self.broker
                .attached()
                .is_none_or(|attached| attached.store.durable() >= ticket)
        };
        if !self.holds_acks() && ticket.is_none_or(durable) {
            self.write(&ack, out);
            return;
        }
        self.rare_mut()
            .held
            .get_or_insert_default()
            .0
            .push_back((ticket.unwrap_or(0), ack));
        self.release_acks(out);
    }

    /// Sends a PUBACK, PUBREC or PUBCOMP without properties (`packet_type`), now or held like
    /// [`Self::send_ack`]: when it can go now it is written straight into `out`, without
    /// building the packet.
    pub(super) fn send_pub_resp(
        &mut self,
        ticket: Option<Ticket>,
        packet_type: PacketType,
        packet_id: PacketId,
        reason_code: ReasonCode,
        out: &mut OutBuf,
    ) {
        let durable = |ticket: Ticket| {
            self.broker
                .attached()
                .is_none_or(|attached| attached.store.durable() >= ticket)
        };
        if !self.holds_acks() && ticket.is_none_or(durable) {
            let written = encode_pub_resp(
                packet_type,
                packet_id,
                reason_code,
                self.version,
                out.tail_mut(),
            );
            if let Err(error) = written {
                tracing::warn!(%error, packet = ?packet_type, "encode_failed");
            }
            return;
        }
        let response = PubResp {
            packet_id,
            reason_code,
            properties: Properties::default(),
        };
        let ack = match packet_type {
            PacketType::PubRec => Packet::PubRec(response),
            PacketType::PubComp => Packet::PubComp(response),
            _ => Packet::PubAck(response),
        };
        self.send_ack(ticket, ack, out);
    }

    /// Writes the held acknowledgements that may go now; while some remain, asks the store to
    /// ring this connection's doorbell when the first one's ticket is durable.
    pub(super) fn release_acks(&mut self, out: &mut OutBuf) {
        let Some(mut held) = self.take_rare(|rare| rare.held.take()) else {
            return;
        };
        let attached = self.broker.attached();
        let durable = attached.map_or(Ticket::MAX, |a| a.store.durable());
        while held.0.front().is_some_and(|(ticket, _)| *ticket <= durable) {
            let (_, ack) = held.0.pop_front().expect("front exists");
            self.write(&ack, out);
        }
        if let (Some((ticket, _)), Some(attached)) = (held.0.front(), attached) {
            attached
                .store
                .notify_when_durable(*ticket, self.doorbell.clone());
            self.rare_mut().held = Some(held);
        }
    }
}
