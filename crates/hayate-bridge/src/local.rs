//! The local side of a bridge: an ordinary client session of the local broker, driven
//! in-process through a `hayate_core::Channel` (no socket). Packets go in decoded; what the
//! channel writes for its client is decoded back into packets for the bridge to forward.
//!
//! The local side always speaks MQTT 5, whatever the remote protocol: No Local keeps what the
//! bridge publishes locally from coming back to it, Retain As Published keeps the retain flag
//! of what goes out, and v5 properties pass through.

use crate::mapping::TopicMap;
use crate::BridgeError;
use bytes::BytesMut;
use hayate_codec::{
    decode, ByteStr, Connect, Disconnect, Packet, PacketId, Properties, ProtocolVersion, QoS,
    ReasonCode, Subscribe, SubscriptionOptions,
};
use hayate_core::hooks::ListenerInfo;
use hayate_core::{Broker, Channel, Close, ConnectionInfo, OutBuf, ReadGate, WakeList};
use std::sync::Arc;
use std::time::Instant;

/// The packet id of the bridge's local SUBSCRIBE.
const SUBSCRIBE_ID: u16 = 1;

/// Settings of the local session, fixed for the bridge's life.
#[derive(Debug, Clone)]
pub(crate) struct LocalSettings {
    pub client_id: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub bridge_name: String,
}

/// The bridge's connection to its own broker.
#[derive(Debug)]
pub(crate) struct Local {
    channel: Channel,
    out: OutBuf,
    wake: WakeList,
    pending: BytesMut,
    /// Packets decoded but not yet taken.
    backlog: Vec<Packet>,
    /// The broker resumed an existing session (CONNACK's Session Present).
    session_present: bool,
}

/// What the remote broker accepts, applied to the local session's deliveries to the bridge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteLimits {
    /// How many QoS 1/2 messages may be in flight towards the remote broker.
    pub receive_maximum: u16,
    /// The local session drops messages larger than the remote broker takes.
    pub max_packet_size: Option<u32>,
    /// The remote broker's Maximum QoS: the local subscriptions ask for no more.
    pub maximum_qos: QoS,
}

/// Retain Handling of the local subscriptions: retained messages once, when the subscription
/// is new (on a link).
pub(crate) const RETAINED_IF_NEW: u8 = 1;
/// Retain Handling of the subscriptions made when the bridge starts, before any link: no
/// retained messages then (the first link's replay sends them, `crate::session`).
pub(crate) const RETAINED_NEVER: u8 = 2;

impl Local {
    /// Connects the bridge's local session. `clean_start` only on the bridge's first
    /// connection when `local_cleansession` is set; afterwards the session resumes, so what was
    /// in flight to the remote side is resent and what queued meanwhile is delivered.
    /// Subscribes to every outgoing rule, within the remote broker's `limits`, with
    /// `retain_handling` ([`RETAINED_IF_NEW`] or [`RETAINED_NEVER`]).
    pub(crate) fn connect(
        broker: &Arc<Broker>,
        settings: &LocalSettings,
        topics: &TopicMap,
        clean_start: bool,
        limits: RemoteLimits,
        retain_handling: u8,
        now: Instant,
    ) -> Result<Local, BridgeError> {
        let RemoteLimits {
            receive_maximum,
            max_packet_size,
            maximum_qos,
        } = limits;
        let properties = Properties {
            // The session outlives a link drop (capped by the broker's
            // max_session_expiry_interval); with local_cleansession it ends when the bridge
            // stops (see `close`).
            session_expiry_interval: Some(u32::MAX),
            receive_maximum: Some(receive_maximum.max(1)),
            maximum_packet_size: max_packet_size,
            ..Properties::default()
        };
        let mut local = Local::open(
            broker,
            settings,
            &settings.client_id,
            clean_start,
            properties,
            now,
        )?;
        let filters: Vec<(ByteStr, SubscriptionOptions)> = topics
            .outgoing()
            .map(|rule| {
                let options = SubscriptionOptions {
                    qos: rule.qos().min(maximum_qos),
                    no_local: true,
                    retain_as_published: true,
                    retain_handling,
                };
                (rule.local_filter().into(), options)
            })
            .collect();
        if let Err(error) = local.subscribe(filters, now) {
            local.close(false, now);
            return Err(error);
        }
        Ok(local)
    }

    /// Connects a local client `client_id` with the bridge's credentials (MQTT 5, keep alive
    /// 0) and checks its CONNACK.
    pub(crate) fn open(
        broker: &Arc<Broker>,
        settings: &LocalSettings,
        client_id: &str,
        clean_start: bool,
        properties: Properties,
        now: Instant,
    ) -> Result<Local, BridgeError> {
        let info = ConnectionInfo {
            listener: Arc::new(ListenerInfo {
                name: format!("bridge:{}", settings.bridge_name).into(),
                // Without local credentials the bridge is trusted, as Mosquitto's is.
                allow_anonymous: settings.username.is_none().then_some(true),
                ..ListenerInfo::default()
            }),
            ..ConnectionInfo::default()
        };
        let mut local = Local {
            channel: Channel::new(broker.clone(), info, now),
            out: OutBuf::new(),
            wake: WakeList::new(),
            pending: BytesMut::new(),
            backlog: Vec::new(),
            session_present: false,
        };
        let connect = Connect {
            protocol: ProtocolVersion::V5,
            clean_start,
            keep_alive: 0,
            client_id: client_id.into(),
            will: None,
            username: settings.username.as_deref().map(Into::into),
            password: settings
                .password
                .as_deref()
                .map(|p| bytes::Bytes::copy_from_slice(p.as_bytes())),
            properties,
            bridge: false,
        };
        local.handle(Packet::Connect(Box::new(connect)), now)?;
        let mut output = local.take_output()?.into_iter();
        let connack = output.next();
        // What follows CONNACK (messages in flight resent on resuming the session) is
        // forwarded like the rest.
        local.backlog.extend(output);
        match connack {
            Some(Packet::ConnAck(connack)) if !connack.reason_code.is_error() => {
                local.session_present = connack.session_present;
                Ok(local)
            }
            Some(Packet::ConnAck(connack)) => Err(BridgeError::LocalRefused(connack.reason_code.0)),
            other => Err(BridgeError::Protocol(format!(
                "local CONNECT answered with {other:?}"
            ))),
        }
    }

    /// The broker resumed an existing session (CONNACK's Session Present).
    pub(crate) fn session_present(&self) -> bool {
        self.session_present
    }

    /// Subscribes to `filters` (nothing when empty).
    pub(crate) fn subscribe(
        &mut self,
        filters: Vec<(ByteStr, SubscriptionOptions)>,
        now: Instant,
    ) -> Result<(), BridgeError> {
        if filters.is_empty() {
            return Ok(());
        }
        let subscribe = Subscribe {
            packet_id: PacketId::new(SUBSCRIBE_ID).expect("non-zero"),
            filters,
            properties: Properties::default(),
        };
        self.handle(Packet::Subscribe(subscribe), now)
    }

    /// Messages the session holds: (waiting to be sent, in flight).
    pub(crate) fn held(&self) -> (usize, usize) {
        self.channel.session().map_or((0, 0), |cell| {
            let state = cell.state.lock();
            let in_flight = state.session.inflight_len();
            (
                state.session.held_messages().saturating_sub(in_flight),
                in_flight,
            )
        })
    }

    /// Hands one packet to the channel and rings the doorbells of the sessions it reached.
    pub(crate) fn handle(&mut self, packet: Packet, now: Instant) -> Result<(), BridgeError> {
        let result = self
            .channel
            .handle_packet(packet, now, &mut self.out, &mut self.wake);
        self.ring();
        result.map_err(closed)
    }

    /// Moves what the session has for the bridge (as far as its window allows) to the output.
    pub(crate) fn transmit(&mut self, now: Instant) -> Result<(), BridgeError> {
        self.channel
            .poll_transmit(now, &mut self.out)
            .map_err(closed)
    }

    /// True when the last transmit stopped at its budget.
    pub(crate) fn has_more_to_send(&self) -> bool {
        self.channel.has_more_to_send()
    }

    /// The doorbell rung when the session has something for the bridge.
    pub(crate) fn doorbell(&self) -> Arc<tokio::sync::Notify> {
        self.channel.doorbell().clone()
    }

    /// True when the channel takes the next PUBLISH now (not held back by a congested
    /// subscriber).
    pub(crate) fn accepts_input(&self) -> bool {
        self.channel.accepts_input()
    }

    /// Re-evaluates the channel's read gate (back-pressure); a held PUBLISH may go on.
    pub(crate) fn poll_gate(&mut self, now: Instant) -> Result<ReadGate, BridgeError> {
        let gate = self.channel.poll_gate(now, &mut self.out, &mut self.wake);
        self.ring();
        gate.map_err(closed)
    }

    /// The packets the channel wrote for its client since the last call.
    pub(crate) fn take_output(&mut self) -> Result<Vec<Packet>, BridgeError> {
        if !self.out.is_empty() {
            let bytes = self.out.take_all();
            self.pending.extend_from_slice(&bytes);
        }
        let mut packets = std::mem::take(&mut self.backlog);
        while let Some(packet) = decode(&mut self.pending, ProtocolVersion::V5, u32::MAX)? {
            packets.push(packet);
        }
        Ok(packets)
    }

    /// Ends the connection: a plain link drop (`end_session` false) keeps the session and
    /// what is queued and in flight in it; `end_session` (bridge stopping with
    /// `local_cleansession`) ends it.
    pub(crate) fn close(mut self, end_session: bool, now: Instant) {
        if self.channel.is_connected() {
            let mut properties = Properties::default();
            if end_session {
                properties.session_expiry_interval = Some(0);
            }
            let disconnect = Disconnect {
                reason_code: ReasonCode::SUCCESS,
                properties,
            };
            let _ = self.handle(Packet::Disconnect(disconnect), now);
        }
        self.channel.finish(now, &mut self.wake);
        self.ring();
    }

    fn ring(&mut self) {
        for doorbell in self.wake.drain(..) {
            doorbell.notify_one();
        }
    }
}

fn closed(close: Close) -> BridgeError {
    BridgeError::LocalClosed(close.reason.to_string())
}
