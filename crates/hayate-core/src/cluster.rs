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

use crate::registry::SessionCell;
use hayate_codec::Publish;
use hayate_session::Arrival;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

/// The client identifier prefix reserved for peer sessions: only connections through a
/// cluster listener may use it, and every session whose identifier has it is a peer session.
pub const PEER_CLIENT_PREFIX: &str = "$cluster/";

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
    Add(Arc<str>),
    /// The last client subscription to this filter went away.
    Remove(Arc<str>),
}

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
        /// When its CONNECT arrived: of two connections of one client to two nodes, the later
        /// one wins.
        at: Arrival,
    },
    /// A node sent a message on a `$cluster/...` topic through its peer session here.
    Control {
        /// The peer session's client identifier (`$cluster/NODE`).
        from: Arc<str>,
        /// The message.
        publish: Box<Publish>,
    },
}

/// The cluster side of a node's router. See the module docs.
#[derive(Debug)]
pub struct ClusterRoutes {
    counts: Mutex<HashMap<Arc<str>, u32>>,
    feed: broadcast::Sender<RouteDelta>,
    peers: RwLock<Vec<Arc<SessionCell>>>,
    events: mpsc::Sender<ClusterEvent>,
    events_rx: Mutex<Option<mpsc::Receiver<ClusterEvent>>>,
    /// Shared-subscription groups deliver to a member on this node when one is online, and
    /// to another node's members only otherwise.
    pub prefer_local_shared: bool,
}

impl ClusterRoutes {
    /// An empty route set.
    pub fn new(prefer_local_shared: bool) -> ClusterRoutes {
        let (events, events_rx) = mpsc::channel(EVENTS_CAPACITY);
        ClusterRoutes {
            events,
            events_rx: Mutex::new(Some(events_rx)),
            counts: Mutex::new(HashMap::new()),
            feed: broadcast::channel(FEED_CAPACITY).0,
            peers: RwLock::new(Vec::new()),
            prefer_local_shared,
        }
    }

    /// The current route set and a receiver of every change after it (taken under the same
    /// lock, so nothing is missed or seen twice). A receiver that lags by more than the feed
    /// holds gets `Lagged` and must take the set again.
    pub fn snapshot(&self) -> (Vec<Arc<str>>, broadcast::Receiver<RouteDelta>) {
        let counts = self.counts.lock();
        (counts.keys().cloned().collect(), self.feed.subscribe())
    }

    /// A client subscription to `filter` was added.
    pub(crate) fn added(&self, filter: &str) {
        let mut counts = self.counts.lock();
        if let Some(count) = counts.get_mut(filter) {
            *count += 1;
            return;
        }
        let filter: Arc<str> = Arc::from(filter);
        counts.insert(filter.clone(), 1);
        let _ = self.feed.send(RouteDelta::Add(filter));
    }

    /// A client subscription to `filter` was removed.
    pub(crate) fn removed(&self, filter: &str) {
        let mut counts = self.counts.lock();
        let Some(count) = counts.get_mut(filter) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            if let Some((filter, _)) = counts.remove_entry(filter) {
                let _ = self.feed.send(RouteDelta::Remove(filter));
            }
        }
    }

    /// Filters in the route set.
    pub fn len(&self) -> usize {
        self.counts.lock().len()
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
        assert_eq!(
            seen,
            vec![
                RouteDelta::Add("a/+".into()),
                RouteDelta::Add("$share/g/b".into()),
                RouteDelta::Remove("a/+".into()),
            ]
        );
        let (now, _) = routes.snapshot();
        assert_eq!(now, vec![Arc::<str>::from("$share/g/b")]);
    }

    #[test]
    fn kind_follows_the_reserved_prefix() {
        assert_eq!(SessionKind::of("$cluster/n1"), SessionKind::Peer);
        assert_eq!(SessionKind::of("sensor-1"), SessionKind::Client);
        assert_eq!(SessionKind::of("$clusterx"), SessionKind::Client);
    }
}
