//! The per-connection protocol handler: one client's packets in, broker actions and output
//! bytes out.
//!
//! A `Channel` is sans-IO: the transport decodes packets, calls [`Channel::handle_packet`]
//! for each, rings the doorbells collected in the [`WakeList`], and writes the [`OutBuf`].
//! When a handler returns [`Close`], any DISCONNECT owed to a v5 client is already in the
//! buffer; the transport flushes it, closes the socket and calls [`Channel::finish`].

mod auth;
mod connect;
mod publish;
mod subscribe;

use crate::broker::Broker;
use crate::hooks::{ClientInfo, ListenerInfo};
use crate::registry::{SessionCell, SessionState};
use crate::router::WakeList;
use crate::stats::Stats;
use auth::AuthState;
use hayate_codec::{encode, Disconnect, Packet, Properties, ProtocolVersion, PubResp, ReasonCode};
use hayate_session::OutBuf;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

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

/// The connection must close. For server-initiated closes of v5 connections a DISCONNECT with
/// `reason` has already been written to the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// Why, as a v5 reason code (0 for a normal client DISCONNECT).
    pub reason: ReasonCode,
    /// Stable snake_case phrase for the log line.
    pub event: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitConnect,
    /// CONNECT carried an Authentication Method and the AUTH exchange is under way: only
    /// AUTH (or DISCONNECT) may come until CONNACK is sent.
    Authenticating,
    Connected,
    Closed,
}

/// One client connection's protocol state. See the module docs.
#[derive(Debug)]
pub struct Channel {
    broker: Arc<Broker>,
    info: ConnectionInfo,
    /// Unique id of this connection; the session's `owner` while attached.
    conn_id: u64,
    phase: Phase,
    version: ProtocolVersion,
    cell: Option<Arc<SessionCell>>,
    /// Who the client is, once connected (shared with the session, which authorises
    /// deliveries against it, and with the will).
    client: Option<Arc<ClientInfo>>,
    /// Enhanced authentication (v5 Authentication Method): the method, the exchange in
    /// progress and the CONNECT waiting for it. Boxed: most connections never use it.
    auth: Option<Box<AuthState>>,
    keep_alive: u16,
    /// Publish the will when the connection ends: true unless the client sent DISCONNECT
    /// (v5: other than 0x04) [MQTT-3.1.2-8] [MQTT-3.1.2-10].
    will_on_close: bool,
    /// The CONNECT's Session Expiry Interval was 0 (v5), which DISCONNECT may not raise
    /// [MQTT-3.14.2-2].
    connect_expiry_zero: bool,
    /// Another connection took the session over; `finish` must leave it alone.
    taken_over: bool,
    /// This connection's doorbell, installed in the session while attached.
    doorbell: Arc<Notify>,
    /// The last `poll_transmit` stopped at its byte budget with more to send.
    more_to_send: bool,
    /// Back-pressure state, allocated the first time this client has to wait (most never do).
    backpressure: Option<Box<Backpressure>>,
}

/// What a publisher remembers about back-pressure.
#[derive(Debug, Default)]
struct Backpressure {
    /// A congested subscriber this client's messages are waiting on.
    waiting_on: Option<Wait>,
    /// Sessions found stalled while congested: not waited on again until they drain below
    /// their congestion mark, so a stuck subscriber cannot hold this publisher back.
    stalled: Vec<Arc<SessionCell>>,
}

/// A congested subscriber session a publisher waits on, and when it last made progress.
#[derive(Debug)]
struct Wait {
    cell: Arc<SessionCell>,
    transmitted: u64,
    progress_at: Instant,
}

/// Stalled sessions remembered per connection (the oldest is forgotten beyond this).
const MAX_STALLED_REMEMBERED: usize = 16;

impl Channel {
    /// A channel for a new network connection.
    pub fn new(broker: Arc<Broker>, info: ConnectionInfo) -> Channel {
        Stats::add(&broker.stats.connections_total, 1);
        Channel {
            broker,
            info,
            conn_id: crate::registry::next_id(),
            phase: Phase::AwaitConnect,
            version: ProtocolVersion::V311,
            cell: None,
            client: None,
            auth: None,
            keep_alive: 0,
            will_on_close: true,
            connect_expiry_zero: true,
            taken_over: false,
            doorbell: Arc::new(Notify::new()),
            more_to_send: false,
            backpressure: None,
        }
    }

    /// The doorbell the transport waits on: rung when messages are queued for this client or
    /// when its session is taken over.
    pub fn doorbell(&self) -> &Arc<Notify> {
        &self.doorbell
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
        self.info.peer
    }

    /// The client identifier, once connected.
    pub fn client_id(&self) -> Option<&str> {
        self.client.as_ref().map(|c| &*c.client_id)
    }

    /// How long the connection may stay silent: 1.5 × keep alive [MQTT-3.1.2-24]; `None` when
    /// keep alive is 0.
    pub fn keep_alive_timeout(&self) -> Option<Duration> {
        (self.keep_alive > 0).then(|| Duration::from_millis(u64::from(self.keep_alive) * 1500))
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
                _ => Err(Close {
                    reason: ReasonCode::PROTOCOL_ERROR,
                    event: "first_packet_not_connect",
                }),
            },
            Phase::Authenticating => self.handle_authenticating(packet, now, out, wake),
            Phase::Closed => Err(Close {
                reason: ReasonCode::PROTOCOL_ERROR,
                event: "packet_after_close",
            }),
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
        match packet {
            Packet::Publish(publish) => self.handle_publish(publish, now, out, wake),
            Packet::PubAck(ack) => {
                self.with_session(out, |state, _| state.session.handle_puback(ack.packet_id))?;
                self.poll_transmit(now, out)
            }
            Packet::PubRec(rec) => {
                self.with_session(out, |state, _| {
                    state.session.handle_pubrec(rec.packet_id, rec.reason_code)
                })?;
                self.poll_transmit(now, out)
            }
            Packet::PubComp(comp) => {
                self.with_session(out, |state, _| state.session.handle_pubcomp(comp.packet_id))?;
                self.poll_transmit(now, out)
            }
            Packet::PubRel(rel) => {
                let known =
                    self.with_session(out, |state, _| state.session.handle_pubrel(rel.packet_id))?;
                // [MQTT-4.3.3-11] always answer PUBCOMP; v5 says whether the id was known.
                let reason = if known || !self.version.is_v5() {
                    ReasonCode::SUCCESS
                } else {
                    ReasonCode::PACKET_IDENTIFIER_NOT_FOUND
                };
                let comp = PubResp {
                    packet_id: rel.packet_id,
                    reason_code: reason,
                    properties: Properties::default(),
                };
                self.write(&Packet::PubComp(comp), out);
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
                Err(self.close_with(ReasonCode::PROTOCOL_ERROR, "second_connect", out))
            }
            Packet::Auth(auth) => self.handle_reauth(auth, out),
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(self.close_with(ReasonCode::PROTOCOL_ERROR, "server_packet_from_client", out))
            }
        }
    }

    fn handle_disconnect(&mut self, disconnect: Disconnect, out: &mut OutBuf) -> Result<(), Close> {
        if self.version.is_v5() {
            if let Some(expiry) = disconnect.properties.session_expiry_interval {
                if self.connect_expiry_zero && expiry != 0 {
                    // [MQTT-3.14.2-2] cannot turn a session that ends with the connection into
                    // one that persists.
                    return Err(self.close_with(
                        ReasonCode::PROTOCOL_ERROR,
                        "disconnect_expiry_raised",
                        out,
                    ));
                }
                let capped = expiry.min(self.broker.config.max_session_expiry_interval);
                self.with_session(out, |state, _| state.expiry_interval = capped)?;
            }
        }
        // [MQTT-3.14.4-3] normal disconnection discards the will; 0x04 asks for it.
        self.will_on_close = disconnect.reason_code == ReasonCode::DISCONNECT_WITH_WILL;
        self.phase = Phase::Closed;
        Err(Close {
            reason: disconnect.reason_code,
            event: "client_disconnect",
        })
    }

    /// Writes messages queued for this client as far as its window allows. The transport calls
    /// this when the session's doorbell rings. Fails if the session was taken over.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut OutBuf) -> Result<(), Close> {
        if self.phase != Phase::Connected {
            return Ok(());
        }
        let (report, drained) = self.with_session(out, |state, out| {
            let report = state.session.poll_transmit(now, out);
            let mut drained = false;
            if state.drained.is_some() && state.session.is_drained() {
                // Down to the low-water mark: resume the publishers paused on this session.
                if let Some(signal) = state.drained.take() {
                    signal.notify_waiters();
                }
                drained = true;
            }
            (report, drained)
        })?;
        if drained {
            if let Some(cell) = &self.cell {
                self.broker.router.clear_congested(cell);
            }
        }
        self.more_to_send = report.more;
        let stats = &self.broker.stats;
        Stats::add(&stats.publish_sent, report.published as u64);
        Stats::add(
            &stats.publish_dropped,
            (report.expired + report.too_large) as u64,
        );
        Ok(())
    }

    /// True when the last `poll_transmit` stopped at its byte budget: the transport should
    /// write and call it again without waiting for the doorbell.
    pub fn has_more_to_send(&self) -> bool {
        self.more_to_send
    }

    /// Back-pressure: true while this client should not be read from because a subscriber its
    /// messages went to is congested and still draining. The transport keeps writing to the
    /// client (and handling its doorbell) while paused, and calls this again every few
    /// milliseconds. Never waits on its own session (it must read its own acknowledgements), on
    /// offline sessions, or on a subscriber that wrote nothing for
    /// `broker.backpressure_stall_timeout_ms`: a stalled subscriber holds a publisher back only
    /// that long, once; then its queue fills and drops instead (counted).
    pub fn is_backpressured(&mut self, now: Instant) -> bool {
        let Some(bp) = self.backpressure.as_deref_mut() else {
            return false;
        };
        let Some(wait) = &mut bp.waiting_on else {
            return false;
        };
        let (congested, transmitted) = {
            let state = wait.cell.state.lock();
            let session = &state.session;
            (
                session.is_attached() && session.is_congested(),
                session.transmitted(),
            )
        };
        if !congested {
            bp.waiting_on = None;
            return false;
        }
        if transmitted != wait.transmitted {
            wait.transmitted = transmitted;
            wait.progress_at = now;
            return true;
        }
        let stall_timeout = Duration::from_millis(self.broker.config.backpressure_stall_timeout_ms);
        if now.saturating_duration_since(wait.progress_at) < stall_timeout {
            return true;
        }
        tracing::debug!(client_id = %wait.cell.client_id, "subscriber_stalled");
        if bp.stalled.len() >= MAX_STALLED_REMEMBERED {
            bp.stalled.remove(0);
        }
        if let Some(wait) = bp.waiting_on.take() {
            bp.stalled.push(wait.cell);
        }
        false
    }

    /// True while this connection waits on a congested subscriber (it should stop handling
    /// further PUBLISH packets of the current batch).
    pub fn is_waiting(&self) -> bool {
        self.backpressure
            .as_ref()
            .is_some_and(|bp| bp.waiting_on.is_some())
    }

    /// The signal rung when the subscriber this connection waits on drains, if any.
    ///
    /// The wait is registered before this returns, under the subscriber's lock: a signal sent
    /// after it (even before the caller awaits it) is not missed.
    pub fn backpressure_signal(&self) -> Option<Pin<Box<OwnedNotified>>> {
        let wait = self.backpressure.as_ref()?.waiting_on.as_ref()?;
        let mut state = wait.cell.state.lock();
        let drained = state.drained.get_or_insert_with(Default::default).clone();
        let mut notified = Box::pin(drained.notified_owned());
        notified.as_mut().enable();
        Some(notified)
    }

    /// Back-pressure before routing: true when `publish` should not be handled yet because a
    /// session it would reach is congested (and attached, and not found stalled). The caller
    /// keeps the packet, stops reading, and offers it again once [`Channel::is_backpressured`]
    /// turns false. Without this, every publisher would still add its next message to the
    /// congested queue before pausing: with thousands of publishers of large messages that
    /// alone overflows the queue. Only a `Connected` channel with a topic in the packet defers
    /// (an alias-only PUBLISH is routed as usual).
    pub fn must_defer(&mut self, publish: &hayate_codec::Publish, now: Instant) -> bool {
        if self.phase != Phase::Connected || publish.topic.is_empty() || self.is_waiting() {
            return false;
        }
        let own = self.cell.as_ref().map(|cell| cell.id);
        let Some(cell) = self.broker.router.congested_target(&publish.topic, own) else {
            return false;
        };
        let congested = {
            let state = cell.state.lock();
            state.session.is_attached() && state.session.is_congested()
        };
        if !congested {
            return false;
        }
        self.wait_on(cell, now);
        self.is_waiting()
    }

    /// Starts waiting on a congested subscriber after a publish, unless it is this client's
    /// own session or one found stalled that has not drained since.
    fn wait_on(&mut self, cell: Arc<SessionCell>, now: Instant) {
        let disabled = self.broker.config.backpressure_stall_timeout_ms == 0;
        if disabled || self.is_waiting() || self.cell.as_ref().is_some_and(|own| own.id == cell.id)
        {
            return;
        }
        let bp = self.backpressure.get_or_insert_with(Default::default);
        if let Some(index) = bp.stalled.iter().position(|s| s.id == cell.id) {
            if cell.state.lock().session.is_congested() {
                return;
            }
            bp.stalled.swap_remove(index);
        }
        let transmitted = cell.state.lock().session.transmitted();
        bp.waiting_on = Some(Wait {
            cell,
            transmitted,
            progress_at: now,
        });
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
    pub fn close_with(
        &mut self,
        reason: ReasonCode,
        event: &'static str,
        out: &mut OutBuf,
    ) -> Close {
        if self.phase == Phase::Connected && self.version.is_v5() {
            let disconnect = Disconnect {
                reason_code: reason,
                properties: Properties::default(),
            };
            self.write(&Packet::Disconnect(disconnect), out);
        }
        self.phase = Phase::Closed;
        Close { reason, event }
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
            return Close {
                reason: error.reason_code(),
                event: "malformed_packet",
            };
        }
        self.close_with(error.reason_code(), "malformed_packet", out)
    }

    /// The connection has ended (any reason). Publishes the will when due, and ends or parks
    /// the session. Call exactly once.
    pub fn finish(&mut self, now: Instant, wake: &mut WakeList) {
        if let Some(cell) = self.cell.take() {
            let still_owner = !self.taken_over && cell.state.lock().owner == self.conn_id;
            if still_owner {
                self.broker
                    .session_detached(&cell, self.will_on_close, now, wake);
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
        let Some(cell) = self.cell.clone() else {
            return Err(Close {
                reason: ReasonCode::PROTOCOL_ERROR,
                event: "no_session",
            });
        };
        let mut state = cell.state.lock();
        if state.owner != self.conn_id {
            drop(state);
            self.cell = None;
            self.taken_over = true;
            return Err(self.close_with(ReasonCode::SESSION_TAKEN_OVER, "session_taken_over", out));
        }
        Ok(f(&mut state, out))
    }

    fn write(&self, packet: &Packet, out: &mut OutBuf) {
        if let Err(error) = encode(packet, self.version, out.tail_mut()) {
            tracing::warn!(%error, packet = ?packet.packet_type(), "encode_failed");
        }
    }
}
