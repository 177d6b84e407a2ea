//! A client's messages in order across the take-over of its session (`docs/CLUSTER.md`, "A
//! publisher that moves"). What the client published on its old node A reaches a third node X
//! over A's link; what it publishes on its new node B, over B's link; nothing orders the two
//! links. When X was away, both backlogs wait for it and the newer one may come first (the kill
//! soak's reordering of 2026-11-29). So:
//!
//! - A, handing the session over, queues a `$cluster/handedover` notice in every other node's
//!   peer session here, behind what the client published here (QoS 2, as the forwarded copies
//!   it must not overtake);
//! - B, taking it over, queues a `$cluster/takenover` notice in every other node's peer session
//!   there, ahead of anything the client publishes there (QoS 1: it goes at once);
//! - X's link from B, reading B's notice before A's has arrived, holds what B sends until it
//!   has, at most `[cluster] relay_order_hold_ms` (the link's hold, `crate::relay::Hold`).
//!
//! Both notices name the take-over as a mark does ([`Mark`]: client, old node, new node, the
//! claim's `at`).

use crate::control::{Mark, HANDED_OVER_TOPIC, TAKEN_OVER_TOPIC};
use crate::link::LinkContext;
use crate::relay::{Awaited, Hold};
use hayate_codec::QoS;
use hayate_core::{Broker, WakeList};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Client id, old node, claim's `at`.
type Key = (Arc<str>, Arc<str>, u64);

/// The `$cluster/handedover` notices that arrived here, until a link waits for them or they
/// are too old to matter.
#[derive(Debug)]
pub(crate) struct HandedOverNotices {
    arrived: Mutex<Arrived>,
    changed: watch::Sender<u64>,
    /// How long a link holds for a notice (`[cluster] relay_order_hold_ms`; zero: never).
    hold: Duration,
    /// How long an arrived notice is kept.
    keep: Duration,
}

#[derive(Debug, Default)]
struct Arrived {
    keys: HashMap<Key, Instant>,
    /// In arrival order, with when each goes.
    order: VecDeque<(Key, Instant)>,
    /// Old nodes whose notice a link waited for in vain, until when links do not wait for
    /// them again: with that node's link down, every client that moved from it would hold a
    /// link for the whole deadline in turn. Ended by any notice arriving from the node.
    not_coming: HashMap<Arc<str>, Instant>,
}

/// Notices kept at most (a mass take-over past this holds some links until the deadline:
/// later, not lost).
const KEPT: usize = 100_000;

impl HandedOverNotices {
    pub(crate) fn new(hold: Duration, keep: Duration) -> HandedOverNotices {
        HandedOverNotices {
            arrived: Mutex::new(Arrived::default()),
            changed: watch::channel(0).0,
            hold,
            keep,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arrived> {
        self.arrived.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The old node's notice for `mark`'s take-over arrived.
    pub(crate) fn arrived(&self, mark: &Mark, now: Instant) {
        let key: Key = (mark.client_id.clone(), mark.old.clone(), mark.at);
        {
            let mut arrived = self.lock();
            while let Some((old_key, until)) = arrived.order.front().cloned() {
                if until > now && arrived.order.len() < KEPT {
                    break;
                }
                arrived.order.pop_front();
                // Unless the same take-over's notice came again since.
                if arrived.keys.get(&old_key) == Some(&until) {
                    arrived.keys.remove(&old_key);
                }
            }
            arrived.not_coming.remove(&mark.old);
            let until = now + self.keep;
            arrived.keys.insert(key.clone(), until);
            arrived.order.push_back((key, until));
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether a link must still wait for the old node's notice of this take-over; one that
    /// arrived is forgotten.
    pub(crate) fn must_hold(
        &self,
        client_id: &Arc<str>,
        old: &Arc<str>,
        at: u64,
        now: Instant,
    ) -> bool {
        let key: Key = (client_id.clone(), old.clone(), at);
        let mut arrived = self.lock();
        if arrived.keys.remove(&key).is_some() {
            return false;
        }
        let given_up = arrived
            .not_coming
            .get(old)
            .is_some_and(|until| *until > now);
        !self.hold.is_zero() && !given_up
    }

    /// A link waited for `old`'s notice until the deadline: links do not wait for that node's
    /// notices again until one arrives (or `keep` passed).
    pub(crate) fn gave_up(&self, old: &Arc<str>, now: Instant) {
        let mut arrived = self.lock();
        arrived.not_coming.retain(|_, until| *until > now);
        arrived.not_coming.insert(old.clone(), now + self.keep);
    }

    /// Wakes a held link when a notice arrives.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// On the old node, as it hands `client_id`'s session over to `new` on the claim `at` (under
/// the switch lock, `control::answer_claim`): the notice, in every other node's peer session
/// here, behind what the client published here.
pub(crate) fn queue_handed_over(
    ctx: &LinkContext,
    client_id: &str,
    new: &Arc<str>,
    at: u64,
    now: Instant,
    wake: &mut WakeList,
) {
    if at == 0 {
        return;
    }
    let mark = Mark {
        client_id: client_id.into(),
        old: ctx.self_name.clone(),
        new: new.clone(),
        at,
    };
    let to = crate::relay::others_than(&ctx.routes, std::slice::from_ref(new), &ctx.self_name);
    queue_notice(
        &ctx.broker,
        &mark,
        HANDED_OVER_TOPIC,
        QoS::ExactlyOnce,
        &to,
        now,
        wake,
    );
}

/// On the new node, as it takes the session over (`relay::take_over`, before the client's
/// CONNACK): the notice, in every other node's peer session here, ahead of anything the
/// client publishes here.
pub(crate) fn queue_taken_over(
    ctx: &LinkContext,
    mark: &Mark,
    to: &[Arc<str>],
    now: Instant,
    wake: &mut WakeList,
) {
    if mark.at != 0 {
        queue_notice(
            &ctx.broker,
            mark,
            TAKEN_OVER_TOPIC,
            QoS::AtLeastOnce,
            to,
            now,
            wake,
        );
    }
}

fn queue_notice(
    broker: &Broker,
    mark: &Mark,
    topic: &'static str,
    qos: QoS,
    to: &[Arc<str>],
    now: Instant,
    wake: &mut WakeList,
) {
    for node in to {
        let message = mark.to_notice(topic, qos);
        crate::relay::queue_for_named_node(broker, node, message, qos, now, wake);
    }
}

/// The new node's `$cluster/takenover` arrived on the link from `from`: what `from` sends from
/// here on may be the client's newer messages, so the link holds until the old node's notice is
/// here (unless this is the old node: what the client published here was routed here first).
pub(crate) fn on_taken_over(
    ctx: &LinkContext,
    from: &Arc<str>,
    mark: &Mark,
    now: Instant,
) -> Option<Hold> {
    if mark.old == ctx.self_name || mark.new != *from {
        return None;
    }
    if !ctx
        .handed_over
        .must_hold(&mark.client_id, &mark.old, mark.at, now)
    {
        return None;
    }
    tracing::debug!(%from, client_id = %mark.client_id, old = %mark.old, at = mark.at, "cluster_link_holds_for_handed_over");
    Some(Hold {
        client_id: mark.client_id.clone(),
        at: mark.at,
        until: now + ctx.handed_over.hold,
        awaited: Awaited::HandedOver {
            old: mark.old.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(client: &str, at: u64) -> Mark {
        Mark {
            client_id: client.into(),
            old: "n1".into(),
            new: "n2".into(),
            at,
        }
    }

    #[test]
    fn a_link_waits_only_for_a_notice_not_arrived() {
        let notices = HandedOverNotices::new(Duration::from_secs(3), Duration::from_secs(30));
        let now = Instant::now();
        let (client, old): (Arc<str>, Arc<str>) = ("c".into(), "n1".into());
        assert!(notices.must_hold(&client, &old, 7, now));
        notices.arrived(&mark("c", 7), now);
        // Another take-over of the same client is another notice.
        assert!(notices.must_hold(&client, &old, 8, now));
        assert!(!notices.must_hold(&client, &old, 7, now));
        // Forgotten once waited for.
        assert!(notices.must_hold(&client, &old, 7, now));
    }

    #[test]
    fn a_node_whose_notice_did_not_come_is_not_waited_for_until_one_does() {
        let notices = HandedOverNotices::new(Duration::from_secs(3), Duration::from_secs(30));
        let now = Instant::now();
        let (old, other): (Arc<str>, Arc<str>) = ("n1".into(), "n4".into());
        notices.gave_up(&old, now);
        assert!(!notices.must_hold(&"c".into(), &old, 7, now));
        assert!(notices.must_hold(&"c".into(), &other, 7, now));
        // Until `keep` passed, or a notice from it arrives.
        assert!(notices.must_hold(&"c".into(), &old, 7, now + Duration::from_secs(31)));
        notices.arrived(&mark("d", 9), now);
        assert!(notices.must_hold(&"c".into(), &old, 7, now));
    }

    #[test]
    fn no_hold_when_configured_off() {
        let notices = HandedOverNotices::new(Duration::ZERO, Duration::from_secs(30));
        assert!(!notices.must_hold(&"c".into(), &"n1".into(), 7, Instant::now()));
    }

    #[test]
    fn notices_go_when_too_old_or_too_many() {
        let notices = HandedOverNotices::new(Duration::from_secs(3), Duration::from_secs(30));
        let start = Instant::now();
        notices.arrived(&mark("old", 1), start);
        // The next arrival past the first's time drops it.
        notices.arrived(&mark("new", 2), start + Duration::from_secs(31));
        let later = start + Duration::from_secs(31);
        assert!(notices.must_hold(&"old".into(), &"n1".into(), 1, later));
        assert!(!notices.must_hold(&"new".into(), &"n1".into(), 2, later));
        for i in 0..(KEPT as u64 + 10) {
            notices.arrived(&mark("many", i), start + Duration::from_secs(40));
        }
        let arrived = notices.lock();
        assert!(arrived.keys.len() <= KEPT, "{}", arrived.keys.len());
        assert!(arrived.order.len() <= KEPT);
    }
}
