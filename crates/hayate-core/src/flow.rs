//! Back-pressure between publishers and subscribers, as one state machine per side. The
//! states, transitions and bounds are described in `docs/design/backpressure.md`.
//!
//! - Subscriber side: [`Congestion`], kept in each session's state and changed only under the
//!   session lock. `Clear` → `Congested` when a queued message takes an attached session past
//!   its high-water mark; `Congested` → `Clear` when it drains to its low-water mark (paused
//!   publishers are woken); `Congested` → `Stalled` when it made no delivery progress for the
//!   stall window (paused publishers are released; nobody waits on it, its overflow is dropped
//!   and counted); `Stalled` → `Congested` as soon as it makes progress again, `Stalled` →
//!   `Clear` once drained. Detaching or ending the session resets it to `Clear`.
//! - Publisher side: the [`Channel`](crate::Channel)'s read gate ([`crate::ReadGate`]): whether
//!   this client is read from, and if not, what it waits for ([`Waiting`] on a congested
//!   subscriber, with the PUBLISH held back before routing, or the inbound rate limit's
//!   buckets).
//!
//! Progress is the session's count of deliveries that left it
//! ([`hayate_session::Session::completed`]): QoS 0 messages handed to the connection's output,
//! which moves only while the subscriber's socket accepts bytes (the transport stops asking for
//! more output while its buffer is full), and QoS 1/2 messages acknowledged. A subscriber that
//! reads slowly keeps it moving and keeps its publishers paused; one that stops reading (or
//! stops acknowledging) does not.

use crate::registry::SessionCell;
use hayate_codec::Publish;
use hayate_session::Session;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A subscriber session's congestion state. See the module docs.
#[derive(Debug, Default)]
pub enum Congestion {
    /// Below the high-water mark, or no connection attached: nobody waits on it.
    #[default]
    Clear,
    /// At or above the high-water mark, attached, and making progress: publishers whose
    /// messages reach it pause reading until it drains.
    Congested(Box<Congested>),
    /// Congested without progress for the stall window: nobody waits on it.
    Stalled {
        /// The progress count when it was found stalled; any change means progress.
        transmitted: u64,
    },
}

/// What a congested session tracks.
#[derive(Debug)]
pub struct Congested {
    /// Rung (`notify_waiters`) when the session leaves this state.
    released: Arc<Notify>,
    /// The progress count last seen, and when it last changed.
    transmitted: u64,
    progress_at: Instant,
}

/// What a transition means for the session's lock-free congested hint
/// ([`SessionCell::congested`]), which is set exactly while the state is `Congested`.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Unchanged.
    Keep,
    /// Entered `Congested`: set the hint.
    Set,
    /// Left `Congested`: clear the hint.
    Clear,
}

impl Congestion {
    fn congested(session: &Session, now: Instant) -> Congestion {
        Congestion::Congested(Box::new(Congested {
            released: Arc::new(Notify::new()),
            transmitted: session.completed(),
            progress_at: now,
        }))
    }

    /// True in the `Congested` state.
    pub fn is_congested(&self) -> bool {
        matches!(self, Congestion::Congested(_))
    }

    /// True in the `Stalled` state.
    pub fn is_stalled(&self) -> bool {
        matches!(self, Congestion::Stalled { .. })
    }

    /// After a message was queued for `session`: `Clear` → `Congested` past the high-water
    /// mark while attached.
    pub fn after_enqueue(&mut self, session: &Session, now: Instant) -> Hint {
        if matches!(self, Congestion::Clear) && session.is_attached() && session.is_congested() {
            *self = Congestion::congested(session, now);
            return Hint::Set;
        }
        Hint::Keep
    }

    /// After the subscriber's connection took output or an acknowledgement: records progress,
    /// and releases the waiting publishers once drained to the low-water mark.
    pub fn after_transmit(&mut self, session: &Session, now: Instant) -> Hint {
        match self {
            Congestion::Clear => Hint::Keep,
            Congestion::Congested(state) => {
                if session.is_drained() {
                    state.released.notify_waiters();
                    *self = Congestion::Clear;
                    return Hint::Clear;
                }
                if session.completed() != state.transmitted {
                    state.transmitted = session.completed();
                    state.progress_at = now;
                }
                Hint::Keep
            }
            Congestion::Stalled { transmitted } => {
                if session.is_drained() {
                    *self = Congestion::Clear;
                    Hint::Keep
                } else if session.completed() != *transmitted {
                    *self = Congestion::congested(session, now);
                    Hint::Set
                } else {
                    Hint::Keep
                }
            }
        }
    }

    /// Judged by a publisher waiting on this session when the stall deadline passes:
    /// `Congested` → `Stalled` when no progress was made for `window`; the waiting publishers
    /// are released.
    pub fn check_stall(&mut self, session: &Session, now: Instant, window: Duration) -> Hint {
        let Congestion::Congested(state) = self else {
            return Hint::Keep;
        };
        if session.completed() != state.transmitted {
            state.transmitted = session.completed();
            state.progress_at = now;
            return Hint::Keep;
        }
        if now.saturating_duration_since(state.progress_at) < window {
            return Hint::Keep;
        }
        state.released.notify_waiters();
        *self = Congestion::Stalled {
            transmitted: state.transmitted,
        };
        Hint::Clear
    }

    /// The connection detached or the session ended: back to `Clear`, waiting publishers
    /// released.
    pub fn reset(&mut self) -> Hint {
        let hint = match self {
            Congestion::Congested(state) => {
                state.released.notify_waiters();
                Hint::Clear
            }
            _ => Hint::Keep,
        };
        *self = Congestion::Clear;
        hint
    }

    /// While `Congested`: the signal rung when it leaves that state, and the moment it counts as
    /// stalled unless it makes progress first.
    pub fn wait(&self, window: Duration) -> Option<(Arc<Notify>, Instant)> {
        match self {
            Congestion::Congested(state) => {
                Some((state.released.clone(), state.progress_at + window))
            }
            _ => None,
        }
    }
}

/// Publisher side: the congested subscriber this client waits on while it is not read from.
/// The [`Channel`](crate::Channel) keeps `Option<Waiting>` (in its rarely used state): `None`
/// is the open gate.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// The subscriber session.
    pub(crate) cell: Arc<SessionCell>,
    /// A PUBLISH decoded but not routed yet (back-pressure before routing), handled first when
    /// the gate opens.
    pub(crate) held: Option<Box<Publish>>,
}

/// A client's inbound rate limit: token buckets for bytes and PUBLISH packets, refilled
/// continuously, holding at most one second's worth. Reading stops while either is empty (the
/// client's bytes wait in TCP: nothing is dropped) and resumes when it has refilled.
#[derive(Debug)]
pub(crate) struct InboundLimit {
    bytes_per_sec: f64,
    messages_per_sec: f64,
    pub(crate) bytes: f64,
    pub(crate) messages: f64,
    refilled: Instant,
}

impl InboundLimit {
    /// A limit for the given rates (0: none), or `None` without any.
    pub(crate) fn new(bytes: u64, messages: u64, now: Instant) -> Option<InboundLimit> {
        (bytes > 0 || messages > 0).then(|| {
            let rate = |r: u64| if r == 0 { f64::INFINITY } else { r as f64 };
            InboundLimit {
                bytes_per_sec: rate(bytes),
                messages_per_sec: rate(messages),
                bytes: rate(bytes),
                messages: rate(messages),
                refilled: now,
            }
        })
    }

    /// `Some(when)` while a bucket is empty: reading may go on again then.
    pub(crate) fn resume_at(&mut self, now: Instant) -> Option<Instant> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.bytes = (self.bytes + elapsed * self.bytes_per_sec).min(self.bytes_per_sec);
        self.messages =
            (self.messages + elapsed * self.messages_per_sec).min(self.messages_per_sec);
        let wait = f64::max(
            -self.bytes / self.bytes_per_sec,
            -self.messages / self.messages_per_sec,
        );
        // Resume once the deficit is paid back; tiny waits are not worth a timer.
        (wait > 0.0005).then(|| now + Duration::from_secs_f64(wait))
    }
}

#[cfg(test)]
// A fixed origin for injected time; every later instant is derived from it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hayate_codec::{Properties, ProtocolVersion, QoS};
    use hayate_session::{ConnectionParams, Delivery, Message, OutBuf, SessionLimits};

    fn session(max_messages: usize) -> Session {
        let mut session = Session::new(SessionLimits {
            max_queued_messages: max_messages,
            ..SessionLimits::default()
        });
        session.attach(ConnectionParams {
            version: ProtocolVersion::V311,
            client_receive_maximum: u16::MAX,
            client_maximum_packet_size: u32::MAX,
            client_topic_alias_maximum: 0,
            server_receive_maximum: u16::MAX,
            server_topic_alias_maximum: 0,
            assign_outbound_aliases: false,
        });
        session
    }

    fn queue(session: &mut Session, n: usize) {
        for _ in 0..n {
            let message = Arc::new(Message::new(
                "t".into(),
                Bytes::from_static(b"x"),
                QoS::AtMostOnce,
                false,
                Properties::default(),
                None,
                None,
            ));
            let _ = session.enqueue(Delivery {
                message,
                qos: QoS::AtMostOnce,
                retain: false,
                subscription_ids: Vec::new(),
                shared_group: None,
                seq: 0,
                sent_as: None,
            });
        }
    }

    /// Sends what is queued (progress).
    fn transmit_all(session: &mut Session, now: Instant) {
        let mut out = OutBuf::new();
        session.poll_transmit(now, &mut out);
    }

    #[test]
    fn congested_past_the_high_mark_and_clear_at_the_low_mark() {
        let t0 = Instant::now();
        let mut s = session(8);
        let mut c = Congestion::default();
        queue(&mut s, 3);
        assert_eq!(c.after_enqueue(&s, t0), Hint::Keep);
        queue(&mut s, 1);
        assert_eq!(
            c.after_enqueue(&s, t0),
            Hint::Set,
            "4 of 8 is the high mark"
        );
        let (released, deadline) = c.wait(Duration::from_secs(5)).expect("waitable");
        assert_eq!(deadline, t0 + Duration::from_secs(5));
        let waiter = released.notified_owned();
        tokio::pin!(waiter);
        waiter.as_mut().enable();
        transmit_all(&mut s, t0);
        assert_eq!(c.after_transmit(&s, t0), Hint::Clear);
        assert!(matches!(c, Congestion::Clear));
        // The waiter registered before the release was woken.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(waiter.as_mut(), &mut cx).is_ready());
    }

    #[test]
    fn stalls_only_without_progress_for_the_whole_window() {
        let t0 = Instant::now();
        let window = Duration::from_secs(5);
        let mut s = session(100);
        let mut c = Congestion::default();
        queue(&mut s, 60);
        assert_eq!(c.after_enqueue(&s, t0), Hint::Set);
        assert_eq!(
            c.check_stall(&s, t0 + Duration::from_secs(4), window),
            Hint::Keep
        );
        // Progress at 4 s (slow, but alive) moves the deadline.
        let mut out = OutBuf::new();
        s.poll_transmit(t0, &mut out);
        queue(&mut s, 60);
        assert_eq!(
            c.check_stall(&s, t0 + Duration::from_secs(4), window),
            Hint::Keep
        );
        assert_eq!(
            c.check_stall(&s, t0 + Duration::from_secs(8), window),
            Hint::Keep
        );
        assert_eq!(
            c.check_stall(&s, t0 + Duration::from_secs(9), window),
            Hint::Clear,
            "5 s without progress"
        );
        assert!(c.is_stalled());
        assert!(
            c.wait(window).is_none(),
            "nobody waits on a stalled session"
        );
        // Progress again while still above the mark: congested again.
        s.poll_transmit(t0, &mut out);
        queue(&mut s, 60);
        assert_eq!(
            c.after_transmit(&s, t0 + Duration::from_secs(10)),
            Hint::Set
        );
        assert!(c.is_congested());
    }

    #[test]
    fn detach_resets_to_clear() {
        let t0 = Instant::now();
        let mut s = session(8);
        let mut c = Congestion::default();
        queue(&mut s, 6);
        assert_eq!(c.after_enqueue(&s, t0), Hint::Set);
        assert_eq!(c.reset(), Hint::Clear);
        assert_eq!(c.reset(), Hint::Keep);
        s.detach();
        queue(&mut s, 1);
        assert_eq!(
            c.after_enqueue(&s, t0),
            Hint::Keep,
            "never congested while detached"
        );
    }

    #[test]
    fn rate_limit_waits_for_the_deficit() {
        let t0 = Instant::now();
        let mut limit = InboundLimit::new(1000, 0, t0).expect("limited");
        assert_eq!(limit.resume_at(t0), None);
        limit.bytes -= 1500.0;
        let resume = limit.resume_at(t0).expect("over the limit");
        assert_eq!(resume, t0 + Duration::from_millis(500));
        assert_eq!(limit.resume_at(resume), None);
        assert!(InboundLimit::new(0, 0, t0).is_none());
    }
}
