//! A session answer that comes after its session left this node (`docs/CLUSTER.md`, "A late
//! answer goes on to where the session went"): this node claimed client C's session from node
//! n2 and waited for n2's answer, gave up waiting (n2 dead past the wait), and then handed its
//! own, newer session of C on to node n3, where C connected next. n2's answer, when it comes,
//! has nothing left here to go into: it is passed on to n3 instead of being dropped.

use crate::link::LinkContext;
use hayate_codec::QoS;
use hayate_core::cluster::PEER_CLIENT_PREFIX;
use hayate_core::handoff::HandedOver;
use hayate_core::router::RouteOutcome;
use hayate_core::{Delivery, WakeList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where sessions handed over from here went, by client identifier, for as long as a late
/// answer may still come (`dead_node_grace_secs`: a claim waits that long in a dead node's
/// peer session).
#[derive(Debug, Default)]
pub(crate) struct HandedTo {
    went: Mutex<HashMap<Arc<str>, Went>>,
}

#[derive(Debug, Clone)]
struct Went {
    /// The node the session went to.
    node: Arc<str>,
    /// Its claim's `at`.
    at: u64,
    /// Forgotten then.
    until: Instant,
}

/// Records kept at most (the oldest go first).
const MAX_RECORDS: usize = 100_000;

impl HandedTo {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Went>> {
        self.went.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `client_id`'s session went to `node` on its claim made `at`.
    pub(crate) fn record(&self, client_id: &str, node: &Arc<str>, at: u64, until: Instant) {
        let mut went = self.lock();
        if went.len() >= MAX_RECORDS {
            let now = Instant::now();
            went.retain(|_, w| w.until > now);
            if went.len() >= MAX_RECORDS {
                if let Some(oldest) = went
                    .iter()
                    .min_by_key(|(_, w)| w.until)
                    .map(|(client, _)| client.clone())
                {
                    went.remove(&oldest);
                }
            }
        }
        went.insert(
            Arc::from(client_id),
            Went {
                node: node.clone(),
                at,
                until,
            },
        );
    }

    /// Where `client_id`'s session went, and on which claim, if that is still remembered.
    fn get(&self, client_id: &str, now: Instant) -> Option<(Arc<str>, u64)> {
        let mut went = self.lock();
        match went.get(client_id) {
            Some(w) if w.until > now => Some((w.node.clone(), w.at)),
            Some(_) => {
                went.remove(client_id);
                None
            }
            None => None,
        }
    }
}

/// A session handed over to this node for `client_id`, which has no session here any more:
/// queued, as a forwarded `$cluster/session`, in the peer session of the node this node handed
/// the client's session to last; dropped (and logged) when there is none.
pub(crate) fn pass_on(
    ctx: &LinkContext,
    from: &str,
    client_id: &str,
    handed: HandedOver,
    now: Instant,
    wake: &mut WakeList,
) {
    let subscriptions = handed.subscriptions.len();
    let messages = handed.deliveries.len();
    let target = ctx.handed_to.get(client_id, now).and_then(|(node, at)| {
        let peer = ctx
            .broker
            .registry
            .get(&format!("{PEER_CLIENT_PREFIX}{node}"))?;
        Some((node, at, peer))
    });
    let Some((node, at, peer)) = target else {
        tracing::warn!(
            client_id,
            %from,
            subscriptions,
            messages,
            "cluster_session_answer_dropped"
        );
        return;
    };
    let message = crate::control::answer_message(client_id, at, Some(&handed), true, now);
    let delivery = Delivery::new(Arc::new(message), QoS::AtLeastOnce, false);
    let mut outcome = RouteOutcome::default();
    ctx.broker
        .router
        .deliver(&peer, delivery, now, wake, &mut outcome);
    tracing::info!(client_id, %from, to = %node, subscriptions, messages, "cluster_session_answer_passed_on");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_record_is_kept_until_its_time() {
        let handed_to = HandedTo::default();
        let now = Instant::now();
        let n3: Arc<str> = Arc::from("n3");
        handed_to.record("c", &n3, 7, now + Duration::from_secs(60));
        assert_eq!(handed_to.get("c", now), Some((n3.clone(), 7)));
        assert_eq!(handed_to.get("other", now), None);
        assert_eq!(handed_to.get("c", now + Duration::from_secs(61)), None);
        assert_eq!(handed_to.get("c", now), None, "forgotten once past");
    }
}
