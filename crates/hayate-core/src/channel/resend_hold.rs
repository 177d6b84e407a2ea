//! A QoS 2 PUBLISH sent again (DUP) by a client whose older session could not be asked for
//! when it connected here (its node away past the wait): the old session may have routed the
//! message already, its PUBREC lost with that node, and only the old session's inbound QoS 2
//! ids, which come with that node's answer, tell. Routed at once, it was delivered twice (the
//! long-down soak's QoS 2 duplicates, `docs/CLUSTER.md`, "A QoS 2 message sent again past the
//! wait"). So it is held, unacknowledged, and the client is not read, until:
//! - the away node answered (`ClusterRoutes::inbound_qos2_ids_answered`): the PUBLISH is
//!   handled again; an id the old session had is now known here and acknowledged without
//!   routing [MQTT-4.3.3-10], any other is routed;
//! - the record's time ran out (`[cluster] resent_qos2_hold_secs`): routed, at least once;
//! - the client's input ended: dropped unacknowledged; the client sends it again on its next
//!   connection.
//!
//! States: none → holding (the PUBLISH, its deadline) → none. While holding, the read gate is
//! paused (`gate.rs`) until the deadline; the answer that ends the wait rings the connection's
//! doorbell (`Broker::inbound_qos2_ids_answered`), and the gate is looked at again then.

use super::{Channel, Phase};
use crate::close::Close;
use crate::hooks::ListenerRole;
use crate::router::WakeList;
use hayate_codec::{Publish, QoS};
use hayate_session::OutBuf;
use std::time::Instant;

/// A held resend and when it goes on at the latest.
#[derive(Debug)]
pub(super) struct ResendHold {
    publish: Box<Publish>,
    until: Instant,
}

impl Channel {
    /// `Some(publish)` to handle it now; `None` when it is held (see the module docs).
    pub(super) fn hold_unknown_resend(
        &mut self,
        publish: Publish,
        now: Instant,
    ) -> Option<Publish> {
        let (QoS::ExactlyOnce, Some(id), true) = (publish.qos, publish.packet_id, publish.dup)
        else {
            return Some(publish);
        };
        if self.listener().role != ListenerRole::Clients || self.input_ended {
            return Some(publish);
        }
        let Some(cluster) = self.broker.router.cluster() else {
            return Some(publish);
        };
        let client_id = self.client_id().unwrap_or_default();
        let Some(until) = cluster.inbound_qos2_unknown_until(client_id, now) else {
            return Some(publish);
        };
        let known = self
            .cell
            .as_ref()
            .is_some_and(|cell| cell.state.lock().session.knows_inbound_qos2(id));
        if known {
            // Sent to this node before: acknowledged again as usual.
            return Some(publish);
        }
        tracing::info!(client_id, packet_id = id.get(), "qos2_resend_held");
        crate::stats::Stats::add(&self.broker.stats.qos2_resends_held, 1);
        self.rare_mut().resend = Some(ResendHold {
            publish: Box::new(publish),
            until,
        });
        None
    }

    /// True while a resend is held.
    pub(super) fn holds_resend(&self) -> bool {
        self.rare
            .as_deref()
            .is_some_and(|rare| rare.resend.is_some())
    }

    /// Looks at a held resend at `now`: `Some(until)` while it stays held (look again then at
    /// the latest); `None` when nothing is held any more (the PUBLISH was handled).
    pub(super) fn poll_resend_hold(
        &mut self,
        now: Instant,
        out: &mut OutBuf,
        wake: &mut WakeList,
    ) -> Result<Option<Instant>, Close> {
        let Some(hold) = self.rare.as_deref().and_then(|rare| rare.resend.as_ref()) else {
            return Ok(None);
        };
        let client_id = self.client_id().unwrap_or_default();
        let unknown = self
            .broker
            .router
            .cluster()
            .and_then(|cluster| cluster.inbound_qos2_unknown_until(client_id, now));
        if unknown.is_some() && now < hold.until && self.phase == Phase::Connected {
            return Ok(Some(hold.until));
        }
        let Some(hold) = self.take_rare(|rare| rare.resend.take()) else {
            return Ok(None);
        };
        if self.phase != Phase::Connected {
            return Ok(None);
        }
        tracing::info!(
            client_id = ?self.client_id(),
            packet_id = hold.publish.packet_id.map(|id| id.get()),
            answered = unknown.is_none(),
            "qos2_resend_released"
        );
        self.handle_publish(*hold.publish, now, out, wake)?;
        Ok(None)
    }

    /// The client's input ended with a resend held: it is dropped unacknowledged (the client
    /// still has it and sends it again on its next connection).
    pub(super) fn drop_resend_hold(&mut self) {
        if let Some(hold) = self.take_rare(|rare| rare.resend.take()) {
            tracing::info!(
                client_id = ?self.client_id(),
                packet_id = hold.publish.packet_id.map(|id| id.get()),
                "qos2_resend_dropped_at_close"
            );
        }
    }
}
