//! Inbound PUBLISH: validation, QoS 1/2 acknowledgement, authorisation, routing.

use super::Channel;
use crate::broker::forwardable_properties;
use crate::close::{Close, CloseReason};
use crate::config::SharedStrategy;
use crate::hooks::ListenerRole;
use crate::router::WakeList;
use crate::stats::Stats;
use hayate_codec::{PacketType, Publish, QoS, ReasonCode};
use hayate_session::{InboundPublish, Message, OutBuf, PeerScope};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Channel {
    pub(super) fn handle_publish(
        &mut self,
        publish: Publish,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<(), Close> {
        self.broker
            .stats
            .publish_received
            .count(publish.qos, publish.payload.len());
        let broker = self.broker.clone();
        let retain_available = broker.retain_available();
        let max_topic_levels = broker.limits().max_topic_levels();
        let strategy = broker.router.strategy();
        if publish.qos > self.max_qos {
            // [MQTT-3.2.2-11] a QoS above the announced Maximum QoS.
            return Err(self.close_with(
                ReasonCode::QOS_NOT_SUPPORTED,
                CloseReason::QosNotSupported,
                out,
            ));
        }
        if !publish.properties.subscription_identifiers.is_empty()
            && self.listener().role != ListenerRole::PeerIngress
        {
            // [MQTT-3.3.4-6] a PUBLISH from a client must not carry a Subscription Identifier.
            return Err(self.close_with(
                ReasonCode::PROTOCOL_ERROR,
                CloseReason::SubscriptionIdInPublish,
                out,
            ));
        }
        if publish.retain && !retain_available {
            // [MQTT-3.2.2-14]
            return Err(self.close_with(
                ReasonCode::RETAIN_NOT_SUPPORTED,
                CloseReason::RetainNotSupported,
                out,
            ));
        }
        // A QoS 2 resend whose older session's node has not answered yet waits for it.
        let Some(mut publish) = self.hold_unknown_resend(publish, now) else {
            return Ok(());
        };
        let inbound = match self.with_session(out, |state, _| {
            state.session.handle_inbound_publish(&mut publish)
        })? {
            Ok(inbound) => inbound,
            Err(error) => {
                tracing::info!(client_id = ?self.client_id(), %error, "protocol_violation");
                return Err(self.close_with(
                    error.reason_code(),
                    CloseReason::ProtocolViolation,
                    out,
                ));
            }
        };
        // [MQTT-3.3.2-2] no wildcards in a topic name; [MQTT-4.7.3-1] not empty.
        let levels_ok = hayate_topic::topic_level_count(&publish.topic) <= max_topic_levels;
        if hayate_topic::validate_topic_name(&publish.topic).is_err() || !levels_ok {
            self.forget_qos2(&publish, out);
            return Err(self.close_with(
                ReasonCode::TOPIC_NAME_INVALID,
                CloseReason::InvalidTopicName,
                out,
            ));
        }
        // Checked first: nothing of this runs per message while debug logging is off.
        if tracing::enabled!(tracing::Level::DEBUG)
            && publish.qos != QoS::AtMostOnce
            && (publish.dup || self.listener().role != ListenerRole::PeerIngress)
        {
            // Every QoS 1/2 PUBLISH of a client, and every one a node link sends again, in the
            // order they arrive (`known`: a QoS 2 id already there, so the message is not
            // routed again): the order and exactly-once across a move or a restart rest on
            // them, so a soak traces them (with `qos2_pubrel` in `hayate_core::channel`).
            tracing::debug!(
                client_id = ?self.client_id(),
                qos = publish.qos as u8,
                packet_id = publish.packet_id.map(|id| id.get()),
                dup = publish.dup,
                known = inbound == InboundPublish::DuplicateQos2,
                "publish_received"
            );
        }
        if inbound == InboundPublish::DuplicateQos2 {
            // [MQTT-4.3.3-10] acknowledge again, never route twice.
            self.acknowledge(&publish, ReasonCode::SUCCESS, None, out);
            return Ok(());
        }

        // §3.3.2.3.2: the server may check a payload declared to be UTF-8.
        if publish.properties.payload_format_indicator == Some(1)
            && std::str::from_utf8(&publish.payload).is_err()
            && self.version.is_v5()
        {
            self.refuse_publish(&publish, ReasonCode::PAYLOAD_FORMAT_INVALID, out);
            return Ok(());
        }
        let allowed = match &self.client {
            Some(client) if client.listener.is_cluster_internal() => true,
            // The nodes' own topics (`crate::cluster::PEER_CLIENT_PREFIX`): never a client's.
            Some(_)
                if publish
                    .topic
                    .starts_with(crate::cluster::PEER_CLIENT_PREFIX) =>
            {
                false
            }
            Some(client) => self.broker.hooks.authorize_publish(client, &publish.topic),
            None => false,
        };
        if !allowed {
            tracing::info!(client_id = ?self.client_id(), topic = %publish.topic, "publish_denied");
            Stats::add(&self.broker.stats.denied_publish, 1);
            if self.version.is_v5() {
                self.refuse_publish(&publish, ReasonCode::NOT_AUTHORIZED, out);
            } else if self.broker.hooks.disconnect_v3_on_denied_publish() {
                // Configured to close v3 connections that publish where they may not (the
                // only refusal a v3 client notices).
                self.forget_qos2(&publish, out);
                return Err(self.close_with(
                    ReasonCode::NOT_AUTHORIZED,
                    CloseReason::PublishDenied,
                    out,
                ));
            } else {
                // v3 cannot say no: acknowledge and drop [3.1.1: MQTT-3.3.5-2].
                self.acknowledge(&publish, ReasonCode::SUCCESS, None, out);
            }
            return Ok(());
        }

        let split_refusal = self.listener().role == ListenerRole::Clients
            && self
                .broker
                .router
                .cluster()
                .is_some_and(|cluster| cluster.refuses_publish());
        if publish.qos != QoS::AtMostOnce && split_refusal {
            return self.refuse_during_split(&publish, out);
        }
        if publish.qos != QoS::AtMostOnce
            && self
                .broker
                .attached()
                .is_some_and(|attached| !attached.store.accepting())
        {
            return self.refuse_unstorable(&publish, out);
        }

        let expires_at = publish
            .properties
            .message_expiry_interval
            .map(|secs| now + Duration::from_secs(u64::from(secs)));
        let publisher = self.cell.as_ref().map(|c| c.id);
        let message = Message::new(
            publish.topic.clone(),
            publish.payload.clone(),
            publish.qos,
            publish.retain,
            forwardable_properties(&publish.properties),
            expires_at,
            publisher,
        )
        .with_arrival(self.arrival);
        let message = if self.listener().role == ListenerRole::PeerIngress {
            let ids = &publish.properties.subscription_identifiers;
            // The ingress of the link from node N is `$cluster/in/N`.
            let node = self
                .client_id()
                .and_then(|id| id.strip_prefix(crate::cluster::INGRESS_CLIENT_PREFIX))
                .unwrap_or_default();
            let scope = match self.broker.router.cluster() {
                Some(cluster) => cluster.scope_from(node, ids, now),
                None => PeerScope::default(),
            };
            message.forwarded_by_peer(Arc::new(scope))
        } else {
            message
        };
        let message = match (&self.client, strategy) {
            (Some(client), SharedStrategy::HashClientId) => {
                message.with_publisher_key(hayate_session::publisher_key(&client.client_id))
            }
            _ => message,
        };
        // A QoS 2 message's queue entries and its inbound id are stored all or none.
        let group = (publish.qos == QoS::ExactlyOnce)
            .then(|| broker.attached().map(|attached| attached.group()))
            .flatten();
        if self.broker.router.cluster().is_some() {
            if let Some(cell) = &self.cell {
                // Before routing: a handover that takes the switch lock after this message was
                // routed sees the flag (`SessionCell::published`).
                if !cell.published.load(std::sync::atomic::Ordering::Relaxed) {
                    cell.published
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        let outcome = self.broker.publish(Arc::new(message), now, wake);
        if outcome.delivered == 0 && outcome.dropped == 0 && outcome.denied == 0 {
            Stats::add(&self.broker.stats.publish_no_subscribers, 1);
        }
        let mut stored = outcome.stored;
        if let (QoS::ExactlyOnce, Some(id)) = (publish.qos, publish.packet_id) {
            let (_, ticket) =
                self.with_session_ticket(out, |state, _| state.session.inbound_qos2_routed(id))?;
            stored = stored.max(ticket);
        }
        drop(group);
        if let Some(congested) = outcome.congested {
            self.wait_on(congested);
        }
        let reason = if outcome.delivered == 0 && outcome.dropped == 0 && self.version.is_v5() {
            ReasonCode::NO_MATCHING_SUBSCRIBERS
        } else {
            ReasonCode::SUCCESS
        };
        self.acknowledge(&publish, reason, stored, out);
        Ok(())
    }

    /// PUBACK for QoS 1 [MQTT-4.3.2-4], PUBREC for QoS 2 [MQTT-4.3.3-8], nothing for QoS 0;
    /// held while `stored` (the store ticket of what the PUBLISH changed) is not durable.
    fn acknowledge(
        &mut self,
        publish: &Publish,
        reason: ReasonCode,
        stored: Option<crate::store::Ticket>,
        out: &mut OutBuf,
    ) {
        let Some(packet_id) = publish.packet_id else {
            return;
        };
        let reason = if self.version.is_v5() {
            reason
        } else {
            ReasonCode::SUCCESS
        };
        let packet_type = match publish.qos {
            QoS::AtMostOnce => return,
            QoS::AtLeastOnce => PacketType::PubAck,
            QoS::ExactlyOnce => PacketType::PubRec,
        };
        self.send_pub_resp(stored, packet_type, packet_id, reason, out);
    }

    /// Refuses a v5 publish with an error reason; for QoS 2 the flow ends there, so the packet
    /// id is free again [MQTT-4.3.3-9]. The refusal waits for nothing the store does: the id
    /// was recorded and forgotten in this same packet, and a refused message is not kept.
    fn refuse_publish(&mut self, publish: &Publish, reason: ReasonCode, out: &mut OutBuf) {
        self.forget_qos2(publish, out);
        self.acknowledge(publish, reason, None, out);
    }

    /// A QoS 1/2 PUBLISH while the store cannot write (a full disk): it could never be
    /// acknowledged, so v5 gets 0x97 Quota exceeded (§3.4.2.1) and a v3 connection, which
    /// cannot be told, is closed. So is a connection with acknowledgements held for the store:
    /// the refusal would have to wait behind them [MQTT-4.6.0-2], and they cannot be sent
    /// while nothing is stored (the client sends those messages again when it reconnects).
    /// QoS 0 and deliveries go on.
    fn refuse_unstorable(&mut self, publish: &Publish, out: &mut OutBuf) -> Result<(), Close> {
        Stats::add(&self.broker.stats.store_refused, 1);
        tracing::debug!(client_id = ?self.client_id(), "publish_refused_store_unavailable");
        if self.version.is_v5() && !self.holds_acks() {
            self.refuse_publish(publish, ReasonCode::QUOTA_EXCEEDED, out);
            return Ok(());
        }
        self.forget_qos2(publish, out);
        Err(self.close_with(
            ReasonCode::QUOTA_EXCEEDED,
            CloseReason::StoreUnavailable,
            out,
        ))
    }

    /// A QoS 1/2 PUBLISH while the cluster may be split and `allow_publish_during_netsplit` is
    /// off: refused (v5) or the connection closed (v3), never acknowledged.
    fn refuse_during_split(&mut self, publish: &Publish, out: &mut OutBuf) -> Result<(), Close> {
        tracing::debug!(client_id = ?self.client_id(), "publish_refused_cluster_split");
        if self.version.is_v5() && !self.holds_acks() {
            self.refuse_publish(publish, ReasonCode::QUOTA_EXCEEDED, out);
            return Ok(());
        }
        self.forget_qos2(publish, out);
        Err(self.close_with(ReasonCode::QUOTA_EXCEEDED, CloseReason::ClusterSplit, out))
    }

    fn forget_qos2(&mut self, publish: &Publish, out: &mut OutBuf) {
        if let (QoS::ExactlyOnce, Some(id)) = (publish.qos, publish.packet_id) {
            tracing::debug!(client_id = ?self.client_id(), packet_id = id.get(), "qos2_id_forgotten");
            let _ = self.with_session(out, |state, _| state.session.forget_inbound_qos2(id));
        }
    }
}
