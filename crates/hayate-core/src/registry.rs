//! Client-id registry: which session belongs to which client identifier, and the state a
//! session keeps between connections (subscriptions, will, expiry) next to its
//! [`hayate_session::Session`].
//!
//! Lock order: the registry map, then a session's state. A session's state is never held
//! while taking the router's index locks (see `docs/ARCHITECTURE.md`, "Locks").

use crate::flow::Congestion;
use crate::hooks::ClientInfo;
use hayate_codec::{QoS, SubscriptionOptions, Will};
use hayate_session::Session;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// A subscription as the session remembers it (the router holds the matching entry).
#[derive(Debug, Clone, Copy)]
pub struct SubscriptionRecord {
    /// Options from SUBSCRIBE, QoS already capped to what was granted.
    pub options: SubscriptionOptions,
    /// Subscription identifier (v5), if given.
    pub subscription_id: Option<u32>,
}

/// A will message waiting for its connection to end, or for its delay to pass.
#[derive(Debug, Clone)]
pub struct PendingWill {
    /// The will from CONNECT.
    pub will: Will,
    /// The session that published it (for No Local).
    pub publisher: u64,
    /// The connection that set it, as authenticated: the will is authorised as its publish.
    pub client: Arc<ClientInfo>,
}

/// Everything a session keeps, guarded by one lock.
#[derive(Debug)]
pub struct SessionState {
    /// Protocol state (queues, in-flight, packet ids).
    pub session: Session,
    /// Filters this session is subscribed to (full text, `$share/...` included).
    pub subscriptions: Subscriptions,
    /// Connection currently attached (0 = none). A connection whose id differs has been taken
    /// over and must stop.
    pub owner: u64,
    /// Bumped on every attach and detach; timers carry the epoch they were set in and do
    /// nothing if it moved on.
    pub epoch: u64,
    /// Session Expiry Interval in seconds in force (0 = ends with the connection).
    pub expiry_interval: u32,
    /// Will of the attached connection, or a disconnected one whose delay has not passed.
    /// Boxed: most sessions have none, and it is large (~0.5 KiB).
    pub will: Option<Box<PendingWill>>,
    /// When the will is due after a disconnect (v5 Will Delay Interval).
    pub will_due: Option<Instant>,
    /// Set once the session is discarded; a cell in this state is never attached again.
    pub ended: bool,
    /// The session is in the attached store (`crate::persist`): its changes are written.
    pub persisted: bool,
    /// Protocol level of the last connection attached (3, 4 or 5; 0 before the first).
    pub protocol: u8,
    /// Doorbell of the attached connection: rung when messages are queued for it, or when
    /// another connection takes the session over. Each connection brings its own, so a
    /// takeover wakes exactly the connection being replaced.
    pub doorbell: Option<Arc<Notify>>,
    /// Back-pressure state of this session as a subscriber (see [`crate::flow`]).
    pub congestion: Congestion,
    /// The connection an operator asked to close ([`crate::Broker::kick`]; 0: none). That
    /// connection closes at its next `poll_transmit` (its doorbell is rung).
    pub kick: u64,
    /// The client attached, or the last one while the session is offline: deliveries are
    /// authorised against it (`AuthHook::authorize_read`).
    pub client: Option<Arc<ClientInfo>>,
    /// In a cluster: where the handover of this client's session from other nodes stands
    /// (`crate::handoff`).
    pub handover: Handover,
    /// Made here for a connection whose CONNACK waits for the cluster's handover, no client
    /// packet has come after such a CONNACK (the one that shows the client got it), and no
    /// other node's session came into it: no client is known to have been told of it, and it
    /// holds nothing (a connection reads nothing before its CONNACK).
    /// It does not count as present, to the client's next connection here or handed on
    /// (`docs/CLUSTER.md`, "A session made only to wait").
    pub unconfirmed: bool,
}

/// The handover of a session from other nodes of a cluster, as its new connection sees it.
#[derive(Debug, Default)]
pub enum Handover {
    /// Nothing awaited (not in a cluster, clean start, or CONNACK went out).
    #[default]
    Settled,
    /// CONNACK waits for the other nodes' answers.
    Awaited(Box<AwaitedHandover>),
    /// This node handed the session over to another node and passes on to it what other
    /// nodes still forward for the session's filters (`docs/CLUSTER.md`, "Relay after a
    /// handover"). The session is no longer in the registry or the store.
    Relaying(Box<Relaying>),
}

/// A session handed over to another node, relaying until every node has marked the end of
/// what it had sent here for it (or until `deadline`).
#[derive(Debug)]
pub struct Relaying {
    /// The peer session of the node that has the session now.
    pub to: Arc<SessionCell>,
    /// Nodes whose mark has not arrived yet.
    pub waiting: Vec<Arc<str>>,
    /// Nodes whose copies the node this session came from still relays here (it was handed
    /// over to this node a moment before, and passed on before that relay ended): their end
    /// of relaying (`Broker::upstream_relay_ended`) has not arrived yet. Relaying goes on
    /// until it has, so that those copies go on to the session too.
    pub upstream: Vec<Arc<str>>,
    /// When relaying ends whatever has not arrived.
    pub deadline: std::time::Instant,
    /// The claim it was handed over on (marks name it).
    pub at: hayate_session::Arrival,
    /// Claims of other nodes that came after the handover (the client moved on while this
    /// node was away and it answered the claims late, the session gone already): their
    /// marks count too ([`Relaying::counts_mark`]). At most [`Relaying::LATER_CLAIMS`].
    pub later: Vec<(hayate_session::Arrival, Arc<str>)>,
}

impl Relaying {
    /// How many later claims a relay remembers ([`Relaying::later`]).
    pub const LATER_CLAIMS: usize = 8;

    /// Whether a mark of the claim made `at` by node `new` counts for this relay: one of its
    /// own claim, or of a later claim by the node the session went to (its client connected
    /// there again and subscribed while this node was away: the fence of that claim marks
    /// from when the other nodes' copies reach its session there directly), or of a claim
    /// this node was asked after the handover (`later`: its client is at that node now, and
    /// a node's copies after that claim's mark reach it there directly).
    pub fn counts_mark(&self, at: hayate_session::Arrival, new: &str) -> bool {
        (at.is_known() && self.later.iter().any(|(a, n)| *a == at && &**n == new))
            || at == self.at
            || (at.is_known()
                && at > self.at
                && self
                    .to
                    .client_id
                    .strip_prefix(crate::cluster::PEER_CLIENT_PREFIX)
                    == Some(new))
    }
}

/// A CONNACK held until the other nodes answered the claim (`Channel::poll_handover`).
#[derive(Debug)]
pub struct AwaitedHandover {
    /// The CONNACK to send.
    pub connack: hayate_codec::ConnAck,
    /// When it goes out whatever the answers.
    pub deadline: std::time::Instant,
    /// A node handed over a session: CONNACK says Session Present.
    pub received: bool,
    /// Every node asked answered (or the cluster gave up waiting).
    pub answered: bool,
    /// Other nodes' claims of this session that came while it waited: answered once it no
    /// longer waits, so that what the answers bring goes with it (`Broker::prepare_hand_over`).
    pub claims: DeferredClaims,
}

/// Answers to other nodes' claims, held while a session waits for its own claim's answers
/// (`AwaitedHandover::claims`); each one runs once.
#[derive(Default)]
pub struct DeferredClaims(pub Vec<Box<dyn FnOnce() + Send>>);

impl std::fmt::Debug for DeferredClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeferredClaims({})", self.0.len())
    }
}

/// A session's subscriptions (filter → options), allocated with the first one: most
/// connections (publishers, idle devices) never subscribe, and an empty map inline would cost
/// each of them 48 bytes.
#[derive(Debug, Default)]
// The box is the point: `Option<Box<HashMap>>` is 8 bytes inline, `HashMap` 48.
#[allow(clippy::box_collection)]
pub struct Subscriptions(Option<Box<HashMap<Box<str>, SubscriptionRecord>>>);

impl Subscriptions {
    /// Whether `filter` is subscribed.
    pub fn contains_key(&self, filter: &str) -> bool {
        self.0.as_ref().is_some_and(|map| map.contains_key(filter))
    }

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    /// True without subscriptions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces one; returns the previous record.
    pub fn insert(
        &mut self,
        filter: Box<str>,
        record: SubscriptionRecord,
    ) -> Option<SubscriptionRecord> {
        self.0
            .get_or_insert_with(Default::default)
            .insert(filter, record)
    }

    /// Removes one; returns its record.
    pub fn remove(&mut self, filter: &str) -> Option<SubscriptionRecord> {
        let map = self.0.as_mut()?;
        let removed = map.remove(filter);
        if map.is_empty() {
            self.0 = None;
        }
        removed
    }

    /// Takes every subscription out.
    pub fn drain(&mut self) -> impl Iterator<Item = (Box<str>, SubscriptionRecord)> {
        self.0.take().into_iter().flat_map(|map| map.into_iter())
    }

    /// The subscriptions, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Box<str>, &SubscriptionRecord)> {
        self.0.iter().flat_map(|map| map.iter())
    }
}

/// A session shared between the registry, the router (subscriptions point at it) and the
/// connection attached to it.
#[derive(Debug)]
pub struct SessionCell {
    /// Unique id of this session (never reused), the router's subscriber key.
    pub id: u64,
    /// Client identifier.
    pub client_id: Arc<str>,
    /// The state.
    pub state: Mutex<SessionState>,
    /// Set exactly while `state.congestion` is `Congested` (by [`crate::router::Router::apply_hint`]):
    /// a lock-free hint for publishers deciding whether to hold a PUBLISH back before routing it
    /// (the lock is taken to confirm).
    pub congested: AtomicBool,
    /// A client's session or another cluster node's ([`crate::cluster::SessionKind`]).
    pub kind: crate::cluster::SessionKind,
    /// In a cluster: the client published through this node while the session was here, or
    /// the node it was handed over from said so. A handover of such a session is announced
    /// to the other nodes so that its messages stay in order (`docs/CLUSTER.md`, "A publisher
    /// that moves"); one of a session that never published is not.
    pub published: AtomicBool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh process-unique id, for sessions and connections.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Client id → session.
#[derive(Debug, Default)]
pub struct Registry {
    /// A set of cells found by their client id: one pointer per slot where a map from client
    /// id to cell takes three (the key is in the cell already).
    sessions: Mutex<HashSet<ByClientId>>,
}

/// A session in the registry, equal to and found by its client id.
#[derive(Debug, Clone)]
struct ByClientId(Arc<SessionCell>);

impl PartialEq for ByClientId {
    fn eq(&self, other: &Self) -> bool {
        self.0.client_id == other.0.client_id
    }
}

impl Eq for ByClientId {}

impl Hash for ByClientId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the `str` it borrows as, so that a lookup by `&str` finds it.
        (*self.0.client_id).hash(state);
    }
}

impl Borrow<str> for ByClientId {
    fn borrow(&self) -> &str {
        &self.0.client_id
    }
}

/// What [`Registry::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The session the connection now owns.
    pub cell: Arc<SessionCell>,
    /// A session was resumed (CONNACK Session Present) [MQTT-3.2.2-3].
    pub session_present: bool,
    /// The previous session under this client id, when it was replaced (clean start) and must
    /// now be ended by the caller (subscriptions removed, will published).
    pub replaced: Option<Arc<SessionCell>>,
}

impl Registry {
    /// Finds or creates the session for `client_id`. With `clean_start` any existing session is
    /// replaced by a new one [MQTT-3.1.2-4]; otherwise it is resumed [MQTT-3.1.2-5].
    pub fn open(
        &self,
        client_id: &Arc<str>,
        clean_start: bool,
        new_session: impl FnOnce() -> Session,
    ) -> Opened {
        let mut sessions = self.sessions.lock();
        if let Some(ByClientId(existing)) = sessions.get(&**client_id) {
            if !clean_start && !existing.state.lock().ended {
                return Opened {
                    cell: existing.clone(),
                    session_present: true,
                    replaced: None,
                };
            }
        }
        let cell = Arc::new(SessionCell {
            id: next_id(),
            client_id: client_id.clone(),
            congested: AtomicBool::new(false),
            kind: crate::cluster::SessionKind::of(client_id),
            published: AtomicBool::new(false),
            state: Mutex::new(SessionState {
                session: new_session(),
                subscriptions: Subscriptions::default(),
                owner: 0,
                epoch: 0,
                expiry_interval: 0,
                will: None,
                will_due: None,
                ended: false,
                persisted: false,
                protocol: 0,
                doorbell: None,
                congestion: Congestion::Clear,
                kick: 0,
                client: None,
                handover: Handover::Settled,
                unconfirmed: false,
            }),
        });
        let replaced = sessions
            .replace(ByClientId(cell.clone()))
            .map(|ByClientId(replaced)| replaced);
        Opened {
            cell,
            session_present: false,
            replaced,
        }
    }

    /// Removes `cell` from the registry if it is still the session for its client id.
    pub fn remove_if_current(&self, cell: &Arc<SessionCell>) -> bool {
        let mut sessions = self.sessions.lock();
        match sessions.get(&*cell.client_id) {
            Some(ByClientId(current)) if Arc::ptr_eq(current, cell) => {
                sessions.remove(&*cell.client_id);
                true
            }
            _ => false,
        }
    }

    /// Sessions registered.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// True when no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session for `client_id`, if any.
    pub fn get(&self, client_id: &str) -> Option<Arc<SessionCell>> {
        self.sessions
            .lock()
            .get(client_id)
            .map(|ByClientId(cell)| cell.clone())
    }

    /// One page of sessions in client id order: at most `limit` whose client id is greater
    /// than `after` and starts with `prefix`. The next page starts after the last one
    /// returned. Walks the whole map under its lock (no copy of it, only the page's entries
    /// are cloned): O(n log limit) under the registry lock, so a listing of 100k clients is
    /// many small answers, never one giant one.
    pub fn page(
        &self,
        after: Option<&str>,
        prefix: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<SessionCell>> {
        let mut smallest = crate::admin::SmallestK::new(limit);
        let sessions = self.sessions.lock();
        for ByClientId(cell) in sessions.iter() {
            let id = &cell.client_id;
            if after.is_some_and(|after| &**id <= after)
                || prefix.is_some_and(|prefix| !id.starts_with(prefix))
            {
                continue;
            }
            if smallest.wants(id) {
                smallest.offer(id.clone());
            }
        }
        smallest
            .into_sorted()
            .iter()
            .filter_map(|id| sessions.get(&**id).map(|ByClientId(cell)| cell.clone()))
            .collect()
    }
}

/// Caps a QoS at the granted maximum.
pub fn min_qos(a: QoS, b: QoS) -> QoS {
    a.min(b)
}
