//! A session moving between nodes of a cluster (`docs/CLUSTER.md`, "Sessions"): the node that
//! has it hands it over when its client connects to another node, and that node takes it.

use crate::cluster::{ClusterRoutes, SessionKind, PEER_CLIENT_PREFIX};
use crate::registry::{DeferredClaims, Handover, Relaying, SessionCell, SubscriptionRecord};
use crate::router::{RouteOutcome, SubEntry, WakeList};
use crate::store::{StoreOp, SubscriptionData};
use crate::Broker;
use hayate_session::{Arrival, Delivery};
use std::sync::Arc;
use std::time::Instant;

/// A claim being answered (`Broker::hand_over`).
#[derive(Debug)]
pub struct Claiming<'a> {
    /// The claim starts a new session: nothing is handed over.
    pub clean_start: bool,
    /// When the claiming connection's CONNECT arrived.
    pub at: Arrival,
    /// The claiming node's peer session here.
    pub to: Option<&'a Arc<SessionCell>>,
    /// Nodes whose copies for the session another node still relays here (see
    /// `Relaying::upstream`).
    pub upstream: Vec<Arc<str>>,
}

/// What a session held when it was handed over.
#[derive(Debug, Default)]
pub struct HandedOver {
    /// Its subscriptions (full filter text, `$share/...` included).
    pub subscriptions: Vec<(Box<str>, SubscriptionRecord)>,
    /// What it still owed its client, in order: in flight (marked possibly sent), then
    /// queued.
    pub deliveries: Vec<Delivery>,
    /// Packet ids of the client's QoS 2 messages routed and waiting for PUBREL: a
    /// retransmission to the new node is acknowledged, not routed again [MQTT-4.3.3-10].
    pub inbound_qos2: Vec<u16>,
    /// Packet ids of QoS 2 messages to the client whose PUBREC came and PUBCOMP not, in send
    /// order: the new node sends their PUBREL again [MQTT-4.4.0-1] (a client that hands the
    /// message to its application at PUBREL has not delivered it yet).
    pub released: Vec<u16>,
    /// The nodes whose copies for the session the handing node relays until their marks
    /// (`Handover::Relaying`); each one's end of relaying follows the relayed copies
    /// (`docs/CLUSTER.md`, "Relay after a handover": order).
    pub relaying_for: Vec<Arc<str>>,
    /// The client published through the handing node (`SessionCell::published`): the
    /// handover is announced so that its messages stay in order (`docs/CLUSTER.md`, "A
    /// publisher that moves").
    pub published: bool,
    /// The session was made on the handing node only to wait for its own claim, and no client
    /// was told of it (`SessionState::unconfirmed`): it holds nothing.
    pub unconfirmed: bool,
}

impl HandedOver {
    /// Nothing to hand over.
    pub fn is_empty(&self) -> bool {
        self.subscriptions.is_empty()
            && self.deliveries.is_empty()
            && self.inbound_qos2.is_empty()
            && self.released.is_empty()
    }

    /// The claiming node's CONNACK may say Session Present for it: false for a session made
    /// only to wait for a claim (`docs/CLUSTER.md`, "A session made only to wait").
    pub fn counts_as_present(&self) -> bool {
        !self.unconfirmed
    }
}

impl Broker {
    /// Call before [`Broker::hand_over`]: when `client_id`'s session here has part of its
    /// queue on disk only (a stored session that is offline, or holds more than its resident
    /// limit), reads that part back into memory first, then calls `done` (on the store's
    /// thread); otherwise calls `done` at once. Until then the session goes on receiving; what
    /// arrives meanwhile stays in memory, so the handover takes it too.
    ///
    /// While the session here waits for its own claim's answers (its CONNACK is held,
    /// `Handover::Awaited`), nothing is handed over yet: `done` is held until the wait ends
    /// (every node answered, or the cluster gave up waiting), so that a session another node
    /// hands over to this one meanwhile goes on with it instead of finding it gone
    /// (`docs/CLUSTER.md`, "A claim that comes while the session waits for its own").
    pub fn prepare_hand_over(&self, client_id: &str, done: Box<dyn FnOnce() + Send>) {
        let Some(done) = self.defer_claim(client_id, done) else {
            return;
        };
        match (self.persistence.get(), self.registry.get(client_id)) {
            (Some(attached), Some(cell)) if cell.kind == SessionKind::Client => {
                attached.load_for_handover(&cell, done)
            }
            _ => done(),
        }
    }

    /// Holds `done` in `client_id`'s session while it waits for its claim's answers; returns
    /// it when the session does not wait.
    fn defer_claim(
        &self,
        client_id: &str,
        done: Box<dyn FnOnce() + Send>,
    ) -> Option<Box<dyn FnOnce() + Send>> {
        let Some(cell) = self.registry.get(client_id) else {
            return Some(done);
        };
        if cell.kind != SessionKind::Client {
            return Some(done);
        }
        let mut state = cell.state.lock();
        match &mut state.handover {
            Handover::Awaited(awaited) if !awaited.answered => {
                awaited.claims.0.push(done);
                tracing::info!(client_id, "cluster_claim_held_for_own_claim");
                None
            }
            _ => Some(done),
        }
    }

    /// Answers the claims held while `client_id`'s session waited (see
    /// [`Broker::prepare_hand_over`]).
    pub(crate) fn answer_held_claims(&self, client_id: &str, claims: DeferredClaims) {
        for done in claims.0 {
            self.prepare_hand_over(client_id, done);
        }
    }

    /// The client `client_id` connected to another node at `claimed_at`: disconnects its
    /// connection here, if any (Session taken over, [MQTT-3.1.4-3]), ends its session here and
    /// returns what the session held (nothing when `clean_start`). `None` when there is no
    /// session here, or when the connection here arrived after the claim (the later
    /// connection wins; the other node hands over to this one).
    ///
    /// `to`: the claiming node's peer session here. Before the session's subscriptions leave
    /// this node's router, that peer session subscribes to its plain (non-shared) filters, so
    /// a message published here meanwhile goes to the claiming node instead of nowhere (the
    /// handover travels first on the same link, so it is there before them).
    pub fn hand_over(
        &self,
        client_id: &str,
        claim: Claiming<'_>,
        now: Instant,
        wake: &mut WakeList,
    ) -> Option<HandedOver> {
        let Claiming {
            clean_start,
            at: claimed_at,
            to,
            upstream,
        } = claim;
        let to = to.filter(|peer| peer.kind == SessionKind::Peer);
        if let (Some(cluster), Some(to)) = (self.router.cluster(), to) {
            note_later_claim(cluster, client_id, to, claimed_at);
        }
        let cell = self.registry.get(client_id)?;
        if cell.kind != SessionKind::Client {
            return None;
        }
        // What other nodes still forward here for the session goes on to `to` (see
        // `Handover::Relaying`); relaying ends once every node linked now marked its end.
        let relay = match (self.router.cluster(), to) {
            (Some(cluster), Some(to)) if !clean_start && cluster.relays_enabled() => {
                Some(Relaying {
                    to: to.clone(),
                    waiting: relay_waiting(cluster, to, cell.id, claimed_at),
                    upstream,
                    deadline: now + cluster.relay_timeout(),
                    at: claimed_at,
                    later: Vec::new(),
                })
            }
            _ => None,
        };
        let (handed, doorbell, relaying) = {
            let mut state = cell.state.lock();
            if state.ended || matches!(state.handover, Handover::Relaying(_)) {
                return None;
            }
            let newer_here = state.owner != 0
                && claimed_at.is_known()
                && state
                    .client
                    .as_ref()
                    .is_some_and(|client| client.connected > claimed_at);
            if newer_here {
                return None;
            }
            state.owner = 0;
            let doorbell = state.doorbell.take();
            let left_on_disk = state.session.spilled();
            if left_on_disk > 0 && !clean_start {
                // Only when `prepare_hand_over` was skipped or gave up (memory budget).
                tracing::warn!(client_id, left_on_disk, "handover_without_stored_queue");
            }
            let mut handed = if clean_start {
                HandedOver::default()
            } else {
                HandedOver {
                    subscriptions: state
                        .subscriptions
                        .iter()
                        .map(|(filter, record)| (filter.clone(), *record))
                        .collect(),
                    released: state.session.released_ids(),
                    deliveries: state.session.take_all_deliveries(),
                    inbound_qos2: state.session.inbound_qos2_ids(),
                    relaying_for: Vec::new(),
                    published: cell.published.load(std::sync::atomic::Ordering::Relaxed),
                    unconfirmed: state.unconfirmed,
                }
            };
            // Under the same lock as the deliveries taken: a forwarded message either went
            // with the session or is relayed, never both, never neither.
            // Every node marked already (the claimant's client subscribed there while this
            // node was away, and the answer waited for the stored queue): nothing more can
            // arrive to relay.
            let relaying = match relay {
                Some(relay)
                    if !(relay.waiting.is_empty() && relay.upstream.is_empty())
                        && handed.subscriptions.iter().any(|(f, _)| !is_shared(f)) =>
                {
                    handed.relaying_for = relay.waiting.clone();
                    state.handover = Handover::Relaying(Box::new(relay));
                    true
                }
                _ => false,
            };
            (handed, doorbell, relaying)
        };
        if let Some(doorbell) = doorbell {
            doorbell.notify_one();
        }
        if let Some(peer) = to {
            for (filter, _) in &handed.subscriptions {
                if !is_shared(filter) {
                    self.add_subscription(peer, filter, peer_record());
                }
            }
        }
        if relaying {
            self.start_relay(&cell, now, wake);
        } else {
            self.end_session(&cell, now, wake);
        }
        tracing::info!(
            client_id,
            subscriptions = handed.subscriptions.len(),
            messages = handed.deliveries.len(),
            inbound_qos2 = ?handed.inbound_qos2,
            relaying,
            "session_handed_over"
        );
        Some(handed)
    }

    /// Queues `delivery` (the answer to another node's claim) in that node's peer session
    /// `peer`, to be sent only once the store holds everything appended so far: the removal of
    /// the session just handed over ([`Broker::hand_over`]) is on disk before the claimant
    /// takes the session, so a node killed right after answering does not restore the session
    /// and hand it over a second time (`docs/CLUSTER.md`, "A handover that outlives a kill").
    /// The rest of the peer session's output waits with it (one store commit). Without a
    /// store it is queued as is.
    pub fn deliver_behind_store(
        &self,
        peer: &Arc<SessionCell>,
        delivery: Delivery,
        now: Instant,
        wake: &mut WakeList,
    ) {
        if let Some(attached) = self.attached() {
            let ticket = attached.store.appended();
            if ticket > 0 && !peer.state.lock().session.hold_output_until(ticket) {
                tracing::debug!(client_id = %peer.client_id, "answer_not_held_session_not_stored");
            }
        }
        let mut outcome = RouteOutcome::default();
        self.router.deliver(peer, delivery, now, wake, &mut outcome);
    }

    /// A session handed over starts relaying (`Handover::Relaying`): it leaves the registry
    /// and the store, its shared subscriptions and its will go as when it ends, its plain
    /// subscriptions stay in the router (and in the node's route set) until it ends.
    fn start_relay(&self, cell: &Arc<SessionCell>, now: Instant, wake: &mut WakeList) {
        // Before it leaves the registry: what is relayed here for it meanwhile finds it
        // (`Broker::deliver_relayed`).
        if let Some(cluster) = self.router.cluster() {
            if let Some(previous) = cluster.relay_started(cell.client_id.clone(), cell.clone()) {
                self.end_relay(&previous, now, wake);
            }
        }
        let (shared, will, persisted) = {
            let mut state = cell.state.lock();
            let shared: Vec<Box<str>> = state
                .subscriptions
                .iter()
                .filter(|(filter, _)| is_shared(filter))
                .map(|(filter, _)| filter.clone())
                .collect();
            for filter in &shared {
                state.subscriptions.remove(filter);
            }
            state.will_due = None;
            (shared, state.will.take(), state.persisted)
        };
        for filter in &shared {
            if self.router.unsubscribe(filter, cell.id) {
                self.stats
                    .subscriptions
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if self.registry.remove_if_current(cell) && persisted {
            if let Some(attached) = self.attached() {
                attached.store.append(StoreOp::DeleteSession {
                    client_id: cell.client_id.to_string(),
                });
            }
        }
        if let Some(will) = will {
            self.publish_will(&cell.client_id, will, now, wake);
        }
    }

    /// Node `node` marked the end of what it had forwarded here for `client_id`'s session,
    /// handed over on the claim made `at` by node `new`: once every node has, the session stops
    /// relaying and ends. A mark of an earlier take-over (late, from before this node was away)
    /// counts not; a mark of a later claim by the node the session went to counts (its client
    /// connected there again while this node was away, and subscribed: a fence; what `node`
    /// forwards from then on reaches that node's session directly, `docs/CLUSTER.md`, "A
    /// fence of a later claim").
    ///
    /// A mark for a session still here (not handed over yet: the claimant started a new one
    /// without it, and marks as it subscribes) keeps what `node` forwards from now on from
    /// this session, which the new one receives directly, and spares the relay the wait.
    ///
    /// Returns the peer session of the node the session went to, and the claim the relay is
    /// for, when this mark ended what is relayed of `node`'s copies: everything relayed for
    /// `node` is queued there by now, and the caller queues the end of it behind, so that the
    /// new node lets `node`'s own copies reach the session only after those (`docs/CLUSTER.md`,
    /// "Relay after a handover").
    pub fn relay_marked(
        &self,
        client_id: &str,
        node: &str,
        mark: (Arrival, &str),
        now: Instant,
        wake: &mut WakeList,
    ) -> Option<(Arc<SessionCell>, Arrival)> {
        let (at, new) = mark;
        let cluster = self.router.cluster()?;
        let Some(cell) = cluster.relaying(client_id) else {
            let here = self
                .registry
                .get(client_id)
                .filter(|cell| cell.kind == SessionKind::Client);
            if let (Some(here), true) = (here, at.is_known()) {
                cluster.suppress(
                    Arc::from(client_id),
                    here.id,
                    at,
                    vec![Arc::from(node)],
                    now + cluster.relay_timeout(),
                );
            }
            return None;
        };
        let (done, deadline, ended_for) = match &mut cell.state.lock().handover {
            Handover::Relaying(relaying) if relaying.counts_mark(at, new) => {
                let before = relaying.waiting.len();
                relaying.waiting.retain(|name| &**name != node);
                tracing::debug!(client_id, node, waiting = ?relaying.waiting, upstream = ?relaying.upstream, "handover_relay_mark");
                let ended_for =
                    (relaying.waiting.len() < before).then(|| (relaying.to.clone(), relaying.at));
                (
                    relaying.waiting.is_empty() && relaying.upstream.is_empty(),
                    Some((relaying.deadline, relaying.at)),
                    ended_for,
                )
            }
            Handover::Relaying(_) => (false, None, None),
            _ => (true, None, None),
        };
        if let (false, Some((deadline, relay_at))) = (done, deadline) {
            // What `node` forwards after its mark reaches the new node directly: relayed too,
            // it would arrive twice while other nodes' marks are still on their way.
            cluster.suppress(
                Arc::from(client_id),
                cell.id,
                relay_at,
                vec![Arc::from(node)],
                deadline,
            );
        }
        if done {
            self.end_relay(&cell, now, wake);
            tracing::info!(client_id, "handover_relay_marked_by_every_node");
        }
        ended_for
    }

    /// The node `client_id`'s session came from ended its relay of `node`'s copies to this
    /// node: when this node handed the session on meanwhile and relays for it, that wait is
    /// over (`Relaying::upstream`); the relay ends when nothing else is awaited.
    pub fn upstream_relay_ended(
        &self,
        client_id: &str,
        node: &str,
        now: Instant,
        wake: &mut WakeList,
    ) {
        let Some(cell) = self
            .router
            .cluster()
            .and_then(|cluster| cluster.relaying(client_id))
        else {
            return;
        };
        let done = match &mut cell.state.lock().handover {
            Handover::Relaying(relaying) if !relaying.upstream.is_empty() => {
                relaying.upstream.retain(|name| &**name != node);
                tracing::debug!(client_id, node, upstream = ?relaying.upstream, "handover_upstream_ended");
                relaying.upstream.is_empty() && relaying.waiting.is_empty()
            }
            _ => false,
        };
        if done {
            self.end_relay(&cell, now, wake);
            tracing::info!(client_id, "handover_relay_ended_after_upstream");
        }
    }

    /// Node `node` is gone for good (forgotten after `dead_node_grace_secs`, or it left): it
    /// will mark nothing, so no relay waits for its mark any more, and a relay that waited
    /// only for it ends now rather than at its deadline.
    pub fn relay_node_gone(&self, node: &str, now: Instant, wake: &mut WakeList) {
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        for cell in cluster.relaying_all() {
            let done = match &mut cell.state.lock().handover {
                Handover::Relaying(relaying) if relaying.waiting.iter().any(|n| &**n == node) => {
                    relaying.waiting.retain(|n| &**n != node);
                    relaying.waiting.is_empty() && relaying.upstream.is_empty()
                }
                _ => false,
            };
            if done {
                tracing::info!(client_id = %cell.client_id, node, "handover_relay_ended_node_gone");
                self.end_relay(&cell, now, wake);
            }
        }
    }

    /// Ends the relaying of sessions past their deadline (some node never marked: what it
    /// forwards here for them from now on goes nowhere).
    pub fn expire_relays(&self, now: Instant, wake: &mut WakeList) {
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        for cell in cluster.relaying_all() {
            let waiting = match &cell.state.lock().handover {
                Handover::Relaying(relaying) if relaying.deadline <= now => {
                    Some(relaying.waiting.join(","))
                }
                _ => None,
            };
            if let Some(waiting) = waiting {
                tracing::warn!(client_id = %cell.client_id, %waiting, "handover_relay_expired");
                self.end_relay(&cell, now, wake);
            }
        }
    }

    fn end_relay(&self, cell: &Arc<SessionCell>, now: Instant, wake: &mut WakeList) {
        if let Some(cluster) = self.router.cluster() {
            cluster.relay_ended(&cell.client_id, cell);
            cluster.clear_suppression(cell.id);
        }
        cell.state.lock().handover = Handover::Settled;
        self.end_session(cell, now, wake);
    }

    /// Whether `client_id` has a client session here.
    pub fn has_client_session(&self, client_id: &str) -> bool {
        self.client_session_id(client_id).is_some()
    }

    /// `node` answered for `client_id`, and what it had (its inbound QoS 2 ids among it) is
    /// merged here: call after [`Broker::take_over`]. When that was the last node the client's
    /// ids waited for, its connection is woken, so that a QoS 2 resend it holds back for them
    /// (`channel/resend_hold.rs`) goes on at once.
    pub fn inbound_qos2_ids_answered(&self, client_id: &str, node: &str) {
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        if !cluster.inbound_qos2_ids_answered(client_id, node) {
            return;
        }
        if let Some(cell) = self.registry.get(client_id) {
            if let Some(doorbell) = &cell.state.lock().doorbell {
                doorbell.notify_one();
            }
        }
    }

    /// The id (`SessionCell::id`) of `client_id`'s client session here, if it has one (not
    /// one that is handed over and relaying: that left the registry).
    pub fn client_session_id(&self, client_id: &str) -> Option<u64> {
        self.registry
            .get(client_id)
            .filter(|cell| cell.kind == SessionKind::Client)
            .map(|cell| cell.id)
    }

    /// Deliveries another node relayed for `client_id`'s session, which it handed over here
    /// (`Handover::Relaying` there): queued in the session as they are (the other node
    /// matched them against the session's subscriptions), or relayed on when this node handed
    /// the session over in turn. Returns how many were queued or relayed, or the deliveries
    /// themselves when no session here takes them (the caller passes the copy on to where the
    /// session went, or counts it dropped: `Stats::cluster_relayed_dropped`).
    pub fn deliver_relayed(
        &self,
        client_id: &str,
        deliveries: Vec<Delivery>,
        now: Instant,
        wake: &mut WakeList,
    ) -> Result<u64, Vec<Delivery>> {
        // Handed over again meanwhile (a claim held while the session waited for its own,
        // answered since): its relaying session passes them on (relayed deliveries are
        // another node's, so `Router::relay` takes them), while `Relaying::upstream` keeps it
        // relaying.
        let cell = self.registry.get(client_id).or_else(|| {
            self.router
                .cluster()
                .and_then(|cluster| cluster.relaying(client_id))
        });
        let Some(cell) = cell else {
            return Err(deliveries);
        };
        let mut outcome = RouteOutcome::default();
        for delivery in deliveries {
            self.router
                .deliver(&cell, delivery, now, wake, &mut outcome);
        }
        Ok(outcome.delivered as u64)
    }

    /// Takes a session handed over by another node into the session `client_id` has here
    /// (its new connection's): its subscriptions are added where this session has none to the
    /// same filter, its messages queued after what this session already holds. False when
    /// there is no such session here (the client left again).
    pub fn take_over(
        &self,
        client_id: &str,
        handed: HandedOver,
        now: Instant,
        wake: &mut WakeList,
    ) -> bool {
        let Some(cell) = self.registry.get(client_id) else {
            // The session that claimed it is gone (the client moved on, e.g. after the claim
            // timed out): what was handed over is lost here. A known fault (docs/CLUSTER.md,
            // "A session lost when the claim's answer comes after the handover timeout").
            tracing::warn!(
                client_id,
                subscriptions = handed.subscriptions.len(),
                messages = handed.deliveries.len(),
                "cluster_session_answer_dropped"
            );
            return false;
        };
        if handed.published {
            // Handed on from here, the session is announced again (its previous node's
            // messages may still be on their way to the other nodes).
            cell.published
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut added = 0u64;
        for (filter, record) in handed.subscriptions {
            if self.add_subscription(&cell, &filter, record) {
                added += 1;
            }
        }
        crate::stats::Stats::add(&self.stats.subscriptions, added);
        let inbound_qos2 = handed.inbound_qos2.len();
        let mut outcome = RouteOutcome::default();
        for delivery in handed.deliveries {
            self.router
                .deliver(&cell, delivery, now, wake, &mut outcome);
        }
        {
            let mut state = cell.state.lock();
            for id in handed.inbound_qos2 {
                state.session.adopt_inbound_qos2(id);
            }
            for id in handed.released {
                state.session.restore_released_id(id);
            }
            if let Some(attached) = self.attached() {
                attached.flush(&cell.client_id, &mut state);
            }
            if let Handover::Awaited(awaited) = &mut state.handover {
                awaited.received = true;
            }
            // Another node's session came into it: present, even holding nothing.
            state.unconfirmed = false;
        }
        tracing::info!(
            client_id,
            subscriptions = added,
            messages = outcome.delivered,
            dropped = outcome.dropped,
            inbound_qos2,
            "session_taken_over_from_node"
        );
        true
    }

    /// Every node asked about `client_id`'s session answered (or the cluster gave up
    /// waiting): its CONNACK goes out now (`Channel::poll_handover`).
    pub fn release_handover(&self, client_id: &str) {
        let Some(cell) = self.registry.get(client_id) else {
            return;
        };
        let (doorbell, claims) = {
            let mut state = cell.state.lock();
            let claims = match &mut state.handover {
                Handover::Awaited(awaited) => {
                    awaited.answered = true;
                    std::mem::take(&mut awaited.claims)
                }
                _ => DeferredClaims::default(),
            };
            (state.doorbell.clone(), claims)
        };
        if let Some(doorbell) = doorbell {
            doorbell.notify_one();
        }
        self.answer_held_claims(client_id, claims);
    }

    /// The cluster waits longer for the answers to `client_id`'s claim (a node it waits for is
    /// back and its link reconnecting): its held CONNACK goes out at `until` at the latest.
    pub fn extend_handover(&self, client_id: &str, until: Instant) {
        let Some(cell) = self.registry.get(client_id) else {
            return;
        };
        let mut state = cell.state.lock();
        if let Handover::Awaited(awaited) = &mut state.handover {
            if !awaited.answered && awaited.deadline < until {
                awaited.deadline = until;
            }
        }
    }

    /// Adds one subscription to `cell` unless it has one to `filter`; true when added.
    fn add_subscription(
        &self,
        cell: &Arc<SessionCell>,
        filter: &str,
        record: SubscriptionRecord,
    ) -> bool {
        {
            let mut state = cell.state.lock();
            if state.ended || state.subscriptions.contains_key(filter) {
                return false;
            }
            state.subscriptions.insert(filter.into(), record);
            self.persist_for(&state, || StoreOp::PutSubscription {
                client_id: cell.client_id.to_string(),
                subscription: SubscriptionData {
                    filter: filter.to_string(),
                    options: crate::persist::options_byte(record.options),
                    subscription_id: record.subscription_id,
                },
            });
        }
        let entry = SubEntry {
            cell: cell.clone(),
            record,
        };
        !self.router.subscribe(filter, entry).replaced
    }
}

fn is_shared(filter: &str) -> bool {
    filter.starts_with("$share/")
}

/// The nodes a session handed over to `to` waits for marks from: every other node this one
/// knows (what any of them routed here before the handover may still be on its way, even from
/// a node whose link here is not up yet), and `to` (`docs/CLUSTER.md`, "Relay after a
/// handover").
///
/// Not the nodes that marked already, before the handover (the claimant had started a new
/// session without this one and marked when it subscribed: what they forward here for the
/// session since, it received directly).
/// A claim of `client_id` by the node of peer session `to`, while a session of the client
/// relays (handed over before): the relay counts that claim's marks (`Relaying::later`).
fn note_later_claim(cluster: &ClusterRoutes, client_id: &str, to: &SessionCell, at: Arrival) {
    let Some(node) = to.client_id.strip_prefix(PEER_CLIENT_PREFIX) else {
        return;
    };
    let Some(relaying) = cluster.relaying(client_id) else {
        return;
    };
    if !at.is_known() {
        return;
    }
    let mut state = relaying.state.lock();
    if let Handover::Relaying(relay) = &mut state.handover {
        if relay.at != at && !relay.later.iter().any(|(a, _)| *a == at) {
            if relay.later.len() == Relaying::LATER_CLAIMS {
                relay.later.remove(0);
            }
            relay.later.push((at, Arc::from(node)));
            tracing::debug!(client_id, node, "handover_relay_later_claim");
        }
    }
}

fn relay_waiting(
    cluster: &ClusterRoutes,
    to: &SessionCell,
    session: u64,
    at: Arrival,
) -> Vec<Arc<str>> {
    let marked = cluster.suppressed_nodes(session, at);
    let mut waiting = cluster.nodes();
    waiting.retain(|node| !marked.contains(node));
    // The claimant marks when it takes the session over, unless it marked already (a fence:
    // its client subscribed there while this node was away).
    if let Some(name) = to.client_id.strip_prefix(PEER_CLIENT_PREFIX) {
        if !waiting.iter().any(|n| &**n == name) && !marked.iter().any(|n| &**n == name) {
            waiting.push(Arc::from(name));
        }
    }
    waiting
}

/// The subscription a node's link makes for a plain filter of its route set (`hayate-cluster`
/// `link.rs` subscribes with the same options).
fn peer_record() -> SubscriptionRecord {
    SubscriptionRecord {
        options: hayate_codec::SubscriptionOptions {
            qos: hayate_codec::QoS::ExactlyOnce,
            no_local: false,
            retain_as_published: true,
            retain_handling: 2,
        },
        subscription_id: Some(crate::cluster::PLAIN_ID),
    }
}

impl crate::router::Router {
    /// Passes `delivery`, made for a session this node handed over, on to the node that has
    /// the session now (`Handover::Relaying`), when another node forwarded it here.
    pub(crate) fn relay(
        &self,
        cell: &Arc<SessionCell>,
        to: &Arc<SessionCell>,
        delivery: Delivery,
        now: Instant,
        wake: &mut WakeList,
        outcome: &mut RouteOutcome,
    ) {
        if delivery.message.from_peer.is_none() {
            return;
        }
        let Some(message) = self
            .cluster()
            .and_then(|cluster| cluster.relay_message(&cell.client_id, &delivery, now))
        else {
            return;
        };
        let relayed = Delivery::new(Arc::new(message), hayate_codec::QoS::AtLeastOnce, false);
        self.enqueue(to, relayed, None, now, wake, outcome);
    }
}
