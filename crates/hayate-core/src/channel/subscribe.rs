//! SUBSCRIBE → SUBACK (+ retained messages) and UNSUBSCRIBE → UNSUBACK.

use super::Channel;
use crate::close::{Close, CloseReason};
use crate::registry::{SubscriptionRecord, Subscriptions};
use crate::router::SubEntry;
use crate::store::{StoreOp, SubscriptionData};
use hayate_codec::{
    Packet, Properties, ProtocolVersion, QoS, ReasonCode, SubAck, Subscribe, SubscriptionOptions,
    UnsubAck, Unsubscribe,
};
use hayate_session::{Delivery, Message, OutBuf};
use std::time::Instant;

/// Retain Handling 1: send retained messages only for a new subscription [MQTT-3.3.1-10].
const RETAIN_IF_NEW: u8 = 1;
/// Retain Handling 2: never send retained messages on subscribe [MQTT-3.3.1-11].
const RETAIN_NEVER: u8 = 2;

/// What applies to every filter of one SUBSCRIBE.
#[derive(Debug, Clone, Copy)]
struct EachFilter {
    /// Its Subscription Identifier, if any (§3.8.2.1.2).
    subscription_id: Option<u32>,
    /// Whether a new subscription catches up on messages that arrived after the SUBSCRIBE but
    /// were routed before it was in place (`docs/design/arrival-order.md`).
    catch_up: bool,
}

impl Channel {
    pub(super) fn handle_subscribe(
        &mut self,
        subscribe: Subscribe,
        now: Instant,
        out: &mut OutBuf,
    ) -> Result<(), Close> {
        let subscription_id = subscribe
            .properties
            .subscription_identifiers
            .first()
            .copied();
        let mut reason_codes = Vec::with_capacity(subscribe.filters.len());
        let mut deliveries = Vec::new();
        // A fence waiting for this client's first SUBSCRIBE runs with its subscriptions, no
        // message routed in between (`crate::cluster::fence`).
        let fenced = self.cluster_fence(now);
        let switch = fenced.as_ref().map(|(cluster, client_id, fence)| {
            let switch = cluster.exclusive();
            let mut wake = crate::router::WakeList::new();
            cluster.run_fence(&self.broker, client_id, fence, now, &mut wake);
            (switch, wake)
        });
        // A fenced SUBSCRIBE catches up on nothing: what was routed here before it went to
        // the away node's queue too, into the old session that comes back merged (caught up
        // as well, it arrived twice: docs/CLUSTER.md, "After a kill -9, past the wait").
        let each = EachFilter {
            subscription_id,
            catch_up: fenced.is_none(),
        };
        for (filter, options) in &subscribe.filters {
            let code = self.subscribe_one(filter, *options, each, now, &mut deliveries, out)?;
            reason_codes.push(code);
        }
        if let Some((switch, wake)) = switch {
            drop(switch);
            wake.iter().for_each(|doorbell| doorbell.notify_one());
        }
        if let Some((cluster, client_id, fence)) = &fenced {
            cluster.event(crate::cluster::ClusterEvent::Fenced {
                client_id: client_id.clone(),
                fence: fence.clone(),
            });
        }
        // [MQTT-3.8.4-1] SUBACK with the same packet id [MQTT-3.8.4-2]; one code per filter [MQTT-3.8.4-6] in filter order [MQTT-3.9.3-1].
        let suback = SubAck {
            packet_id: subscribe.packet_id,
            reason_codes,
            properties: Properties::default(),
        };
        let stored = self.stored_subscriptions();
        self.send_ack(stored, Packet::SubAck(suback), out);
        if !deliveries.is_empty() {
            self.with_session(out, |state, _| {
                for delivery in deliveries {
                    state.session.enqueue(delivery);
                }
            })?;
        }
        self.poll_transmit(now, out)
    }

    /// This client's fence, when it is a client of a cluster node and one waits for it.
    fn cluster_fence(
        &self,
        now: Instant,
    ) -> Option<(
        std::sync::Arc<crate::cluster::ClusterRoutes>,
        std::sync::Arc<str>,
        crate::cluster::Fence,
    )> {
        if self.listener().role != crate::ListenerRole::Clients {
            return None;
        }
        let (cluster, cell) = (self.broker.router.cluster()?, self.cell.as_ref()?);
        let fence = cluster.take_fence(&cell.client_id, now)?;
        Some((cluster.clone(), cell.client_id.clone(), fence))
    }

    fn subscribe_one(
        &mut self,
        filter: &str,
        mut options: SubscriptionOptions,
        each: EachFilter,
        now: Instant,
        deliveries: &mut Vec<Delivery>,
        out: &mut OutBuf,
    ) -> Result<ReasonCode, Close> {
        let subscription_id = each.subscription_id;
        let v5 = self.version.is_v5();
        let failure = |reason: ReasonCode| {
            if v5 {
                reason
            } else {
                ReasonCode::V3_SUBACK_FAILURE
            }
        };
        let broker = self.broker.clone();
        let limits = broker.limits();
        let shared = match hayate_topic::parse_shared(filter) {
            Ok(shared) => shared,
            Err(_) => return Ok(failure(ReasonCode::TOPIC_FILTER_INVALID)),
        };
        let inner = shared.as_ref().map_or(filter, |s| s.filter);
        if hayate_topic::validate_topic_filter(inner).is_err()
            || hayate_topic::topic_level_count(inner) > limits.max_topic_levels()
        {
            return Ok(failure(ReasonCode::TOPIC_FILTER_INVALID));
        }
        if shared.is_some() && options.no_local {
            // [MQTT-3.8.3-4] No Local on a shared subscription is a protocol error.
            return Err(self.close_with(
                ReasonCode::PROTOCOL_ERROR,
                CloseReason::SharedNoLocal,
                out,
            ));
        }
        let verdict = match &self.client {
            Some(client) if client.listener.is_cluster_internal() => Ok(()),
            // The nodes' own topics (`crate::cluster::PEER_CLIENT_PREFIX`): never a client's.
            Some(_) if inner.starts_with(crate::cluster::PEER_CLIENT_PREFIX) => {
                Err(ReasonCode::NOT_AUTHORIZED)
            }
            Some(client) => self.broker.hooks.authorize_subscribe(client, inner),
            None => Err(ReasonCode::NOT_AUTHORIZED),
        };
        if let Err(code) = verdict {
            tracing::info!(client_id = ?self.client_id(), filter, "subscribe_denied");
            crate::stats::Stats::add(&self.broker.stats.denied_subscribe, 1);
            return Ok(failure(code));
        }
        let Some(cell) = self.cell.clone() else {
            return Ok(failure(ReasonCode::UNSPECIFIED_ERROR));
        };
        let max_subscriptions = limits.max_subscriptions_per_client();
        let over_quota = self.with_session(out, |state, _| {
            !state.subscriptions.contains_key(filter)
                && state.subscriptions.len() >= max_subscriptions
        })?;
        if over_quota {
            return Ok(failure(ReasonCode::QUOTA_EXCEEDED));
        }
        // §3.8.4: grant at most the server's maximum QoS; the SUBACK shows it [MQTT-3.8.4-7].
        options.qos = options.qos.min(self.max_qos);
        if self.version != ProtocolVersion::V5 {
            // A v3 bridge (Mosquitto's bridge bit) is not sent its own messages back, which
            // would loop between two bridged brokers, and gets retain flags as published, as
            // Mosquitto does for bridges. Shared subscriptions cannot have No Local.
            let bridge = self.bridge && shared.is_none();
            options.no_local = bridge;
            options.retain_as_published = bridge;
            options.retain_handling = 0;
        }
        let record = SubscriptionRecord {
            options,
            subscription_id,
        };
        let session_id = cell.id;
        let client_id = cell.client_id.clone();
        // The index lock is taken without holding the session lock (lock order).
        let subscribed = self
            .broker
            .router
            .subscribe(filter, SubEntry { cell, record });
        let existed = subscribed.replaced;
        // Retained messages: never for shared subscriptions (§4.8.2); per Retain
        // Handling otherwise; sent with RETAIN set (§3.3.1.3; [3.1.1: MQTT-3.3.1-8]).
        let send_retained = shared.is_none()
            && options.retain_handling != RETAIN_NEVER
            && !(options.retain_handling == RETAIN_IF_NEW && existed);
        let missed = if shared.is_none() && !existed && each.catch_up {
            broker.router.missed(
                inner,
                self.arrival,
                self.client
                    .as_ref()
                    .map_or(hayate_session::Arrival::UNKNOWN, |client| client.connected),
                subscribed.version,
                session_id,
            )
        } else {
            Vec::new()
        };
        let missed = self.with_session(out, |state, _| {
            let missed: Vec<_> = missed
                .into_iter()
                .filter(|message| {
                    catch_up_wanted(message, &state.subscriptions, session_id, options)
                        && !(send_retained && message.retain && broker.retain_available())
                })
                .collect();
            state.subscriptions.insert(filter.into(), record);
            broker.persist_for(state, || StoreOp::PutSubscription {
                client_id: client_id.to_string(),
                subscription: SubscriptionData {
                    filter: filter.to_string(),
                    options: crate::persist::options_byte(record.options),
                    subscription_id: record.subscription_id,
                },
            });
            missed
        })?;
        if !existed {
            crate::stats::Stats::add(&self.broker.stats.subscriptions, 1);
        }
        let retained = if send_retained {
            broker.router.retained_matching(inner, now)
        } else {
            Vec::new()
        };
        if !missed.is_empty() {
            tracing::debug!(client_id = ?self.client_id(), filter, count = missed.len(), "arrival_catch_up");
            crate::stats::Stats::add(&broker.stats.arrival_catch_up, missed.len() as u64);
        }
        let subscription_ids: Vec<u32> = subscription_id.into_iter().collect();
        let retained = retained.into_iter().map(|message| Delivery {
            qos: message.qos.min(options.qos),
            message,
            retain: true,
            subscription_ids: subscription_ids.clone(),
            shared_group: None,
            seq: 0,
            sent_as: None,
        });
        let caught_up = missed.into_iter().map(|message| Delivery {
            qos: message.qos.min(options.qos),
            retain: options.retain_as_published && message.retain,
            message,
            subscription_ids: subscription_ids.clone(),
            shared_group: None,
            seq: 0,
            sent_as: None,
        });
        // Retained and caught-up messages are deliveries too: each is checked against the
        // subscriber's read access, when the hook has read rules.
        let reader = broker.reader();
        for delivery in retained.chain(caught_up) {
            if let (Some(hook), Some(client)) = (reader, &self.client) {
                if !hook.authorize_read(client, &delivery.message.topic) {
                    crate::stats::Stats::add(&broker.stats.denied_delivery, 1);
                    continue;
                }
            }
            deliveries.push(delivery);
        }
        Ok(match options.qos {
            QoS::AtMostOnce => ReasonCode::GRANTED_QOS_0,
            QoS::AtLeastOnce => ReasonCode::GRANTED_QOS_1,
            QoS::ExactlyOnce => ReasonCode::GRANTED_QOS_2,
        })
    }

    /// For a session in the store: a ticket covering the subscription ops just appended (the
    /// last ticket appended so far), which the SUBACK/UNSUBACK waits for.
    fn stored_subscriptions(&self) -> Option<crate::store::Ticket> {
        let attached = self.broker.attached()?;
        let persisted = self.cell.as_ref()?.state.lock().persisted;
        persisted.then(|| attached.store.appended())
    }

    pub(super) fn handle_unsubscribe(
        &mut self,
        unsubscribe: Unsubscribe,
        out: &mut OutBuf,
    ) -> Result<(), Close> {
        let mut reason_codes = Vec::with_capacity(unsubscribe.filters.len());
        let session_id = self.cell.as_ref().map_or(0, |c| c.id);
        let client_id: std::sync::Arc<str> = self
            .cell
            .as_ref()
            .map_or_else(|| "".into(), |c| c.client_id.clone());
        for filter in &unsubscribe.filters {
            let valid = match hayate_topic::parse_shared(filter) {
                Ok(Some(shared)) => hayate_topic::validate_topic_filter(shared.filter).is_ok(),
                Ok(None) => hayate_topic::validate_topic_filter(filter).is_ok(),
                Err(_) => false,
            };
            if !valid {
                reason_codes.push(ReasonCode::TOPIC_FILTER_INVALID);
                continue;
            }
            let broker = self.broker.clone();
            let recorded = self.with_session(out, |state, _| {
                let recorded = state.subscriptions.remove(filter).is_some();
                if recorded {
                    broker.persist_for(state, || StoreOp::DeleteSubscription {
                        client_id: client_id.to_string(),
                        filter: filter.to_string(),
                    });
                }
                recorded
            })?;
            let removed = self.broker.router.unsubscribe(filter, session_id);
            if removed {
                self.broker
                    .stats
                    .subscriptions
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            reason_codes.push(if recorded || removed {
                ReasonCode::SUCCESS
            } else {
                ReasonCode::NO_SUBSCRIPTION_EXISTED
            });
        }
        if !self.version.is_v5() {
            // The v3 UNSUBACK has no payload.
            reason_codes.clear();
        }
        // [MQTT-3.10.4-4] UNSUBACK with the same packet id, even when nothing matched [MQTT-3.10.4-5].
        let unsuback = UnsubAck {
            packet_id: unsubscribe.packet_id,
            reason_codes,
            properties: Properties::default(),
        };
        let stored = self.stored_subscriptions();
        self.send_ack(stored, Packet::UnsubAck(unsuback), out);
        Ok(())
    }
}

/// Whether a message a new subscription missed ([`crate::router::Router::missed`]) is to be
/// delivered through it: not back to its publisher under No Local [MQTT-3.8.3-3], and not when
/// another (non-shared) subscription of the session already matched it when it was routed.
fn catch_up_wanted(
    message: &Message,
    subscriptions: &Subscriptions,
    session_id: u64,
    options: SubscriptionOptions,
) -> bool {
    if options.no_local && message.publisher == Some(session_id) {
        return false;
    }
    !subscriptions.iter().any(|(other, _)| {
        !other.starts_with("$share/") && hayate_topic::matches_filter(other, &message.topic)
    })
}
