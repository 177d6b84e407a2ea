//! The broker's side of persistence (`docs/design/persistence.md`): turning changes to retained
//! messages and persistent sessions into [`StoreOp`]s, and rebuilding them from a
//! [`Recovered`] store at start.
//!
//! Rules (the states of one client id's record):
//! - a session is written (`PutSession`, `persisted` set) when a connection takes it with a
//!   non-zero Session Expiry Interval, and written again with its disconnection time when the
//!   connection leaves it;
//! - its subscriptions are written as they change while `persisted` is set;
//! - it is deleted (`DeleteSession`, subscriptions included) when it ends while it is still the
//!   registry's session for its client id, or when a clean start replaces it;
//! - retained messages are written when stored or removed, except broker-made ones (`$SYS`),
//!   which are made again after a restart. Expired retained messages are dropped at restore.
//!
//! The store keeps its order, so ops are appended while the lock that orders the change in
//! memory is held (the session's lock, the retained tree's lock).

use crate::broker::Broker;
use crate::registry::{SessionCell, SessionState, SubscriptionRecord};
use crate::router::SubEntry;
use crate::store::{Recovered, SessionRecord, Store, StoreOp, SubscriptionData};
use bytes::BytesMut;
use hayate_codec::{Packet, ProtocolVersion, Publish, QoS, SubscriptionOptions};
use hayate_session::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store attached to a broker, with the broker clock's relation to the wall clock (stored
/// times are milliseconds since the Unix epoch; the core only has `Instant`s).
#[derive(Debug)]
pub struct Attached {
    pub(crate) store: Arc<dyn Store>,
    base: Instant,
    base_unix_ms: u64,
}

impl Attached {
    /// `at` on the wall clock, in milliseconds since the Unix epoch.
    pub(crate) fn unix_ms(&self, at: Instant) -> u64 {
        let offset = at.saturating_duration_since(self.base).as_millis() as u64;
        let before = self.base.saturating_duration_since(at).as_millis() as u64;
        (self.base_unix_ms + offset).saturating_sub(before)
    }

    /// The broker-clock instant of `unix_ms`.
    fn instant(&self, unix_ms: u64) -> Instant {
        if unix_ms >= self.base_unix_ms {
            self.base + Duration::from_millis(unix_ms - self.base_unix_ms)
        } else {
            self.base
                .checked_sub(Duration::from_millis(self.base_unix_ms - unix_ms))
                .unwrap_or(self.base)
        }
    }
}

/// What [`Broker::restore`] rebuilt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Retained messages put back.
    pub retained: usize,
    /// Retained messages dropped: expired, or unreadable.
    pub retained_dropped: usize,
    /// Sessions put back (disconnected, expiry clock running).
    pub sessions: usize,
    /// Sessions that expired while the broker was down (deleted from the store).
    pub sessions_expired: usize,
    /// Subscriptions put back.
    pub subscriptions: usize,
}

impl Broker {
    /// Attaches `store`: from now on changes to retained messages and persistent sessions are
    /// appended to it. `now` and `now_unix_ms` are the same moment on the broker's clock and
    /// on the wall clock. Returns false (and attaches nothing) when a store is already attached.
    pub fn attach_store(&self, store: Arc<dyn Store>, now: Instant, now_unix_ms: u64) -> bool {
        self.persistence
            .set(Attached {
                store,
                base: now,
                base_unix_ms: now_unix_ms,
            })
            .is_ok()
    }

    pub(crate) fn attached(&self) -> Option<&Attached> {
        self.persistence.get()
    }

    /// Rebuilds retained messages and disconnected persistent sessions from `recovered` (call
    /// once, after [`Broker::attach_store`] and before serving). Time a session spent with the
    /// broker down counts against its expiry; a session whose connection was still open when
    /// the broker stopped counts as disconnected at restart.
    pub fn restore(&self, recovered: Recovered, now: Instant) -> Restored {
        let mut report = Restored::default();
        let Some(attached) = self.attached() else {
            return report;
        };
        let now_ms = attached.unix_ms(now);
        for (topic, expires_at_ms, publish) in recovered.retained {
            if expires_at_ms.is_some_and(|at| at <= now_ms) {
                report.retained_dropped += 1;
                attached.store.append(StoreOp::DeleteRetained { topic });
                continue;
            }
            match decode_retained(&publish, expires_at_ms.map(|at| attached.instant(at))) {
                Some(message) => {
                    let _ = self.router.retain(&Arc::new(message), None);
                    report.retained += 1;
                }
                None => {
                    tracing::warn!(topic, "stored_retained_unreadable");
                    report.retained_dropped += 1;
                }
            }
        }
        self.stats.retained.store(
            self.router.retained_count() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        for (record, subscriptions) in recovered.sessions {
            let down_ms = now_ms.saturating_sub(record.disconnected_at_ms.unwrap_or(now_ms));
            let left = match record.expiry_interval {
                u32::MAX => None,
                secs => match (u64::from(secs) * 1000).checked_sub(down_ms) {
                    Some(left) if left > 0 => Some(Duration::from_millis(left)),
                    _ => {
                        report.sessions_expired += 1;
                        attached.store.append(StoreOp::DeleteSession {
                            client_id: record.client_id,
                        });
                        continue;
                    }
                },
            };
            report.subscriptions += self.restore_session(&record, subscriptions, left, now);
            report.sessions += 1;
        }
        report
    }

    /// Puts one disconnected session back with its subscriptions; returns how many
    /// subscriptions were installed.
    fn restore_session(
        &self,
        record: &SessionRecord,
        subscriptions: Vec<SubscriptionData>,
        left: Option<Duration>,
        now: Instant,
    ) -> usize {
        let client_id: Arc<str> = Arc::from(record.client_id.as_str());
        let limits = self.session_limits();
        let cell = self
            .registry
            .open(&client_id, true, || {
                hayate_session::Session::with_shared_limits(limits)
            })
            .cell;
        let mut installed = 0;
        for data in subscriptions {
            let Some(record) = subscription_record(&data) else {
                continue;
            };
            let entry = SubEntry {
                cell: cell.clone(),
                record,
            };
            if !self.router.subscribe(&data.filter, entry).replaced {
                installed += 1;
            }
            cell.state
                .lock()
                .subscriptions
                .insert(data.filter.as_str().into(), record);
        }
        crate::stats::Stats::add(&self.stats.subscriptions, installed as u64);
        let mut state = cell.state.lock();
        state.expiry_interval = record.expiry_interval;
        state.persisted = true;
        if let Some(left) = left {
            self.schedule_expiry(&cell, state.epoch, now + left);
        }
        installed
    }

    /// Appends a `PutSession` for `cell` (called with its state locked). `disconnected_at`:
    /// when its connection left, `None` while connected.
    pub(crate) fn persist_session(
        &self,
        cell: &SessionCell,
        state: &mut SessionState,
        disconnected_at: Option<Instant>,
    ) {
        let Some(attached) = self.attached() else {
            return;
        };
        state.persisted = true;
        attached.store.append(StoreOp::PutSession(SessionRecord {
            client_id: cell.client_id.to_string(),
            expiry_interval: state.expiry_interval,
            protocol: state.protocol,
            disconnected_at_ms: disconnected_at.map(|at| attached.unix_ms(at)),
        }));
    }

    /// Appends `op` for a persisted session (called with its state locked).
    pub(crate) fn persist_for(&self, state: &SessionState, op: impl FnOnce() -> StoreOp) {
        if state.persisted {
            if let Some(attached) = self.attached() {
                attached.store.append(op());
            }
        }
    }
}

/// The store op for a retained message being stored (or removed, empty payload), or `None`
/// for broker-made messages.
pub(crate) fn retained_op(attached: &Attached, message: &Message) -> Option<StoreOp> {
    message.publisher?;
    let topic = message.topic.to_string();
    if message.payload.is_empty() {
        return Some(StoreOp::DeleteRetained { topic });
    }
    let publish = Publish {
        dup: false,
        qos: message.qos,
        retain: true,
        topic: message.topic.clone(),
        packet_id: (message.qos != QoS::AtMostOnce).then_some(hayate_codec::PacketId::MIN),
        properties: message.properties.clone(),
        payload: message.payload.clone(),
    };
    let mut buf = BytesMut::new();
    hayate_codec::encode(&Packet::Publish(publish), ProtocolVersion::V5, &mut buf).ok()?;
    Some(StoreOp::PutRetained {
        topic,
        expires_at_ms: message.expires_at.map(|at| attached.unix_ms(at)),
        publish: buf.freeze(),
    })
}

/// A retained message from its stored PUBLISH.
fn decode_retained(publish: &[u8], expires_at: Option<Instant>) -> Option<Message> {
    let mut buf = BytesMut::from(publish);
    match hayate_codec::decode(&mut buf, ProtocolVersion::V5, u32::MAX) {
        Ok(Some(Packet::Publish(p))) => Some(Message::new(
            p.topic,
            p.payload,
            p.qos,
            true,
            p.properties,
            expires_at,
            // Not broker-made: a message a client published (No Local never matches it now).
            Some(0),
        )),
        _ => None,
    }
}

/// The SUBSCRIBE options byte (§3.8.3.1) of `options`.
pub(crate) fn options_byte(options: SubscriptionOptions) -> u8 {
    options.qos as u8
        | u8::from(options.no_local) << 2
        | u8::from(options.retain_as_published) << 3
        | (options.retain_handling & 0b11) << 4
}

/// The stored subscription `data` as the core holds it; `None` if its options are invalid.
fn subscription_record(data: &SubscriptionData) -> Option<SubscriptionRecord> {
    let qos = match data.options & 0b11 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        2 => QoS::ExactlyOnce,
        _ => return None,
    };
    Some(SubscriptionRecord {
        options: SubscriptionOptions {
            qos,
            no_local: data.options & 0b100 != 0,
            retain_as_published: data.options & 0b1000 != 0,
            retain_handling: (data.options >> 4) & 0b11,
        },
        subscription_id: data.subscription_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_byte_round_trips() {
        for byte in 0u8..0b11_1111 {
            if byte & 0b11 == 3 || byte >> 4 == 3 {
                continue;
            }
            let data = SubscriptionData {
                filter: "a/#".into(),
                options: byte,
                subscription_id: None,
            };
            let record = subscription_record(&data).expect("valid");
            assert_eq!(options_byte(record.options), byte);
        }
    }
}
