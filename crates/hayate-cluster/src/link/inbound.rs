//! A control message from the other node on a link (`$cluster/` topics, `crate::control`):
//! claims, answers, relayed copies and the marks and notices that keep them in order. Handled
//! here and acknowledged; it never reaches the ingress.

use super::Link;
use crate::client::NodeClient;
use crate::control::{
    answer_claim, decode_answer, decode_relay, decode_relay_end, Answer, Claim, Mark, CLAIM_TOPIC,
    HANDED_OVER_TOPIC, MARK_TOPIC, RELAY_END_TOPIC, RELAY_TOPIC, SESSION_TOPIC, TAKEN_OVER_TOPIC,
};
use crate::ClusterError;
use hayate_codec::{Packet, PubResp, Publish, QoS};
use std::time::Instant;

impl Link {
    /// A message from the other node's cluster task: a claim (a client of that node's wants
    /// its session from here), or the answer to one of this node's claims (a session handed
    /// over). Acknowledged here once handled (it never reaches the ingress).
    pub(super) fn on_control(
        &mut self,
        client: &mut NodeClient,
        publish: Publish,
        now: Instant,
    ) -> Result<(), ClusterError> {
        if publish.topic.as_str() == SESSION_TOPIC {
            match decode_answer(&publish, now) {
                Some(answer) => {
                    // Taken here, before the link hands in the next message: those that the
                    // other node forwarded for the client after the handover find its
                    // subscriptions in place.
                    let client_id = answer.client_id.clone();
                    let passed_on = answer.origin.is_some();
                    let origin = answer.origin.clone().unwrap_or_else(|| self.peer.clone());
                    // (An answer without its claim's `at`, from an older node, cannot be told
                    // from another.)
                    let first = answer.at == 0
                        || self.ctx.late.first(
                            &client_id,
                            &origin,
                            answer.at,
                            now,
                            now + self.ctx.grace,
                        );
                    if first {
                        let mut wake = hayate_core::WakeList::new();
                        crate::relay::take_over(&self.ctx, &self.peer, answer, now, &mut wake);
                        for doorbell in wake {
                            doorbell.notify_one();
                        }
                    } else {
                        // Came again (the link dropped before it was acknowledged).
                        tracing::info!(peer = %self.peer, %client_id, %origin, "cluster_session_answer_again");
                    }
                    // Passed on, it answers no claim of this node's.
                    if !passed_on {
                        let answer = Answer {
                            from: self.peer.clone(),
                            client_id,
                        };
                        if self.ctx.answers.try_send(answer).is_err() {
                            tracing::warn!(peer = %self.peer, "cluster_answer_dropped");
                        }
                    }
                }
                None => tracing::warn!(peer = %self.peer, "cluster_session_undecodable"),
            }
        } else if publish.topic.as_str() == RELAY_TOPIC {
            match decode_relay(&publish, now) {
                Some((client_id, deliveries)) => {
                    if tracing::enabled!(tracing::Level::DEBUG) {
                        let payloads: Vec<String> = deliveries
                            .iter()
                            .map(|d| {
                                let p = &d.message.payload;
                                String::from_utf8_lossy(&p[..p.len().min(24)]).into_owned()
                            })
                            .collect();
                        tracing::debug!(peer = %self.peer, %client_id, ?payloads, "cluster_relay_received");
                    }
                    let mut wake = hayate_core::WakeList::new();
                    if let Err(dropped) = self
                        .ctx
                        .broker
                        .deliver_relayed(&client_id, deliveries, now, &mut wake)
                    {
                        if !crate::late::pass_on_relay(
                            &self.ctx, &client_id, &publish, now, &mut wake,
                        ) {
                            self.dropped.count(
                                &self.ctx.broker,
                                &self.peer,
                                &client_id,
                                dropped.len(),
                                now,
                            );
                        }
                    }
                    for doorbell in wake {
                        doorbell.notify_one();
                    }
                }
                None => tracing::warn!(peer = %self.peer, "cluster_relay_undecodable"),
            }
        } else if publish.topic.as_str() == RELAY_END_TOPIC {
            match decode_relay_end(&publish) {
                Some((client_id, node, at)) => {
                    let mut wake = hayate_core::WakeList::new();
                    self.ctx
                        .broker
                        .upstream_relay_ended(&client_id, &node, now, &mut wake);
                    if node == self.ctx.self_name {
                        // This node's own copies (`relay::take_over`'s hold).
                        self.ctx
                            .broker
                            .release_direct_copies(&client_id, at, &mut wake);
                    }
                    for doorbell in wake {
                        doorbell.notify_one();
                    }
                    self.ctx.relay_ends.ended(client_id, node, at)
                }
                None => tracing::warn!(peer = %self.peer, "cluster_relay_end_malformed"),
            }
        } else if publish.topic.as_str() == HANDED_OVER_TOPIC {
            match Mark::from_publish(&publish) {
                Some(mark) => self.ctx.handed_over.arrived(&mark, now),
                None => tracing::warn!(peer = %self.peer, "cluster_handed_over_malformed"),
            }
        } else if publish.topic.as_str() == TAKEN_OVER_TOPIC {
            match Mark::from_publish(&publish) {
                Some(mark) => {
                    let hold = crate::moved::on_taken_over(&self.ctx, &self.peer, &mark, now);
                    self.set_hold(hold);
                }
                None => tracing::warn!(peer = %self.peer, "cluster_taken_over_malformed"),
            }
        } else if publish.topic.as_str() == MARK_TOPIC {
            match Mark::from_publish(&publish) {
                Some(mark) => {
                    let mut wake = hayate_core::WakeList::new();
                    let hold = crate::relay::on_mark(&self.ctx, &self.peer, &mark, now, &mut wake);
                    self.set_hold(hold);
                    for doorbell in wake {
                        doorbell.notify_one();
                    }
                }
                None => tracing::warn!(peer = %self.peer, "cluster_mark_malformed"),
            }
        } else if publish.topic.as_str() == CLAIM_TOPIC {
            if *self.ctx.shutdown.borrow() {
                // Shutting down: a session handed over now would leave its relay with this
                // process, and what the other node queued for the client here after the
                // claim would find nothing when this node is back. Unacknowledged, the claim
                // comes again when the link resumes its session after the restart.
                tracing::info!(peer = %self.peer, "cluster_claim_left_for_restart");
                return Ok(());
            }
            match Claim::from_publish(&publish) {
                Some(claim) if claim.clean_start => {
                    answer_claim(&self.ctx, &self.peer, &claim, now)
                }
                Some(claim) => {
                    // The part of the session's queue on disk only is read back first (it
                    // goes with the session); the answer follows when it is in memory.
                    let ctx = self.ctx.clone();
                    let peer = self.peer.clone();
                    let client_id = claim.client_id.clone();
                    self.ctx.broker.prepare_hand_over(
                        &client_id,
                        Box::new(move || answer_claim(&ctx, &peer, &claim, Instant::now())),
                    );
                }
                None => tracing::warn!(peer = %self.peer, "cluster_claim_malformed"),
            }
        } else {
            tracing::warn!(peer = %self.peer, topic = %publish.topic, "cluster_control_unknown");
        }
        match (publish.qos, publish.packet_id) {
            (QoS::AtLeastOnce, Some(id)) => client.queue(&Packet::PubAck(PubResp::new(id))),
            (QoS::ExactlyOnce, Some(id)) => {
                self.control_rel.insert(id.get());
                client.queue(&Packet::PubRec(PubResp::new(id)))
            }
            _ => Ok(()),
        }
    }
}
