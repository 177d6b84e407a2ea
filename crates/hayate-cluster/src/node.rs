//! This node in the cluster: gossip (chitchat), one [`crate::link::Link`] per other live
//! node (`membership.rs`), dead nodes' state dropped after a grace period, and the status in
//! `$SYS/broker/cluster/nodes`.

use crate::control::{Answer, Claim};
use crate::link::LinkContext;
use crate::status::{NodeStatus, Status, STATUS_TOPIC};
use crate::wait::{relink_wait, PeerState, PendingClaim, ANSWER_TIMEOUT};
use crate::{ClusterConfig, ClusterError, NodeStats};
use chitchat::transport::UdpTransport;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig};
use hayate_codec::QoS;
use hayate_core::cluster::{
    ClusterEvent, ClusterRoutes, Fence, INGRESS_CLIENT_PREFIX, PEER_CLIENT_PREFIX,
};
use hayate_core::router::RouteOutcome;
use hayate_core::{Broker, Delivery, WakeList};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Set by a node that is stopping (SIGTERM). It is expected back (a restart): the others keep
/// its peer session, where messages and claims for it wait, as for a node that failed, until
/// it returns or `dead_node_grace_secs` pass; but its absence is no split.
const STOPPING_KEY: &str = "stopping";
/// Set by a node that leaves the cluster for good (`hayate cluster leave`): the others forget
/// it at once (its peer session there ends, with what was queued for it).
const LEAVING_KEY: &str = "leaving";
/// Set by a node that keeps its sessions in a store: they outlive its restart, so a stopped
/// one is worth waiting for.
const DURABLE_KEY: &str = "durable";
/// The gossip cluster id: nodes of other systems on the same port are not mixed in.
const CLUSTER_ID: &str = "hayate";
/// Answers to claims waiting for the node task.
const ANSWERS_CAPACITY: usize = 4_096;
/// How long a node shutting down waits at most for its sessions handed over a moment ago to
/// finish relaying.
const RELAY_AT_EXIT: Duration = Duration::from_secs(5);

mod membership;

/// The nodes this one had sessions with before a restart: the names in its stored
/// `$cluster/in/N` and `$cluster/N` sessions (none without a store).
fn remembered_nodes(broker: &Broker, self_name: &str) -> Vec<Arc<str>> {
    let mut names: Vec<Arc<str>> = Vec::new();
    for cell in broker.registry.page(None, Some(PEER_CLIENT_PREFIX), 4_096) {
        let id = &cell.client_id;
        let name = id
            .strip_prefix(INGRESS_CLIENT_PREFIX)
            .or_else(|| id.strip_prefix(PEER_CLIENT_PREFIX))
            .unwrap_or_default();
        if !name.is_empty() && name != self_name && !names.iter().any(|n| &**n == name) {
            names.push(Arc::from(name));
        }
    }
    names
}

/// Where a claim went (`Node::send_claim`).
#[derive(Default)]
struct Claimed {
    /// The nodes whose answers a resumed session's CONNACK waits for: those linked now, those
    /// stopped for a restart (they answer when back), those lost a moment ago.
    asked: Vec<Arc<str>>,
    /// Some node asked is stopped for a restart.
    stopped: bool,
    /// The nodes the claim could not reach now (dead or cut off, not stopped): the client's
    /// first SUBSCRIBE runs a fence for them unless they answer before.
    away: Vec<Arc<str>>,
    /// How long to wait for the nodes lost a moment ago.
    lost_until: Option<Instant>,
}

/// One other node as this node knows it.
struct Peer {
    generation: u64,
    address: SocketAddr,
    stats: Arc<NodeStats>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// Ends the link's reconnect back-off (the node is back).
    retry: Arc<tokio::sync::Notify>,
    /// Since when gossip has it dead (`None` while live).
    dead_since: Option<Instant>,
    /// This incarnation announced that it is stopping: while it is away, the cluster is not
    /// split.
    stopping: bool,
    /// It keeps its sessions in a store (`durable` in its gossip state): a client resuming a
    /// session here waits for its return when it stopped, or for a while when it was lost.
    durable: bool,
}

impl Peer {
    /// What a claim's wait needs to know of it.
    fn state(&self) -> PeerState {
        PeerState {
            dead_since: self.dead_since,
            stopping: self.stopping,
            durable: self.durable,
            link_up: self.stats.link_up.load(Ordering::Relaxed),
            hold: *self
                .stats
                .hold
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }
}

/// The running cluster side of a node.
pub struct ClusterHandle {
    task: JoinHandle<()>,
    leave: LeaveSwitch,
    settled: watch::Receiver<bool>,
    tls: Option<crate::tls::LinkTlsReload>,
}

/// Waits, at most `within`, until `settled` ([`ClusterHandle::settled_signal`]) turns true: a
/// client that connects before then could start a new session here while its old one sits on
/// a node this one cannot ask yet. False when `within` passed.
pub async fn wait_settled(mut settled: watch::Receiver<bool>, within: Duration) -> bool {
    tokio::time::timeout(within, settled.wait_for(|s| *s))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Turned on before the server shuts down, makes the node leave the cluster for good (the
/// others forget it at once) instead of stopping (they wait for its return).
#[derive(Debug, Clone, Default)]
pub struct LeaveSwitch(Arc<std::sync::atomic::AtomicBool>);

impl LeaveSwitch {
    /// Leave for good at shutdown.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl ClusterHandle {
    /// Turns true once the node knows the other live nodes and is linked both ways with each
    /// ([`wait_settled`]).
    pub fn settled_signal(&self) -> watch::Receiver<bool> {
        self.settled.clone()
    }

    /// The switch that makes this node leave for good when the server shuts down.
    pub fn leave_switch(&self) -> LeaveSwitch {
        self.leave.clone()
    }

    /// What reads the links' TLS files again on SIGHUP; `None` without TLS on links.
    pub fn tls_reload(&self) -> Option<crate::tls::LinkTlsReload> {
        self.tls.clone()
    }

    /// Waits until the node left the cluster (after the server's shutdown signal).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Makes `broker`'s router one node's of the cluster `config` describes: from now on its
/// clients' subscriptions are counted in the node's route set. Call before the broker restores
/// stored sessions or accepts clients; then [`start`] once the store is restored.
pub fn attach(broker: &Broker, config: &ClusterConfig) -> Result<Arc<ClusterRoutes>, ClusterError> {
    let routes = Arc::new(ClusterRoutes::with_policy(
        config.prefer_local_shared,
        config.split_policy(),
    ));
    // The core's bound on a held CONNACK: past the cluster's own waits (the answers of live
    // nodes, or a stopped node's return).
    routes.set_handover_timeout(
        ANSWER_TIMEOUT
            .max(Duration::from_secs(config.stopped_node_wait_secs))
            .max(Duration::from_secs(config.lost_node_wait_secs))
            + ANSWER_TIMEOUT,
    );
    routes.set_relay_timeout(Duration::from_secs(config.handover_relay_secs));
    routes.set_relay_encoder(hayate_core::cluster::RelayEncoder(Box::new(
        crate::control::relay_message,
    )));
    let self_name: Arc<str> = Arc::from(config.node_name.as_str());
    routes.set_fence_hook(hayate_core::cluster::FenceHook(Box::new(
        move |broker, client_id, fence, now, wake| {
            crate::relay::run_fence(&self_name, broker, client_id, fence, now, wake)
        },
    )));
    if !broker.router.attach_cluster(routes.clone()) {
        return Err(ClusterError::Gossip(
            "the broker is already in a cluster".into(),
        ));
    }
    Ok(routes)
}

/// Joins the cluster: gossip, then a link to every other live node. Call after [`attach`]
/// and after the broker restored its stored sessions: a link that resumes its session on
/// another node is delivered at once what that node queued for this one, and it must find
/// the sessions it is for. Runs until `shutdown` turns true.
///
/// `durable`: the broker keeps its sessions in a store. Links then resume their sessions on
/// the other nodes even across this node's restart, so that what the others queued for it
/// meanwhile (for its clients' persistent sessions) is delivered; without a store they start
/// new ones, as this node's clients' sessions are gone anyway.
pub async fn start(
    broker: Arc<Broker>,
    routes: Arc<ClusterRoutes>,
    config: ClusterConfig,
    durable: bool,
    shutdown: watch::Receiver<bool>,
) -> Result<ClusterHandle, ClusterError> {
    // Unusable TLS files stop the node here, naming the file.
    let tls = crate::tls::LinkTls::load(&config)?.map(Arc::new);
    let generation = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let self_id = ChitchatId::new(config.node_name.clone(), generation, config.advertised());
    let gossip_interval = Duration::from_millis(config.gossip_interval_ms);
    let grace = Duration::from_secs(config.dead_node_grace_secs);
    let chitchat_config = ChitchatConfig {
        chitchat_id: self_id.clone(),
        cluster_id: CLUSTER_ID.to_string(),
        gossip_interval,
        listen_addr: config.listen,
        seed_nodes: config.join.clone(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: config.phi_threshold,
            initial_interval: gossip_interval,
            dead_node_grace_period: grace,
            ..FailureDetectorConfig::default()
        },
        marked_for_deletion_grace_period: Duration::from_secs(3_600),
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: chitchat::ProtocolVersion::V0,
    };
    let initial = if durable {
        vec![(DURABLE_KEY.to_string(), "1".to_string())]
    } else {
        Vec::new()
    };
    let chitchat = spawn_chitchat(chitchat_config, initial, &UdpTransport)
        .await
        .map_err(|error| ClusterError::Gossip(format!("{error:#}")))?;
    tracing::info!(node = %config.node_name, generation, listen = %config.listen, join = ?config.join, "cluster_started");
    if config.secret.is_none() && tls.is_none() && !config.listen.ip().is_loopback() {
        tracing::warn!(listen = %config.listen, "cluster listener without a secret or TLS: any host that reaches it can join and read every message (set [cluster] secret, or tls_cert, tls_key and tls_ca)");
    }
    let (answers, answers_rx) = mpsc::channel(ANSWERS_CAPACITY);
    let remembered = remembered_nodes(&broker, &config.node_name);
    let node = Node {
        answers: Some(answers_rx),
        pending: HashMap::new(),
        ctx: LinkContext {
            answers,
            marks: Arc::new(crate::relay::MarkBoard::new()),
            relay_ends: Arc::new(crate::relay::RelayEnds::new(Duration::from_millis(
                config.relay_order_hold_ms,
            ))),
            handed_over: Arc::new(crate::moved::HandedOverNotices::new(
                Duration::from_millis(config.relay_order_hold_ms),
                Duration::from_secs(config.handover_relay_secs),
            )),
            late: Arc::new(crate::late::LateAnswers::default()),
            shutdown: shutdown.clone(),
            broker,
            routes,
            self_name: Arc::from(config.node_name.as_str()),
            secret: config.secret.as_deref().map(Arc::from),
            tls: tls.clone(),
            durable,
            grace,
        },
        self_id,
        grace,
        stopped_wait: Duration::from_secs(config.stopped_node_wait_secs),
        lost_wait: Duration::from_secs(config.lost_node_wait_secs),
        hold_wait: Duration::from_millis(config.relay_order_hold_ms),
        resent_qos2_hold: Duration::from_secs(config.resent_qos2_hold_secs),
        gossip_interval,
        peers: HashMap::new(),
        last_status: String::new(),
        remembered,
    };
    let leave = LeaveSwitch::default();
    let (settled_tx, settled) = watch::channel(false);
    let task = tokio::spawn(node.run(chitchat, shutdown, leave.clone(), settled_tx));
    Ok(ClusterHandle {
        task,
        leave,
        settled,
        tls: tls.map(crate::tls::LinkTlsReload),
    })
}

struct Node {
    ctx: LinkContext,
    answers: Option<mpsc::Receiver<Answer>>,
    /// Claims whose CONNACK waits for answers, by client id.
    pending: HashMap<String, PendingClaim>,
    self_id: ChitchatId,
    grace: Duration,
    /// How long a held CONNACK waits for a stopped node's answer.
    stopped_wait: Duration,
    /// How long after a node with a store went away without notice a resumed session still
    /// waits for it (`lost_node_wait_secs`).
    lost_wait: Duration,
    /// The longest a link holds what a node sends (`relay_order_hold_ms`): how long a claim
    /// waits for a held link at most (`PendingClaim::held_cap`).
    hold_wait: Duration,
    /// How long a QoS 2 resend of a client served past the wait waits for the answer of the
    /// node that had its session (`resent_qos2_hold_secs`).
    resent_qos2_hold: Duration,
    gossip_interval: Duration,
    peers: HashMap<Arc<str>, Peer>,
    last_status: String,
    /// The nodes this one had sessions with before a restart (see `Node::known_nodes`).
    remembered: Vec<Arc<str>>,
}

impl Node {
    async fn run(
        mut self,
        chitchat: ChitchatHandle,
        mut shutdown: watch::Receiver<bool>,
        leave: LeaveSwitch,
        settled: watch::Sender<bool>,
    ) {
        // Gossip needs a few rounds to tell this node who else is live.
        let learn_until = Instant::now() + self.gossip_interval * 3;
        let mut live = chitchat.chitchat().lock().await.live_nodes_watcher();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let (Some(mut events), Some(mut answers)) =
            (self.ctx.routes.take_events(), self.answers.take())
        else {
            tracing::error!("cluster events already taken");
            return;
        };
        loop {
            let snapshot: Vec<ChitchatId> = live
                .borrow_and_update()
                .iter()
                .filter(|(_, state)| {
                    state.get(STOPPING_KEY).is_none() && state.get(LEAVING_KEY).is_none()
                })
                .map(|(id, _)| id.clone())
                .collect();
            self.reconcile(&snapshot, &live.borrow());
            self.ctx
                .routes
                .set_nodes(self.known_nodes(*settled.borrow()));
            if !*settled.borrow() && Instant::now() >= learn_until && self.linked_both_ways() {
                tracing::info!(nodes = self.peers.len(), "cluster_settled");
                let _ = settled.send(true);
            }
            self.expire_pending();
            self.expire_relays();
            self.publish_status();
            tokio::select! {
                changed = live.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                _ = tick.tick() => {}
                Some(answer) = answers.recv() => self.on_answer(answer),
                Some(event) = events.recv() => {
                    self.on_event(event);
                    while let Ok(event) = events.try_recv() {
                        self.on_event(event);
                    }
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
            }
        }
        // Stopping: the others keep what waits for this node, as for a node that failed, but
        // do not count the cluster as split meanwhile. Leaving: they forget it at once.
        let key = if leave.is_set() {
            LEAVING_KEY
        } else {
            STOPPING_KEY
        };
        tracing::info!(key, "cluster_announcing_shutdown");
        chitchat
            .with_chitchat(|chitchat| chitchat.self_node_state().set(key, "1"))
            .await;
        tokio::time::sleep(self.gossip_interval * 3).await;
        self.finish_relays().await;
        for (_, peer) in self.peers.drain() {
            let _ = peer.stop.send(true);
            let _ = peer.task.await;
        }
        if let Err(error) = chitchat.shutdown().await {
            tracing::warn!(error = %format!("{error:#}"), "cluster_gossip_shutdown");
        }
        tracing::info!("cluster_left");
    }

    fn on_event(&mut self, event: ClusterEvent) {
        match event {
            ClusterEvent::ClientConnected {
                client_id,
                clean_start,
                await_handover,
                at,
            } => {
                let claim = Claim {
                    client_id: client_id.to_string(),
                    clean_start,
                    at: at.as_nanos(),
                };
                let now = Instant::now();
                let Claimed {
                    asked,
                    stopped,
                    away,
                    lost_until,
                } = self.send_claim(&claim);
                if !clean_start && !away.is_empty() {
                    // Their answer may come much later: the client starts a new session here
                    // meanwhile, and marks when it subscribes (`relay::fence`).
                    self.await_inbound_qos2_ids(&client_id, &away, now);
                    self.ctx.routes.await_fence(
                        client_id.clone(),
                        Fence {
                            away,
                            at,
                            until: Instant::now() + self.grace,
                        },
                    );
                }
                if await_handover {
                    if asked.is_empty() {
                        self.ctx.broker.release_handover(&client_id);
                    } else {
                        // A stopped node answers once it is back from its restart.
                        let wait = if stopped {
                            self.stopped_wait.max(ANSWER_TIMEOUT)
                        } else {
                            ANSWER_TIMEOUT
                        };
                        let deadline = (Instant::now() + wait).max(lost_until.unwrap_or(now));
                        let was_away = asked
                            .iter()
                            .filter(|name| {
                                self.peers
                                    .get(*name)
                                    .is_some_and(|p| p.dead_since.is_some())
                            })
                            .cloned()
                            .collect();
                        self.pending.insert(
                            client_id.to_string(),
                            PendingClaim {
                                waiting: asked,
                                deadline,
                                at,
                                cap: now + self.ctx.routes.handover_timeout() + 2 * ANSWER_TIMEOUT,
                                held_cap: deadline + self.hold_wait + ANSWER_TIMEOUT,
                                was_away,
                                relinked: Vec::new(),
                            },
                        );
                    }
                }
            }
            ClusterEvent::Fenced { client_id, fence } => {
                crate::relay::post_fence(&self.ctx, &client_id, &fence, Instant::now());
            }
        }
    }

    /// Queues `claim` in every other node's peer session here (behind what is already queued
    /// for it); returns which nodes a resumed session's CONNACK waits for, and which could not
    /// be asked now.
    fn send_claim(&self, claim: &Claim) -> Claimed {
        let broker = &self.ctx.broker;
        let now = Instant::now();
        let message = Arc::new(claim.to_message());
        let mut wake = WakeList::new();
        let mut claimed = Claimed::default();
        for (name, peer) in &self.peers {
            let Some(cell) = broker.registry.get(&format!("{PEER_CLIENT_PREFIX}{name}")) else {
                continue;
            };
            let online = cell.state.lock().owner != 0;
            let delivery = Delivery::new(message.clone(), QoS::AtLeastOnce, false);
            let mut outcome = RouteOutcome::default();
            broker
                .router
                .deliver(&cell, delivery, now, &mut wake, &mut outcome);
            if tracing::enabled!(tracing::Level::DEBUG) {
                let (output, durable) = broker.output_state(&cell);
                tracing::debug!(peer = %name, client_id = %claim.client_id, ?output, ?durable, "cluster_claim_queued");
            }
            if outcome.delivered == 0 {
                tracing::warn!(peer = %name, client_id = %claim.client_id, "cluster_claim_dropped");
            } else if peer.stopping && peer.durable {
                // Stopping (its link may not be down yet): it answers once back.
                claimed.asked.push(name.clone());
                claimed.stopped = true;
            } else if online {
                claimed.asked.push(name.clone());
            } else {
                claimed.away.push(name.clone());
                // Lost without notice a moment ago, with its sessions on disk: most likely
                // killed and about to be restarted. Waiting for it a while makes its clients'
                // sessions follow them whole (a fence covers the case it is not back in time).
                let until = peer.dead_since.unwrap_or(now) + self.lost_wait;
                if peer.durable && until > now {
                    claimed.asked.push(name.clone());
                    claimed.lost_until = Some(claimed.lost_until.map_or(until, |u| u.max(until)));
                }
            }
        }
        for doorbell in wake {
            doorbell.notify_one();
        }
        claimed
    }

    /// Another node answered a claim (its session, if any, was taken by the link): once every
    /// node asked has answered, the client's CONNACK goes out.
    fn on_answer(&mut self, answer: Answer) {
        let done = match self.pending.get_mut(&answer.client_id) {
            Some(claim) => {
                claim.waiting.retain(|name| *name != answer.from);
                claim.waiting.is_empty()
            }
            None => false,
        };
        if done {
            self.pending.remove(&answer.client_id);
            self.ctx.broker.release_handover(&answer.client_id);
        }
    }

    /// Before the links stop: sessions handed over a moment ago relay until the other nodes
    /// marked the end (their relay lives in this process only), at most `RELAY_AT_EXIT`.
    async fn finish_relays(&self) {
        let until = Instant::now() + RELAY_AT_EXIT.min(self.ctx.routes.relay_timeout());
        while self.ctx.routes.relaying_count() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.expire_relays();
        }
        let left = self.ctx.routes.relaying_count();
        if left > 0 {
            tracing::warn!(sessions = left, "cluster_relays_cut_by_shutdown");
        }
    }

    /// Every live node that has not announced it is stopping has its link from here up and
    /// its link to here attached (its peer session here is online).
    fn linked_both_ways(&self) -> bool {
        self.peers
            .iter()
            .filter(|(_, peer)| peer.dead_since.is_none() && !peer.stopping)
            .all(|(name, peer)| {
                peer.stats.link_up.load(Ordering::Relaxed)
                    && self
                        .ctx
                        .broker
                        .registry
                        .get(&format!("{PEER_CLIENT_PREFIX}{name}"))
                        .is_some_and(|cell| cell.state.lock().owner != 0)
            })
    }

    /// Sessions handed over that relayed long enough, and sessions taken over that held
    /// their own copies back long enough.
    fn expire_relays(&self) {
        let mut wake = WakeList::new();
        let now = Instant::now();
        self.ctx.broker.expire_relays(now, &mut wake);
        self.ctx.broker.expire_direct_holds(now, &mut wake);
        for doorbell in wake {
            doorbell.notify_one();
        }
    }

    /// The other nodes a session handed over from here waits for marks from: those gossip
    /// reports, and, until this node has settled, also those it had sessions with before a
    /// restart (stored `$cluster/in/N` and `$cluster/N` sessions). Gossip brings the live
    /// nodes one by one: a session handed over to the first one before the others were known
    /// ended its relay at once, and what the others had queued here for it found nothing (the
    /// kill soak's losses, 2026-11-25).
    fn known_nodes(&self, settled: bool) -> Vec<Arc<str>> {
        let mut nodes: Vec<Arc<str>> = self.peers.keys().cloned().collect();
        if !settled {
            for name in &self.remembered {
                if !nodes.contains(name) {
                    nodes.push(name.clone());
                }
            }
        }
        nodes
    }

    /// Claims that waited too long for answers: their CONNACK goes out now, and the client
    /// starts a new session here. A node that did not answer may still hold the old one (it
    /// died as it was asked, while its link here looked up, or it is not back from a restart
    /// in time): as for a node found away at the claim, the client's first SUBSCRIBE runs a
    /// fence for it, so that when its answer comes later nothing arrives twice
    /// (`docs/CLUSTER.md`, "After a kill -9, past the wait").
    fn expire_pending(&mut self) {
        let now = Instant::now();
        self.ctx.routes.expire_fences(now);
        for claim in self.pending.values_mut() {
            for name in &claim.waiting {
                let dead = self.peers.get(name).is_some_and(|p| p.dead_since.is_some());
                if dead && !claim.was_away.contains(name) {
                    claim.was_away.push(name.clone());
                }
            }
        }
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, claim)| claim.deadline <= now)
            .map(|(client_id, _)| client_id.clone())
            .collect();
        for client_id in expired {
            if let Some(claim) = self.pending.get_mut(&client_id) {
                let peers = &self.peers;
                let state = |name: &str| peers.get(name).map(Peer::state);
                if let Some(until) = relink_wait(claim, state, self.lost_wait, now) {
                    if claim.deadline < until {
                        tracing::info!(%client_id, waiting = ?claim.waiting, "cluster_handover_waits_for_relink");
                    }
                    claim.deadline = until;
                    self.ctx.broker.extend_handover(&client_id, until);
                    continue;
                }
            }
            if let Some(claim) = self.pending.remove(&client_id) {
                tracing::warn!(%client_id, waiting = ?claim.waiting, "cluster_handover_timeout");
                let client: Arc<str> = Arc::from(client_id.as_str());
                self.await_inbound_qos2_ids(&client, &claim.waiting, now);
                self.ctx.routes.await_fence(
                    client,
                    Fence {
                        away: claim.waiting,
                        at: claim.at,
                        until: now + self.grace,
                    },
                );
            }
            self.ctx.broker.release_handover(&client_id);
        }
    }

    /// `client_id`'s session here started without `away`'s answers: its QoS 2 resends wait
    /// for them (`hayate_core` `channel/resend_hold.rs`).
    fn await_inbound_qos2_ids(&self, client_id: &Arc<str>, away: &[Arc<str>], now: Instant) {
        if !self.resent_qos2_hold.is_zero() {
            self.ctx.routes.await_inbound_qos2_ids(
                client_id.clone(),
                away.to_vec(),
                now + self.resent_qos2_hold,
            );
        }
    }

    /// Publishes this node's view as retained JSON when it changed.
    fn publish_status(&mut self) {
        let mut nodes: BTreeMap<String, NodeStatus> = BTreeMap::new();
        for (name, peer) in &self.peers {
            nodes.insert(
                name.to_string(),
                NodeStatus {
                    address: peer.address.to_string(),
                    generation: peer.generation,
                    live: peer.dead_since.is_none(),
                    stopping: peer.stopping,
                    link_up: peer.stats.link_up.load(Ordering::Relaxed),
                    messages_in: peer.stats.messages_in.load(Ordering::Relaxed),
                    connects: peer.stats.connects.load(Ordering::Relaxed),
                },
            );
        }
        let status = Status {
            node: self.self_id.node_id.to_string(),
            address: self.self_id.gossip_advertise_addr.to_string(),
            generation: self.self_id.generation_id,
            routes: self.ctx.routes.len(),
            nodes,
        };
        let Ok(json) = serde_json::to_string(&status) else {
            return;
        };
        if json != self.last_status {
            self.ctx.broker.publish_internal(
                STATUS_TOPIC,
                bytes::Bytes::from(json.clone()),
                true,
                Instant::now(),
            );
            self.last_status = json;
        }
    }
}
