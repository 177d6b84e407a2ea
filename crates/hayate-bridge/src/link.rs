//! One link: a connection to the remote broker and the bridge's local session, with packets
//! passed between them until either side ends or the server shuts down.
//!
//! Packet identifiers are kept across the bridge: a message the local session sends the
//! bridge with id N goes to the remote broker with id N, and the remote broker's PUBACK /
//! PUBREC / PUBCOMP for N goes back to the local session as is (the local session's ids are
//! unique among its messages in flight, so they are unique on the remote connection too). The
//! other way round likewise. So the local session releases a message only once the remote
//! broker has acknowledged it, and the remote broker only once the local broker has.

use crate::bridge::{Bridge, BridgeStats};
use crate::local::{Local, RemoteLimits};
use crate::remote::Remote;
use crate::retained::RetainedChanges;
use crate::transport::Connector;
use crate::BridgeError;
use hayate_codec::{
    ByteStr, Packet, PacketId, Properties, PubResp, Publish, QoS, ReasonCode, Subscribe,
    SubscriptionOptions, Unsubscribe,
};
use hayate_core::ReadGate;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Messages in flight towards a v3 remote broker (Mosquitto's `max_inflight_messages`).
const V3_IN_FLIGHT: u16 = 20;
/// At most this many messages in flight towards a v5 remote broker, whatever its Receive
/// Maximum: it bounds the duplicates a link drop can cause.
const V5_IN_FLIGHT_CAP: u16 = 100;
/// The packet id of the bridge's remote SUBSCRIBE.
const SUBSCRIBE_ID: u16 = 1;
/// The packet id of the bridge's remote UNSUBSCRIBE (`bridge_attempt_unsubscribe`).
const UNSUBSCRIBE_ID: u16 = 2;
/// A remote broker that takes no bytes for this long is taken as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How a link ended.
pub(crate) enum LinkEnd {
    /// The server is shutting down.
    Shutdown,
    /// The link never came up.
    Failed(BridgeError),
    /// The link was up and dropped.
    Dropped(BridgeError),
    /// `start_type lazy`: the link was idle for `idle_timeout` and closed cleanly.
    Idle,
}

pub(crate) struct Link<'a> {
    bridge: &'a mut Bridge,
    remote: Remote,
    local: Local,
    /// Outgoing QoS 2 messages no rule maps, acknowledged locally by the bridge.
    dropped_q2: HashSet<u16>,
    /// Inbound QoS 2 flows the bridge released locally itself (the remote session was new):
    /// their PUBCOMP is not forwarded.
    released: HashSet<u16>,
    /// The keep alive in use: the remote broker's Server Keep Alive (v5) or ours.
    keep_alive: Duration,
    last_input: tokio::time::Instant,
    /// Last PUBLISH either way (`start_type lazy` closes the link after `idle_timeout`).
    last_traffic: tokio::time::Instant,
    /// Retained messages changed while the link was down, to send once the session has sent
    /// what it had queued (`crate::retained`).
    replay: Option<Replay>,
    /// PINGREQs sent and PINGRESPs received on this link.
    pings_sent: u64,
    pings_answered: u64,
}

/// A replay of retained state, pending or awaiting its confirmation.
struct Replay {
    changes: RetainedChanges,
    /// PUBLISHes the local session held when it resumed (queued while the link was down):
    /// the replay goes after them.
    stale: usize,
    /// PUBLISHes forwarded from the local session since it resumed.
    forwarded: usize,
    /// Sent, confirmed once this many PINGRESPs have come.
    confirmed_at: Option<u64>,
}

impl<'a> Link<'a> {
    /// Connects to `address`, runs the link until it ends, and closes both sides.
    pub(crate) async fn run(
        bridge: &'a mut Bridge,
        address: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> LinkEnd {
        let mut link = tokio::select! {
            link = Link::open(bridge, address) => match link {
                Ok(link) => link,
                Err(error) => return LinkEnd::Failed(error),
            },
            _ = shutdown.changed() => return LinkEnd::Shutdown,
        };
        let name = link.bridge.config.name.clone();
        link.take_retained_changes().await;
        let tls = link.remote.tls().unwrap_or_else(|| "none".into());
        tracing::info!(bridge = %name, %address, version = ?link.remote.version(), %tls, "bridge_connected");
        link.bridge.stats.connected.store(true, Ordering::Relaxed);
        BridgeStats::add(&link.bridge.stats.connects, 1);
        link.bridge.notify_local(true);
        let result = link.serve(shutdown).await;
        let now = Instant::now();
        match result {
            Ok(()) => {
                let end_session = link
                    .bridge
                    .config
                    .local_cleansession
                    .unwrap_or(link.bridge.config.cleansession);
                link.local.close(end_session, now);
                // An ended session: a later start of the bridge begins a new one.
                link.bridge.first_local |= end_session;
                link.remote.disconnect().await;
                LinkEnd::Shutdown
            }
            Err(BridgeError::Idle) => {
                link.bridge.start_watcher(now);
                link.local.close(false, now);
                link.remote.disconnect().await;
                LinkEnd::Idle
            }
            Err(error) => {
                if let Some(replay) = link.replay.take() {
                    link.bridge.carried.merge(replay.changes);
                }
                // Watch before the session goes offline, so that no change is missed.
                link.bridge.start_watcher(now);
                link.local.close(false, now);
                LinkEnd::Dropped(error)
            }
        }
    }

    /// Connects to the remote broker, subscribes there, then connects the local session.
    async fn open(bridge: &'a mut Bridge, address: &str) -> Result<Link<'a>, BridgeError> {
        let config = &bridge.config;
        let connector = Connector::new(config).map_err(BridgeError::TlsSetup)?;
        let (mut remote, connack) = Remote::connect(
            &connector,
            address,
            config,
            &bridge.remote_client_id,
            bridge.notification_will(),
        )
        .await?;
        let v5 = remote.version().is_v5();
        let mut stale_q2 = HashSet::new();
        if !connack.session_present {
            // A new remote session knows nothing of the QoS 2 flows the bridge answered, and
            // will not send the PUBRELs the local session waits for: those are released
            // locally, or a new message reusing an id would be taken for a duplicate.
            bridge.rel_direct.clear();
            bridge.q2_over_q1.clear();
            stale_q2 = std::mem::take(&mut bridge.in_q2);
        }
        let filters: Vec<(ByteStr, SubscriptionOptions)> = bridge
            .topics
            .incoming()
            .map(|rule| {
                let options = SubscriptionOptions {
                    qos: rule.qos(),
                    no_local: v5,
                    retain_as_published: v5,
                    retain_handling: if v5 { 1 } else { 0 },
                };
                (rule.remote_filter().into(), options)
            })
            .collect();
        if connack.session_present && bridge.config.attempt_unsubscribe {
            // `bridge_attempt_unsubscribe`: the remote session may still hold subscriptions
            // of `out` topics that were `in` or `both` before (a configuration changed by a
            // restart or SIGHUP): removed, as Mosquitto does.
            let stale: Vec<ByteStr> = bridge
                .topics
                .outgoing()
                .filter(|rule| !rule.is_in())
                .map(|rule| rule.remote_filter())
                .filter(|filter| !filters.iter().any(|(f, _)| f.as_str() == *filter))
                .map(ByteStr::from)
                .collect();
            if !stale.is_empty() {
                remote.queue(&Packet::Unsubscribe(Unsubscribe {
                    packet_id: PacketId::new(UNSUBSCRIBE_ID).expect("non-zero"),
                    filters: stale,
                    properties: Properties::default(),
                }))?;
            }
        }
        if !filters.is_empty() {
            remote.queue(&Packet::Subscribe(Subscribe {
                packet_id: PacketId::new(SUBSCRIBE_ID).expect("non-zero"),
                filters,
                properties: Properties::default(),
            }))?;
        }
        if let Some(publish) = bridge.remote_notification(true) {
            remote.queue(&Packet::Publish(publish))?;
        }
        remote.flush().await?;
        let in_flight = if v5 {
            connack
                .properties
                .receive_maximum
                .unwrap_or(u16::MAX)
                .min(V5_IN_FLIGHT_CAP)
        } else {
            V3_IN_FLIGHT
        };
        let clean_start = bridge.first_local
            && bridge
                .config
                .local_cleansession
                .unwrap_or(bridge.config.cleansession);
        let mut local = Local::connect(
            &bridge.broker,
            &bridge.local,
            &bridge.topics,
            clean_start,
            RemoteLimits {
                receive_maximum: in_flight,
                max_packet_size: connack.properties.maximum_packet_size,
                maximum_qos: connack
                    .properties
                    .maximum_qos
                    .and_then(QoS::from_u8)
                    .unwrap_or(QoS::ExactlyOnce),
            },
            crate::local::RETAINED_IF_NEW,
            Instant::now(),
        )?;
        bridge.first_local = false;
        let keep_alive = Duration::from_secs(u64::from(
            connack
                .properties
                .server_keep_alive
                .unwrap_or(bridge.config.keepalive_interval_secs),
        ));
        for id in &stale_q2 {
            let Some(id) = PacketId::new(*id) else {
                continue;
            };
            if let Err(error) = local.handle(Packet::PubRel(PubResp::new(id)), Instant::now()) {
                local.close(false, Instant::now());
                return Err(error);
            }
        }
        Ok(Link {
            bridge,
            remote,
            local,
            dropped_q2: HashSet::new(),
            released: stale_q2,
            keep_alive,
            last_input: tokio::time::Instant::now(),
            last_traffic: tokio::time::Instant::now(),
            replay: None,
            pings_sent: 0,
            pings_answered: 0,
        })
    }

    /// Stops the watcher of the outage that ends (the session is resumed now) and keeps what
    /// it recorded for the replay.
    async fn take_retained_changes(&mut self) {
        let mut changes = std::mem::take(&mut self.bridge.carried);
        if let Some(watcher) = self.bridge.watcher.take() {
            changes.merge(watcher.finish().await);
        }
        if !changes.is_empty() {
            let (waiting, in_flight) = self.local.held();
            self.replay = Some(Replay {
                changes,
                stale: waiting + in_flight,
                forwarded: 0,
                confirmed_at: None,
            });
        }
    }

    /// Sends the retained replay once what the session had queued has gone out (or nothing
    /// waits in it any more), then a PINGREQ whose answer confirms it.
    fn replay_when_due(&mut self, now: Instant) -> Result<(), BridgeError> {
        let Some(replay) = &mut self.replay else {
            return Ok(());
        };
        if replay.confirmed_at.is_some()
            || (replay.forwarded < replay.stale && self.local.held().0 > 0)
        {
            return Ok(());
        }
        let publishes = replay
            .changes
            .replay(&self.bridge.broker, &self.bridge.topics, now);
        tracing::info!(bridge = %self.bridge.config.name, topics = publishes.len(), "bridge_retained_replay");
        BridgeStats::add(&self.bridge.stats.retained_replayed, publishes.len() as u64);
        for publish in publishes {
            self.remote.queue(&Packet::Publish(publish))?;
        }
        self.remote.queue(&Packet::PingReq)?;
        self.pings_sent += 1;
        replay.confirmed_at = Some(self.pings_sent);
        Ok(())
    }

    /// `start_type lazy`: ends the link once nothing has crossed it for `idle_timeout` and
    /// nothing is queued or in flight.
    fn check_idle(&self) -> Result<(), BridgeError> {
        let idle = Duration::from_secs(self.bridge.config.idle_timeout_secs.max(1));
        if self.last_traffic.elapsed() >= idle
            && self.local.held() == (0, 0)
            && self.replay.is_none()
            && self.bridge.in_q2.is_empty()
        {
            return Err(BridgeError::Idle);
        }
        Ok(())
    }

    fn on_ping_response(&mut self) {
        self.pings_answered += 1;
        let confirmed = self
            .replay
            .as_ref()
            .and_then(|replay| replay.confirmed_at)
            .is_some_and(|at| self.pings_answered >= at);
        if confirmed {
            self.replay = None;
        }
    }

    /// Passes packets both ways until an error or shutdown (`Ok`).
    async fn serve(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), BridgeError> {
        let doorbell = self.local.doorbell();
        let keep_alive = self.keep_alive;
        let mut ping = tokio::time::interval(if keep_alive.is_zero() {
            Duration::from_secs(24 * 3600)
        } else {
            keep_alive
        });
        ping.tick().await;
        let lazy = self.bridge.config.start_type == crate::config::BridgeStartType::Lazy;
        let mut idle_check = tokio::time::interval(Duration::from_millis(500));
        self.local.transmit(Instant::now())?;
        loop {
            self.forward_local_output()?;
            self.replay_when_due(Instant::now())?;
            tokio::time::timeout(WRITE_TIMEOUT, self.remote.flush())
                .await
                .map_err(|_| BridgeError::Timeout("the remote broker to read"))??;
            let now = Instant::now();
            if self.local.has_more_to_send() {
                self.local.transmit(now)?;
                continue;
            }
            let gate = if self.local.accepts_input() {
                ReadGate::Open
            } else {
                self.local.poll_gate(now)?
            };
            if matches!(gate, ReadGate::Open) && self.process_remote_buffered(now)? {
                // Remote packets were handled: forward what they produced first.
                continue;
            }
            let reading = matches!(gate, ReadGate::Open);
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
                read = self.remote.read(), if reading => {
                    read?;
                    self.last_input = tokio::time::Instant::now();
                }
                _ = doorbell.notified() => self.local.transmit(Instant::now())?,
                _ = paused => {}
                _ = idle_check.tick(), if lazy => self.check_idle()?,
                _ = ping.tick(), if !keep_alive.is_zero() => {
                    if self.last_input.elapsed() > keep_alive * 3 / 2 {
                        return Err(BridgeError::Timeout("PINGRESP"));
                    }
                    self.remote.queue(&Packet::PingReq)?;
                    self.pings_sent += 1;
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Handles the complete remote packets already read, while the local channel takes them.
    /// True when it handled any.
    fn process_remote_buffered(&mut self, now: Instant) -> Result<bool, BridgeError> {
        let mut any = false;
        while self.local.accepts_input() {
            let Some(packet) = self.remote.next_buffered()? else {
                break;
            };
            any = true;
            self.on_remote(packet, now)?;
        }
        Ok(any)
    }

    /// One packet from the remote broker.
    fn on_remote(&mut self, packet: Packet, now: Instant) -> Result<(), BridgeError> {
        tracing::trace!(bridge = %self.bridge.config.name, packet = ?packet.packet_type(), "bridge_remote_packet");
        match packet {
            Packet::Publish(publish) => self.on_remote_publish(publish, now),
            Packet::PubAck(ack) => self.local.handle(Packet::PubAck(ack), now),
            Packet::PubRec(rec) => self.local.handle(Packet::PubRec(rec), now),
            Packet::PubComp(comp) => self.local.handle(Packet::PubComp(comp), now),
            Packet::PubRel(rel) => {
                if self.bridge.rel_direct.remove(&rel.packet_id.get()) {
                    self.remote
                        .queue(&Packet::PubComp(PubResp::new(rel.packet_id)))
                } else {
                    self.local.handle(Packet::PubRel(rel), now)
                }
            }
            Packet::SubAck(suback) => {
                self.log_refused_subscriptions("remote", &suback.reason_codes);
                Ok(())
            }
            Packet::PingResp => {
                self.on_ping_response();
                Ok(())
            }
            Packet::UnsubAck(_) => Ok(()),
            Packet::Disconnect(disconnect) => {
                Err(BridgeError::Disconnected(disconnect.reason_code.0))
            }
            other => Err(BridgeError::Protocol(format!(
                "unexpected {:?} from the remote broker",
                other.packet_type()
            ))),
        }
    }

    /// A message from the remote broker: published locally under its local topic at
    /// min(rule QoS, received QoS); acknowledged remotely when the local broker has it.
    fn on_remote_publish(&mut self, publish: Publish, now: Instant) -> Result<(), BridgeError> {
        self.last_traffic = tokio::time::Instant::now();
        let id = publish.packet_id;
        let raw_id = id.map_or(0, PacketId::get);
        let remote_qos = publish.qos;
        if remote_qos == QoS::ExactlyOnce {
            if self.bridge.rel_direct.contains(&raw_id) {
                // Already taken and answered: answer again, do not publish again.
                return self.ack_remote(id, QoS::ExactlyOnce);
            }
            if self.bridge.q2_over_q1.contains(&raw_id) {
                // The local broker has it; its PUBACK will answer.
                return Ok(());
            }
        }
        let Some((topic, rule_qos)) = self.bridge.topics.to_local(publish.topic.as_str()) else {
            BridgeStats::add(&self.bridge.stats.dropped, 1);
            return self.ack_remote_directly(id, remote_qos);
        };
        let local_qos = remote_qos.min(rule_qos);
        let local_publish = Publish {
            dup: publish.dup && local_qos != QoS::AtMostOnce,
            qos: local_qos,
            retain: publish.retain,
            topic: topic.into(),
            packet_id: if local_qos == QoS::AtMostOnce {
                None
            } else {
                id
            },
            properties: forwarded_properties(publish.properties),
            payload: publish.payload,
        };
        self.local.handle(Packet::Publish(local_publish), now)?;
        BridgeStats::add(&self.bridge.stats.messages_in, 1);
        match (remote_qos, local_qos) {
            (QoS::AtLeastOnce, QoS::AtMostOnce) | (QoS::ExactlyOnce, QoS::AtMostOnce) => {
                self.ack_remote_directly(id, remote_qos)
            }
            (QoS::ExactlyOnce, QoS::AtLeastOnce) => {
                self.bridge.q2_over_q1.insert(raw_id);
                Ok(())
            }
            (QoS::ExactlyOnce, QoS::ExactlyOnce) => {
                self.bridge.in_q2.insert(raw_id);
                Ok(())
            }
            // Same QoS both sides: the local acknowledgements pass through.
            _ => Ok(()),
        }
    }

    /// Acknowledges a remote message the bridge itself answers for (not delivered locally at
    /// the remote QoS).
    fn ack_remote_directly(&mut self, id: Option<PacketId>, qos: QoS) -> Result<(), BridgeError> {
        if qos == QoS::ExactlyOnce {
            self.bridge.rel_direct.insert(id.map_or(0, PacketId::get));
        }
        self.ack_remote(id, qos)
    }

    fn ack_remote(&mut self, id: Option<PacketId>, qos: QoS) -> Result<(), BridgeError> {
        let Some(id) = id else { return Ok(()) };
        match qos {
            QoS::AtMostOnce => Ok(()),
            QoS::AtLeastOnce => self.remote.queue(&Packet::PubAck(PubResp::new(id))),
            QoS::ExactlyOnce => self.remote.queue(&Packet::PubRec(PubResp::new(id))),
        }
    }

    /// Forwards what the local session wrote for the bridge.
    fn forward_local_output(&mut self) -> Result<(), BridgeError> {
        for packet in self.local.take_output()? {
            self.on_local(packet)?;
        }
        Ok(())
    }

    /// One packet from the local session.
    fn on_local(&mut self, packet: Packet) -> Result<(), BridgeError> {
        let now = Instant::now();
        match packet {
            Packet::Publish(publish) => self.on_local_publish(publish, now),
            Packet::PubRel(rel) => {
                if self.dropped_q2.remove(&rel.packet_id.get()) {
                    self.local
                        .handle(Packet::PubComp(PubResp::new(rel.packet_id)), now)
                } else {
                    self.remote.queue(&Packet::PubRel(rel))
                }
            }
            Packet::PubAck(ack) => {
                if self.bridge.q2_over_q1.remove(&ack.packet_id.get()) {
                    // QoS 2 from the remote broker, QoS 1 locally: now the remote may release.
                    self.bridge.rel_direct.insert(ack.packet_id.get());
                    self.remote
                        .queue(&Packet::PubRec(PubResp::new(ack.packet_id)))
                } else {
                    self.remote.queue(&Packet::PubAck(ack))
                }
            }
            Packet::PubRec(rec) => self.remote.queue(&Packet::PubRec(rec)),
            Packet::PubComp(comp) => {
                let id = comp.packet_id.get();
                if self.released.remove(&id) {
                    return Ok(());
                }
                self.bridge.in_q2.remove(&id);
                self.remote.queue(&Packet::PubComp(comp))
            }
            Packet::SubAck(suback) => {
                self.log_refused_subscriptions("local", &suback.reason_codes);
                Ok(())
            }
            Packet::PingResp | Packet::UnsubAck(_) => Ok(()),
            Packet::Disconnect(disconnect) => Err(BridgeError::LocalClosed(format!(
                "DISCONNECT 0x{:02x}",
                disconnect.reason_code.0
            ))),
            other => Err(BridgeError::Protocol(format!(
                "unexpected {:?} from the local session",
                other.packet_type()
            ))),
        }
    }

    /// A message from the local session: published remotely under its remote topic, with the
    /// same packet id; the remote acknowledgement goes back to the local session.
    fn on_local_publish(&mut self, publish: Publish, now: Instant) -> Result<(), BridgeError> {
        let Some((topic, _)) = self.bridge.topics.to_remote(publish.topic.as_str()) else {
            BridgeStats::add(&self.bridge.stats.dropped, 1);
            let Some(id) = publish.packet_id else {
                return Ok(());
            };
            return match publish.qos {
                QoS::AtMostOnce => Ok(()),
                QoS::AtLeastOnce => self.local.handle(Packet::PubAck(PubResp::new(id)), now),
                QoS::ExactlyOnce => {
                    self.dropped_q2.insert(id.get());
                    self.local.handle(Packet::PubRec(PubResp::new(id)), now)
                }
            };
        };
        self.last_traffic = tokio::time::Instant::now();
        if let Some(replay) = &mut self.replay {
            replay.forwarded += 1;
        }
        if publish.dup {
            BridgeStats::add(&self.bridge.stats.resent_out, 1);
        }
        let remote_publish = Publish {
            dup: publish.dup,
            qos: publish.qos,
            retain: publish.retain && self.bridge.config.outgoing_retain,
            topic: topic.into(),
            packet_id: publish.packet_id,
            properties: forwarded_properties(publish.properties),
            payload: publish.payload,
        };
        BridgeStats::add(&self.bridge.stats.messages_out, 1);
        tracing::trace!(bridge = %self.bridge.config.name, topic = %remote_publish.topic, id = ?remote_publish.packet_id, dup = remote_publish.dup, "bridge_forward_out");
        self.remote.queue(&Packet::Publish(remote_publish))
    }

    fn log_refused_subscriptions(&self, side: &str, codes: &[ReasonCode]) {
        for code in codes.iter().filter(|code| code.0 >= 0x80) {
            tracing::warn!(bridge = %self.bridge.config.name, side, code = code.0, "bridge_subscription_refused");
        }
    }
}

/// The properties of a forwarded message: what the publisher set (payload format, expiry,
/// content type, response topic, correlation data, user properties); not what belongs to one
/// connection (topic alias, subscription identifiers).
pub(crate) fn forwarded_properties(mut properties: Properties) -> Properties {
    properties.topic_alias = None;
    properties.subscription_identifiers.clear();
    properties
}
