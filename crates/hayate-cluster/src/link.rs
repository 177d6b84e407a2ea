//! One node link: this node pulling, from one other node, the messages its own clients
//! subscribe to (`hayate_core::cluster`).
//!
//! The link is an MQTT 5 client session `$cluster/SELF` on the other node, subscribed there
//! to this node's route set and kept in step with it by SUBSCRIBE / UNSUBSCRIBE deltas. What
//! arrives is published here through the ingress, an in-process connection whose messages go
//! to this node's clients only. Packet identifiers pass through: the other node's message N
//! is this node's inbound message N, and the ingress's PUBACK / PUBREC / PUBCOMP for N goes
//! back as is, so the other node releases a QoS 1/2 message only once this node has it (and,
//! with a data directory, has stored what it queued). A link that drops reconnects to the
//! same session there: what was queued or in flight meanwhile is delivered then.

use crate::client::NodeClient;
use crate::control::{Answer, MARK_TOPIC};
use crate::relay::{Awaited, Hold};
use crate::{ClusterError, NodeStats};
use hayate_codec::{
    ByteStr, Connect, Packet, PacketId, Properties, ProtocolVersion, PubResp, Publish, QoS,
    Subscribe, SubscriptionOptions, Unsubscribe,
};
use hayate_core::cluster::{
    ClusterRoutes, Route, RouteDelta, INGRESS_CLIENT_PREFIX, PEER_CLIENT_PREFIX, PLAIN_ID,
};
use hayate_core::{
    Broker, ConnectionInfo, InProcess, InProcessError, ListenerInfo, ListenerRole, ReadGate,
};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, watch};

mod answers;
mod inbound;
mod routes;

/// Keep alive of a link: a node silent for 1.5 × this is taken as gone by the link (gossip
/// usually says so first).
const KEEP_ALIVE_SECS: u16 = 5;
/// A node that takes no bytes for this long is taken as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(15);
/// Filters per SUBSCRIBE / UNSUBSCRIBE packet.
const FILTERS_PER_PACKET: usize = 1_000;
/// The catch-all subscribed for a moment on a new session, to receive every retained message.
const ALL: &str = "#";

/// What a link needs from its node.
#[derive(Clone)]
pub(crate) struct LinkContext {
    pub broker: Arc<Broker>,
    pub routes: Arc<ClusterRoutes>,
    pub self_name: Arc<str>,
    pub secret: Option<Arc<str>>,
    /// TLS on the links (`[cluster] tls_*`); `None`: plain TCP.
    pub tls: Option<Arc<crate::tls::LinkTls>>,
    /// The node keeps its sessions in a store (see `crate::start`).
    pub durable: bool,
    /// How long another node keeps this one's peer session once it is dead
    /// (`dead_node_grace_secs`): a durable ingress session is kept a minute longer.
    pub grace: Duration,
    /// Answers to this node's claims, for the node task.
    pub answers: mpsc::Sender<Answer>,
    /// Marks each link publishes on its node after the route deltas before them (sessions
    /// taken over here: `crate::relay`).
    pub marks: Arc<crate::relay::MarkBoard>,
    /// The ends of relaying that sessions taken over here wait for (`crate::relay`).
    pub relay_ends: Arc<crate::relay::RelayEnds>,
    /// The old nodes' notices of sessions they handed over, that links wait for
    /// (`crate::moved`).
    pub handed_over: Arc<crate::moved::HandedOverNotices>,
    /// Where sessions handed over from here went, and the answers handled here
    /// (`crate::late`).
    pub late: Arc<crate::late::LateAnswers>,
    /// The node is shutting down: claims wait for its restart (see `Link::on_control`).
    pub shutdown: watch::Receiver<bool>,
}

/// One link, alive across reconnections to the same incarnation of the other node.
pub(crate) struct Link {
    ctx: LinkContext,
    peer: Arc<str>,
    address: SocketAddr,
    stats: Arc<NodeStats>,
    /// Rung when gossip finds the node back: the next attempt starts now.
    retry: Arc<tokio::sync::Notify>,
    /// Filters (with their subscription identifiers) the other node's session for us has
    /// (valid while it keeps the session).
    subscribed: routes::Subscribed,
    ingress: Option<InProcess>,
    /// The first connection starts a new session there.
    first: bool,
    next_id: u16,
    /// When the unanswered PINGREQ was queued, for the link round trip in `Stats`.
    ping_sent: Option<Instant>,
    /// Packet ids of QoS 2 control messages (marks) this link acknowledged with PUBREC: their
    /// PUBREL is answered here. Passed to the ingress, it released a forwarded message's id
    /// the ingress still held when the other node, restarted, gave the id to a mark before
    /// sending that message again, which the ingress then routed a second time.
    control_rel: HashSet<u16>,
    /// What the other node sends waits: its mark for a session taken over here came back
    /// before the old node's end of relaying its copies (`crate::relay::RelayEnds`).
    hold: Option<Hold>,
    /// Relayed copies this link brought for no session here (`crate::late::DroppedRelays`).
    dropped: crate::late::DroppedRelays,
    /// What the current connection brought that the ingress has not answered: only those
    /// answers go out on it (`answers.rs`).
    unanswered: answers::Unanswered,
}

impl Link {
    pub(crate) fn new(
        ctx: LinkContext,
        peer: Arc<str>,
        address: SocketAddr,
        stats: Arc<NodeStats>,
        retry: Arc<tokio::sync::Notify>,
    ) -> Link {
        Link {
            ctx,
            peer,
            address,
            stats,
            retry,
            subscribed: HashMap::new(),
            ingress: None,
            first: true,
            next_id: 0,
            ping_sent: None,
            control_rel: HashSet::new(),
            hold: None,
            dropped: crate::late::DroppedRelays::default(),
            unanswered: answers::Unanswered::default(),
        }
    }

    /// Connects, reconnects with a jittered back-off, until `stop`. A `retry` (gossip says the
    /// node is back) ends the back-off at once.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut delay = Duration::from_millis(100);
        loop {
            // A second receiver: a stop while connecting ends the attempt too.
            let mut stopping = stop.clone();
            let result = tokio::select! {
                result = self.connect_and_serve(&mut stop) => result,
                _ = stopping.changed() => Ok(()),
            };
            self.stats.link_up.store(false, Ordering::Relaxed);
            match result {
                Ok(()) => break,
                Err(error) => {
                    tracing::info!(peer = %self.peer, address = %self.address, %error, "cluster_link_down");
                }
            }
            if *stop.borrow() {
                break;
            }
            let jitter = rand::random::<u64>() % (delay.as_millis() as u64 / 2 + 1);
            tokio::select! {
                _ = tokio::time::sleep(delay + Duration::from_millis(jitter)) => {
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                _ = self.retry.notified() => delay = Duration::from_millis(100),
                _ = stop.changed() => break,
            }
        }
        if let Some(ingress) = self.ingress.take() {
            ingress.finish(Instant::now());
        }
    }

    async fn connect_and_serve(
        &mut self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let client_id = format!("{PEER_CLIENT_PREFIX}{}", self.ctx.self_name);
        // Without a store, this node's first connection starts a new session there: the
        // clients it queued for are gone. With one, it resumes (see `crate::start`).
        let clean_start = self.first && !self.ctx.durable;
        let connected = NodeClient::connect(
            self.address,
            self.ctx.tls.as_deref(),
            &client_id,
            self.ctx.secret.as_deref(),
            clean_start,
            KEEP_ALIVE_SECS,
            u32::MAX,
        )
        .await?;
        self.first = false;
        self.unanswered.new_connection();
        let mut client = connected.client;
        let fresh = !connected.connack.session_present;
        if fresh {
            // A new session there: it has none of our filters, and its packet ids start
            // over, so the ingress (which remembers inbound QoS 2 ids) starts over too.
            self.subscribed.clear();
            self.control_rel.clear();
            if let Some(old) = self.ingress.take() {
                old.finish(Instant::now());
            }
        }
        if self.ingress.is_none() {
            self.ingress = Some(self.open_ingress(fresh)?);
        }
        let (routes, feed) = self.ctx.routes.snapshot();
        self.sync_routes(&mut client, routes, fresh, true)?;
        // Marks for sessions handed over travel in this session's queue there.
        let mark: Arc<str> = Arc::from(MARK_TOPIC);
        self.subscribe_packet(&mut client, std::slice::from_ref(&mark), None, 2)?;
        let marks = self.ctx.marks.watch();
        // Marks posted while this link was down go now, after the routes just synced.
        self.publish_marks(&mut client)?;
        client.flush().await?;
        self.stats.link_up.store(true, Ordering::Relaxed);
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        tracing::info!(peer = %self.peer, address = %self.address, session_present = !fresh, "cluster_link_up");
        let result = self.serve(&mut client, feed, marks, stop).await;
        if result.is_ok() {
            client.disconnect().await;
        }
        result
    }

    /// The ingress: this node's in-process connection for what the other node forwards.
    ///
    /// On a durable node its session is stored, and resumed when the link resumed its
    /// session on the other node (`fresh` false): the inbound QoS 2 ids it remembers then
    /// survive this node's restart, so a QoS 2 message the other node sends again because
    /// its PUBREC was lost in the restart is acknowledged, not routed a second time
    /// [MQTT-4.3.3-10]. A new session there (`fresh`) starts a new one here.
    fn open_ingress(&self, fresh: bool) -> Result<InProcess, ClusterError> {
        let now = Instant::now();
        let info = ConnectionInfo {
            listener: Arc::new(ListenerInfo {
                name: format!("cluster:{}", self.peer).into(),
                role: ListenerRole::PeerIngress,
                ..ListenerInfo::default()
            }),
            ..ConnectionInfo::default()
        };
        let mut ingress = InProcess::new(self.ctx.broker.clone(), info, now);
        let connect = Connect {
            protocol: ProtocolVersion::V5,
            clean_start: fresh || !self.ctx.durable,
            keep_alive: 0,
            client_id: format!("{INGRESS_CLIENT_PREFIX}{}", self.peer)
                .as_str()
                .into(),
            will: None,
            username: None,
            password: None,
            properties: Properties {
                // As many in flight as the other node sends: its session's window bounds it.
                receive_maximum: Some(u16::MAX),
                session_expiry_interval: self.ctx.durable.then(|| {
                    (self.ctx.grace + Duration::from_secs(60))
                        .as_secs()
                        .min(u64::from(u32::MAX)) as u32
                }),
                ..Properties::default()
            },
            bridge: false,
        };
        ingress.handle(Packet::Connect(Box::new(connect)), now)?;
        match ingress.take_output()?.first() {
            Some(Packet::ConnAck(connack)) if !connack.reason_code.is_error() => Ok(ingress),
            other => Err(ClusterError::Protocol(format!(
                "ingress CONNECT answered with {other:?}"
            ))),
        }
    }

    /// Brings the other node's subscriptions for us to `routes`; on a new session, also asks
    /// once for every retained message there (a moment's `#` with retain handling 0 and no
    /// subscription identifier: what it brings is stored, not routed).
    ///
    /// On a connection (`resync`) every filter of `routes` is subscribed again, not only
    /// those `subscribed` lacks: a SUBSCRIBE the other node took just before it was killed
    /// may not have reached its store, and the session it resumes then lacks the filter
    /// while `subscribed` has it (subscribing again replaces a subscription there, with no
    /// retained messages: retain handling 2). After a lagged feed only the difference goes.
    fn sync_routes(
        &mut self,
        client: &mut NodeClient,
        routes: Vec<Route>,
        fresh: bool,
        resync: bool,
    ) -> Result<(), ClusterError> {
        let wanted: routes::Subscribed = routes.into_iter().map(|r| (r.filter, r.id)).collect();
        let add: Vec<Route> = wanted
            .iter()
            .filter(|(filter, id)| resync || self.subscribed.get(*filter) != Some(id))
            .map(|(filter, id)| Route {
                filter: filter.clone(),
                id: *id,
            })
            .collect();
        let remove: Vec<Arc<str>> = self
            .subscribed
            .keys()
            .filter(|filter| !wanted.contains_key(*filter))
            .cloned()
            .collect();
        if fresh {
            let all: Arc<str> = Arc::from(ALL);
            self.subscribe_packet(client, std::slice::from_ref(&all), None, 0)?;
            if !wanted.contains_key(&all) {
                self.unsubscribe(client, &[all])?;
            }
        }
        self.log_routes_sent(&add, &remove, resync);
        self.subscribe(client, &add)?;
        self.unsubscribe(client, &remove)?;
        self.subscribed = wanted;
        Ok(())
    }

    /// Subscribes to `routes`: the plain filters together, each shared group on its own (a
    /// SUBSCRIBE carries one subscription identifier).
    fn subscribe(&mut self, client: &mut NodeClient, routes: &[Route]) -> Result<(), ClusterError> {
        let (plain, groups): (Vec<&Route>, Vec<&Route>) =
            routes.iter().partition(|r| r.id == PLAIN_ID);
        let plain: Vec<Arc<str>> = plain.iter().map(|r| r.filter.clone()).collect();
        for chunk in plain.chunks(FILTERS_PER_PACKET) {
            self.subscribe_packet(client, chunk, Some(PLAIN_ID), 2)?;
        }
        for route in groups {
            self.subscribe_packet(
                client,
                std::slice::from_ref(&route.filter),
                Some(route.id),
                2,
            )?;
        }
        Ok(())
    }

    fn subscribe_packet(
        &mut self,
        client: &mut NodeClient,
        filters: &[Arc<str>],
        id: Option<u32>,
        retain_handling: u8,
    ) -> Result<(), ClusterError> {
        let filters = filters
            .iter()
            .map(|filter| {
                let options = SubscriptionOptions {
                    qos: QoS::ExactlyOnce,
                    no_local: false,
                    // The retain flag is the publisher's: the receiving node stores the
                    // retained messages it is sent.
                    retain_as_published: true,
                    retain_handling,
                };
                (ByteStr::from(&**filter), options)
            })
            .collect();
        let packet_id = self.packet_id();
        client.queue(&Packet::Subscribe(Subscribe {
            packet_id,
            filters,
            properties: Properties {
                subscription_identifiers: id.into_iter().collect(),
                ..Properties::default()
            },
        }))
    }

    fn unsubscribe(
        &mut self,
        client: &mut NodeClient,
        filters: &[Arc<str>],
    ) -> Result<(), ClusterError> {
        for chunk in filters.chunks(FILTERS_PER_PACKET) {
            let packet_id = self.packet_id();
            client.queue(&Packet::Unsubscribe(Unsubscribe {
                packet_id,
                filters: chunk.iter().map(|f| ByteStr::from(&**f)).collect(),
                properties: Properties::default(),
            }))?;
        }
        Ok(())
    }

    fn packet_id(&mut self) -> PacketId {
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        PacketId::new(self.next_id).expect("never zero")
    }

    /// Passes packets until an error, or `stop` (`Ok`).
    async fn serve(
        &mut self,
        client: &mut NodeClient,
        mut feed: broadcast::Receiver<RouteDelta>,
        mut marks: watch::Receiver<u64>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let doorbell = self.ingress()?.doorbell();
        let keep_alive = Duration::from_secs(u64::from(KEEP_ALIVE_SECS));
        let mut ping = tokio::time::interval(keep_alive);
        ping.tick().await;
        let mut last_input = tokio::time::Instant::now();
        self.ping_sent = None;
        let mut ends = self.ctx.relay_ends.watch();
        let mut notices = self.ctx.handed_over.watch();
        loop {
            self.release_hold(Instant::now());
            self.forward_ingress_output(client)?;
            tokio::time::timeout(WRITE_TIMEOUT, client.flush())
                .await
                .map_err(|_| ClusterError::Timeout("the other node to read"))??;
            let now = Instant::now();
            let ingress = self.ingress()?;
            let gate = if ingress.accepts_input() {
                ReadGate::Open
            } else {
                ingress.poll_gate(now)?
            };
            let reading = matches!(gate, ReadGate::Open) && self.hold.is_none();
            if reading && self.process_buffered(client, now)? {
                continue;
            }
            let hold_until = self.hold.as_ref().map(|hold| hold.until);
            let held = async {
                match hold_until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => std::future::pending().await,
                }
            };
            let paused = async {
                match gate {
                    ReadGate::Paused { until, released } => match released {
                        Some(released) => {
                            tokio::select! {
                                _ = tokio::time::sleep_until(until.into()) => {}
                                _ = released => {}
                            }
                        }
                        None => tokio::time::sleep_until(until.into()).await,
                    },
                    ReadGate::Open => std::future::pending().await,
                }
            };
            tokio::select! {
                read = client.read(), if reading => {
                    read?;
                    last_input = tokio::time::Instant::now();
                }
                delta = feed.recv() => self.on_route_delta(client, delta, &mut feed)?,
                changed = marks.changed() => {
                    if changed.is_err() {
                        return Err(ClusterError::Protocol("mark board closed".into()));
                    }
                    self.on_marks_posted(client, &mut feed)?;
                }
                _ = doorbell.notified() => {
                    // A held acknowledgement of the ingress became durable (or its session has
                    // something): write it, for the top of the loop to send. Without this, the
                    // PUBRECs the ingress held for the store went out only with the next
                    // packet's answer, and once the other node's window was full of them none
                    // came: its peer session here stopped sending (docs/CLUSTER.md, "A peer
                    // session that stopped sending").
                    self.ingress()?.transmit(Instant::now())?;
                }
                _ = paused => {}
                _ = held => {}
                _ = ends.changed(), if hold_until.is_some() => {}
                _ = notices.changed(), if hold_until.is_some() => {}
                _ = ping.tick() => {
                    if last_input.elapsed() > keep_alive * 3 / 2 {
                        return Err(ClusterError::Timeout("PINGRESP"));
                    }
                    client.queue(&Packet::PingReq)?;
                    self.ping_sent.get_or_insert_with(Instant::now);
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn ingress(&mut self) -> Result<&mut InProcess, ClusterError> {
        self.ingress
            .as_mut()
            .ok_or_else(|| ClusterError::Protocol("no ingress".into()))
    }

    /// A change of this node's route set (and any others already waiting): sent as one
    /// SUBSCRIBE and one UNSUBSCRIBE, net of the batch (`routes.rs`). Fallen too far behind:
    /// the whole set is compared again.
    fn on_route_delta(
        &mut self,
        client: &mut NodeClient,
        first: Result<RouteDelta, broadcast::error::RecvError>,
        feed: &mut broadcast::Receiver<RouteDelta>,
    ) -> Result<(), ClusterError> {
        let mut batch = routes::RouteBatch::default();
        let mut next = first;
        loop {
            match next {
                Ok(delta) => batch.apply(&mut self.subscribed, delta),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    batch.undo(&mut self.subscribed);
                    let (routes, fresh_feed) = self.ctx.routes.snapshot();
                    *feed = fresh_feed;
                    return self.sync_routes(client, routes, false, false);
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(ClusterError::Protocol("route feed closed".into()))
                }
            }
            next = match feed.try_recv() {
                Ok(delta) => Ok(delta),
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    Err(broadcast::error::RecvError::Lagged(n))
                }
                Err(_) => break,
            };
        }
        let (add, remove) = batch.changes(&self.subscribed);
        self.log_routes_sent(&add, &remove, false);
        self.subscribe(client, &add)?;
        self.unsubscribe(client, &remove)
    }

    /// One debug line per batch of route changes sent to the other node.
    fn log_routes_sent(&self, add: &[Route], remove: &[Arc<str>], resync: bool) {
        if (add.is_empty() && remove.is_empty()) || !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let add: Vec<String> = add
            .iter()
            .map(|r| format!("{}#{}", r.filter, r.id))
            .collect();
        tracing::debug!(peer = %self.peer, ?add, ?remove, resync, "cluster_routes_sent");
    }

    /// Marks were posted (sessions taken over here): publishes this link's on the other
    /// node, after the route deltas that came before them, so the other node routes what
    /// follows a mark here and what preceded it to the old node, which relays it.
    fn on_marks_posted(
        &mut self,
        client: &mut NodeClient,
        feed: &mut broadcast::Receiver<RouteDelta>,
    ) -> Result<(), ClusterError> {
        match feed.try_recv() {
            Ok(delta) => self.on_route_delta(client, Ok(delta), feed)?,
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                self.on_route_delta(client, Err(broadcast::error::RecvError::Lagged(n)), feed)?
            }
            Err(_) => {}
        }
        self.publish_marks(client)
    }

    fn publish_marks(&mut self, client: &mut NodeClient) -> Result<(), ClusterError> {
        let max_age = self.ctx.routes.relay_timeout();
        for mark in self.ctx.marks.take(&self.peer, Instant::now(), max_age) {
            let packet_id = self.packet_id();
            client.queue(&Packet::Publish(mark.to_publish(packet_id)))?;
        }
        Ok(())
    }

    /// Holds what the other node sends, or stops holding (`None`); the node's claims see it
    /// (`NodeStats::hold`).
    pub(crate) fn set_hold(&mut self, hold: Option<Hold>) {
        let (was, is) = (self.hold.is_some(), hold.is_some());
        self.hold = hold;
        if was == is {
            return;
        }
        let mut shared = self
            .stats
            .hold
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        shared.held = is;
        if was {
            shared.last_ended = Some(Instant::now());
        }
    }

    /// Ends the hold once what it awaits arrived, or at its deadline.
    fn release_hold(&mut self, now: Instant) {
        let Some(hold) = &self.hold else {
            return;
        };
        let waiting = match &hold.awaited {
            Awaited::RelayEnd => {
                self.ctx
                    .relay_ends
                    .must_hold(&hold.client_id, &self.peer, hold.at)
            }
            Awaited::HandedOver { old } => {
                self.ctx
                    .handed_over
                    .must_hold(&hold.client_id, old, hold.at, now)
            }
        };
        if !waiting {
            self.set_hold(None);
        } else if now >= hold.until {
            let late = match hold.awaited {
                Awaited::RelayEnd => "cluster_relay_end_late",
                Awaited::HandedOver { .. } => "cluster_handed_over_late",
            };
            tracing::info!(peer = %self.peer, client_id = %hold.client_id, "{late}");
            if let Awaited::HandedOver { old } = &hold.awaited {
                self.ctx.handed_over.gave_up(old, now);
            }
            self.set_hold(None);
        }
    }

    /// Handles the packets already read while the ingress takes them, until a hold; true
    /// when any.
    fn process_buffered(
        &mut self,
        client: &mut NodeClient,
        now: Instant,
    ) -> Result<bool, ClusterError> {
        let mut any = false;
        while self.hold.is_none() && self.ingress()?.accepts_input() {
            let Some(packet) = client.next_buffered()? else {
                break;
            };
            any = true;
            self.on_remote(client, packet, now)?;
        }
        Ok(any)
    }

    /// One packet from the other node.
    fn on_remote(
        &mut self,
        client: &mut NodeClient,
        packet: Packet,
        now: Instant,
    ) -> Result<(), ClusterError> {
        match packet {
            Packet::Publish(publish) if publish.topic.starts_with(PEER_CLIENT_PREFIX) => {
                self.on_control(client, publish, now)
            }
            Packet::Publish(publish) => {
                self.stats.messages_in.fetch_add(1, Ordering::Relaxed);
                // The subscription identifiers stay: they tell the ingress which of this
                // node's subscriptions the copy is for.
                let publish = Publish {
                    properties: Properties {
                        topic_alias: None,
                        ..publish.properties
                    },
                    ..publish
                };
                let packet = Packet::Publish(publish);
                self.unanswered.received(&packet);
                self.ingress()?.handle(packet, now)?;
                Ok(())
            }
            Packet::PubRel(rel) if self.control_rel.remove(&rel.packet_id.get()) => {
                client.queue(&Packet::PubComp(PubResp::new(rel.packet_id)))
            }
            Packet::PubRel(rel) => {
                let packet = Packet::PubRel(rel);
                self.unanswered.received(&packet);
                Ok(self.ingress()?.handle(packet, now)?)
            }
            Packet::SubAck(suback) => {
                for code in suback.reason_codes.iter().filter(|c| c.is_error()) {
                    tracing::warn!(peer = %self.peer, code = code.0, "cluster_subscription_refused");
                }
                Ok(())
            }
            Packet::PingResp => {
                if let Some(sent) = self.ping_sent.take() {
                    let stats = &self.ctx.broker.stats;
                    stats
                        .cluster_link_round_trip
                        .observe(now.saturating_duration_since(sent));
                }
                Ok(())
            }
            // The QoS 2 flow of a mark this link published there.
            Packet::PubRec(rec) => client.queue(&Packet::PubRel(PubResp::new(rec.packet_id))),
            Packet::UnsubAck(_) | Packet::PubComp(_) => Ok(()),
            Packet::Disconnect(disconnect) => {
                Err(ClusterError::Disconnected(disconnect.reason_code.0))
            }
            other => Err(ClusterError::Protocol(format!(
                "unexpected {:?} from a node",
                other.packet_type()
            ))),
        }
    }

    /// The ingress's acknowledgements go back to the other node as they are, those that answer
    /// a packet of this connection (`answers.rs`).
    fn forward_ingress_output(&mut self, client: &mut NodeClient) -> Result<(), ClusterError> {
        for packet in self.ingress()?.take_output()? {
            match packet {
                // An answer to a packet of an earlier connection falls through, dropped.
                Packet::PubAck(_) | Packet::PubRec(_) | Packet::PubComp(_)
                    if self.unanswered.answers(&packet) =>
                {
                    client.queue(&packet)?
                }
                Packet::Disconnect(disconnect) => {
                    return Err(ClusterError::Ingress(format!(
                        "DISCONNECT 0x{:02x}",
                        disconnect.reason_code.0
                    )))
                }
                _ => {}
            }
        }
        let dropped = self.unanswered.take_dropped();
        if dropped > 0 {
            tracing::info!(peer = %self.peer, dropped, "cluster_answer_for_earlier_connection_dropped");
        }
        Ok(())
    }
}

impl From<InProcessError> for ClusterError {
    fn from(error: InProcessError) -> ClusterError {
        ClusterError::Ingress(error.to_string())
    }
}
