//! What the router needs to be one node of a cluster (`docs/CLUSTER.md`), kept apart from the
//! transport that links the nodes (`hayate-cluster`).
//!
//! A node N receives what its clients subscribe to from every other node P by being a client
//! of P: N's link opens a *peer session* on P (client id `$cluster/N`, through P's cluster
//! listener) and subscribes there to N's *route set*, the filters N's own clients subscribe
//! to. P's router then treats N like any subscriber: a message matching several of N's
//! filters is queued for N once, QoS 1/2 flows and back-pressure are those of any session.
//! N's link publishes what it receives into N through an in-process channel whose messages
//! are marked as coming from a peer ([`crate::hooks::ListenerRole::PeerIngress`]); such a
//! message goes to N's own clients only, never on to another peer session, so nothing loops
//! and nothing is forwarded twice.
//!
//! This module keeps, for the node's links, the route set as reference counts per filter with
//! a feed of its changes ([`RouteDelta`]), and the list of peer sessions on this node (to
//! which retained messages published here are replicated whatever they subscribe to). A
//! broker that is not in a cluster never creates it and pays one `OnceLock` load per
//! subscription change.

mod direct_hold;
mod fence;
mod switch;
mod unknown_qos2;

pub use fence::{Fence, FenceFn, FenceHook};
pub use switch::Switch;

use crate::registry::SessionCell;
use crate::router::WakeList;
use hayate_session::{Arrival, Delivery, Message, PeerScope};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

/// A resumed session's CONNACK waits at most this long for the cluster, unless set.
const DEFAULT_HANDOVER_TIMEOUT_MS: u64 = 3_000;
/// A session handed over relays at most this long, unless set.
const DEFAULT_RELAY_TIMEOUT_MS: u64 = 30_000;

/// Makes the control message that carries a delivery for a session handed over to another
/// node there (`hayate-cluster` owns the format): `(client id, delivery, now)`.
pub struct RelayEncoder(pub Box<RelayFn>);

/// See [`RelayEncoder`].
pub type RelayFn = dyn Fn(&str, &Delivery, std::time::Instant) -> Message + Send + Sync;

impl std::fmt::Debug for RelayEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayEncoder")
    }
}

/// True for a topic or topic filter that each node keeps to itself: those starting with `$`
/// (`$SYS`, [MQTT-4.7.2-1]). Neither routed to other nodes nor replicated when retained.
pub fn stays_on_node(topic_or_filter: &str) -> bool {
    topic_or_filter.starts_with('$')
}

/// The client identifier prefix reserved for peer sessions: only connections through a
/// cluster listener may use it, and every session whose identifier has it is a peer session.
pub const PEER_CLIENT_PREFIX: &str = "$cluster/";

/// The client identifier prefix of a link's ingress: `$cluster/in/N` hands in what node N
/// forwards.
pub const INGRESS_CLIENT_PREFIX: &str = "$cluster/in/";

/// Who a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// An MQTT client.
    Client,
    /// Another node of the cluster pulling what its clients subscribe to.
    Peer,
}

impl SessionKind {
    /// The kind of the session with this client identifier (the prefix is reserved, see
    /// [`PEER_CLIENT_PREFIX`]).
    pub fn of(client_id: &str) -> SessionKind {
        if client_id.starts_with(PEER_CLIENT_PREFIX) {
            SessionKind::Peer
        } else {
            SessionKind::Client
        }
    }
}

/// A change of the node's route set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteDelta {
    /// The first client subscription to this filter (full text, `$share/...` included).
    Add(Route),
    /// The last client subscription to this filter went away.
    Remove(Arc<str>),
}

/// A filter of the route set with the subscription identifier its node link subscribes with:
/// [`PLAIN_ID`] for every non-shared filter, one of its own for each shared group. The other
/// node echoes the identifiers in what it forwards, so this node knows which of its
/// subscriptions each copy is for ([`ClusterRoutes::scope_of`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The filter.
    pub filter: Arc<str>,
    /// Its subscription identifier.
    pub id: u32,
}

/// The subscription identifier of every non-shared filter of a route set.
pub const PLAIN_ID: u32 = 1;

/// The largest subscription identifier (§3.8.2.1.2: a Variable Byte Integer of 1 to
/// 268,435,455).
const MAX_ID: u32 = 268_435_455;

/// Changes a link may fall behind by before it has to compare whole route sets again.
const FEED_CAPACITY: usize = 65_536;
/// Events waiting for the cluster task; beyond this they are dropped and logged (a node
/// so far behind is in trouble anyway).
const EVENTS_CAPACITY: usize = 65_536;

/// What the core tells the cluster task.
#[derive(Debug)]
pub enum ClusterEvent {
    /// A client connected here: another node that has a session for it hands it over
    /// (`Broker::hand_over`), and disconnects the client there if it is connected
    /// [MQTT-3.1.4-3].
    ClientConnected {
        /// Its client identifier.
        client_id: Arc<str>,
        /// It asked for a new session (nothing is handed over then; the old one ends).
        clean_start: bool,
        /// Its CONNACK waits for the other nodes' answers (`Broker::release_handover`).
        await_handover: bool,
        /// When its CONNECT arrived: of two connections of one client to two nodes, the later
        /// one wins.
        at: Arrival,
    },
    /// A client connected here subscribed for the first time with a fence waiting
    /// ([`ClusterRoutes::await_fence`]), and its marks went into the away nodes' peer
    /// sessions here: the links publish them on the other nodes now, after the route deltas
    /// of the subscriptions (`docs/CLUSTER.md`, "Relay after a handover").
    Fenced {
        /// Its client identifier.
        client_id: Arc<str>,
        /// The fence that ran.
        fence: Fence,
    },
}

/// The cluster side of a node's router. See the module docs.
#[derive(Debug)]
pub struct ClusterRoutes {
    routes: Mutex<RouteSet>,
    feed: broadcast::Sender<RouteDelta>,
    peers: RwLock<Vec<Arc<SessionCell>>>,
    events: mpsc::Sender<ClusterEvent>,
    events_rx: Mutex<Option<mpsc::Receiver<ClusterEvent>>>,
    /// Shared-subscription groups deliver to a member on this node when one is online, and
    /// to another node's members only otherwise.
    pub prefer_local_shared: bool,
    /// What clients may do while a known node is unreachable ([`SplitPolicy`]).
    pub split_policy: SplitPolicy,
    /// Some known node is unreachable (gossip has it dead and it was not yet forgotten): the
    /// cluster may be split, and [`SplitPolicy`] applies.
    split: std::sync::atomic::AtomicBool,
    /// How long a resumed session's CONNACK waits at most for the other nodes' answers, in
    /// milliseconds ([`ClusterRoutes::set_handover_timeout`]).
    handover_timeout_ms: std::sync::atomic::AtomicU64,
    /// How long a session handed over relays at most, in milliseconds.
    relay_timeout_ms: std::sync::atomic::AtomicU64,
    /// Encodes relayed deliveries; without it, a session handed over does not relay.
    relay_encoder: std::sync::OnceLock<RelayEncoder>,
    /// The other nodes this one knows (has links to, or keeps for their return).
    nodes: RwLock<Vec<Arc<str>>>,
    /// Sessions just taken over that must not take what some nodes forward until their mark
    /// comes back ([`ClusterRoutes::suppress`]); `suppressing` says whether any.
    suppressed: Mutex<Vec<Suppression>>,
    suppressing: std::sync::atomic::AtomicBool,
    /// Sessions handed over and relaying, by client identifier
    /// (`crate::registry::Handover::Relaying`).
    relays: Mutex<HashMap<Arc<str>, Arc<SessionCell>>>,
    /// Routing and the changes that move a client's messages between nodes exclude each
    /// other (`switch`).
    switch: switch::SwitchLock,
    /// Fences waiting for their client's first SUBSCRIBE (`fence`).
    fences: fence::Fences,
    /// Sessions taken over here holding back their direct copies (`direct_hold`).
    direct_holds: direct_hold::DirectHolds,
    /// Clients whose inbound QoS 2 ids are on a node that has not answered yet
    /// (`unknown_qos2`).
    unknown_qos2: unknown_qos2::UnknownQos2,
}

/// See [`ClusterRoutes::suppress`].
#[derive(Debug)]
struct Suppression {
    client_id: Arc<str>,
    /// The session (`SessionCell::id`) that does not take the nodes' copies.
    session: u64,
    at: Arrival,
    nodes: Vec<Arc<str>>,
    until: std::time::Instant,
}

/// What clients may do while the cluster may be split (some known node unreachable), after
/// VerneMQ's `allow_register_during_netsplit` / `allow_publish_during_netsplit`. Both allowed
/// favours availability: each side serves its clients, and a client connected on both sides
/// meanwhile is disconnected from one when they heal. Refusing favours consistency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPolicy {
    /// CONNECT is accepted (else refused with Server unavailable, v5 0x88 / v3 3).
    pub allow_register: bool,
    /// QoS 1/2 PUBLISH is accepted (else refused: v5 PUBACK/PUBREC 0x97 Quota exceeded, a v3
    /// client is disconnected, so nothing is acknowledged that the split might lose).
    pub allow_publish: bool,
}

impl Default for SplitPolicy {
    fn default() -> Self {
        SplitPolicy {
            allow_register: true,
            allow_publish: true,
        }
    }
}

/// Counts per filter, and the identifiers of shared groups.
#[derive(Debug, Default)]
struct RouteSet {
    /// Filter → (client subscriptions, subscription identifier).
    counts: HashMap<Arc<str>, (u32, u32)>,
    /// Identifier → shared filter.
    groups: HashMap<u32, Arc<str>>,
    last_id: u32,
}

impl RouteSet {
    fn next_group_id(&mut self) -> u32 {
        loop {
            self.last_id = if self.last_id >= MAX_ID {
                PLAIN_ID + 1
            } else {
                self.last_id.max(PLAIN_ID) + 1
            };
            if !self.groups.contains_key(&self.last_id) {
                return self.last_id;
            }
        }
    }
}

impl ClusterRoutes {
    /// An empty route set.
    pub fn new(prefer_local_shared: bool) -> ClusterRoutes {
        ClusterRoutes::with_policy(prefer_local_shared, SplitPolicy::default())
    }

    /// An empty route set with a netsplit policy.
    pub fn with_policy(prefer_local_shared: bool, split_policy: SplitPolicy) -> ClusterRoutes {
        let (events, events_rx) = mpsc::channel(EVENTS_CAPACITY);
        ClusterRoutes {
            split_policy,
            split: std::sync::atomic::AtomicBool::new(false),
            handover_timeout_ms: std::sync::atomic::AtomicU64::new(DEFAULT_HANDOVER_TIMEOUT_MS),
            relay_timeout_ms: std::sync::atomic::AtomicU64::new(DEFAULT_RELAY_TIMEOUT_MS),
            relay_encoder: std::sync::OnceLock::new(),
            relays: Mutex::new(HashMap::new()),
            switch: switch::SwitchLock::default(),
            fences: fence::Fences::default(),
            direct_holds: direct_hold::DirectHolds::default(),
            unknown_qos2: unknown_qos2::UnknownQos2::default(),
            nodes: RwLock::new(Vec::new()),
            suppressed: Mutex::new(Vec::new()),
            suppressing: std::sync::atomic::AtomicBool::new(false),
            events,
            events_rx: Mutex::new(Some(events_rx)),
            routes: Mutex::new(RouteSet::default()),
            feed: broadcast::channel(FEED_CAPACITY).0,
            peers: RwLock::new(Vec::new()),
            prefer_local_shared,
        }
    }

    /// The current route set and a receiver of every change after it (taken under the same
    /// lock, so nothing is missed or seen twice). A receiver that lags by more than the feed
    /// holds gets `Lagged` and must take the set again.
    pub fn snapshot(&self) -> (Vec<Route>, broadcast::Receiver<RouteDelta>) {
        let routes = self.routes.lock();
        let set = routes
            .counts
            .iter()
            .map(|(filter, (_, id))| Route {
                filter: filter.clone(),
                id: *id,
            })
            .collect();
        (set, self.feed.subscribe())
    }

    /// Which of this node's subscriptions a forwarded message carrying `ids` is for.
    pub fn scope_of(&self, ids: &[u32]) -> PeerScope {
        let routes = self.routes.lock();
        let mut scope = PeerScope::default();
        for id in ids {
            if *id == PLAIN_ID {
                scope.plain = true;
            } else if let Some(filter) = routes.groups.get(id) {
                if !scope.groups.contains(filter) {
                    scope.groups.push(filter.clone());
                }
            }
        }
        scope
    }

    /// The scope of a copy forwarded by `node` carrying `ids` ([`ClusterRoutes::scope_of`]),
    /// with the sessions that must not take it now ([`ClusterRoutes::suppress`]).
    pub fn scope_from(&self, node: &str, ids: &[u32], now: std::time::Instant) -> PeerScope {
        let mut scope = self.scope_of(ids);
        if self.suppressing.load(std::sync::atomic::Ordering::Relaxed) {
            let mut suppressed = self.suppressed.lock();
            suppressed.retain(|s| s.until > now);
            scope.except = suppressed
                .iter()
                .filter(|s| s.nodes.iter().any(|n| &**n == node))
                .map(|s| s.session)
                .collect();
            if suppressed.is_empty() {
                self.suppressing
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        scope
    }

    /// `client_id`'s session `session` here is about to take over its session from another
    /// node (the claim made `at`), which relays what each of `nodes` forwarded it until that
    /// node's mark: until the same mark comes back here ([`ClusterRoutes::unsuppress`]) or
    /// `until`, what those nodes forward here does not reach the session, so nothing arrives
    /// twice (`docs/CLUSTER.md`, "Relay after a handover"). Also for a session handed over
    /// (or about to be) that must not relay what those nodes forward after their mark.
    ///
    /// One claim's suppression per session: one of a new claim replaces it. Another session
    /// of the same client here (a relaying one, and the live one) keeps its own.
    pub fn suppress(
        &self,
        client_id: Arc<str>,
        session: u64,
        at: Arrival,
        nodes: Vec<Arc<str>>,
        until: std::time::Instant,
    ) {
        if nodes.is_empty() {
            return;
        }
        let mut suppressed = self.suppressed.lock();
        match suppressed
            .iter_mut()
            .find(|s| s.session == session && s.at == at)
        {
            Some(same) => {
                for node in nodes {
                    if !same.nodes.contains(&node) {
                        same.nodes.push(node);
                    }
                }
                same.until = same.until.max(until);
            }
            None => {
                suppressed.retain(|s| s.session != session);
                suppressed.push(Suppression {
                    client_id,
                    session,
                    at,
                    nodes,
                    until,
                });
            }
        }
        self.suppressing
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// `node`'s mark for `client_id`'s take-over `at` came back: what it forwards from now on
    /// reaches the session again.
    pub fn unsuppress(&self, client_id: &str, at: Arrival, node: &str) {
        let mut suppressed = self.suppressed.lock();
        for s in suppressed
            .iter_mut()
            .filter(|s| &*s.client_id == client_id && s.at == at)
        {
            s.nodes.retain(|n| &**n != node);
        }
        suppressed.retain(|s| !s.nodes.is_empty());
    }

    /// The nodes whose copies session `session` here does not take now for the take-over `at`
    /// or a later claim (the marks of a later claim's fence, which came while the session was
    /// still here, count for an earlier claim answered now).
    pub fn suppressed_nodes(&self, session: u64, at: Arrival) -> Vec<Arc<str>> {
        self.suppressed
            .lock()
            .iter()
            .filter(|s| s.session == session && s.at >= at)
            .flat_map(|s| s.nodes.iter().cloned())
            .collect()
    }

    /// Forgets every suppression for session `session` (its client connected to it again, or
    /// it stopped relaying).
    pub fn clear_suppression(&self, session: u64) {
        self.suppressed.lock().retain(|s| s.session != session);
    }

    /// A client subscription to `filter` was added.
    pub(crate) fn added(&self, filter: &str) {
        let mut routes = self.routes.lock();
        if let Some((count, _)) = routes.counts.get_mut(filter) {
            *count += 1;
            return;
        }
        let filter: Arc<str> = Arc::from(filter);
        let id = if filter.starts_with("$share/") {
            let id = routes.next_group_id();
            routes.groups.insert(id, filter.clone());
            id
        } else {
            PLAIN_ID
        };
        routes.counts.insert(filter.clone(), (1, id));
        let _ = self.feed.send(RouteDelta::Add(Route { filter, id }));
    }

    /// A client subscription to `filter` was removed.
    pub(crate) fn removed(&self, filter: &str) {
        let mut routes = self.routes.lock();
        let Some((count, id)) = routes.counts.get_mut(filter) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            let id = *id;
            routes.groups.remove(&id);
            if let Some((filter, _)) = routes.counts.remove_entry(filter) {
                let _ = self.feed.send(RouteDelta::Remove(filter));
            }
        }
    }

    /// Filters in the route set.
    pub fn len(&self) -> usize {
        self.routes.lock().counts.len()
    }

    /// True when no client on this node subscribes to anything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A peer session attached: retained messages published here are replicated to it.
    pub(crate) fn peer_attached(&self, cell: &Arc<SessionCell>) {
        let mut peers = self.peers.write();
        if !peers.iter().any(|p| Arc::ptr_eq(p, cell)) {
            peers.push(cell.clone());
        }
    }

    /// A peer session ended.
    pub(crate) fn peer_ended(&self, cell: &Arc<SessionCell>) {
        self.peers.write().retain(|p| !Arc::ptr_eq(p, cell));
    }

    /// The peer sessions on this node.
    pub fn peers(&self) -> Vec<Arc<SessionCell>> {
        self.peers.read().clone()
    }

    /// Sets whether some known node is unreachable (the cluster task, from gossip).
    pub fn set_split(&self, split: bool) {
        self.split
            .store(split, std::sync::atomic::Ordering::Relaxed);
    }

    /// The longest a resumed session's CONNACK waits for the other nodes' answers to its
    /// claim (the cluster's own wait ends earlier when they answer or time out).
    pub fn set_handover_timeout(&self, timeout: std::time::Duration) {
        self.handover_timeout_ms.store(
            timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// See [`ClusterRoutes::set_handover_timeout`] (3 s unless set).
    pub fn handover_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.handover_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Sets the other nodes this one knows (the cluster task, as membership changes).
    pub fn set_nodes(&self, nodes: Vec<Arc<str>>) {
        if *self.nodes.read() != nodes {
            *self.nodes.write() = nodes;
        }
    }

    /// The other nodes this one knows.
    pub fn nodes(&self) -> Vec<Arc<str>> {
        self.nodes.read().clone()
    }

    /// Sets how a session handed over passes on what other nodes still forward for it; until
    /// set, a session handed over does not relay. False when already set.
    pub fn set_relay_encoder(&self, encoder: RelayEncoder) -> bool {
        self.relay_encoder.set(encoder).is_ok()
    }

    /// Whether a session handed over relays.
    pub fn relays_enabled(&self) -> bool {
        self.relay_encoder.get().is_some()
    }

    /// The control message relaying `delivery` for `client_id` (`None` without an encoder).
    pub(crate) fn relay_message(
        &self,
        client_id: &str,
        delivery: &Delivery,
        now: std::time::Instant,
    ) -> Option<Message> {
        self.relay_encoder
            .get()
            .map(|encoder| (encoder.0)(client_id, delivery, now))
    }

    /// Sets how long a session handed over relays at most (30 s unless set).
    pub fn set_relay_timeout(&self, timeout: std::time::Duration) {
        self.relay_timeout_ms.store(
            timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// See [`ClusterRoutes::set_relay_timeout`].
    pub fn relay_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.relay_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// A session started relaying; returns the one relaying for the same client before, if
    /// any (to be ended).
    pub(crate) fn relay_started(
        &self,
        client_id: Arc<str>,
        cell: Arc<SessionCell>,
    ) -> Option<Arc<SessionCell>> {
        self.relays.lock().insert(client_id, cell)
    }

    /// The session relaying for `client_id`, if any.
    pub(crate) fn relaying(&self, client_id: &str) -> Option<Arc<SessionCell>> {
        self.relays.lock().get(client_id).cloned()
    }

    /// Forgets the session relaying for `client_id` if it is `cell`.
    pub(crate) fn relay_ended(&self, client_id: &str, cell: &Arc<SessionCell>) {
        let mut relays = self.relays.lock();
        if relays.get(client_id).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            relays.remove(client_id);
        }
    }

    /// How many sessions relay now.
    pub fn relaying_count(&self) -> usize {
        self.relays.lock().len()
    }

    /// Every session relaying now.
    pub(crate) fn relaying_all(&self) -> Vec<Arc<SessionCell>> {
        self.relays.lock().values().cloned().collect()
    }

    /// Whether some known node is unreachable.
    pub fn is_split(&self) -> bool {
        self.split.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A client CONNECT is refused now (split, and the policy says so).
    pub fn refuses_register(&self) -> bool {
        !self.split_policy.allow_register && self.is_split()
    }

    /// A client's QoS 1/2 PUBLISH is refused now (split, and the policy says so).
    pub fn refuses_publish(&self) -> bool {
        !self.split_policy.allow_publish && self.is_split()
    }

    /// Excludes routing on this node until dropped: for a change of where a client's messages
    /// go that must not fall between the two halves of a route (see the `switch` module).
    /// Nested in a guard this thread holds already, it takes nothing.
    pub fn exclusive(&self) -> Switch<'_> {
        self.switch.take(true)
    }

    /// Held while routing `topic`: shared, except for a node's control message (`$cluster/`,
    /// a mark), which is routed exclusively.
    pub(crate) fn routing(&self, topic: &str) -> Switch<'_> {
        self.switch.take(topic.starts_with(PEER_CLIENT_PREFIX))
    }

    /// `client_id`'s session here was started while `fence.away` could not be asked for
    /// its older one: its first SUBSCRIBE runs the fence hook.
    pub fn await_fence(&self, client_id: Arc<str>, fence: Fence) {
        self.fences.insert(client_id, fence);
    }

    /// Node `node` answered `client_id`'s claim, which had found it away: the client's fence no
    /// longer marks for it (the session came with the answer, or there was none there).
    pub fn fence_answered(&self, client_id: &str, node: &str) {
        self.fences.answered(client_id, node);
    }

    /// Drops the fences that waited too long, and the records of unknown inbound QoS 2 ids
    /// past their time.
    pub fn expire_fences(&self, now: std::time::Instant) {
        self.fences.expire(now);
        self.unknown_qos2.expire(now);
    }

    /// `client_id` resumed its session here while `away` could not be asked for it: until they
    /// answer, at most until `until`, a QoS 2 PUBLISH it sends again (DUP) with an id not known
    /// here is held back (`channel/resend_hold.rs`; `docs/CLUSTER.md`, "A QoS 2 message sent
    /// again past the wait").
    pub fn await_inbound_qos2_ids(
        &self,
        client_id: Arc<str>,
        away: Vec<Arc<str>>,
        until: std::time::Instant,
    ) {
        self.unknown_qos2.insert(client_id, away, until);
    }

    /// `node` answered for `client_id`, and what it had (its inbound QoS 2 ids among it) is
    /// merged here: true when every away node has now (the client's connection is to be
    /// woken: [`crate::Broker::inbound_qos2_ids_answered`], which callers use).
    pub(crate) fn inbound_qos2_ids_answered(&self, client_id: &str, node: &str) -> bool {
        self.unknown_qos2.answered(client_id, node)
    }

    /// Until when a QoS 2 resend of `client_id` with an id not known here is held back, if it
    /// is.
    pub(crate) fn inbound_qos2_unknown_until(
        &self,
        client_id: &str,
        now: std::time::Instant,
    ) -> Option<std::time::Instant> {
        self.unknown_qos2.until(client_id, now)
    }

    /// Installs what runs a fence; false if one was installed already.
    pub fn set_fence_hook(&self, hook: FenceHook) -> bool {
        self.fences.set_hook(hook)
    }

    /// `client_id`'s waiting fence, if any (it runs once).
    pub(crate) fn take_fence(&self, client_id: &str, now: std::time::Instant) -> Option<Fence> {
        self.fences.take(client_id, now)
    }

    /// Runs `fence` (call with [`ClusterRoutes::exclusive`] held).
    pub(crate) fn run_fence(
        &self,
        broker: &crate::Broker,
        client_id: &Arc<str>,
        fence: &Fence,
        now: std::time::Instant,
        wake: &mut WakeList,
    ) {
        self.fences.run(broker, client_id, fence, now, wake);
    }

    /// The receiver of [`ClusterEvent`]s, once (for the cluster task).
    pub fn take_events(&self) -> Option<mpsc::Receiver<ClusterEvent>> {
        self.events_rx.lock().take()
    }

    /// Queues an event for the cluster task (dropped, with a log line, when it is that far
    /// behind).
    pub(crate) fn event(&self, event: ClusterEvent) {
        if let Err(error) = self.events.try_send(event) {
            tracing::warn!(%error, "cluster_event_dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_sent_on_the_first_add_and_the_last_remove_only() {
        let routes = ClusterRoutes::new(true);
        let (initial, mut feed) = routes.snapshot();
        assert!(initial.is_empty());
        routes.added("a/+");
        routes.added("a/+");
        routes.added("$share/g/b");
        routes.removed("a/+");
        routes.removed("never/added");
        routes.removed("a/+");
        let mut seen = Vec::new();
        while let Ok(delta) = feed.try_recv() {
            seen.push(delta);
        }
        let group = Route {
            filter: "$share/g/b".into(),
            id: 2,
        };
        assert_eq!(
            seen,
            vec![
                RouteDelta::Add(Route {
                    filter: "a/+".into(),
                    id: PLAIN_ID
                }),
                RouteDelta::Add(group.clone()),
                RouteDelta::Remove("a/+".into()),
            ]
        );
        let (now, _) = routes.snapshot();
        assert_eq!(now, vec![group]);
    }

    #[test]
    fn a_forwarded_copy_is_scoped_by_the_identifiers_it_carries() {
        let routes = ClusterRoutes::new(true);
        routes.added("a/#");
        routes.added("$share/g/a/#");
        routes.added("$share/h/a/#");
        let (set, _) = routes.snapshot();
        let id_of = |f: &str| set.iter().find(|r| &*r.filter == f).unwrap().id;
        let g = id_of("$share/g/a/#");
        let h = id_of("$share/h/a/#");
        assert_ne!(g, h);
        assert_eq!(
            routes.scope_of(&[PLAIN_ID]),
            PeerScope {
                plain: true,
                ..PeerScope::default()
            }
        );
        assert_eq!(
            routes.scope_of(&[g]),
            PeerScope {
                groups: vec!["$share/g/a/#".into()],
                ..PeerScope::default()
            }
        );
        // A group that went away meanwhile: the copy goes nowhere.
        routes.removed("$share/h/a/#");
        assert_eq!(routes.scope_of(&[h]), PeerScope::default());
    }

    #[test]
    fn kind_follows_the_reserved_prefix() {
        assert_eq!(SessionKind::of("$cluster/n1"), SessionKind::Peer);
        assert_eq!(SessionKind::of("sensor-1"), SessionKind::Client);
        assert_eq!(SessionKind::of("$clusterx"), SessionKind::Client);
    }
}
