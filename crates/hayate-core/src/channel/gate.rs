//! The channel's read gate and clocks: publisher-side back-pressure (hold a PUBLISH back while
//! a subscriber it reaches is congested), the inbound rate limit, the connect timeout and keep
//! alive. All of it is driven by `now` from the caller; see `docs/design/backpressure.md`.

use super::{Channel, Phase};
use crate::close::{Close, CloseReason};
use crate::flow::{Hint, Waiting};
use crate::router::WakeList;
use crate::stats::Stats;
use hayate_codec::{Publish, ReasonCode};
use hayate_session::{Arrival, OutBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::futures::OwnedNotified;

/// Whether the transport may read from the client now.
#[derive(Debug)]
pub enum ReadGate {
    /// Read, decode and hand packets over.
    Open,
    /// Do not read. Call [`Channel::poll_gate`] again when `released` completes (a congested
    /// subscriber drained or stalled), or at `until`, whichever comes first. The client's
    /// bytes wait in its socket, so TCP slows it down.
    Paused {
        /// When to look again at the latest.
        until: Instant,
        /// Registered before it was returned: a release in between is not missed.
        released: Option<Pin<Box<OwnedNotified>>>,
    },
}

/// How far away "never" is for [`Channel::poll_timeout`].
const FAR: Duration = Duration::from_secs(24 * 3600);

impl Channel {
    /// True when the transport should decode and hand over the next packet now: not waiting on
    /// a congested subscriber, not holding a QoS 2 resend (`resend_hold.rs`) and not over the
    /// PUBLISH rate limit.
    pub fn accepts_input(&self) -> bool {
        self.input_ended
            || (self.gate().is_none()
                && !self.holds_resend()
                && !self.awaiting_handover
                && !self.limit().is_some_and(|l| l.messages < 0.0))
    }

    /// How many bytes to read at most now: `max`, or less while a byte-rate limit's bucket is
    /// low (at least a little, so a packet header can always be read).
    pub fn read_budget(&self, max: usize) -> usize {
        match self.limit() {
            Some(limit) => (limit.bytes.max(0.0) as usize).clamp(1024.min(max), max),
            None => max,
        }
    }

    /// `bytes` arrived from the client at `now` (on the broker's clock) and reached the broker
    /// at `arrival` (the transport's receive time): restarts the keep-alive clock, charges the
    /// byte-rate limit, and stamps the packets handled next with `arrival`.
    pub fn on_input(&mut self, bytes: usize, now: Instant, arrival: Arrival) {
        if bytes == 0 {
            return;
        }
        self.arrival = arrival;
        if self.phase == Phase::Connected {
            self.last_input = now;
        }
        if let Some(limit) = self.limit_mut() {
            limit.bytes -= bytes as f64;
        }
    }

    /// Charges one PUBLISH to the rate limit, if there is one.
    pub(super) fn count_publish(&mut self) -> &mut Channel {
        if let Some(limit) = self.limit_mut() {
            limit.messages -= 1.0;
        }
        self
    }

    /// Back-pressure before routing: `Some(publish)` to handle it now, or `None` when it was
    /// held back because a session it would reach is congested. The transport stops handing
    /// over packets ([`Channel::accepts_input`]) and asks [`Channel::poll_gate`] when to go on;
    /// the held PUBLISH is handled first then. Without this every publisher would add its next
    /// message to the congested queue before pausing, and thousands of publishers of large
    /// messages would overflow it. An alias-only PUBLISH is routed as usual.
    pub(super) fn hold_if_congested(&mut self, publish: Publish) -> Option<Publish> {
        if self.input_ended
            || self.gate().is_some()
            || publish.topic.is_empty()
            || !self.backpressure_enabled()
        {
            return Some(publish);
        }
        let own = self.cell.as_ref().map(|cell| cell.id);
        let Some(cell) = self.broker.router.congested_target(&publish.topic, own) else {
            return Some(publish);
        };
        if !cell.state.lock().congestion.is_congested() {
            return Some(publish);
        }
        Stats::add(&self.broker.stats.backpressure_pauses, 1);
        self.rare_mut().gate = Some(Waiting {
            cell,
            held: Some(Box::new(publish)),
        });
        None
    }

    /// After routing a PUBLISH that left `cell` congested: stop reading this client until it
    /// drains (never its own session: it must read its own acknowledgements).
    pub(super) fn wait_on(&mut self, cell: Arc<crate::registry::SessionCell>) {
        let own = self.cell.as_ref().is_some_and(|own| own.id == cell.id);
        if own || self.input_ended || self.gate().is_some() || !self.backpressure_enabled() {
            return;
        }
        Stats::add(&self.broker.stats.backpressure_pauses, 1);
        self.rare_mut().gate = Some(Waiting { cell, held: None });
    }

    fn backpressure_enabled(&self) -> bool {
        self.broker.limits().backpressure_stall_timeout_ms() > 0
    }

    fn stall_window(&self) -> Duration {
        Duration::from_millis(self.broker.limits().backpressure_stall_timeout_ms())
    }

    /// Re-evaluates the read gate at `now`. While the subscriber waited on is congested and
    /// making progress the client stays paused; once it drained, stalled or went away the held
    /// PUBLISH is handled (which may start waiting on another one). Then the inbound rate
    /// limit is checked.
    pub fn poll_gate(
        &mut self,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<ReadGate, Close> {
        // CONNACK waits for the cluster's handover: nothing the client sent is handled before
        // it (its doorbell, rung when the answers are in, writes it).
        if self.poll_handover(now, out) {
            if let Some(until) = self.handover_deadline() {
                return Ok(ReadGate::Paused {
                    until,
                    released: None,
                });
            }
        }
        if let Some(until) = self.poll_resend_hold(now, out, wake)? {
            return Ok(ReadGate::Paused {
                until,
                released: None,
            });
        }
        while let Some(waiting) = self.gate() {
            let window = self.stall_window();
            {
                let mut state = waiting.cell.state.lock();
                let state = &mut *state;
                let hint = state.congestion.check_stall(&state.session, now, window);
                self.broker.router.apply_hint(&waiting.cell, hint);
                if hint == Hint::Clear {
                    Stats::add(&self.broker.stats.backpressure_stalls, 1);
                    tracing::info!(client_id = %waiting.cell.client_id, window_ms = window.as_millis() as u64, "subscriber_stalled");
                }
                if let Some((released, deadline)) = state.congestion.wait(window) {
                    let mut notified = Box::pin(released.notified_owned());
                    notified.as_mut().enable();
                    return Ok(ReadGate::Paused {
                        until: deadline,
                        released: Some(notified),
                    });
                }
            }
            let held = self
                .take_rare(|rare| rare.gate.take())
                .and_then(|waiting| waiting.held);
            if let Some(publish) = held {
                if self.phase == Phase::Connected {
                    self.handle_publish(*publish, now, out, wake)?;
                }
            }
        }
        if let Some(limit) = self.limit_mut() {
            if let Some(until) = limit.resume_at(now) {
                return Ok(ReadGate::Paused {
                    until,
                    released: None,
                });
            }
        }
        Ok(ReadGate::Open)
    }

    /// The client's input has ended (end of stream): the held PUBLISH is handled and nothing is
    /// held back any more, so everything the client sent is handled (its last packet may be a
    /// DISCONNECT that decides about its will).
    pub fn input_ended(
        &mut self,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        self.input_ended = true;
        self.drop_resend_hold();
        let held = self
            .take_rare(|rare| rare.gate.take())
            .and_then(|waiting| waiting.held);
        if let (Some(publish), Phase::Connected) = (held, self.phase) {
            self.handle_publish(*publish, now, out, wake)?;
        }
        Ok(())
    }

    /// When [`Channel::handle_timeout`] must be called next: the connect timeout until CONNECT
    /// completes, then 1.5 × keep alive after the last input (far away with keep alive 0).
    pub fn poll_timeout(&self) -> Instant {
        match self.phase {
            Phase::AwaitConnect | Phase::Authenticating => {
                self.last_input + self.listener().limits.connect_timeout
            }
            Phase::Connected => match self.keep_alive_timeout() {
                Some(timeout) => self.last_input + timeout,
                None => self.last_input + FAR,
            },
            Phase::Closed => self.last_input + FAR,
        }
    }

    /// Time has passed: closes the connection when CONNECT did not complete in time, or when
    /// nothing arrived for 1.5 × keep alive [MQTT-3.1.2-22] ([3.1.1: MQTT-3.1.2-24]). `reading` is false while the
    /// transport does not read from the client (its output is backlogged); neither then nor
    /// while this channel holds the client back does silence count against it.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        reading: bool,
        out: &mut OutBuf,
    ) -> Result<(), Close> {
        if now < self.poll_timeout() {
            return Ok(());
        }
        match self.phase {
            Phase::AwaitConnect | Phase::Authenticating => {
                // Debug, not info: a slowloris attack would otherwise write one line per socket.
                tracing::debug!(peer = ?self.peer(), "connect_timeout");
                self.phase = Phase::Closed;
                Err(Close::new(
                    ReasonCode::MAXIMUM_CONNECT_TIME,
                    CloseReason::ConnectTimeout,
                ))
            }
            Phase::Connected => {
                if !reading
                    || self.gate().is_some()
                    || self.holds_resend()
                    || self.keep_alive_timeout().is_none()
                {
                    // Not reading is our doing, not the client's silence (and keep alive 0
                    // turns the check off [MQTT-3.1.2-22]): look again later.
                    self.last_input = now;
                    return Ok(());
                }
                tracing::info!(peer = ?self.peer(), client_id = ?self.client_id(), "keep_alive_timeout");
                Err(self.close_with(
                    ReasonCode::KEEP_ALIVE_TIMEOUT,
                    CloseReason::KeepAliveTimeout,
                    out,
                ))
            }
            Phase::Closed => Ok(()),
        }
    }
}
