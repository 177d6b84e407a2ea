//! An answer, or relayed copies, that come for a session after it left this node
//! (`docs/CLUSTER.md`, "A late answer goes on to where the session went"). This node claimed
//! client C's session from node n2 and waited for n2's answer, gave up waiting (n2 dead past
//! `lost_node_wait_secs`), and then handed its own, newer session of C on to node n3, where C
//! connected next. n2's answer, when it comes, has nothing left here to go into, and neither
//! has what n2 then relays: both are passed on to n3, the node this node handed C's session
//! to last, instead of being dropped.
//!
//! A `$cluster/session` is acknowledged once handled and comes again when the link drops
//! before the acknowledgement: [`LateAnswers::first`] keeps one from being merged (or passed
//! on) twice.

use crate::control::{answer_message, queue_for_node, SessionAnswer};
use crate::link::LinkContext;
use hayate_codec::{Publish, QoS};
use hayate_core::cluster::PEER_CLIENT_PREFIX;
use hayate_core::handoff::HandedOver;
use hayate_core::registry::SessionCell;
use hayate_core::{Broker, Stats, WakeList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many times an answer, or a relayed copy, is passed on at most: a record of where a
/// session went may be stale (the session came back and left again), and passing on must not
/// go round in a loop.
pub(crate) const MAX_HOPS: u8 = 2;

/// Records kept per map at most (the oldest go first).
const MAX_RECORDS: usize = 100_000;

/// Where sessions handed over from here went, and which answers were handled here, for as
/// long as a late answer may still come (`dead_node_grace_secs`: a claim waits that long in
/// a dead node's peer session). In memory only: a restarted node passes nothing on.
#[derive(Debug, Default)]
pub(crate) struct LateAnswers {
    went: Mutex<HashMap<Arc<str>, Went>>,
    /// Answers handled here → kept until.
    handled: Mutex<HashMap<AnswerKey, Instant>>,
}

/// An answer: client id, answering node, claim's `at`.
type AnswerKey = (Arc<str>, Arc<str>, u64);

#[derive(Debug, Clone)]
struct Went {
    /// The node the session went to.
    node: Arc<str>,
    /// Forgotten then.
    until: Instant,
}

/// Makes room in `map` for one more entry: drops those past their time, then the one that
/// would go first.
fn make_room<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    until: impl Fn(&V) -> Instant,
    now: Instant,
) {
    if map.len() < MAX_RECORDS {
        return;
    }
    map.retain(|_, v| until(v) > now);
    if map.len() >= MAX_RECORDS {
        if let Some(oldest) = map
            .iter()
            .min_by_key(|(_, v)| until(v))
            .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }
}

impl LateAnswers {
    /// `client_id`'s session went to `node`.
    pub(crate) fn record(&self, client_id: &str, node: &Arc<str>, now: Instant, until: Instant) {
        let mut went = self.went.lock().unwrap_or_else(|e| e.into_inner());
        make_room(&mut went, |w| w.until, now);
        went.insert(
            Arc::from(client_id),
            Went {
                node: node.clone(),
                until,
            },
        );
    }

    /// Where `client_id`'s session went, if that is still remembered.
    fn went(&self, client_id: &str, now: Instant) -> Option<Arc<str>> {
        let mut went = self.went.lock().unwrap_or_else(|e| e.into_inner());
        match went.get(client_id) {
            Some(w) if w.until > now => Some(w.node.clone()),
            Some(_) => {
                went.remove(client_id);
                None
            }
            None => None,
        }
    }

    /// True the first time the answer of `origin` to `client_id`'s claim made `at` is seen
    /// (until `until`), false when it comes again.
    pub(crate) fn first(
        &self,
        client_id: &str,
        origin: &Arc<str>,
        at: u64,
        now: Instant,
        until: Instant,
    ) -> bool {
        let mut handled = self.handled.lock().unwrap_or_else(|e| e.into_inner());
        let key = (Arc::from(client_id), origin.clone(), at);
        if handled.get(&key).is_some_and(|keep| *keep > now) {
            return false;
        }
        make_room(&mut handled, |keep| *keep, now);
        handled.insert(key, until);
        true
    }
}

/// The node `client_id`'s session went to last, with its peer session here.
fn destination(
    ctx: &LinkContext,
    client_id: &str,
    now: Instant,
) -> Option<(Arc<str>, Arc<SessionCell>)> {
    let node = ctx.late.went(client_id, now)?;
    let peer = ctx
        .broker
        .registry
        .get(&format!("{PEER_CLIENT_PREFIX}{node}"))?;
    Some((node, peer))
}

/// The session in `answer` (`handed`), which `from` handed over to this node for a client
/// that has no session here any more: queued, as a forwarded `$cluster/session` (one hop
/// more, the same answering node and claim), in the peer session of the node this node
/// handed the client's session to last; dropped (and logged) when there is none or the
/// answer has gone [`MAX_HOPS`] already.
pub(crate) fn pass_on(
    ctx: &LinkContext,
    from: &str,
    answer: &SessionAnswer,
    handed: HandedOver,
    now: Instant,
    wake: &mut WakeList,
) {
    let client_id = answer.client_id.as_str();
    let (subscriptions, messages) = (handed.subscriptions.len(), handed.deliveries.len());
    let target = (answer.hops < MAX_HOPS)
        .then(|| destination(ctx, client_id, now))
        .flatten();
    let Some((node, peer)) = target else {
        tracing::warn!(
            client_id,
            %from,
            subscriptions,
            messages,
            hops = answer.hops,
            "cluster_session_answer_dropped"
        );
        return;
    };
    let forwarded = crate::control::Forwarded {
        origin: answer.origin.as_deref().unwrap_or(from),
        hops: answer.hops + 1,
    };
    // The original claim's `at`: with the answering node, it names the answer.
    let message = answer_message(
        client_id,
        answer.at,
        Some(&handed),
        &[],
        Some(&forwarded),
        now,
    );
    queue_for_node(&ctx.broker, &peer, message, QoS::AtLeastOnce, now, wake);
    tracing::info!(client_id, %from, to = %node, subscriptions, messages, "cluster_session_answer_passed_on");
}

/// A `$cluster/relay` for `client_id`, which has no session here, relaying or not: passed on
/// as it is (one hop more) to the node this node handed the client's session to last.
/// Returns false when there is no such node (or the copy has gone [`MAX_HOPS`] already).
pub(crate) fn pass_on_relay(
    ctx: &LinkContext,
    client_id: &str,
    publish: &Publish,
    now: Instant,
    wake: &mut WakeList,
) -> bool {
    let hops = crate::control::hops(publish);
    if hops >= MAX_HOPS {
        return false;
    }
    let Some((_, peer)) = destination(ctx, client_id, now) else {
        return false;
    };
    let message = crate::control::relay_passed_on(publish, hops + 1);
    queue_for_node(&ctx.broker, &peer, message, QoS::AtLeastOnce, now, wake);
    true
}

/// How often a link logs the relayed copies it dropped, at most.
const DROP_LOG_EVERY: Duration = Duration::from_secs(10);

/// Relayed copies a link brought for a session this node no longer has, relaying or not, and
/// could not pass on ([`pass_on_relay`]): each is counted (`Stats::cluster_relayed_dropped`),
/// and the link logs `relayed_without_session` at most once per [`DROP_LOG_EVERY`], with the
/// count since its last line, so that a node flooded with such copies does not flood its log.
#[derive(Debug, Default)]
pub(crate) struct DroppedRelays {
    logged: Option<Instant>,
    since: u64,
}

impl DroppedRelays {
    /// `n` copies for `client_id` from `peer` dropped at `now`; true when a line was logged.
    pub(crate) fn count(
        &mut self,
        broker: &Broker,
        peer: &str,
        client_id: &str,
        n: usize,
        now: Instant,
    ) -> bool {
        Stats::add(&broker.stats.cluster_relayed_dropped, n as u64);
        self.since += n as u64;
        if self
            .logged
            .is_some_and(|logged| now.duration_since(logged) < DROP_LOG_EVERY)
        {
            return false;
        }
        tracing::warn!(
            peer,
            client_id,
            dropped = self.since,
            "relayed_without_session"
        );
        self.logged = Some(now);
        self.since = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_relays_are_all_counted_and_logged_at_most_once_per_period() {
        let now = Instant::now();
        let broker = Broker::new(
            hayate_core::BrokerConfig::default(),
            Arc::new(hayate_core::StaticPolicy::default()),
            now,
        );
        let mut dropped = DroppedRelays::default();
        assert!(
            dropped.count(&broker, "n2", "c", 3, now),
            "the first is logged"
        );
        assert!(!dropped.count(&broker, "n2", "c", 2, now + Duration::from_secs(1)));
        assert!(!dropped.count(&broker, "n2", "d", 4, now + Duration::from_secs(9)));
        assert_eq!(dropped.since, 6, "counted for the next line");
        assert!(dropped.count(&broker, "n2", "c", 1, now + Duration::from_secs(10)));
        assert_eq!(dropped.since, 0);
        assert_eq!(Stats::get(&broker.stats.cluster_relayed_dropped), 10);
    }

    #[test]
    fn a_record_is_kept_until_its_time() {
        let late = LateAnswers::default();
        let now = Instant::now();
        let n3: Arc<str> = Arc::from("n3");
        late.record("c", &n3, now, now + Duration::from_secs(60));
        assert_eq!(late.went("c", now), Some(n3.clone()));
        assert_eq!(late.went("other", now), None);
        assert_eq!(late.went("c", now + Duration::from_secs(61)), None);
        assert_eq!(late.went("c", now), None, "forgotten once past");
    }

    #[test]
    fn an_answer_is_handled_once_while_it_is_remembered() {
        let late = LateAnswers::default();
        let now = Instant::now();
        let until = now + Duration::from_secs(60);
        let n2: Arc<str> = Arc::from("n2");
        assert!(late.first("c", &n2, 7, now, until));
        assert!(
            !late.first("c", &n2, 7, now, until),
            "the same answer again"
        );
        assert!(late.first("c", &n2, 8, now, until), "another claim");
        assert!(
            late.first("c", &Arc::from("n3"), 7, now, until),
            "another node"
        );
        assert!(late.first("d", &n2, 7, now, until), "another client");
        let later = now + Duration::from_secs(61);
        assert!(late.first("c", &n2, 7, later, later + Duration::from_secs(60)));
    }
}
