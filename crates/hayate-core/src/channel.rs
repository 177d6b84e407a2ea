//! The per-connection protocol handler: one client's packets in, broker actions and output
//! bytes out.
//!
//! A `Channel` is sans-IO: the transport decodes packets, calls [`Channel::handle_packet`]
//! for each, rings the doorbells collected in the [`WakeList`], and writes the [`OutBuf`].
//! When a handler returns [`Close`], any DISCONNECT owed to a v5 client is already in the
//! buffer; the transport flushes it, closes the socket and calls [`Channel::finish`].

mod auth;
mod connect;
mod gate;
mod held;
mod publish;
mod resend_hold;
mod subscribe;

use crate::broker::Broker;
use crate::close::{Close, CloseReason};
use crate::flow::{InboundLimit, Waiting};
use crate::hooks::{ClientInfo, ListenerInfo};
use crate::registry::{AwaitedHandover, Handover, SessionCell, SessionState};
use crate::router::WakeList;
use crate::stats::Stats;
use auth::AuthState;
use hayate_codec::{
    encode, Disconnect, Packet, PacketType, Properties, ProtocolVersion, QoS, ReasonCode,
};
use hayate_session::{Arrival, OutBuf};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub use gate::ReadGate;

/// Facts about the network connection, from the transport.
#[derive(Debug, Clone, Default)]
pub struct ConnectionInfo {
    /// Remote address.
    pub peer: Option<SocketAddr>,
    /// The listener is at its connection limit: CONNECT is answered with "quota exceeded"
    /// (v5 0x97, v3 0x03) and the connection closed.
    pub over_capacity: bool,
    /// The listener the connection came in on, with its authentication settings.
    pub listener: Arc<ListenerInfo>,
    /// An identity the transport proved: the CN (or first SAN) of a verified client
    /// certificate, or the TLS-PSK identity. `None` on plain TCP and WebSocket.
    pub transport_identity: Option<Arc<str>>,
}

/// `Channel::transmit`: the last `poll_transmit` stopped at its byte budget with more to send,
/// or an acknowledgement left its transmit to the transport.
const MORE_TO_SEND: u8 = 1;
/// `Channel::transmit`: the transport hands over more input after the packet being handled,
/// and calls [`Channel::poll_transmit`] once it is through when [`Channel::has_more_to_send`]
/// says so ([`Channel::set_input_follows`]).
const INPUT_FOLLOWS: u8 = 2;

/// How long a CONNACK waits at most for other nodes to hand over the client's session.
pub(crate) const HANDOVER_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitConnect,
    /// CONNECT carried an Authentication Method and the AUTH exchange is under way: only
    /// AUTH (or DISCONNECT) may come until CONNACK is sent.
    Authenticating,
    Connected,
    Closed,
}

/// The state only some connections use, boxed together so that a connection that uses none
/// of it (most of them) carries one pointer in its task instead of four: allocated on first
/// use, freed once empty again (apart from a rate limit, kept for the connection's life).
#[derive(Debug, Default)]
struct Rare {
    /// Enhanced authentication (v5 Authentication Method): the method, the exchange in
    /// progress and the CONNECT waiting for it.
    auth: Option<AuthState>,
    /// Publisher-side back-pressure ([`crate::flow`]): `Some` while this client waits on a
    /// congested subscriber.
    gate: Option<Waiting>,
    /// The inbound rate limit, when the listener has one.
    limit: Option<InboundLimit>,
    /// Acknowledgements waiting for the store (`held.rs`).
    held: Option<held::HeldAcks>,
    /// A QoS 2 resend held until the client's older session's node answers
    /// (`resend_hold.rs`).
    resend: Option<resend_hold::ResendHold>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.auth.is_none()
            && self.gate.is_none()
            && self.limit.is_none()
            && self.held.is_none()
            && self.resend.is_none()
    }
}

/// One client connection's protocol state. See the module docs.
#[derive(Debug)]
pub struct Channel {
    broker: Arc<Broker>,
    /// The largest packet accepted from this client, fixed when the connection opened (v5
    /// clients are told it in CONNACK): a reload changes it for new connections only.
    max_packet_size: u32,
    /// The maximum QoS as of CONNECT (announced to v5 clients in CONNACK; a reload changes
    /// it for new connections only).
    max_qos: QoS,
    /// What the transport told about the connection, until CONNECT completes; from then on
    /// the same facts (the listener, the peer) are in `client`. Boxed and dropped then: an
    /// idle connection keeps only what its session needs.
    info: Option<Box<ConnectionInfo>>,
    /// Unique id of this connection; the session's `owner` while attached.
    conn_id: u64,
    phase: Phase,
    version: ProtocolVersion,
    cell: Option<Arc<SessionCell>>,
    /// Who the client is, once connected (shared with the session, which authorises
    /// deliveries against it, and with the will).
    client: Option<Arc<ClientInfo>>,
    keep_alive: u16,
    /// Publish the will when the connection ends: true unless the client sent DISCONNECT
    /// (v5: other than 0x04) [MQTT-3.1.2-8] [MQTT-3.1.2-10].
    will_on_close: bool,
    /// The CONNECT's Session Expiry Interval was 0 (v5), which DISCONNECT may not raise
    /// (§3.14.2.2.2).
    connect_expiry_zero: bool,
    /// Another connection took the session over; `finish` must leave it alone.
    taken_over: bool,
    /// A v3 client that set Mosquitto's bridge bit in CONNECT: its subscriptions get No Local
    /// and Retain As Published (`subscribe.rs`).
    bridge: bool,
    /// This connection's doorbell, installed in the session while attached.
    doorbell: Arc<Notify>,
    /// [`MORE_TO_SEND`] and [`INPUT_FOLLOWS`], in one byte (the channel is part of every
    /// connection's task, idle or not).
    transmit: u8,
    /// In a cluster: CONNACK is held until other nodes handed over the client's session (it
    /// waits in the session state, `Handover::Awaited`).
    awaiting_handover: bool,
    /// The held CONNACK of a session made only to wait went out: the client's next packet
    /// shows it got it, and only then is the session told (`SessionState::unconfirmed`).
    confirm_at_input: bool,
    /// The input has ended (end of stream): everything left is handled, nothing held back.
    input_ended: bool,
    /// Before CONNECT completes: when the connection was opened (the connect timeout runs from
    /// it). After: when bytes last arrived (the keep-alive clock).
    last_input: Instant,
    /// What only some connections use, in one box allocated on first use ([`Rare`]).
    rare: Option<Box<Rare>>,
    /// When the input being handled reached the broker (stamped on messages and
    /// subscriptions for arrival order, `crate::arrival`).
    arrival: Arrival,
}

impl Channel {
    /// A channel for a new network connection opened at `now`.
    pub fn new(broker: Arc<Broker>, info: ConnectionInfo, now: Instant) -> Channel {
        Stats::add(&broker.stats.connections_total, 1);
        let limits = info.listener.limits;
        let config = broker.config();
        Channel {
            max_packet_size: config.max_packet_size,
            max_qos: config.maximum_qos(),
            rare: InboundLimit::new(
                limits.max_inbound_bytes_per_sec,
                limits.max_inbound_messages_per_sec,
                now,
            )
            .map(|limit| {
                Box::new(Rare {
                    limit: Some(limit),
                    ..Rare::default()
                })
            }),
            last_input: now,
            arrival: Arrival::UNKNOWN,
            input_ended: false,
            broker,
            info: Some(Box::new(info)),
            conn_id: crate::registry::next_id(),
            phase: Phase::AwaitConnect,
            version: ProtocolVersion::V311,
            cell: None,
            client: None,
            keep_alive: 0,
            will_on_close: true,
            connect_expiry_zero: true,
            taken_over: false,
            bridge: false,
            doorbell: Arc::new(Notify::new()),
            transmit: 0,
            awaiting_handover: false,
            confirm_at_input: false,
        }
    }

    /// The doorbell the transport waits on: rung when messages are queued for this client or
    /// when its session is taken over.
    pub fn doorbell(&self) -> &Arc<Notify> {
        &self.doorbell
    }

    /// The rarely used state, allocated now if it was not.
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Takes something out of the rarely used state, freeing it once empty.
    fn take_rare<T>(&mut self, take: impl FnOnce(&mut Rare) -> Option<T>) -> Option<T> {
        let rare = self.rare.as_deref_mut()?;
        let taken = take(rare);
        if rare.is_empty() {
            self.rare = None;
        }
        taken
    }

    fn auth(&self) -> Option<&AuthState> {
        self.rare.as_deref()?.auth.as_ref()
    }

    fn auth_mut(&mut self) -> Option<&mut AuthState> {
        self.rare.as_deref_mut()?.auth.as_mut()
    }

    fn gate(&self) -> Option<&Waiting> {
        self.rare.as_deref()?.gate.as_ref()
    }

    fn limit(&self) -> Option<&InboundLimit> {
        self.rare.as_deref()?.limit.as_ref()
    }

    fn limit_mut(&mut self) -> Option<&mut InboundLimit> {
        self.rare.as_deref_mut()?.limit.as_mut()
    }

    /// Acknowledgements are held for the store.
    fn holds_acks(&self) -> bool {
        self.rare.as_deref().is_some_and(|rare| rare.held.is_some())
    }

    /// The broker this connection belongs to.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The protocol level the client connected with (3.1.1 until CONNECT arrives).
    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// True once CONNECT was accepted and until the connection ends.
    pub fn is_connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// The attached session, whose doorbell the transport waits on.
    pub fn session(&self) -> Option<&Arc<SessionCell>> {
        self.cell.as_ref()
    }

    /// The remote address of the connection, when the transport knows it.
    pub fn peer(&self) -> Option<SocketAddr> {
        match (&self.client, &self.info) {
            (Some(client), _) => client.peer,
            (None, Some(info)) => info.peer,
            (None, None) => None,
        }
    }

    /// What the listener the connection came in on serves (clients, or another node's link).
    pub fn listener_role(&self) -> crate::ListenerRole {
        self.listener().role
    }

    /// The listener the connection came in on: the client's once connected, the transport's
    /// before.
    fn listener(&self) -> &ListenerInfo {
        static ENDED: std::sync::OnceLock<ListenerInfo> = std::sync::OnceLock::new();
        match (&self.client, &self.info) {
            (Some(client), _) => &client.listener,
            (None, Some(info)) => &info.listener,
            // Only after `finish`, which drops the client.
            (None, None) => ENDED.get_or_init(ListenerInfo::default),
        }
    }

    /// The client identifier, once connected.
    pub fn client_id(&self) -> Option<&str> {
        self.client.as_ref().map(|c| &*c.client_id)
    }

    /// How long the connection may stay silent: 1.5 × keep alive [MQTT-3.1.2-22] ([3.1.1: MQTT-3.1.2-24]); `None`
    /// when keep alive is 0.
    pub fn keep_alive_timeout(&self) -> Option<Duration> {
        (self.keep_alive > 0).then(|| Duration::from_millis(u64::from(self.keep_alive) * 1500))
    }

    /// The largest packet this connection accepts (the decoder's limit), as the broker's
    /// `max_packet_size` was when the connection opened.
    pub fn max_packet_size(&self) -> u32 {
        self.max_packet_size
    }

    /// Handles one decoded packet from the client.
    pub fn handle_packet(
        &mut self,
        packet: Packet,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        Stats::add(&self.broker.stats.messages_received, 1);
        match self.phase {
            Phase::AwaitConnect => match packet {
                Packet::Connect(connect) => self.handle_connect(*connect, now, out, wake),
                // [MQTT-3.1.0-1] the first packet must be CONNECT.
                _ => Err(Close::new(
                    ReasonCode::PROTOCOL_ERROR,
                    CloseReason::FirstPacketNotConnect,
                )),
            },
            Phase::Authenticating => self.handle_authenticating(packet, now, out, wake),
            Phase::Closed => Err(Close::new(
                ReasonCode::PROTOCOL_ERROR,
                CloseReason::PacketAfterClose,
            )),
            Phase::Connected => self.handle_connected(packet, now, out, wake),
        }
    }

    fn handle_connected(
        &mut self,
        packet: Packet,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        if self.confirm_at_input {
            self.confirm_at_input = false;
            if let Some(cell) = &self.cell {
                cell.state.lock().unconfirmed = false;
            }
        }
        match packet {
            Packet::Publish(publish) => match self.count_publish().hold_if_congested(publish) {
                Some(publish) => self.handle_publish(publish, now, out, wake),
                None => Ok(()),
            },
            Packet::PubAck(ack) => {
                self.with_session(out, |state, _| state.session.handle_puback(ack.packet_id))?;
                self.transmit_after_ack(now, out)
            }
            Packet::PubRec(rec) => {
                self.with_session(out, |state, _| {
                    state.session.handle_pubrec(rec.packet_id, rec.reason_code)
                })?;
                self.transmit_after_ack(now, out)
            }
            Packet::PubComp(comp) => {
                self.with_session(out, |state, _| state.session.handle_pubcomp(comp.packet_id))?;
                self.transmit_after_ack(now, out)
            }
            Packet::PubRel(rel) => {
                let (known, ticket) = self.with_session_ticket(out, |state, _| {
                    state.session.handle_pubrel(rel.packet_id)
                })?;
                if tracing::enabled!(tracing::Level::DEBUG)
                    && self.listener().role != crate::ListenerRole::PeerIngress
                {
                    tracing::debug!(client_id = ?self.client_id(), packet_id = rel.packet_id.get(), known, "qos2_pubrel");
                }
                // [MQTT-4.3.3-11] always answer PUBCOMP; v5 says whether the id was known.
                let reason = if known || !self.version.is_v5() {
                    ReasonCode::SUCCESS
                } else {
                    ReasonCode::PACKET_IDENTIFIER_NOT_FOUND
                };
                // Once the client has PUBCOMP it may reuse the id: the release is stored first.
                self.send_pub_resp(ticket, PacketType::PubComp, rel.packet_id, reason, out);
                Ok(())
            }
            Packet::Subscribe(subscribe) => self.handle_subscribe(subscribe, now, out),
            Packet::Unsubscribe(unsubscribe) => self.handle_unsubscribe(unsubscribe, out),
            Packet::PingReq => {
                // [MQTT-3.12.4-1]
                self.write(&Packet::PingResp, out);
                Ok(())
            }
            Packet::Disconnect(disconnect) => self.handle_disconnect(disconnect, out),
            Packet::Connect(_) => {
                // [MQTT-3.1.0-2] a second CONNECT is a protocol violation.
                Err(self.close_with(ReasonCode::PROTOCOL_ERROR, CloseReason::SecondConnect, out))
            }
            Packet::Auth(auth) => self.handle_reauth(auth, out),
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(self.close_with(
                    ReasonCode::PROTOCOL_ERROR,
                    CloseReason::ServerPacketFromClient,
                    out,
                ))
            }
        }
    }

    fn handle_disconnect(&mut self, disconnect: Disconnect, out: &mut OutBuf) -> Result<(), Close> {
        if self.version.is_v5() {
            if let Some(expiry) = disconnect.properties.session_expiry_interval {
                if self.connect_expiry_zero && expiry != 0 {
                    // §3.14.2.2.2: cannot turn a session that ends with the connection into
                    // one that persists.
                    return Err(self.close_with(
                        ReasonCode::PROTOCOL_ERROR,
                        CloseReason::DisconnectExpiryRaised,
                        out,
                    ));
                }
                let capped = expiry.min(self.broker.limits().max_session_expiry_interval());
                self.with_session(out, |state, _| state.expiry_interval = capped)?;
            }
        }
        // [MQTT-3.14.4-3] normal disconnection discards the will; 0x04 asks for it.
        self.will_on_close = disconnect.reason_code == ReasonCode::DISCONNECT_WITH_WILL;
        self.phase = Phase::Closed;
        Err(Close::new(
            disconnect.reason_code,
            CloseReason::ClientDisconnect,
        ))
    }

    /// The transport says whether more input follows the packet it hands over next: while it
    /// does, an acknowledgement from the client does not transmit at once, it leaves that to
    /// the transport's call of [`Channel::poll_transmit`] after the input (one for a read of
    /// many PUBACKs instead of one per PUBACK). A transport that never sets it gets every
    /// acknowledgement's transmit at once.
    pub fn set_input_follows(&mut self, follows: bool) {
        if follows {
            self.transmit |= INPUT_FOLLOWS;
        } else {
            self.transmit &= !INPUT_FOLLOWS;
        }
    }

    /// After a PUBACK, PUBREC or PUBCOMP freed a slot of the window or queued a PUBREL:
    /// transmits now, or, while more input follows, marks the transmit as owed
    /// ([`Channel::has_more_to_send`]) for the transport to make once the input is handled.
    fn transmit_after_ack(&mut self, now: Instant, out: &mut OutBuf) -> Result<(), Close> {
        if self.transmit & INPUT_FOLLOWS != 0 {
            self.transmit |= MORE_TO_SEND;
            return Ok(());
        }
        self.poll_transmit(now, out)
    }

    /// Writes messages queued for this client as far as its window allows. The transport calls
    /// this when the session's doorbell rings. Fails if the session was taken over.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut OutBuf) -> Result<(), Close> {
        if self.phase != Phase::Connected || self.poll_handover(now, out) {
            return Ok(());
        }
        self.release_acks(out);
        let broker = self.broker.clone();
        let attached = broker.attached();
        let report = self.with_session(out, |state, out| {
            // A stored session's PUBRELs and QoS 2 PUBLISHes wait for the store (other sessions
            // do not ask it).
            let waiting = attached
                .filter(|_| state.session.is_journaled())
                .and_then(|attached| state.session.confirm(attached.store.durable()));
            let report = state.session.poll_transmit(now, out);
            // A stored session whose queue is on disk reads the next page as it runs low.
            let page = state.session.take_page_request();
            // Progress (or drained to the low-water mark) for the publishers paused on us.
            let hint = state.congestion.after_transmit(&state.session, now);
            (report, hint, waiting, page)
        })?;
        let (report, hint, waiting, page) = report;
        if let (Some(ticket), Some(attached)) = (waiting, broker.attached()) {
            attached
                .store
                .notify_when_durable(ticket, self.doorbell.clone());
        }
        if let (Some((from_seq, max)), Some(attached), Some(cell)) =
            (page, broker.persistence.get(), &self.cell)
        {
            attached.read_page(cell, from_seq, max);
        }
        if let Some(cell) = &self.cell {
            broker.router.apply_hint(cell, hint);
        }
        self.transmit &= !MORE_TO_SEND;
        if report.more {
            self.transmit |= MORE_TO_SEND;
        }
        let stats = &self.broker.stats;
        for qos in crate::stats::QOS_LEVELS {
            stats.publish_sent.add(
                qos,
                report.published_by_qos[qos as usize] as u64,
                report.payload_bytes_by_qos[qos as usize],
            );
        }
        Stats::add(
            &stats.publish_dropped,
            (report.expired + report.too_large) as u64,
        );
        Stats::add(&stats.dropped_expired, report.expired as u64);
        Stats::add(&stats.dropped_too_large, report.too_large as u64);
        Ok(())
    }

    /// While CONNACK waits for the cluster's handover: true, unless the answers are in or the
    /// wait timed out, in which case CONNACK is written now (Session Present when a session
    /// was handed over) and the connection goes on.
    pub(crate) fn poll_handover(&mut self, now: Instant, out: &mut OutBuf) -> bool {
        if !self.awaiting_handover {
            return false;
        }
        let Some(cell) = self.cell.clone() else {
            self.awaiting_handover = false;
            return false;
        };
        let awaited = {
            let mut state = cell.state.lock();
            match &state.handover {
                Handover::Awaited(awaited) if !awaited.answered && now < awaited.deadline => {
                    return true;
                }
                Handover::Awaited(_) => {
                    // Its CONNACK goes out now, but the client may have given up a moment
                    // before (nothing is read during the wait, so its leaving is not seen
                    // yet): the session is told only when the client sends something after it
                    // (the lose-node soak of `c710fdc`: an empty session made only to wait was
                    // handed on as present to a client that never got its CONNACK, and the
                    // client, told Session Present 1, never subscribed again).
                    self.confirm_at_input = state.unconfirmed;
                    std::mem::take(&mut state.handover)
                }
                // Handed over to another node meanwhile (`Relaying` is that relay's, not
                // this connection's to end): the session is gone from here.
                Handover::Settled | Handover::Relaying(_) => Handover::Settled,
            }
        };
        self.awaiting_handover = false;
        if let Handover::Awaited(awaited) = awaited {
            let AwaitedHandover {
                mut connack,
                received,
                answered,
                claims,
                ..
            } = *awaited;
            connack.session_present |= received;
            tracing::debug!(client_id = %cell.client_id, session_present = connack.session_present, timed_out = !answered, "handover_settled");
            self.write(&Packet::ConnAck(connack), out);
            // Other nodes' claims held while it waited (the wait ended here, before the
            // cluster's release).
            self.broker.answer_held_claims(&cell.client_id, claims);
        }
        false
    }

    /// While CONNACK waits for the cluster's handover: when it goes out at the latest.
    pub(crate) fn handover_deadline(&self) -> Option<Instant> {
        if !self.awaiting_handover {
            return None;
        }
        match &self.cell.as_ref()?.state.lock().handover {
            Handover::Awaited(awaited) => Some(awaited.deadline),
            Handover::Settled | Handover::Relaying(_) => None,
        }
    }

    /// True when the last `poll_transmit` stopped at its byte budget, or an acknowledgement
    /// left its transmit to the transport ([`Channel::set_input_follows`]): the transport
    /// should write and call it again without waiting for the doorbell.
    pub fn has_more_to_send(&self) -> bool {
        self.transmit & MORE_TO_SEND != 0
    }

    /// True when the session has output that `poll_transmit` would write now.
    pub fn wants_transmit(&self) -> bool {
        self.cell.as_ref().is_some_and(|cell| {
            let state = cell.state.lock();
            state.owner != self.conn_id || state.session.wants_transmit()
        })
    }

    /// The server closes the connection (keep alive timeout, malformed packet, shutdown...):
    /// writes DISCONNECT with `reason` to v5 clients that completed CONNECT, and marks the
    /// connection for the will to be published.
    pub fn close_with(&mut self, code: ReasonCode, reason: CloseReason, out: &mut OutBuf) -> Close {
        if self.phase == Phase::Connected && self.version.is_v5() {
            let disconnect = Disconnect {
                reason_code: code,
                properties: Properties::default(),
            };
            self.write(&Packet::Disconnect(disconnect), out);
        }
        self.phase = Phase::Closed;
        Close::new(code, reason)
    }

    /// A packet could not be decoded. Before CONNECT completed an unknown protocol level is
    /// answered with CONNACK 0x01 [MQTT-3.1.2-2]; otherwise v5 clients get DISCONNECT with the
    /// error's reason code.
    pub fn decode_error(&mut self, error: hayate_codec::DecodeError, out: &mut OutBuf) -> Close {
        if self.phase == Phase::AwaitConnect {
            if let hayate_codec::DecodeError::UnsupportedProtocolLevel(_) = error {
                // The client's level is unknown, so answer in the 3.1.1 form, which every
                // level can read.
                out.put_slice(&[
                    0x20,
                    0x02,
                    0x00,
                    ReasonCode::V3_UNACCEPTABLE_PROTOCOL_VERSION.0,
                ]);
            }
            self.phase = Phase::Closed;
            return Close::new(error.reason_code(), CloseReason::MalformedPacket);
        }
        self.close_with(error.reason_code(), CloseReason::MalformedPacket, out)
    }

    /// The connection has ended (any reason). Publishes the will when due, and ends or parks
    /// the session. Call exactly once.
    pub fn finish(&mut self, now: Instant, wake: &mut WakeList) {
        if let Some(cell) = self.cell.take() {
            if !self.taken_over {
                self.broker
                    .session_detached(&cell, self.conn_id, self.will_on_close, now, wake);
            }
        }
        if self.client.take().is_some() {
            self.broker.stats.client_disconnected();
        }
        self.phase = Phase::Closed;
    }

    /// Runs `f` on the session state if this connection still owns the session; otherwise the
    /// session was taken over and the connection must close [MQTT-3.1.4-3].
    fn with_session<R>(
        &mut self,
        out: &mut OutBuf,
        f: impl FnOnce(&mut SessionState, &mut OutBuf) -> R,
    ) -> Result<R, Close> {
        self.with_session_ticket(out, f).map(|(result, _)| result)
    }

    /// [`Channel::with_session`], also returning the store ticket that covers what the
    /// session's journal wrote meanwhile (what an acknowledgement of it must wait for).
    fn with_session_ticket<R>(
        &mut self,
        out: &mut OutBuf,
        f: impl FnOnce(&mut SessionState, &mut OutBuf) -> R,
    ) -> Result<(R, Option<crate::store::Ticket>), Close> {
        let Some(cell) = self.cell.clone() else {
            return Err(Close::new(
                ReasonCode::PROTOCOL_ERROR,
                CloseReason::NoSession,
            ));
        };
        let mut state = cell.state.lock();
        if state.owner != self.conn_id {
            drop(state);
            self.cell = None;
            self.taken_over = true;
            return Err(self.close_with(
                ReasonCode::SESSION_TAKEN_OVER,
                CloseReason::SessionTakenOver,
                out,
            ));
        }
        if state.kick == self.conn_id {
            // An operator closed this connection (`Broker::kick`): it ends as a connection
            // the server closed, its will published.
            state.kick = 0;
            drop(state);
            return Err(self.close_with(
                ReasonCode::ADMINISTRATIVE_ACTION,
                CloseReason::AdministrativeAction,
                out,
            ));
        }
        let result = f(&mut state, out);
        let ticket = self
            .broker
            .attached()
            .and_then(|attached| attached.flush(&cell.client_id, &mut state));
        Ok((result, ticket))
    }

    fn write(&self, packet: &Packet, out: &mut OutBuf) {
        if let Err(error) = encode(packet, self.version, out.tail_mut()) {
            tracing::warn!(%error, packet = ?packet.packet_type(), "encode_failed");
        }
    }
}
