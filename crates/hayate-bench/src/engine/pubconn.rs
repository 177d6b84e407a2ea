//! A publisher connection and its MQTT state: acknowledgements, the in-flight window, packet
//! ids.

use super::worker::WorkerOut;
use crate::client::Conn;
use crate::clock::Clock;
use hayate_codec::{Packet, PacketId, PubResp, QoS};
use std::time::Duration;

/// A publisher whose QoS 1/2 acknowledgements stop coming for this long is given up.
const ACK_TIMEOUT_NS: u64 = 10_000_000_000;

/// A publisher connection and its MQTT state.
pub(super) struct PubConn {
    pub(super) conn: Conn,
    /// Connection index (the stream id of its messages).
    pub(super) id: u64,
    /// Its topic (empty when the worker picks topics per message).
    pub(super) topic: Vec<u8>,
    /// Next sequence number.
    pub(super) seq: u64,
    /// Unacknowledged QoS 1/2 publishes.
    pub(super) inflight: u64,
    next_pid: u16,
    /// Unusable (closed, failed, or given up).
    pub(super) dead: bool,
}

impl PubConn {
    /// A connection before its first message.
    pub(super) fn new(conn: Conn, id: u64, topic: Vec<u8>) -> PubConn {
        PubConn {
            conn,
            id,
            topic,
            seq: 0,
            inflight: 0,
            next_pid: 0,
            dead: false,
        }
    }

    /// Handles every complete packet in the read buffer. Returns false when the connection
    /// is unusable.
    pub(super) fn handle_input(&mut self, out: &mut WorkerOut) -> bool {
        loop {
            match self.conn.next_packet() {
                Ok(Some(packet)) => match packet {
                    Packet::PubAck(ack) => {
                        self.inflight = self.inflight.saturating_sub(1);
                        if ack.reason_code.is_error() {
                            out.error(format!("puback-0x{:02X}", ack.reason_code.0));
                        } else {
                            out.acked += 1;
                        }
                    }
                    Packet::PubRec(rec) => {
                        if rec.reason_code.is_error() {
                            self.inflight = self.inflight.saturating_sub(1);
                            out.error(format!("pubrec-0x{:02X}", rec.reason_code.0));
                        } else {
                            self.conn.push(&Packet::PubRel(PubResp::new(rec.packet_id)));
                        }
                    }
                    Packet::PubComp(_) => {
                        self.inflight = self.inflight.saturating_sub(1);
                        out.acked += 1;
                    }
                    Packet::Disconnect(d) => {
                        *out.drops
                            .entry(format!("disconnect-0x{:02X}", d.reason_code.0))
                            .or_default() += 1;
                        return false;
                    }
                    Packet::Publish(p) => {
                        // Not subscribed; acknowledge anything a broker sends anyway.
                        if let Some(id) = p.packet_id {
                            match p.qos {
                                QoS::AtLeastOnce => {
                                    self.conn.push(&Packet::PubAck(PubResp::new(id)))
                                }
                                QoS::ExactlyOnce => {
                                    self.conn.push(&Packet::PubRec(PubResp::new(id)))
                                }
                                QoS::AtMostOnce => {}
                            }
                        }
                    }
                    Packet::PubRel(r) => {
                        self.conn.push(&Packet::PubComp(PubResp::new(r.packet_id)))
                    }
                    _ => {}
                },
                Ok(None) => return true,
                Err(_) => {
                    out.drop_reason("protocol");
                    return false;
                }
            }
        }
    }

    /// Reads whatever is available and handles it, without waiting.
    pub(super) fn poll_input(&mut self, out: &mut WorkerOut) -> bool {
        match self.conn.try_fill() {
            Ok(true) => self.handle_input(out),
            Ok(false) => {
                out.drop_reason("closed");
                false
            }
            Err(e) => {
                out.drop_io(&e);
                false
            }
        }
    }

    /// Sends what is pending (PUBRELs), then waits (up to `timeout`) for input and handles it.
    /// Returns false when the connection is unusable; a timeout is not an error.
    pub(super) async fn wait_input(&mut self, out: &mut WorkerOut, timeout: Duration) -> bool {
        if let Err(e) = self.conn.flush().await {
            out.drop_io(&e);
            return false;
        }
        match tokio::time::timeout(timeout, self.conn.fill(1024)).await {
            Err(_) => true,
            Ok(Ok(true)) => self.handle_input(out),
            Ok(Ok(false)) => {
                out.drop_reason("closed");
                false
            }
            Ok(Err(e)) => {
                out.drop_io(&e);
                false
            }
        }
    }

    /// Waits until the in-flight count drops below `max` (or the connection fails, or no
    /// acknowledgement came for `ACK_TIMEOUT`, which also counts as a failure).
    pub(super) async fn wait_window(
        &mut self,
        out: &mut WorkerOut,
        max: u64,
        deadline: u64,
        clock: Clock,
    ) -> bool {
        let mut last_progress = clock.now_ns();
        while self.inflight >= max {
            let before = self.inflight;
            if !self.wait_input(out, Duration::from_millis(500)).await {
                return false;
            }
            let now = clock.now_ns();
            if self.inflight < before {
                last_progress = now;
            } else if now - last_progress > ACK_TIMEOUT_NS {
                out.drop_reason("ack-timeout");
                return false;
            }
            if now >= deadline {
                break;
            }
        }
        true
    }

    pub(super) fn next_packet_id(&mut self) -> PacketId {
        self.next_pid = self.next_pid.wrapping_add(1);
        if self.next_pid == 0 {
            self.next_pid = 1;
        }
        PacketId::new(self.next_pid).unwrap_or(PacketId::MIN)
    }
}
