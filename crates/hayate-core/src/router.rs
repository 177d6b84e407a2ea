//! Routing: the subscription index, shared-subscription groups, retained messages, and the
//! fan-out of one message to the sessions whose subscriptions match it.
//!
//! The cost of routing a message depends on the topic's levels and the number of matches,
//! never on the number of clients or subscriptions (the index is a hash map for exact filters
//! plus a level trie for wildcards). The index sits behind a reader-writer lock: publishes only
//! read it, so they never wait for each other; SUBSCRIBE/UNSUBSCRIBE take it briefly to write.
//! No session lock is held while the index lock is taken.

use crate::arrival::RecentPublishes;
use crate::cluster::{ClusterRoutes, SessionKind};
use crate::config::{BrokerConfig, SharedStrategy};
use crate::flow::Hint;
use crate::hooks::AuthHook;
use crate::persist::Attached;
use crate::registry::{Handover, SessionCell, SessionState, SubscriptionRecord};
use hayate_codec::{QoS, SubscriptionOptions};
use hayate_session::{Arrival, Delivery, EnqueueOutcome, Message};
use hayate_topic::{RetainedTree, SubscriptionIndex};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Doorbells to ring once the current batch of packets is processed. A publisher collects them
/// across its whole read buffer and rings each once at the end. `Notify` keeps a permit, so a
/// ring before the connection waits is not lost.
pub type WakeList = Vec<Arc<tokio::sync::Notify>>;

/// One subscription in the index.
#[derive(Debug, Clone)]
pub struct SubEntry {
    /// The subscribing session.
    pub cell: Arc<SessionCell>,
    /// Options and identifier.
    pub record: SubscriptionRecord,
}

/// A `$share/{group}/{filter}` group: its members and the cursor of its strategy.
#[derive(Debug)]
pub struct SharedGroup {
    /// The full `$share/group/filter` text; also the tag on deliveries made through the group.
    pub key: Arc<str>,
    members: Mutex<Vec<SubEntry>>,
    cursor: AtomicUsize,
}

/// Outcome of routing one message.
#[derive(Debug, Default, Clone)]
pub struct RouteOutcome {
    /// Sessions the message was queued for.
    pub delivered: usize,
    /// Sessions that matched but dropped it (queue full, offline QoS 0).
    pub dropped: usize,
    /// Sessions that matched but may not read the topic (`AuthHook::authorize_read`).
    pub denied: usize,
    /// A session the message was queued for that is now `Congested`
    /// ([`crate::flow::Congestion`]): the publisher should pause reading while it drains.
    pub congested: Option<Arc<SessionCell>>,
    /// The store's ticket for what this message changed (a retained message), when a store is
    /// attached: its acknowledgement waits until the ticket is durable.
    pub stored: Option<crate::store::Ticket>,
}

/// A subscription put in place by [`Router::subscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscribed {
    /// It replaced an existing subscription of the same session to the same filter.
    pub replaced: bool,
    /// The index version it created: messages routed against an earlier version did not see
    /// it (see [`Router::missed`]). 0 for shared subscriptions.
    pub version: u64,
}

/// The router. See the module docs.
#[derive(Debug)]
pub struct Router {
    index: RwLock<SubscriptionIndex<u64, SubEntry>>,
    /// Bumped (under the `index` write lock) by every non-shared subscription.
    version: AtomicU64,
    /// Recently routed messages, for subscriptions that arrived first but were put in place
    /// after them (`crate::arrival`).
    recent: RecentPublishes,
    /// The broker's store, once attached: deliveries to stored sessions are written to it.
    pub(crate) persistence: std::sync::OnceLock<Arc<Attached>>,
    shared: RwLock<SubscriptionIndex<Arc<str>, Arc<SharedGroup>>>,
    retained: RwLock<RetainedTree<Arc<Message>>>,
    /// The shared-group strategy; changeable while the broker runs ([`Router::reconfigure`]).
    strategy: AtomicU8,
    /// Sessions with their `congested` hint set (in the `Congested` state); while zero,
    /// publishers skip the pre-routing congestion check entirely.
    congested_sessions: AtomicUsize,
    /// The node's route set and peer sessions, when the broker is one node of a cluster.
    cluster: std::sync::OnceLock<Arc<ClusterRoutes>>,
}

/// A matched, per-client merged target of one message.
struct Target {
    cell: Arc<SessionCell>,
    qos: QoS,
    retain_as_published: bool,
    subscription_ids: Vec<u32>,
}

impl Router {
    /// A router configured by `config` (shared-group strategy, arrival-order window).
    pub fn new(config: &BrokerConfig) -> Router {
        Router {
            index: RwLock::default(),
            version: AtomicU64::new(0),
            recent: RecentPublishes::new(
                Duration::from_millis(config.arrival_window_ms),
                config.arrival_window_bytes,
            ),
            shared: RwLock::default(),
            retained: RwLock::default(),
            strategy: AtomicU8::new(config.shared_subscription_strategy as u8),
            congested_sessions: AtomicUsize::new(0),
            persistence: std::sync::OnceLock::new(),
            cluster: std::sync::OnceLock::new(),
        }
    }

    /// Applies the live settings of a new configuration: the shared-group strategy and the
    /// arrival-order window, for the messages routed from now on.
    pub fn reconfigure(&self, config: &BrokerConfig) {
        self.strategy
            .store(config.shared_subscription_strategy as u8, Ordering::Relaxed);
        self.recent.set(
            Duration::from_millis(config.arrival_window_ms),
            config.arrival_window_bytes,
        );
    }

    /// The shared-group strategy in force.
    pub fn strategy(&self) -> SharedStrategy {
        match self.strategy.load(Ordering::Relaxed) {
            x if x == SharedStrategy::Random as u8 => SharedStrategy::Random,
            x if x == SharedStrategy::HashClientId as u8 => SharedStrategy::HashClientId,
            _ => SharedStrategy::RoundRobin,
        }
    }

    /// Makes this router one node's of a cluster (`crate::cluster`): from now on client
    /// subscriptions are counted in `routes`. Call before any client subscribes; a second call
    /// returns `false` and changes nothing.
    pub fn attach_cluster(&self, routes: Arc<ClusterRoutes>) -> bool {
        self.cluster.set(routes).is_ok()
    }

    /// The node's route set and peer sessions, when in a cluster.
    pub fn cluster(&self) -> Option<&Arc<ClusterRoutes>> {
        self.cluster.get()
    }

    /// Counts a client subscription added to or removed from `filter` (its topic filter
    /// `topic_filter`, without `$share/GROUP/`) in the route set. Filters on node-local topics
    /// (`$SYS`) stay out of it: each node has its own.
    fn count_route(&self, filter: &str, topic_filter: &str, cell: &SessionCell, added: bool) {
        if crate::cluster::stays_on_node(topic_filter) {
            return;
        }
        if let (Some(cluster), SessionKind::Client) = (self.cluster.get(), cell.kind) {
            if added {
                cluster.added(filter);
            } else {
                cluster.removed(filter);
            }
        }
    }

    /// Adds or replaces a subscription (replacing is [MQTT-3.8.4-3]). `filter` is the full
    /// text (with `$share/...` for shared ones) and must be valid.
    pub fn subscribe(&self, filter: &str, entry: SubEntry) -> Subscribed {
        match hayate_topic::parse_shared(filter) {
            Ok(Some(shared)) => {
                let group_name: Arc<str> = Arc::from(shared.group);
                let group = {
                    let mut index = self.shared.write();
                    match index.get(shared.filter, &group_name) {
                        Some(group) => group.clone(),
                        None => {
                            let group = Arc::new(SharedGroup {
                                key: Arc::from(filter),
                                members: Mutex::new(Vec::new()),
                                cursor: AtomicUsize::new(0),
                            });
                            index.insert(shared.filter, group_name, group.clone());
                            group
                        }
                    }
                };
                let mut members = group.members.lock();
                let replaced = match members.iter_mut().find(|m| m.cell.id == entry.cell.id) {
                    Some(existing) => {
                        *existing = entry;
                        true
                    }
                    None => {
                        self.count_route(filter, shared.filter, &entry.cell, true);
                        members.push(entry);
                        false
                    }
                };
                Subscribed {
                    replaced,
                    version: 0,
                }
            }
            _ => {
                let id = entry.cell.id;
                let cell = entry.cell.clone();
                let mut index = self.index.write();
                let replaced = index.insert(filter, id, entry).is_some();
                if !replaced {
                    self.count_route(filter, filter, &cell, true);
                }
                let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
                Subscribed { replaced, version }
            }
        }
    }

    /// Messages that arrived after `arrival` but were routed before index version `version`
    /// existed, on topics `filter` matches, in arrival order: what a subscription that arrived
    /// at `arrival` and was put in place as `version` would have received had the broker
    /// handled packets strictly in arrival order (`docs/design/arrival-order.md`).
    /// `subscriber` is the subscribing session: its own messages are ordered exactly (they came
    /// on its own connection), others' within the stamps' slack, but never one that arrived
    /// before `connected` (the subscriber's CONNECT): its client cannot have expected it.
    pub fn missed(
        &self,
        filter: &str,
        arrival: Arrival,
        connected: Arrival,
        version: u64,
        subscriber: u64,
    ) -> Vec<Arc<Message>> {
        self.recent.missed(arrival, version, subscriber, |message| {
            message.arrival > connected && hayate_topic::matches_filter(filter, &message.topic)
        })
    }

    /// Removes a subscription; returns whether it existed.
    pub fn unsubscribe(&self, filter: &str, session_id: u64) -> bool {
        match hayate_topic::parse_shared(filter) {
            Ok(Some(shared)) => {
                let group_name: Arc<str> = Arc::from(shared.group);
                let mut index = self.shared.write();
                let Some(group) = index.get(shared.filter, &group_name).cloned() else {
                    return false;
                };
                let mut members = group.members.lock();
                let Some(at) = members.iter().position(|m| m.cell.id == session_id) else {
                    return false;
                };
                let removed = members.remove(at);
                self.count_route(filter, shared.filter, &removed.cell, false);
                if members.is_empty() {
                    index.remove(shared.filter, &group_name);
                }
                true
            }
            _ => {
                let removed = self.index.write().remove(filter, &session_id);
                match removed {
                    Some(entry) => {
                        self.count_route(filter, filter, &entry.cell, false);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    /// A session matching `topic` (other than `exclude`) whose congested flag is set, if any:
    /// the candidate a publisher should wait on before routing. Costs one relaxed load while no
    /// session is congested. Shared groups are not looked at (a group member that is congested
    /// holds back only the publishers whose messages reached it).
    pub fn congested_target(&self, topic: &str, exclude: Option<u64>) -> Option<Arc<SessionCell>> {
        if self.congested_sessions.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut found = None;
        self.index
            .read()
            .for_each_match(topic, |_filter, _id, entry| {
                if found.is_none()
                    && Some(entry.cell.id) != exclude
                    && entry.cell.congested.load(Ordering::Relaxed)
                {
                    found = Some(entry.cell.clone());
                }
            });
        found
    }

    /// Applies a congestion transition to the session's lock-free hint and the count of
    /// congested sessions. Call with the session's lock held, right after the transition.
    pub fn apply_hint(&self, cell: &SessionCell, hint: Hint) {
        match hint {
            Hint::Keep => {}
            Hint::Set => {
                if !cell.congested.swap(true, Ordering::Relaxed) {
                    self.congested_sessions.fetch_add(1, Ordering::Relaxed);
                }
            }
            Hint::Clear => {
                if cell.congested.swap(false, Ordering::Relaxed) {
                    self.congested_sessions.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sessions in the `Congested` state (for tests and metrics).
    pub fn congested_count(&self) -> usize {
        self.congested_sessions.load(Ordering::Relaxed)
    }

    /// Number of (filter, session) subscriptions, shared members not included.
    pub fn subscription_count(&self) -> usize {
        self.index.read().len()
    }

    /// Queues `message` for every session with a matching subscription: one copy per session at
    /// the highest granted QoS of its matching subscriptions, carrying all their subscription
    /// identifiers [MQTT-3.3.4-2] [MQTT-3.3.4-3] [MQTT-3.3.4-4]; plus one member of each matching shared group
    /// (§4.8.2). Sessions that need waking are appended to `wake`.
    ///
    /// With `reader` (a hook whose `has_read_rules` is true) each delivery is first checked
    /// with `authorize_read` against the subscriber's `ClientInfo`; without it delivery costs
    /// nothing extra.
    pub fn route(
        &self,
        message: &Arc<Message>,
        reader: Option<&dyn AuthHook>,
        now: Instant,
        wake: &mut WakeList,
    ) -> RouteOutcome {
        let mut targets: Vec<Target> = Vec::new();
        let mut groups: Vec<Arc<SharedGroup>> = Vec::new();
        // A message another node forwarded goes where its scope says: to the plain
        // subscriptions, to one member of the named groups, or both (`crate::cluster`).
        let scope = message.from_peer.as_deref();
        let plain = scope.is_none_or(|scope| scope.plain);
        // On a cluster node, matched and queued as one step (`crate::cluster::Switch`).
        let _switch = self
            .cluster
            .get()
            .map(|cluster| cluster.routing(&message.topic));
        {
            let index = self.index.read();
            if plain {
                index.for_each_match(&message.topic, |_filter, _id, entry| {
                    add_target(&mut targets, entry, message);
                });
            }
            // Under the read lock: no subscription can appear between the match and this.
            self.recent
                .record(message, self.version.load(Ordering::Relaxed));
        }
        self.add_peers_for_retained(&mut targets, message);
        merge_targets(&mut targets);
        {
            let shared = self.shared.read();
            shared.for_each_match(&message.topic, |_filter, _group, group| {
                if scope.is_none_or(|scope| scope.groups.contains(&group.key)) {
                    groups.push(group.clone());
                }
            });
        }
        let mut outcome = RouteOutcome::default();
        for target in targets {
            let delivery = Delivery {
                message: message.clone(),
                qos: message.qos.min(target.qos),
                retain: target.retain_as_published && message.retain,
                subscription_ids: target.subscription_ids,
                shared_group: None,
                seq: 0,
                sent_as: None,
            };
            self.enqueue(&target.cell, delivery, reader, now, wake, &mut outcome);
        }
        for group in groups {
            self.deliver_to_group(&group, message, None, reader, now, wake, &mut outcome);
        }
        outcome
    }

    /// In a cluster, a retained message published on this node goes to every peer session,
    /// whatever it subscribes to: every node keeps every retained message, so a subscription
    /// on any node finds them (`docs/CLUSTER.md`). Node-local topics (`$SYS`) stay on their node.
    fn add_peers_for_retained(&self, targets: &mut Vec<Target>, message: &Message) {
        if !message.retain
            || message.from_peer.is_some()
            || crate::cluster::stays_on_node(&message.topic)
        {
            return;
        }
        let Some(cluster) = self.cluster.get() else {
            return;
        };
        for cell in cluster.peers() {
            targets.push(Target {
                cell,
                qos: message.qos,
                retain_as_published: true,
                subscription_ids: Vec::new(),
            });
        }
    }

    /// Hands a message to one member of a shared group, skipping `exclude` (a member that went
    /// away) and members that may not read the topic, and preferring members that are online.
    #[allow(clippy::too_many_arguments)]
    fn deliver_to_group(
        &self,
        group: &SharedGroup,
        message: &Arc<Message>,
        exclude: Option<u64>,
        reader: Option<&dyn AuthHook>,
        now: Instant,
        wake: &mut WakeList,
        outcome: &mut RouteOutcome,
    ) {
        let chosen = {
            let members = group.members.lock();
            let candidates: Vec<&SubEntry> = members
                .iter()
                .filter(|m| Some(m.cell.id) != exclude)
                .collect();
            if candidates.is_empty() {
                return;
            }
            let start = match self.strategy() {
                SharedStrategy::RoundRobin => group.cursor.fetch_add(1, Ordering::Relaxed),
                SharedStrategy::Random => rand::random::<u32>() as usize,
                SharedStrategy::HashClientId => message.publisher_key as usize,
            };
            let n = candidates.len();
            // First online member from the strategy's pick onwards; else the first offline
            // one from there (the pick itself when every member may read). In a cluster, a
            // message from another node goes to a member on this node only, and with
            // `prefer_local_shared` an online member on this node comes before other nodes.
            let prefer_local = self.cluster.get().is_some_and(|c| c.prefer_local_shared);
            let mut offline = None;
            let mut online = None;
            let mut online_peer = None;
            for member in (0..n).map(|i| candidates[(start + i) % n]) {
                let peer = member.cell.kind == SessionKind::Peer;
                if peer && message.from_peer.is_some() {
                    continue;
                }
                let state = member.cell.state.lock();
                if !may_read(reader, &state, message) {
                    continue;
                }
                if state.session.is_attached() {
                    if peer && prefer_local {
                        online_peer.get_or_insert(member);
                        continue;
                    }
                    online = Some(member);
                    break;
                }
                offline.get_or_insert(member);
            }
            match online.or(online_peer).or(offline) {
                Some(member) => member.clone(),
                None => {
                    outcome.denied += 1;
                    return;
                }
            }
        };
        let delivery = Delivery {
            message: message.clone(),
            qos: message.qos.min(chosen.record.options.qos),
            retain: false,
            subscription_ids: chosen.record.subscription_id.into_iter().collect(),
            shared_group: Some(group.key.clone()),
            seq: 0,
            sent_as: None,
        };
        // Already checked: the group member was chosen among those that may read.
        self.enqueue(&chosen.cell, delivery, None, now, wake, outcome);
    }

    /// Gives deliveries that a departing member of shared groups had not completed to other
    /// members of the same groups.
    pub fn redistribute_shared(
        &self,
        from: u64,
        deliveries: Vec<hayate_session::Delivery>,
        reader: Option<&dyn AuthHook>,
        now: Instant,
        wake: &mut WakeList,
    ) -> RouteOutcome {
        let mut outcome = RouteOutcome::default();
        for delivery in deliveries {
            let Some(key) = delivery.shared_group.as_ref() else {
                continue;
            };
            let Ok(Some(shared)) = hayate_topic::parse_shared(key) else {
                continue;
            };
            let group_name: Arc<str> = Arc::from(shared.group);
            let group = self.shared.read().get(shared.filter, &group_name).cloned();
            if let Some(group) = group {
                self.deliver_to_group(
                    &group,
                    &delivery.message,
                    Some(from),
                    reader,
                    now,
                    wake,
                    &mut outcome,
                );
            }
        }
        outcome
    }

    // ----- retained --------------------------------------------------------------------------

    /// Stores, replaces or (empty payload) clears the retained message of its topic, and
    /// tells `store` (`crate::persist`)
    /// [MQTT-3.3.1-5] [MQTT-3.3.1-6] [MQTT-3.3.1-7]. Returns the number stored afterwards.
    /// With a store, also the ticket of the op appended for it.
    pub fn retain(
        &self,
        message: &Arc<Message>,
        store: Option<&Attached>,
    ) -> (usize, Option<crate::store::Ticket>) {
        let mut retained = self.retained.write();
        // Under the lock: the store sees changes to one topic in the order they were made.
        let ticket = store.and_then(|attached| {
            crate::persist::retained_op(attached, message).map(|op| {
                attached.store.append(op);
                attached.store.appended()
            })
        });
        if message.payload.is_empty() {
            retained.remove(&message.topic);
        } else {
            retained.insert(&message.topic, message.clone());
        }
        (retained.len(), ticket)
    }

    /// Retained messages matching `filter`, not expired.
    pub fn retained_matching(&self, filter: &str, now: Instant) -> Vec<Arc<Message>> {
        let mut found = Vec::new();
        self.retained
            .read()
            .for_each_match(filter, |_topic, message| {
                if !message.is_expired(now) {
                    found.push(message.clone());
                }
            });
        found
    }

    /// Drops expired retained messages (§3.3.1.3); returns how many.
    pub fn prune_retained(&self, now: Instant) -> usize {
        let store = self.persistence.get();
        self.retained.write().retain(|_topic, message| {
            let expired = message.is_expired(now);
            // Client-made messages are stored: remove them from the store too (under the
            // tree's lock, so the store keeps the tree's order).
            if let (true, Some(attached), Some(_)) = (expired, store, message.publisher) {
                attached
                    .store
                    .append(crate::store::StoreOp::DeleteRetained {
                        topic: message.topic.to_string(),
                    });
            }
            !expired
        })
    }

    /// Retained messages stored.
    pub fn retained_count(&self) -> usize {
        self.retained.read().len()
    }

    /// Removes the retained message of `topic`, from `store` too, without routing anything.
    /// Returns whether there was one.
    pub fn remove_retained(&self, topic: &str, store: Option<&Attached>) -> bool {
        let mut retained = self.retained.write();
        let removed = retained.remove(topic).is_some();
        if let (true, Some(attached)) = (removed, store) {
            attached
                .store
                .append(crate::store::StoreOp::DeleteRetained {
                    topic: topic.to_string(),
                });
        }
        removed
    }

    /// One page of the retained messages matching `filter`, not expired, in topic order: at
    /// most `limit` whose topic is greater than `after`. Visits every match under the read
    /// lock but copies only the page.
    pub fn retained_page(
        &self,
        filter: &str,
        after: Option<&str>,
        limit: usize,
        now: Instant,
    ) -> Vec<Arc<Message>> {
        let mut page = crate::admin::SmallestK::new(limit);
        self.retained
            .read()
            .for_each_match(filter, |topic, message| {
                if after.is_none_or(|after| topic > after) && !message.is_expired(now) {
                    page.offer(SortedByTopic(message.clone()));
                }
            });
        page.into_sorted().into_iter().map(|m| m.0).collect()
    }

    /// The subscriptions whose filter matches `topic` (shared groups' members included): the
    /// filter, the session and the granted QoS of each.
    pub fn subscribers(&self, topic: &str) -> Vec<(Arc<str>, Arc<SessionCell>, QoS)> {
        let mut found = Vec::new();
        self.index
            .read()
            .for_each_match(topic, |filter, _id, entry| {
                found.push((
                    Arc::from(filter),
                    entry.cell.clone(),
                    entry.record.options.qos,
                ));
            });
        self.shared
            .read()
            .for_each_match(topic, |_filter, _key, group| {
                for member in group.members.lock().iter() {
                    let qos = member.record.options.qos;
                    found.push((group.key.clone(), member.cell.clone(), qos));
                }
            });
        found
    }
}

/// A retained message ordered by its topic (for [`Router::retained_page`]).
struct SortedByTopic(Arc<Message>);

impl PartialEq for SortedByTopic {
    fn eq(&self, other: &Self) -> bool {
        self.0.topic == other.0.topic
    }
}
impl Eq for SortedByTopic {}
impl PartialOrd for SortedByTopic {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SortedByTopic {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.topic.cmp(&other.0.topic)
    }
}

/// Adds a matching subscription to the target list (merged per session later).
fn add_target(targets: &mut Vec<Target>, entry: &SubEntry, message: &Message) {
    // A message from another node of the cluster reached every node that wanted it directly:
    // it is never passed on to a third (`crate::cluster`).
    if let Some(scope) = &message.from_peer {
        if entry.cell.kind == SessionKind::Peer
            || (!scope.except.is_empty() && scope.except.contains(&entry.cell.id))
        {
            return;
        }
    }
    let options: SubscriptionOptions = entry.record.options;
    // [MQTT-3.8.3-3] No Local: never back to the connection that published it.
    if options.no_local && message.publisher == Some(entry.cell.id) {
        return;
    }
    targets.push(Target {
        cell: entry.cell.clone(),
        qos: options.qos,
        retain_as_published: options.retain_as_published,
        subscription_ids: entry.record.subscription_id.into_iter().collect(),
    });
}

/// Merges targets of the same session (overlapping subscriptions) into one: highest QoS, every
/// subscription identifier. Sorting keeps this O(m log m) in the number of matches.
fn merge_targets(targets: &mut Vec<Target>) {
    if targets.len() < 2 {
        return;
    }
    targets.sort_unstable_by_key(|t| t.cell.id);
    let mut merged: Vec<Target> = Vec::with_capacity(targets.len());
    for target in targets.drain(..) {
        match merged.last_mut() {
            Some(last) if last.cell.id == target.cell.id => {
                last.qos = last.qos.max(target.qos);
                last.retain_as_published |= target.retain_as_published;
                last.subscription_ids.extend(target.subscription_ids);
            }
            _ => merged.push(target),
        }
    }
    *targets = merged;
}

/// Whether the session's client may receive `message` (always, without read rules). A
/// session that never had a client is refused.
fn may_read(reader: Option<&dyn AuthHook>, state: &SessionState, message: &Message) -> bool {
    match reader {
        None => true,
        Some(hook) => state.client.as_deref().is_some_and(|client| {
            client.listener.is_cluster_internal() || hook.authorize_read(client, &message.topic)
        }),
    }
}

impl Router {
    /// Queues one delivery for one session, outside routing (a session handed over by
    /// another node of a cluster, a node's control message to a peer session).
    pub fn deliver(
        &self,
        cell: &Arc<SessionCell>,
        delivery: Delivery,
        now: Instant,
        wake: &mut WakeList,
        outcome: &mut RouteOutcome,
    ) {
        self.enqueue(cell, delivery, None, now, wake, outcome);
    }

    pub(crate) fn enqueue(
        &self,
        cell: &Arc<SessionCell>,
        delivery: Delivery,
        reader: Option<&dyn AuthHook>,
        now: Instant,
        wake: &mut WakeList,
        outcome: &mut RouteOutcome,
    ) {
        let mut state = cell.state.lock();
        if let Handover::Relaying(relaying) = &state.handover {
            // Handed over to another node: what another node forwarded goes on to it; what
            // was published here reaches it through its peer session's own subscription.
            // Past its deadline a relay passes nothing on, though it ends only at the next
            // `Broker::expire_relays`: the suppressions of the nodes that marked end at the
            // deadline, and their copies, which reach the session directly, went on twice in
            // between (the lose-node soak of `aa0d107`).
            if relaying.deadline <= now {
                return;
            }
            let to = relaying.to.clone();
            drop(state);
            self.relay(cell, &to, delivery, now, wake, outcome);
            return;
        }
        if !may_read(reader, &state, &delivery.message) {
            outcome.denied += 1;
            tracing::debug!(client_id = %cell.client_id, topic = %delivery.message.topic, "delivery_denied");
            return;
        }
        match state.session.enqueue(delivery) {
            EnqueueOutcome::Queued { wake: needs_wake } => {
                outcome.delivered += 1;
                let state = &mut *state;
                if let Some(attached) = self.persistence.get() {
                    let ticket = attached.flush(&cell.client_id, state);
                    outcome.stored = outcome.stored.max(ticket);
                }
                let hint = state.congestion.after_enqueue(&state.session, now);
                self.apply_hint(cell, hint);
                if outcome.congested.is_none() && state.congestion.is_congested() {
                    outcome.congested = Some(cell.clone());
                }
                if needs_wake {
                    if let Some(doorbell) = &state.doorbell {
                        wake.push(doorbell.clone());
                    }
                }
            }
            EnqueueOutcome::DroppedQueueFull => {
                outcome.dropped += 1;
                tracing::debug!(client_id = %cell.client_id, "queue_full_message_dropped");
            }
            EnqueueOutcome::DroppedBudget => {
                outcome.dropped += 1;
                tracing::debug!(client_id = %cell.client_id, "memory_budget_message_dropped");
            }
            EnqueueOutcome::DroppedOffline => outcome.dropped += 1,
        }
    }
}
