//! A connection to this broker without a socket: a [`Channel`] driven in-process, packets in
//! as values, the bytes it writes for its client decoded back into packets. A cluster node's
//! ingress of forwarded messages is one (`crate::cluster`).

use crate::channel::{Channel, ConnectionInfo, ReadGate};
use crate::close::Close;
use crate::router::WakeList;
use crate::Broker;
use bytes::BytesMut;
use hayate_codec::{decode, DecodeError, Packet, ProtocolVersion};
use hayate_session::OutBuf;
use std::sync::Arc;
use std::time::Instant;

/// Why an in-process connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum InProcessError {
    /// The channel closed the connection.
    #[error("closed by the broker: {}", .0.reason)]
    Closed(Close),
    /// The channel wrote bytes that do not decode (a bug, never expected).
    #[error("undecodable output: {0}")]
    Output(#[from] DecodeError),
}

/// See the module docs. Always speaks MQTT 5.
#[derive(Debug)]
pub struct InProcess {
    channel: Channel,
    out: OutBuf,
    wake: WakeList,
    pending: BytesMut,
}

impl InProcess {
    /// A new connection on the listener described by `info`; send CONNECT first.
    pub fn new(broker: Arc<Broker>, info: ConnectionInfo, now: Instant) -> InProcess {
        InProcess {
            channel: Channel::new(broker, info, now),
            out: OutBuf::new(),
            wake: WakeList::new(),
            pending: BytesMut::new(),
        }
    }

    /// Hands one packet to the channel and rings the doorbells of the sessions it reached.
    pub fn handle(&mut self, packet: Packet, now: Instant) -> Result<(), InProcessError> {
        let result = self
            .channel
            .handle_packet(packet, now, &mut self.out, &mut self.wake);
        self.ring();
        result.map_err(InProcessError::Closed)
    }

    /// Moves what the session has queued for its client (as far as its window allows) to the
    /// output.
    pub fn transmit(&mut self, now: Instant) -> Result<(), InProcessError> {
        self.channel
            .poll_transmit(now, &mut self.out)
            .map_err(InProcessError::Closed)
    }

    /// True when the last transmit stopped at its budget.
    pub fn has_more_to_send(&self) -> bool {
        self.channel.has_more_to_send()
    }

    /// The doorbell rung when the session has something for its client (or a held
    /// acknowledgement became durable).
    pub fn doorbell(&self) -> Arc<tokio::sync::Notify> {
        self.channel.doorbell().clone()
    }

    /// True when the channel takes the next PUBLISH now (not held back by a congested
    /// subscriber).
    pub fn accepts_input(&self) -> bool {
        self.channel.accepts_input()
    }

    /// Re-evaluates the channel's read gate (back-pressure); a held PUBLISH may go on.
    pub fn poll_gate(&mut self, now: Instant) -> Result<ReadGate, InProcessError> {
        let gate = self.channel.poll_gate(now, &mut self.out, &mut self.wake);
        self.ring();
        gate.map_err(InProcessError::Closed)
    }

    /// The packets the channel wrote for its client since the last call.
    pub fn take_output(&mut self) -> Result<Vec<Packet>, InProcessError> {
        if !self.out.is_empty() {
            let bytes = self.out.take_all();
            self.pending.extend_from_slice(&bytes);
        }
        let mut packets = Vec::new();
        while let Some(packet) = decode(&mut self.pending, ProtocolVersion::V5, u32::MAX)? {
            packets.push(packet);
        }
        Ok(packets)
    }

    /// True once CONNECT was accepted and until the connection ends.
    pub fn is_connected(&self) -> bool {
        self.channel.is_connected()
    }

    /// Ends the connection (after a DISCONNECT the caller sent, or as a connection lost).
    pub fn finish(mut self, now: Instant) {
        self.channel.finish(now, &mut self.wake);
        self.ring();
    }

    fn ring(&mut self) {
        for doorbell in self.wake.drain(..) {
            doorbell.notify_one();
        }
    }
}
