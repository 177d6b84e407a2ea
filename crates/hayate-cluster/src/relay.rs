//! The claiming node's side of the relay after a handover (`docs/CLUSTER.md`, "Relay after a
//! handover"): taking a session over, it stops its direct copies from the other nodes reaching
//! the session, and has each of them mark, behind what it routed to the old node, the end of
//! what the old node must relay. A node's mark coming back here lets its copies through again.

use crate::control::{queue_for_node, Mark, SessionAnswer};
use crate::link::LinkContext;
use hayate_codec::QoS;
use hayate_core::cluster::{ClusterRoutes, Fence, PEER_CLIENT_PREFIX};
use hayate_core::{Arrival, Broker, WakeList};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Marks each link still has to publish on its node, kept until it is connected to publish
/// them (a mark missed would leave the old node relaying, and this one suppressing, until
/// their deadlines).
#[derive(Debug)]
pub(crate) struct MarkBoard {
    pending: Mutex<HashMap<Arc<str>, Posted>>,
    changed: watch::Sender<u64>,
    /// Sessions that marked when their client subscribed (`fence`), by client identifier,
    /// with the claim's `at` and the nodes the fence was for.
    fenced: Mutex<HashMap<Arc<str>, Fenced>>,
}

/// A fence run here: its claim's `at`, and the nodes it was for.
type Fenced = (u64, Vec<Arc<str>>);

/// Marks waiting for one node's link, with when they were posted.
type Posted = Vec<(Mark, Instant)>;

/// Marks kept per node at most (the oldest go first; they are useless after the relay's
/// deadline anyway).
const MARKS_PER_NODE: usize = 10_000;

impl MarkBoard {
    pub(crate) fn new() -> MarkBoard {
        MarkBoard {
            pending: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            fenced: Mutex::new(HashMap::new()),
        }
    }

    /// Wakes a link when marks were posted.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn post(&self, mark: &Mark, nodes: &[Arc<str>], now: Instant) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for node in nodes {
                let marks = pending.entry(node.clone()).or_default();
                if marks.len() >= MARKS_PER_NODE {
                    marks.remove(0);
                }
                marks.push((mark.clone(), now));
            }
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether `client_id`'s session here marked, when it subscribed, for the claim `at` or a
    /// later one whose fence was for node `old` (and forgets it). A later claim's fence covers
    /// `old`'s late answer to an earlier claim of the same client here: every node marked for
    /// `old` when the client subscribed, so `old` relays only what came before
    /// (`docs/CLUSTER.md`, "A fence of a later claim").
    fn take_fenced(&self, client_id: &str, at: u64, old: &str) -> bool {
        let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        let covered = fenced
            .get(client_id)
            .is_some_and(|(fence_at, away)| *fence_at >= at && away.iter().any(|n| &**n == old));
        if covered {
            fenced.remove(client_id);
        }
        covered
    }

    /// The marks waiting to be published on `node`, those younger than `max_age`.
    pub(crate) fn take(&self, node: &str, now: Instant, max_age: Duration) -> Vec<Mark> {
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node)
            .unwrap_or_default();
        taken
            .into_iter()
            .filter(|(_, posted)| now.duration_since(*posted) < max_age)
            .map(|(mark, _)| mark)
            .collect()
    }
}

/// The node that had `answer`'s session (and the one that passed it on, if another) answered:
/// what it had is merged, so the client's QoS 2 resends held for its ids go on
/// (`hayate_core` `channel/resend_hold.rs`). Call after the take-over.
fn inbound_qos2_ids_answered(broker: &Broker, answer: &SessionAnswer, sender: &str) {
    broker.inbound_qos2_ids_answered(&answer.client_id, sender);
    if let Some(origin) = &answer.origin {
        broker.inbound_qos2_ids_answered(&answer.client_id, origin);
    }
}

/// Takes over the session in `answer`, which node `old` handed over here: first suppresses
/// what every other node forwards for it (the old node relays that until the node's mark),
/// then takes it, then marks the end of what this node routed to `old` (in its peer session
/// here) and posts the mark for every other node's link. Without plain subscriptions nothing
/// is relayed and nothing is marked. The take-over and the mark in the old node's peer session
/// are one step for this node's routing (`ClusterRoutes::exclusive`): a message published
/// here goes either to `old` before the mark (relayed from there) or to the session, never
/// both, never neither.
pub(crate) fn take_over(
    ctx: &LinkContext,
    old: &Arc<str>,
    mut answer: SessionAnswer,
    now: Instant,
    wake: &mut WakeList,
) {
    let (broker, routes, self_name) = (&ctx.broker, &ctx.routes, &ctx.self_name);
    let Some(mut handed) = answer.handed.take() else {
        if answer.origin.is_none() {
            routes.fence_answered(&answer.client_id, old);
            ctx.marks.take_fenced(&answer.client_id, answer.at, old);
        }
        inbound_qos2_ids_answered(broker, &answer, old);
        return;
    };
    if !broker.has_client_session(&answer.client_id) {
        // This node handed the session on meanwhile (or it ended here).
        crate::late::pass_on(ctx, old, &answer, handed, now, wake);
        return;
    }
    // Passed on (`crate::late`): the node that answered relays to the node that passed it on
    // (which passes the copies on here), and the marks that end that relay come from here as
    // if this node had claimed the session from it. The ends of relaying go to the node that
    // passed the answer on, not here: none is expected (`RelayEnds`).
    let passed_on = answer.origin.is_some();
    let origin = answer.origin.clone();
    let old = origin.as_ref().unwrap_or(old);
    // A node the claim found away that answers before the client's first SUBSCRIBE (back
    // within `lost_node_wait_secs`) hands over as any other: no fence for it. A fence this
    // node ran for a later claim covers an answer passed on as well: every node marked for
    // the answering node then, so nothing of theirs since is in the old session, and the
    // answering node, which has their marks, relays nothing. Suppressing their copies here
    // until new marks came back lost what they routed meanwhile (the long-down soak of
    // `276d187`: 20 QoS 2 messages published on the passing node in those 6 ms).
    let fenced = if passed_on {
        ctx.marks.take_fenced(&answer.client_id, answer.at, old)
    } else {
        routes.fence_answered(&answer.client_id, old);
        ctx.marks.take_fenced(&answer.client_id, answer.at, old)
    };
    let relaying_for = std::mem::take(&mut handed.relaying_for);
    let published = handed.published;
    let client_id: Arc<str> = Arc::from(answer.client_id.as_str());
    let at = Arrival::from_nanos(answer.at);
    if fenced {
        // Every node marked when the client subscribed here: the session received their
        // copies directly since, and the old node relays only what came before.
        ctx.broker.take_over(&client_id, handed, now, wake);
        inbound_qos2_ids_answered(broker, &answer, old);
        return;
    }
    let relayed = answer.at != 0
        && handed
            .subscriptions
            .iter()
            .any(|(filter, _)| !filter.starts_with("$share/"));
    let others: Vec<Arc<str>> = routes
        .nodes()
        .into_iter()
        .filter(|node| node != old && node != self_name)
        .collect();
    let _switch = routes.exclusive();
    if let (true, Some(session)) = (relayed, broker.client_session_id(&client_id)) {
        // Half the old node's relay deadline: should a mark never come back, copies arrive
        // twice for a while rather than not at all.
        routes.suppress(
            client_id.clone(),
            session,
            at,
            others.clone(),
            now + routes.relay_timeout() / 2,
        );
    }
    let taken = broker.take_over(&client_id, handed, now, wake);
    inbound_qos2_ids_answered(broker, &answer, old);
    if !passed_on && published {
        // What the client publishes here from its CONNACK on comes after this on every link
        // from here, and the other nodes wait for the old node's notice before reading on
        // (`crate::moved`). Not for a client that never published through the old node.
        let mark = Mark {
            client_id: client_id.clone(),
            old: old.clone(),
            new: self_name.clone(),
            at: answer.at,
        };
        crate::moved::queue_taken_over(ctx, &mark, &others, now, wake);
    }
    if !relayed {
        return;
    }
    if !taken {
        for node in &others {
            routes.unsuppress(&client_id, at, node);
        }
        return;
    }
    if !passed_on {
        // What this node routed to the old node for the session before now comes back
        // relayed, and the old node queues its end for this node behind it, once this node's
        // mark (below) reaches it: this node's own copies, which reach the session directly
        // from now on, wait for that end (`docs/CLUSTER.md`, "Direct copies after a take-over").
        // At most half the relay's deadline, as the suppression above.
        broker.hold_direct_copies(&client_id, answer.at, now + routes.relay_timeout() / 2);
    }
    // The old node relays these nodes' copies until their marks, and then says so: their own
    // copies wait for that here (`RelayEnds`). Not this node's: what it routes itself cannot
    // be held back.
    let relayed_for: Vec<Arc<str>> = relaying_for
        .into_iter()
        .filter(|node| !passed_on && node != self_name && node != old)
        .collect();
    tracing::debug!(client_id = %client_id, ?relayed_for, at = answer.at, passed_on, "cluster_relay_ends_expected");
    ctx.relay_ends.expect(
        &client_id,
        old,
        &relayed_for,
        answer.at,
        now,
        now + routes.relay_timeout(),
    );
    // The node the session came from may itself still relay to it from the node before
    // (relays in a chain): that node goes on relaying this node's copies until this node's
    // mark for that take-over reaches it, and what this node routes from now on reaches the
    // session here directly. Marked here, behind what this node routed there before the
    // take-over, rather than when the old node's own post of that mark reaches this node's
    // link (later, maybe: a copy routed between the two arrived twice).
    for (upstream_old, upstream_at) in &answer.upstream_marks {
        if upstream_old == self_name {
            continue;
        }
        let mark = Mark {
            client_id: client_id.clone(),
            old: upstream_old.clone(),
            new: old.clone(),
            at: *upstream_at,
        };
        queue_mark(broker, &mark, now, wake);
        let to: Vec<Arc<str>> = others
            .iter()
            .filter(|node| *node != upstream_old)
            .cloned()
            .collect();
        ctx.marks.post(&mark, &to, now);
    }
    let mark = Mark {
        client_id,
        old: old.clone(),
        new: self_name.clone(),
        at: answer.at,
    };
    queue_mark(broker, &mark, now, wake);
    tracing::debug!(client_id = %mark.client_id, ?others, at = mark.at, upstream = ?answer.upstream_marks, "cluster_marks_posted");
    ctx.marks.post(&mark, &others, now);
}

/// Queues `mark` in the old node's peer session here, behind what this node routed to it.
fn queue_mark(broker: &Broker, mark: &Mark, now: Instant, wake: &mut WakeList) {
    let message = mark.to_message();
    queue_for_named_node(broker, &mark.old, message, QoS::ExactlyOnce, now, wake);
}

/// Queues a control message in node `node`'s peer session here, if there is one.
pub(crate) fn queue_for_named_node(
    broker: &Broker,
    node: &str,
    message: hayate_core::Message,
    qos: QoS,
    now: Instant,
    wake: &mut WakeList,
) {
    if let Some(cell) = broker.registry.get(&format!("{PEER_CLIENT_PREFIX}{node}")) {
        queue_for_node(broker, &cell, message, qos, now, wake);
    }
}

/// The other nodes than `away` (and this one).
pub(crate) fn others_than(
    routes: &ClusterRoutes,
    away: &[Arc<str>],
    self_name: &str,
) -> Vec<Arc<str>> {
    routes
        .nodes()
        .into_iter()
        .filter(|node| !away.contains(node) && **node != *self_name)
        .collect()
}

/// The fence hook (`hayate_core::cluster::fence`): a client of this node's that resumed its
/// session while some nodes could not be asked for it (`fence.away`: dead, not stopped for a
/// restart) subscribes, with a new session here. Run with the switch lock held exclusively,
/// before its subscriptions are made. For each away node it marks, in that node's peer
/// session here, from when this node's copies reach the new session directly; the other
/// nodes' copies are kept from the session until their own marks come back ([`post_fence`]
/// has them published after the route deltas): what they routed before their mark goes to the
/// old session, which the away node, back, hands over. Back, such a node keeps what comes
/// after each node's mark from the old session (it would arrive twice once that session is
/// handed over here).
pub(crate) fn run_fence(
    self_name: &Arc<str>,
    broker: &Broker,
    client_id: &Arc<str>,
    fence: &Fence,
    now: Instant,
    wake: &mut WakeList,
) {
    let Some(routes) = broker.router.cluster() else {
        return;
    };
    let others = others_than(routes, &fence.away, self_name);
    if let Some(session) = broker.client_session_id(client_id) {
        routes.suppress(
            client_id.clone(),
            session,
            fence.at,
            others,
            now + routes.relay_timeout() / 2,
        );
    }
    for old in &fence.away {
        let mark = Mark {
            client_id: client_id.clone(),
            old: old.clone(),
            new: self_name.clone(),
            at: fence.at.as_nanos(),
        };
        queue_mark(broker, &mark, now, wake);
    }
}

/// After [`run_fence`] and the SUBSCRIBE's subscriptions (their route deltas are out): posts
/// the fence's marks for every other node's link, and remembers that the session marked, so
/// that taking the old session over later suppresses nothing.
pub(crate) fn post_fence(ctx: &LinkContext, client_id: &Arc<str>, fence: &Fence, now: Instant) {
    let at = fence.at.as_nanos();
    for old in &fence.away {
        let mark = Mark {
            client_id: client_id.clone(),
            old: old.clone(),
            new: ctx.self_name.clone(),
            at,
        };
        let others = others_than(&ctx.routes, std::slice::from_ref(old), &ctx.self_name);
        tracing::debug!(%client_id, ?others, at, "cluster_fence_marks_posted");
        ctx.marks.post(&mark, &others, now);
    }
    ctx.marks
        .fenced
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(client_id.clone(), (at, fence.away.clone()));
}

/// A mark arrived on the link from `from`: for a session this node handed over (it may stop
/// relaying what `from` forwards, and then says so behind what it relayed), or the mark of one
/// of this node's take-overs coming back (what `from` forwards reaches the session again,
/// once the old node's end of relaying `from`'s copies is here too: until then the link holds
/// what `from` sends, the returned [`Hold`]). Any other node's is not ours.
pub(crate) fn on_mark(
    ctx: &LinkContext,
    from: &Arc<str>,
    mark: &Mark,
    now: Instant,
    wake: &mut WakeList,
) -> Option<Hold> {
    let at = Arrival::from_nanos(mark.at);
    tracing::debug!(%from, client_id = %mark.client_id, old = %mark.old, new = %mark.new, at = mark.at, "cluster_mark_received");
    if mark.old == ctx.self_name {
        if let Some((to, relay_at)) =
            ctx.broker
                .relay_marked(&mark.client_id, from, (at, &mark.new), now, wake)
        {
            let relay_at = relay_at.as_nanos();
            queue_relay_end(&ctx.broker, &to, &mark.client_id, from, relay_at, now, wake);
        }
    } else if mark.new == ctx.self_name {
        ctx.routes.unsuppress(&mark.client_id, at, from);
        if ctx.relay_ends.must_hold(&mark.client_id, from, mark.at) {
            return Some(Hold {
                client_id: mark.client_id.clone(),
                at: mark.at,
                until: now + ctx.relay_ends.hold,
                awaited: Awaited::RelayEnd,
            });
        }
    }
    None
}

/// The ends of relaying this node waits for, per session taken over here: the old node relays
/// each other node X's copies until X's mark reaches it, then queues a `$cluster/relayend`
/// behind them. X's own copies reach the session here once X's mark comes back here; held
/// until that end has arrived too, they come after the relayed older ones (`docs/CLUSTER.md`,
/// "Relay after a handover": order).
#[derive(Debug)]
pub(crate) struct RelayEnds {
    /// (client id, node X, claim's `at`) → whether the end arrived, and until when the entry
    /// is kept, and the old node that relays.
    waiting: Mutex<HashMap<EndKey, Expected>>,
    changed: watch::Sender<u64>,
    /// How long a link from node X holds what X sends once X's mark came back, waiting for
    /// the old node's end (`[cluster] relay_order_hold_ms`). Past it, X's copies go on (and
    /// may arrive before relayed older ones). Zero: no hold.
    hold: Duration,
}

/// Client id, node, claim's `at`.
type EndKey = (Arc<str>, Arc<str>, u64);

/// One end expected (see [`RelayEnds`]).
#[derive(Debug)]
struct Expected {
    /// The end arrived.
    done: bool,
    /// Kept until then.
    keep: Instant,
    /// The node that relays (the session's old node).
    old: Arc<str>,
}

/// What the node a session came from still relays to this node for it, when the session is
/// handed on from here: the nodes whose ends have not arrived, and the take-overs
/// (old node, claim's `at`) they belong to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Upstream {
    pub nodes: Vec<Arc<str>>,
    pub marks: Vec<(Arc<str>, u64)>,
}

impl RelayEnds {
    pub(crate) fn new(hold: Duration) -> RelayEnds {
        RelayEnds {
            waiting: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            hold,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EndKey, Expected>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The old node `old` relays `nodes`' copies for `client_id` (take-over `at`) until
    /// `until`; entries past their time are dropped.
    fn expect(
        &self,
        client_id: &Arc<str>,
        old: &Arc<str>,
        nodes: &[Arc<str>],
        at: u64,
        now: Instant,
        until: Instant,
    ) {
        let mut waiting = self.lock();
        waiting.retain(|_, expected| expected.keep > now);
        for node in nodes {
            waiting
                .entry((client_id.clone(), node.clone(), at))
                .or_insert_with(|| Expected {
                    done: false,
                    keep: until,
                    old: old.clone(),
                });
        }
    }

    /// The old node's end of relaying `node`'s copies arrived.
    pub(crate) fn ended(&self, client_id: Arc<str>, node: Arc<str>, at: u64) {
        if let Some(expected) = self.lock().get_mut(&(client_id, node, at)) {
            expected.done = true;
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Whether the link from `node` must hold what it sends until the end for `client_id`
    /// arrives (an end expected and not there yet). An end that arrived is forgotten.
    pub(crate) fn must_hold(&self, client_id: &Arc<str>, node: &Arc<str>, at: u64) -> bool {
        let key = (client_id.clone(), node.clone(), at);
        let mut waiting = self.lock();
        match waiting.get(&key).map(|expected| expected.done) {
            Some(false) => !self.hold.is_zero(),
            Some(true) => {
                waiting.remove(&key);
                false
            }
            None => false,
        }
    }

    /// What the node `client_id`'s session came from still relays here for it (ends not
    /// arrived, not past their time): a handover of the session from here waits for those
    /// nodes' ends too (`Relaying::upstream` in `hayate-core`), and the node it goes to marks
    /// those take-overs on the old node itself ([`take_over`]).
    pub(crate) fn pending(&self, client_id: &str, now: Instant) -> Upstream {
        let mut upstream = Upstream::default();
        for ((client, node, at), expected) in self.lock().iter() {
            if &**client == client_id && !expected.done && expected.keep > now {
                upstream.nodes.push(node.clone());
                upstream.marks.push((expected.old.clone(), *at));
            }
        }
        upstream.nodes.sort();
        upstream.nodes.dedup();
        upstream.marks.sort();
        upstream.marks.dedup();
        upstream
    }

    /// Wakes a held link when an end arrives.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// A link holding what its node sends, for one take-over (client, claim's `at`), until what it
/// awaits has arrived or `until`.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub client_id: Arc<str>,
    pub at: u64,
    pub until: Instant,
    pub awaited: Awaited,
}

/// What a held link waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// The old node's end of relaying the link's node's copies ([`RelayEnds`]).
    RelayEnd,
    /// The old node's `$cluster/handedover` notice (`crate::moved`): the client's messages
    /// published there come first.
    HandedOver { old: Arc<str> },
}

/// The old node's end of relaying `node`'s copies for `client_id`, queued in the new node's
/// peer session `to` here, behind what was relayed.
fn queue_relay_end(
    broker: &Broker,
    to: &Arc<hayate_core::registry::SessionCell>,
    client_id: &str,
    node: &str,
    at: u64,
    now: Instant,
    wake: &mut WakeList,
) {
    let message = crate::control::relay_end_message(client_id, node, at);
    queue_for_node(broker, to, message, QoS::AtLeastOnce, now, wake);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fence covers the answer of a node it was for, to its own claim or an earlier one of
    /// the same client here (`docs/CLUSTER.md`, "A fence of a later claim"), once.
    #[test]
    fn a_fence_covers_its_nodes_answers_to_its_claim_or_an_earlier_one() {
        let board = MarkBoard::new();
        let fence = |at| (at, vec![Arc::<str>::from("n3")]);
        let fenced = |client: &str, entry: Fenced| {
            board
                .fenced
                .lock()
                .unwrap()
                .insert(Arc::from(client), entry);
        };
        fenced("c", fence(2_000));
        assert!(!board.take_fenced("c", 1_000, "n1"), "n1 was asked");
        assert!(!board.take_fenced("c", 3_000, "n3"), "a later claim");
        assert!(board.take_fenced("c", 1_000, "n3"), "an earlier claim");
        assert!(!board.take_fenced("c", 2_000, "n3"), "once");
        fenced("d", fence(2_000));
        assert!(board.take_fenced("d", 2_000, "n3"), "its own claim");
        assert!(!board.take_fenced("e", 2_000, "n3"));
    }
}
