//! The journal of a stored session: the changes to its queue and to its inbound QoS 2 ids,
//! recorded as plain data for the broker to write to its store, and the gates that keep output
//! from getting ahead of what is stored (`docs/design/persistence.md`, "Queues").
//!
//! States of one stored queue entry (its `seq` is its key in the store):
//!
//! ```text
//! Queued --send--> in flight --PUBACK--------------------------> Removed
//!                            --PUBREC--> Released --PUBCOMP----> Removed
//!   (expired, too large, handed to another group member)-------> Removed
//! ```
//!
//! Sending is not recorded: a stored entry's packet id is derived from its `seq`, so the same
//! message goes out under the same id after a restart. Two things must be stored before they
//! reach the client, or a restart could break exactly-once delivery:
//! - a QoS 2 PUBLISH: the client keeps its packet id until PUBREL, so a message that was sent
//!   but lost with the restart would make the next message under that id a "duplicate";
//! - a PUBREL: once the client has it, it forgets the id, so a PUBLISH resent after a restart
//!   that lost the `Released` would be delivered twice.
//!
//! The broker stamps each batch of events it writes with its store ticket
//! ([`Session::journal_flushed`]) and tells the session how far the store is durable
//! ([`Session::confirm`]); what waits for a later ticket stays back.

use super::*;

/// A change to a stored session, for the broker to write to its store in this order.
#[derive(Debug, Clone)]
pub enum JournalEvent {
    /// A QoS 1/2 delivery was queued under `delivery.seq`.
    Queued(Delivery),
    /// PUBREC arrived for entry `seq`: the message itself is no longer needed; PUBREL is sent
    /// and PUBCOMP awaited (packet id derived from `seq`).
    Released {
        /// The entry.
        seq: u64,
    },
    /// Entry `seq` left the session: acknowledged, expired, too large, or handed to another
    /// member of its shared group.
    Removed {
        /// The entry.
        seq: u64,
        /// It had been released (PUBCOMP ended it).
        released: bool,
    },
    /// An inbound QoS 2 packet id now awaits PUBREL (`true`), or no longer does.
    InboundQos2 {
        /// The packet id.
        packet_id: u16,
        /// Awaiting PUBREL.
        awaiting: bool,
    },
}

/// The store ticket a gate waits for; 0 until the broker stamps it.
type Ticket = u64;

/// A stored session keeps at most this many deliveries in memory; further QoS 1/2 entries stay
/// on disk only, and are read back in pages as the client drains the queue.
pub const RESIDENT_LIMIT: usize = 1000;
/// Entries asked for per page.
pub const PAGE_SIZE: usize = 500;

/// The entries of a stored session that are on disk only: every entry from `first_seq` on. Its
/// states: none (everything is in memory); spilled; spilled with a page being read.
#[derive(Debug)]
struct Spill {
    /// The first seq on disk only; every entry in memory has a lower one.
    first_seq: u64,
    /// Entries on disk from `first_seq` on.
    count: u64,
    /// A page was asked for and has not come back.
    reading: bool,
    /// Entries spilled since the page was asked for (the page may not have them).
    added_while_reading: u64,
    /// Entries below this seq were read back after a restart and may have been sent before it.
    maybe_sent_below: u64,
}

#[derive(Debug, Default)]
pub(super) struct Journal {
    /// `seq` of the next queued entry (the first is 1).
    next_seq: u64,
    events: Vec<JournalEvent>,
    /// Queued QoS 2 entries whose `Queued` is not known to be durable: (seq, ticket).
    qos2_gates: VecDeque<(u64, Ticket)>,
    /// PUBRELs waiting for their `Released` to be durable.
    pubrels: VecDeque<(Ticket, PubResp)>,
    /// Ticket of the last batch written for this session.
    last_ticket: Ticket,
    /// Set at attach: nothing goes out until this ticket is durable (resent PUBRELs and QoS 2
    /// PUBLISHes whose events were written just before).
    barrier: Ticket,
    /// Gates were added since the last stamp.
    unstamped: bool,
    /// Entries on disk only (offline, or past [`RESIDENT_LIMIT`]).
    spill: Option<Spill>,
    /// The session is being read back whole to be handed over to another node of a cluster
    /// ([`Session::take_handover_page_request`]): once nothing is on disk, new entries stay
    /// in memory, so that the handover takes everything.
    handing_over: bool,
}

/// The packet id of stored entry `seq`: 1, 2, ... 65,535, 1, ...
pub(super) fn derived_packet_id(seq: u64) -> u16 {
    ((seq.saturating_sub(1)) % u64::from(u16::MAX)) as u16 + 1
}

impl Journal {
    fn record(&mut self, event: JournalEvent) {
        self.events.push(event);
    }

    /// The seq for a new entry: the next one, or, for a delivery sent before under a packet
    /// id (handed over from another node of a cluster), the first from there whose derived id
    /// is that one, so that it goes out again under it [MQTT-4.4.0-1]. The seqs skipped stay
    /// unused: the store reads pages over gaps, and counts entries, not seqs.
    fn take_seq(&mut self, sent_as: Option<PacketId>) -> u64 {
        let seq = match sent_as {
            Some(id) => {
                let period = u64::from(u16::MAX);
                let current = u64::from(derived_packet_id(self.next_seq));
                self.next_seq + (u64::from(id.get()) + period - current) % period
            }
            None => self.next_seq,
        };
        self.next_seq = seq + 1;
        seq
    }

    pub(super) fn spill_reading(&self) -> Option<bool> {
        self.spill.as_ref().map(|spill| spill.reading)
    }

    pub(super) fn barrier_ticket(&self) -> Ticket {
        self.barrier
    }

    pub(super) fn first_gate(&self) -> Option<(u64, Ticket)> {
        self.qos2_gates.front().copied()
    }

    pub(super) fn pubrels_waiting(&self) -> usize {
        self.pubrels.len()
    }
}

impl Session {
    /// Starts recording this session's changes (it is now stored). `next_seq`: the first seq
    /// to give a queued entry (one past the highest in the store).
    pub fn enable_journal(&mut self, next_seq: u64) {
        let rare = self.rare();
        if rare.journal.is_none() {
            rare.journal = Some(Journal {
                next_seq: next_seq.max(1),
                ..Journal::default()
            });
        }
    }

    /// True while the session records its changes.
    pub fn is_journaled(&self) -> bool {
        self.journal().is_some()
    }

    pub(super) fn journal(&self) -> Option<&Journal> {
        self.rare.as_ref().and_then(|rare| rare.journal.as_ref())
    }

    pub(super) fn journal_mut(&mut self) -> Option<&mut Journal> {
        self.rare.as_mut().and_then(|rare| rare.journal.as_mut())
    }

    /// Records `event` if journaled.
    pub(super) fn record(&mut self, event: impl FnOnce() -> JournalEvent) {
        if let Some(journal) = self.journal_mut() {
            journal.record(event());
        }
    }

    /// Gives a QoS 1/2 delivery to a journaled session its seq, and records it.
    pub(super) fn journal_enqueue(&mut self, delivery: &mut Delivery) {
        if delivery.qos == QoS::AtMostOnce {
            return;
        }
        let Some(journal) = self.journal_mut() else {
            return;
        };
        delivery.seq = journal.take_seq(delivery.sent_as);
        if delivery.qos == QoS::ExactlyOnce {
            journal.qos2_gates.push_back((delivery.seq, 0));
            journal.unstamped = true;
        }
        journal.record(JournalEvent::Queued(delivery.clone()));
    }

    /// Queues a PUBREL: behind the store for a journaled session, else straight out.
    pub(super) fn queue_pubrel(&mut self, rel: PubResp) {
        match self.journal_mut() {
            Some(journal) => {
                journal.pubrels.push_back((0, rel));
                journal.unstamped = true;
            }
            None => self.rare().pubrel_out.push_back(rel),
        }
    }

    /// True when events or unstamped gates wait for [`Session::take_journal`].
    pub fn journal_pending(&self) -> bool {
        self.journal()
            .is_some_and(|journal| !journal.events.is_empty() || journal.unstamped)
    }

    /// The events recorded since the last call, oldest first. Write them to the store, then
    /// call [`Session::journal_flushed`] with the ticket that covers them.
    pub fn take_journal(&mut self) -> Vec<JournalEvent> {
        self.journal_mut()
            .map(|journal| std::mem::take(&mut journal.events))
            .unwrap_or_default()
    }

    /// Everything taken so far is covered by store ticket `ticket`.
    pub fn journal_flushed(&mut self, ticket: Ticket) {
        let Some(journal) = self.journal_mut() else {
            return;
        };
        journal.last_ticket = journal.last_ticket.max(ticket);
        if !journal.unstamped {
            return;
        }
        journal.unstamped = false;
        for (_, t) in journal.qos2_gates.iter_mut().rev() {
            if *t != 0 {
                break;
            }
            *t = ticket;
        }
        for (t, _) in journal.pubrels.iter_mut().rev() {
            if *t != 0 {
                break;
            }
            *t = ticket;
        }
    }

    /// The store is durable up to `durable`: lets out what waited for it. Returns the ticket
    /// output still waits for, if any (ask the store to wake the connection then).
    pub fn confirm(&mut self, durable: Ticket) -> Option<Ticket> {
        let journal = self.journal_mut()?;
        if journal.barrier <= durable {
            journal.barrier = 0;
        }
        while let Some(&(_, ticket)) = journal.qos2_gates.front() {
            if ticket == 0 || ticket > durable {
                break;
            }
            journal.qos2_gates.pop_front();
        }
        let mut ready = Vec::new();
        while let Some(&(ticket, _)) = journal.pubrels.front() {
            if ticket == 0 || ticket > durable {
                break;
            }
            if let Some((_, rel)) = journal.pubrels.pop_front() {
                ready.push(rel);
            }
        }
        let waiting = [
            (journal.barrier != 0).then_some(journal.barrier),
            journal.qos2_gates.front().map(|(_, t)| *t),
            journal.pubrels.front().map(|(t, _)| *t),
        ]
        .into_iter()
        .flatten()
        .filter(|t| *t != 0)
        .min();
        if !ready.is_empty() {
            self.rare().pubrel_out.extend(ready);
        }
        waiting
    }

    /// At attach: output waits until everything this session wrote so far is durable.
    pub(super) fn journal_attach(&mut self) {
        if let Some(journal) = self.journal_mut() {
            journal.handing_over = false;
            journal.barrier = journal.barrier.max(journal.last_ticket);
            // PUBRELs still waiting are sent again from the in-flight state.
            journal.pubrels.clear();
        }
    }

    /// True when a journaled delivery may not go out yet: its derived packet id is still in
    /// flight, the store has not confirmed a QoS 2 entry, or the attach barrier holds.
    pub(super) fn journal_blocks(&self, delivery: &Delivery) -> bool {
        let Some(journal) = self.journal() else {
            return false;
        };
        if journal.barrier != 0 {
            return true;
        }
        if delivery.seq == 0 {
            return false;
        }
        // A QoS 2 entry waits while its own gate, or an older one, is not confirmed. Entries
        // without a gate (written to disk only, or restored) are durable; one of them behind an
        // unconfirmed older entry waits too, as it would in the queue's order anyway.
        let gated = delivery.qos == QoS::ExactlyOnce
            && journal
                .qos2_gates
                .front()
                .is_some_and(|&(gate_seq, _)| gate_seq <= delivery.seq);
        gated || self.inflight.contains_key(&derived_packet_id(delivery.seq))
    }

    /// Holds this stored session's QoS 1/2 output back until the store is durable up to
    /// `ticket`, as the attach barrier does: what was appended before (another session's
    /// removal, say) is on disk before anything queued from now on leaves. False (and nothing
    /// held) when the session is not stored.
    pub fn hold_output_until(&mut self, ticket: Ticket) -> bool {
        let Some(journal) = self.journal_mut() else {
            return false;
        };
        journal.barrier = journal.barrier.max(ticket);
        true
    }

    /// True while the attach barrier holds every output back.
    pub(super) fn journal_barrier(&self) -> bool {
        self.journal().is_some_and(|journal| journal.barrier != 0)
    }

    // ----- paging ----------------------------------------------------------------------

    /// Entries on disk only (not in memory).
    pub fn spilled(&self) -> u64 {
        self.journal()
            .and_then(|journal| journal.spill.as_ref())
            .map_or(0, |spill| spill.count)
    }

    /// The first seq on disk only, while anything is.
    pub fn spilled_from(&self) -> Option<u64> {
        self.journal()
            .and_then(|journal| journal.spill.as_ref())
            .map(|spill| spill.first_seq)
    }

    /// Whether `delivery` goes to disk only: a QoS 1/2 delivery to a stored session that is
    /// offline (outside a shared group, whose members take over what an offline one holds),
    /// has entries on disk already, or holds [`RESIDENT_LIMIT`] in memory.
    pub(super) fn spills(&self, delivery: &Delivery) -> bool {
        let Some(journal) = self.journal() else {
            return false;
        };
        if journal.handing_over {
            // Behind what is still on disk, in order; in memory once that is read back.
            return delivery.qos != QoS::AtMostOnce && journal.spill.is_some();
        }
        // A drop-oldest queue stays in memory (bounded by its own limits; `overflow.rs`): it
        // spills only to stay behind entries restored on disk, until they are read back.
        delivery.qos != QoS::AtMostOnce
            && (journal.spill.is_some()
                || (!self.drops_oldest()
                    && ((self.connection.is_none() && delivery.shared_group.is_none())
                        || self.pending.len() >= RESIDENT_LIMIT)))
    }

    /// Queues `delivery` on disk only (see [`Session::spills`]).
    pub(super) fn spill(&mut self, mut delivery: Delivery) {
        let Some(journal) = self.journal_mut() else {
            return;
        };
        delivery.seq = journal.take_seq(delivery.sent_as);
        let seq = delivery.seq;
        // Durable before it is ever read back: no gate.
        journal.record(JournalEvent::Queued(delivery));
        let spill = journal.spill.get_or_insert(Spill {
            first_seq: seq,
            count: 0,
            reading: false,
            added_while_reading: 0,
            maybe_sent_below: 0,
        });
        spill.count += 1;
        if spill.reading {
            spill.added_while_reading += 1;
        }
    }

    /// At detach: the stored deliveries waiting in memory go to disk only (they are there
    /// already); the ones in flight stay, to be sent again. Not while the session is being
    /// handed over ([`Session::take_handover_page_request`]): the handover takes what is in
    /// memory, and what went back to disk after its read would stay behind. (The CONNACK of a
    /// connection that waited for its own claim goes out as the claim held meanwhile is
    /// answered; the client had gone, and its detach on another thread spilled the queue
    /// between the read and the handover: 33 of 100 lost in CI, 2026-11-30.)
    pub(super) fn spill_resident(&mut self) {
        let handing_over = self.journal().is_some_and(|journal| journal.handing_over);
        if self.journal().is_none() || self.drops_oldest() || handing_over {
            return;
        }
        self.drop_direct_hold();
        let mut kept = VecDeque::with_capacity(self.pending.len());
        let mut spilled: Vec<u64> = Vec::new();
        for delivery in std::mem::take(&mut self.pending) {
            if delivery.seq != 0 && delivery.shared_group.is_none() {
                spilled.push(delivery.seq);
                self.unhold(delivery.weight());
            } else {
                kept.push_back(delivery);
            }
        }
        self.pending = kept;
        let (Some(first), Some(journal)) = (spilled.iter().min().copied(), self.journal_mut())
        else {
            return;
        };
        let spill = journal.spill.get_or_insert(Spill {
            first_seq: first,
            count: 0,
            reading: false,
            added_while_reading: 0,
            maybe_sent_below: 0,
        });
        spill.first_seq = spill.first_seq.min(first);
        spill.count += spilled.len() as u64;
        // A page still being read no longer starts where the queue on disk does.
        spill.reading = false;
    }

    /// A page to read from the store, when the client is attached, entries are on disk and
    /// few are left in memory: `(from_seq, max)`. Asks once until [`Session::apply_page`].
    /// A drop-oldest queue reads every page back, attached or not (it stays in memory).
    pub fn take_page_request(&mut self) -> Option<(u64, usize)> {
        if !self.drops_oldest()
            && (self.connection.is_none() || self.pending.len() >= RESIDENT_LIMIT / 2)
        {
            return None;
        }
        let spill = self.journal_mut()?.spill.as_mut()?;
        if spill.reading {
            return None;
        }
        spill.reading = true;
        spill.added_while_reading = 0;
        Some((spill.first_seq, PAGE_SIZE))
    }

    /// For a handover to another node of a cluster: a page to read whatever the client's state
    /// (`(from_seq, max)`), or `None` once nothing is on disk. From the first call on, new
    /// entries stay in memory once the disk part is read back (until a connection attaches
    /// here again). A page already being read for the connection is read again: whichever
    /// reply comes first is applied, the other is ignored.
    pub fn take_handover_page_request(&mut self) -> Option<(u64, usize)> {
        let journal = self.journal_mut()?;
        journal.handing_over = true;
        let spill = journal.spill.as_mut()?;
        if !spill.reading {
            spill.added_while_reading = 0;
        }
        spill.reading = true;
        Some((spill.first_seq, PAGE_SIZE))
    }

    /// The page read from `from_seq` (entries in seq order, `seq` set): they go to memory.
    /// `exhausted`: the store had no more entries than these. Returns whether anything was
    /// added (the caller wakes the connection). A page that no longer fits (the session was
    /// spilled again meanwhile) is ignored; it is asked for again.
    pub fn apply_page(&mut self, from_seq: u64, page: Vec<Delivery>, exhausted: bool) -> bool {
        // Read back behind what is in memory: no hold counts the back of the queue any more.
        self.drop_direct_hold();
        let attached = self.connection.is_some()
            || self.drops_oldest()
            || self.journal().is_some_and(|journal| journal.handing_over);
        let Some(spill) = self
            .journal_mut()
            .and_then(|journal| journal.spill.as_mut())
        else {
            return false;
        };
        if !spill.reading || spill.first_seq != from_seq {
            return false;
        }
        spill.reading = false;
        let maybe_sent_below = spill.maybe_sent_below;
        let mut applied = 0u64;
        let mut next_seq = from_seq;
        let taken = page.len() as u64;
        for mut delivery in page {
            if !attached || !self.charge(delivery.weight()) {
                break;
            }
            next_seq = delivery.seq + 1;
            if delivery.seq < maybe_sent_below {
                delivery.sent_as = PacketId::new(derived_packet_id(delivery.seq));
            }
            self.held_bytes += delivery.weight();
            self.pending.push_back(delivery);
            applied += 1;
        }
        let Some(journal) = self.journal_mut() else {
            return false;
        };
        let allocated_since = journal.next_seq.saturating_sub(next_seq);
        if let Some(spill) = journal.spill.as_mut() {
            spill.first_seq = next_seq;
            spill.count = if exhausted && applied == taken {
                // Everything on disk when the page was read is in memory now; what is left
                // came in meanwhile, minus what of it the read already saw (every entry queued
                // while a spill exists is spilled, under consecutive seqs; a handed-over
                // message's seq may skip some, `Journal::take_seq`: then this counts too many,
                // and the next page, read empty, sets it right).
                spill.added_while_reading.min(allocated_since)
            } else {
                spill.count.saturating_sub(applied)
            };
            if spill.count == 0 {
                journal.spill = None;
            }
        }
        if self.drops_oldest() {
            // A queue restored larger than its limits keeps its newest entries.
            self.trim();
        }
        applied > 0
    }

    // ----- restore ---------------------------------------------------------------------

    /// Puts back a stored queue that stays on disk: `count` entries from `first_seq` on,
    /// read back in pages once the client is attached; they go out with DUP, since they may
    /// have been sent before the restart.
    pub fn restore_spilled(&mut self, first_seq: u64, count: u64) {
        if count == 0 {
            return;
        }
        let Some(journal) = self.journal_mut() else {
            return;
        };
        journal.spill = Some(Spill {
            first_seq,
            count,
            reading: false,
            added_while_reading: 0,
            maybe_sent_below: journal.next_seq,
        });
    }

    /// Puts back a queued entry read from the store (its `seq` set). It goes out with DUP,
    /// since it may have been sent before. False (nothing kept) when the session's limits or
    /// the memory budget leave no room.
    pub fn restore_queued(&mut self, mut delivery: Delivery) -> bool {
        let weight = delivery.weight();
        if self.held_messages() >= self.limits.max_queued_messages()
            || self.held_bytes + weight > self.limits.max_queued_bytes()
        {
            return false;
        }
        let charge = weight + DELIVERY_OVERHEAD_BYTES;
        if let Some(budget) = self.limits.budget() {
            if !budget.try_charge(charge) {
                return false;
            }
        }
        self.charged += charge;
        self.held_bytes += weight;
        delivery.sent_as = PacketId::new(derived_packet_id(delivery.seq));
        self.pending.push_back(delivery);
        true
    }

    /// Puts back an entry whose PUBREC had arrived: its PUBREL is sent again at attach.
    pub fn restore_released(&mut self, seq: u64) {
        let send_order = self.next_seq;
        self.next_seq += 1;
        self.inflight.insert(
            derived_packet_id(seq),
            Outflight {
                delivery: None,
                state: OutflightState::AwaitPubComp,
                seq: send_order,
                stored: seq,
            },
        );
    }

    /// Records that stored entry `seq` was not put back (its message is gone, or no room).
    pub fn forget_restored(&mut self, seq: u64) {
        self.record(|| JournalEvent::Removed {
            seq,
            released: false,
        });
    }

    /// Takes over an outbound QoS 2 message released on another node of a cluster (PUBREC
    /// came, PUBCOMP not): its PUBREL with the same packet id goes out now if a connection is
    /// attached, else at attach. Not stored: kept in memory until its PUBCOMP. Ignored if the
    /// id is in flight here already.
    pub fn restore_released_id(&mut self, packet_id: u16) {
        let Some(pid) = PacketId::new(packet_id) else {
            return;
        };
        if self.inflight.contains_key(&packet_id) {
            return;
        }
        let send_order = self.next_seq;
        self.next_seq += 1;
        self.inflight.insert(
            packet_id,
            Outflight {
                delivery: None,
                state: OutflightState::AwaitPubComp,
                seq: send_order,
                stored: 0,
            },
        );
        if self.is_attached() {
            self.rare().pubrel_out.push_back(PubResp::new(pid));
        }
    }

    /// Puts back an inbound QoS 2 packet id that awaits PUBREL.
    pub fn restore_inbound_qos2(&mut self, packet_id: u16) {
        self.rare().inbound_qos2.insert(packet_id);
    }

    /// Takes on an inbound QoS 2 packet id that awaits PUBREL from a session handed over by
    /// another node: unlike [`Session::restore_inbound_qos2`] (read back from this node's
    /// own store) it is recorded, so that a restart of this node before the PUBREL still
    /// knows the message was routed and does not route a PUBLISH sent again.
    pub fn adopt_inbound_qos2(&mut self, packet_id: u16) {
        if self.rare().inbound_qos2.insert(packet_id) {
            self.record(|| JournalEvent::InboundQos2 {
                packet_id,
                awaiting: true,
            });
        }
    }
}
