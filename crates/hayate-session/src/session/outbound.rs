//! The outbound half of a session: what `poll_transmit` writes (PUBRELs, resends after a
//! reconnect, queued messages within the in-flight window), packet id allocation, the encoding
//! of each PUBLISH and outbound topic aliases. Acknowledgements are handled in `session.rs`.

use super::*;

impl Session {
    /// Writes what can be sent now into `out`: PUBRELs, resends after reconnect, then waiting
    /// messages while the in-flight window allows [MQTT-3.3.4-9]. Stops after a byte budget so
    /// the caller can write and poll again. Does nothing while detached.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut OutBuf) -> TransmitReport {
        let report = self.transmit(now, out);
        self.transmitted += report.published as u64;
        report
    }

    fn transmit(&mut self, now: Instant, out: &mut OutBuf) -> TransmitReport {
        let mut report = TransmitReport::default();
        let Some(conn) = self.connection.clone() else {
            return report;
        };
        if self.journal_barrier() {
            // Attached just now: what it wrote before is not durable yet.
            return report;
        }
        let start_len = out.len();
        while let Some(rel) = self
            .rare
            .as_mut()
            .and_then(|rare| rare.pubrel_out.pop_front())
        {
            let _ = encode(&Packet::PubRel(rel), conn.version, out.tail_mut());
        }
        while let Some(id) = self.rare.as_mut().and_then(|rare| rare.resend.pop_front()) {
            let Some(flight) = self.inflight.get(&id) else {
                continue;
            };
            match (flight.state, &flight.delivery) {
                (OutflightState::AwaitPubComp, _) => {
                    let Some(pid) = PacketId::new(id) else {
                        continue;
                    };
                    let _ = encode(
                        &Packet::PubRel(PubResp::new(pid)),
                        conn.version,
                        out.tail_mut(),
                    );
                }
                (_, Some(delivery)) => {
                    let delivery = delivery.clone();
                    match self.write_publish(&conn, &delivery, Some(id), true, now, out) {
                        Ok(()) => {
                            report.count_published(delivery.qos, delivery.message.payload.len())
                        }
                        Err(reason) => {
                            // Too large for the client's new Maximum Packet Size: give up on
                            // it, and count it.
                            self.release(id);
                            match reason {
                                Unsendable::Expired => report.expired += 1,
                                Unsendable::TooLarge => report.too_large += 1,
                            }
                        }
                    }
                }
                (_, None) => {}
            }
            if out.len() - start_len > TRANSMIT_BUDGET_BYTES {
                report.more = true;
                return report;
            }
        }
        let window = usize::from(self.window());
        // Direct copies held back at the back of the queue wait (`hold.rs`).
        let mut sendable = self.pending.len().saturating_sub(self.direct_held());
        while let Some(front) = self.pending.front() {
            if sendable == 0
                || (front.qos != QoS::AtMostOnce
                    && (self.inflight.len() >= window || self.journal_blocks(front)))
            {
                break;
            }
            let Some(delivery) = self.pending.pop_front() else {
                break;
            };
            sendable -= 1;
            let weight = delivery.weight();
            if delivery.message.is_expired(now) {
                self.free(weight);
                self.forget_stored(&delivery);
                report.expired += 1;
                continue;
            }
            if delivery.qos == QoS::AtMostOnce {
                self.free(weight);
                match self.write_publish(&conn, &delivery, None, false, now, out) {
                    Ok(()) => report.count_published(delivery.qos, delivery.message.payload.len()),
                    Err(Unsendable::Expired) => report.expired += 1,
                    Err(Unsendable::TooLarge) => report.too_large += 1,
                }
            } else {
                let id = self.packet_id_for(&delivery);
                let dup = delivery.maybe_sent();
                match self.write_publish(&conn, &delivery, Some(id), dup, now, out) {
                    Ok(()) => {
                        report.count_published(delivery.qos, delivery.message.payload.len());
                        let state = if delivery.qos == QoS::AtLeastOnce {
                            OutflightState::AwaitPubAck
                        } else {
                            OutflightState::AwaitPubRec
                        };
                        let seq = self.next_seq;
                        self.next_seq += 1;
                        self.inflight.insert(
                            id,
                            Outflight {
                                stored: delivery.seq,
                                delivery: Some(delivery),
                                state,
                                seq,
                            },
                        );
                    }
                    Err(reason) => {
                        self.free(weight);
                        self.forget_stored(&delivery);
                        match reason {
                            Unsendable::Expired => report.expired += 1,
                            Unsendable::TooLarge => report.too_large += 1,
                        }
                    }
                }
            }
            if out.len() - start_len > TRANSMIT_BUDGET_BYTES {
                report.more = self.wants_transmit();
                break;
            }
        }
        report
    }

    /// Records that a stored delivery left without being sent.
    pub(super) fn forget_stored(&mut self, delivery: &Delivery) {
        if delivery.seq != 0 {
            let seq = delivery.seq;
            self.record(|| JournalEvent::Removed {
                seq,
                released: false,
            });
        }
    }

    /// The packet id `delivery` goes out under: a stored entry's is derived from its seq (the
    /// seq of one sent before under another id was chosen to derive that id, and it waits
    /// while that id is in flight: `journal_blocks`); one sent before on another node of a
    /// cluster keeps that node's id [MQTT-4.4.0-1] unless the id is in flight here already
    /// (a session merged with one this node served meanwhile), then it gets a new one, as
    /// does any other delivery.
    fn packet_id_for(&mut self, delivery: &Delivery) -> u16 {
        if delivery.seq != 0 {
            return journal::derived_packet_id(delivery.seq);
        }
        match delivery.sent_as {
            Some(id) if !self.inflight.contains_key(&id.get()) => id.get(),
            _ => self.allocate_packet_id(),
        }
    }

    /// The next packet id not in flight. The window is at most 65,535, so one is free.
    fn allocate_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if !self.inflight.contains_key(&id) {
                return id;
            }
        }
    }

    fn write_publish(
        &mut self,
        conn: &ConnectionParams,
        delivery: &Delivery,
        packet_id: Option<u16>,
        dup: bool,
        now: Instant,
        out: &mut OutBuf,
    ) -> Result<(), Unsendable> {
        let message = &delivery.message;
        // Expiry only stops a delivery that has not started [MQTT-3.3.2-5]; a resend (DUP) of
        // one the client may already hold must go out [MQTT-4.4.0-1].
        if !dup && message.is_expired(now) {
            return Err(Unsendable::Expired);
        }
        let v5 = conn.version.is_v5();
        let mut alias = if v5 && conn.assign_outbound_aliases && conn.client_topic_alias_maximum > 0
        {
            self.outbound_alias(&message.topic, conn.client_topic_alias_maximum)
        } else {
            None
        };
        let per_subscriber = v5
            && (!delivery.subscription_ids.is_empty()
                || message.expires_at.is_some()
                || alias.is_some());
        if !per_subscriber {
            // The common case: the header bytes are shared by every subscriber of this form.
            return message
                .write_shared_form(
                    WireForm {
                        version: conn.version,
                        qos: delivery.qos,
                        retain: delivery.retain,
                    },
                    packet_id,
                    dup,
                    conn.client_maximum_packet_size,
                    out,
                )
                .map(|_| ())
                .ok_or(Unsendable::TooLarge);
        }
        let mut properties = message.properties.clone();
        properties.message_expiry_interval = message.remaining_expiry(now);
        properties.subscription_identifiers = delivery.subscription_ids.clone();
        let mut topic: &[u8] = message.topic.as_bytes();
        if let Some((alias, known)) = alias {
            properties.topic_alias = Some(alias);
            if known {
                topic = b"";
            }
        }
        let fits = |topic: &[u8], properties: &Properties| {
            let header_len = publish_header_len(
                conn.version,
                topic.len(),
                packet_id.is_some(),
                properties,
                message.payload.len(),
            );
            header_len + message.payload.len() <= conn.client_maximum_packet_size as usize
        };
        if !fits(topic, &properties) {
            // The alias property (3 bytes) can make a packet larger than the full topic would
            // (a new alias, or a known one for a topic under 3 bytes): try without it.
            if alias.is_none() {
                return Err(Unsendable::TooLarge);
            }
            alias = None;
            properties.topic_alias = None;
            topic = message.topic.as_bytes();
            if !fits(topic, &properties) {
                return Err(Unsendable::TooLarge);
            }
        }
        let packet_id = packet_id.and_then(PacketId::new);
        encode_publish_header(
            conn.version,
            dup,
            delivery.qos,
            delivery.retain,
            topic,
            packet_id,
            &properties,
            message.payload.len(),
            out.tail_mut(),
        )
        .map_err(|_| Unsendable::TooLarge)?;
        out.put_bytes(message.payload.clone());
        if let Some((alias, false)) = alias {
            // Recorded only once the client has been told, with the full topic, what it means.
            self.rare()
                .outbound_aliases
                .insert(message.topic.clone(), alias);
        }
        Ok(())
    }

    /// Returns `(alias, already_known_by_client)` for `topic`; a new alias is offered while the
    /// client's maximum allows and recorded by the caller once it was sent.
    fn outbound_alias(&mut self, topic: &ByteStr, max: u16) -> Option<(u16, bool)> {
        let known = self.rare.as_ref().map(|rare| &rare.outbound_aliases);
        if let Some(alias) = known.and_then(|aliases| aliases.get(topic)) {
            return Some((*alias, true));
        }
        let next = u16::try_from(known.map_or(0, HashMap::len) + 1).ok()?;
        (next <= max).then_some((next, false))
    }
}

enum Unsendable {
    Expired,
    TooLarge,
}
