//! A harness for the sans-IO broker core ([`Broker`] + [`Channel`]) with injected time: no
//! sockets, no runtime, no real sleeps.
//!
//! [`CoreHarness`] owns a broker and a [`Clock`] that starts at one real `Instant` (`t0`) and
//! moves only when the test moves it. [`TestChannel`] plays the transport for one connection:
//! it hands packets to the channel (charging their encoded size to [`Channel::on_input`] first,
//! as the server does), rings the doorbells the channel collected, and decodes what the broker
//! wrote so that tests can look at the packets a client would receive.
//!
//! ```ignore
//! let h = CoreHarness::new();
//! let mut sub = h.client(ConnectSpec::v5("sub"));
//! sub.subscribe("t", QoS::AtMostOnce);
//! let mut publisher = h.client(ConnectSpec::v5("pub"));
//! publisher.publish("t", b"m", QoS::AtMostOnce).unwrap();
//! h.advance(Duration::from_secs(1));
//! assert_eq!(sub.transmit_publishes().len(), 1);
//! ```

use crate::connect_packet;
use bytes::{Bytes, BytesMut};
use hayate_codec::{
    decode, encode, ConnAck, Connect, Packet, PacketId, Properties, ProtocolVersion, PubResp,
    Publish, QoS, Subscribe, SubscriptionOptions, Will,
};
use hayate_core::handoff::{Claiming, HandedOver};
use hayate_core::{
    Arrival, Broker, BrokerConfig, Channel, Close, ConnectionInfo, ConnectionLimits, ListenerInfo,
    ListenerRole, OutBuf, ReadGate, SessionCell, StaticPolicy, WakeList,
};
use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

/// Injected time: `t0` plus an offset that only the test moves. Clones share the same time.
#[derive(Debug, Clone)]
pub struct Clock {
    t0: Instant,
    now: Rc<Cell<Instant>>,
}

impl Clock {
    /// A clock standing at `t0`.
    pub fn new(t0: Instant) -> Clock {
        Clock {
            t0,
            now: Rc::new(Cell::new(t0)),
        }
    }

    /// Where the clock started.
    pub fn t0(&self) -> Instant {
        self.t0
    }

    /// The current injected time.
    pub fn now(&self) -> Instant {
        self.now.get()
    }

    /// `t0 + offset`.
    pub fn at(&self, offset: Duration) -> Instant {
        self.t0 + offset
    }

    /// Time since `t0`.
    pub fn elapsed(&self) -> Duration {
        self.now() - self.t0
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.set(self.now() + by);
    }

    /// Moves the clock to `t0 + offset`; panics if that is in the past.
    pub fn set(&self, offset: Duration) {
        let target = self.t0 + offset;
        assert!(
            target >= self.now(),
            "the clock does not go back ({offset:?} < {:?})",
            self.elapsed()
        );
        self.now.set(target);
    }
}

/// A broker core with an injected clock. See the module docs.
pub struct CoreHarness {
    /// The broker under test.
    pub broker: Arc<Broker>,
    /// The time every call made through this harness and its channels sees.
    pub clock: Clock,
}

impl Default for CoreHarness {
    fn default() -> Self {
        CoreHarness::new()
    }
}

impl CoreHarness {
    /// A broker with the default configuration and an allow-all policy, started now.
    pub fn new() -> CoreHarness {
        CoreHarness::with_config(|_| {})
    }

    /// A broker as [`CoreHarness::new`], one node of a cluster: its router counts its
    /// sessions' subscriptions in the returned route set.
    pub fn clustered() -> (CoreHarness, Arc<hayate_core::cluster::ClusterRoutes>) {
        let harness = CoreHarness::new();
        let routes = Arc::new(hayate_core::cluster::ClusterRoutes::new(true));
        assert!(harness.broker.router.attach_cluster(routes.clone()));
        (harness, routes)
    }

    /// Attaches a new [`MemoryStore`](crate::store::MemoryStore) to the broker as its store,
    /// the wall clock reading `unix_ms` now; returns it (to hold, complete or read back).
    pub fn attach_memory_store(&self, unix_ms: u64) -> Arc<crate::store::MemoryStore> {
        let store = Arc::new(crate::store::MemoryStore::default());
        assert!(
            self.broker.attach_store(store.clone(), self.now(), unix_ms),
            "a store attaches once"
        );
        store
    }

    /// A broker whose configuration `configure` adjusted first.
    pub fn with_config(configure: impl FnOnce(&mut BrokerConfig)) -> CoreHarness {
        let mut config = BrokerConfig::default();
        configure(&mut config);
        config.validate().expect("valid broker configuration");
        // The one real clock read: every later instant is derived from it.
        let clock = Clock::new(Instant::now());
        let broker = Broker::new(config, Arc::new(StaticPolicy::default()), clock.t0());
        CoreHarness { broker, clock }
    }

    /// The current injected time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// `t0 + offset`.
    pub fn at(&self, offset: Duration) -> Instant {
        self.clock.at(offset)
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Moves the clock to `t0 + offset`.
    pub fn set_time(&self, offset: Duration) {
        self.clock.set(offset);
    }

    /// A new connection, opened now, on a listener with default limits; no CONNECT sent yet.
    pub fn channel(&self) -> TestChannel {
        self.channel_with(ConnectionLimits::default())
    }

    /// A new connection, opened now, on a listener with `limits`.
    pub fn channel_with(&self, limits: ConnectionLimits) -> TestChannel {
        self.channel_on(ListenerInfo {
            name: Arc::from("core-test"),
            limits,
            ..ListenerInfo::default()
        })
    }

    /// A new connection, opened now, on the listener `listener` (its role: a cluster
    /// listener, a node's ingress).
    pub fn channel_on(&self, listener: ListenerInfo) -> TestChannel {
        let info = ConnectionInfo {
            listener: Arc::new(listener),
            ..ConnectionInfo::default()
        };
        TestChannel {
            channel: Channel::new(self.broker.clone(), info, self.now()),
            out: OutBuf::new(),
            wake: WakeList::new(),
            clock: self.clock.clone(),
            next_packet_id: 0,
            unread: Vec::new(),
            arrival: None,
        }
    }

    /// A new connection that sent `connect` now and was accepted; the CONNACK and anything sent
    /// with it (a resumed session's messages) are left in its output.
    pub fn client(&self, connect: impl Into<Connect>) -> TestChannel {
        let mut channel = self.channel();
        channel.connect(connect);
        channel
    }

    /// Fires the broker's due deadlines (will delay, session expiry) at the current time and
    /// rings the doorbells of the sessions that got messages.
    pub fn run_timers(&self) {
        let mut wake = WakeList::new();
        self.broker.run_timers(self.now(), &mut wake);
        ring(&mut wake);
    }

    /// The session registered for `client_id`, if any.
    pub fn session(&self, client_id: &str) -> Option<Arc<SessionCell>> {
        self.broker.registry.get(client_id)
    }

    /// A new connection, opened now, on a listener of `role` (a cluster listener, a node's
    /// ingress).
    pub fn channel_with_role(&self, role: ListenerRole) -> TestChannel {
        self.channel_on(ListenerInfo {
            name: Arc::from("cluster-test"),
            role,
            ..ListenerInfo::default()
        })
    }

    /// Node `name`'s peer session here (its link's connection, on the cluster listener),
    /// subscribed to `filters` with their subscription identifiers as a link subscribes. In a
    /// cluster harness, a node with a peer: a resumed client session waits for its answer.
    pub fn peer(&self, name: &str, filters: &[(&str, u32)]) -> TestChannel {
        let mut peer = self.channel_with_role(ListenerRole::Cluster);
        peer.connect(ConnectSpec::v5(&format!("$cluster/{name}")).session_expiry(600));
        for (i, (filter, id)) in filters.iter().enumerate() {
            let subscribe = Subscribe {
                packet_id: PacketId::new(i as u16 + 1).expect("non-zero"),
                filters: vec![(
                    (*filter).into(),
                    SubscriptionOptions {
                        qos: QoS::ExactlyOnce,
                        no_local: false,
                        retain_as_published: true,
                        retain_handling: 2,
                    },
                )],
                properties: Properties {
                    subscription_identifiers: vec![*id],
                    ..Properties::default()
                },
            };
            peer.send(Packet::Subscribe(subscribe))
                .expect("a peer session subscribes");
        }
        peer.received();
        peer
    }

    /// Answers another node's claim of `client_id`'s session made `at` (not a clean start):
    /// hands the session here over, to the peer session of node `to` here when given.
    pub fn hand_over(
        &self,
        client_id: &str,
        at: Arrival,
        to: Option<&str>,
        wake: &mut WakeList,
    ) -> Option<HandedOver> {
        let to = to.and_then(|node| self.session(&format!("$cluster/{node}")));
        self.broker.hand_over(
            client_id,
            Claiming {
                clean_start: false,
                at,
                to: to.as_ref(),
                upstream: Vec::new(),
            },
            self.now(),
            wake,
        )
    }

    /// `client_id` connects and resumes its session (MQTT 5, kept 600 s) here, in a cluster
    /// with a peer: its CONNACK waits for the other nodes' answers.
    pub fn resume_waiting(&self, client_id: &str) -> TestChannel {
        let mut client = self.channel();
        client
            .send(Packet::Connect(Box::new(
                ConnectSpec::v5(client_id)
                    .clean_start(false)
                    .session_expiry(600)
                    .into(),
            )))
            .expect("CONNECT accepted");
        client.poll_transmit().expect("open");
        assert!(client.received().is_empty(), "CONNACK waits");
        client
    }
}

/// What another node hands over for a session subscribed to `filter` at QoS 1 and holding
/// nothing else (`Broker::take_over`'s input in the cluster tests).
pub fn handed_subscription(filter: &str) -> HandedOver {
    HandedOver {
        subscriptions: vec![(
            filter.into(),
            hayate_core::registry::SubscriptionRecord {
                options: SubscriptionOptions::with_qos(QoS::AtLeastOnce),
                subscription_id: None,
            },
        )],
        ..HandedOver::default()
    }
}

/// A CONNECT under construction; converts into [`Connect`].
#[derive(Debug, Clone)]
pub struct ConnectSpec(pub Connect);

impl ConnectSpec {
    /// MQTT 5, clean start, keep alive 0, session expiry 0 (absent), no will.
    pub fn v5(client_id: &str) -> ConnectSpec {
        ConnectSpec::new(ProtocolVersion::V5, client_id)
    }

    /// MQTT 3.1.1, clean session, keep alive 0, no will.
    pub fn v311(client_id: &str) -> ConnectSpec {
        ConnectSpec::new(ProtocolVersion::V311, client_id)
    }

    /// `version`, clean start, keep alive 0, no will.
    pub fn new(version: ProtocolVersion, client_id: &str) -> ConnectSpec {
        let mut connect = connect_packet(version, client_id, true);
        connect.keep_alive = 0;
        ConnectSpec(connect)
    }

    /// Keep alive in seconds.
    pub fn keep_alive(mut self, seconds: u16) -> ConnectSpec {
        self.0.keep_alive = seconds;
        self
    }

    /// Clean Start (v5) / Clean Session (v3).
    pub fn clean_start(mut self, clean: bool) -> ConnectSpec {
        self.0.clean_start = clean;
        self
    }

    /// v5 Session Expiry Interval in seconds.
    pub fn session_expiry(mut self, seconds: u32) -> ConnectSpec {
        self.0.properties.session_expiry_interval = Some(seconds);
        self
    }

    /// v5 Receive Maximum: QoS 1/2 messages the broker may have in flight to this client.
    pub fn receive_maximum(mut self, maximum: u16) -> ConnectSpec {
        self.0.properties.receive_maximum = Some(maximum);
        self
    }

    /// A will message (no delay).
    pub fn will(mut self, topic: &str, payload: &'static [u8], qos: QoS) -> ConnectSpec {
        self.0.will = Some(Will {
            topic: topic.into(),
            payload: Bytes::from_static(payload),
            qos,
            retain: false,
            properties: Properties::default(),
        });
        self
    }

    /// v5 Will Delay Interval in seconds of the will set by [`ConnectSpec::will`].
    pub fn will_delay(mut self, seconds: u32) -> ConnectSpec {
        let will = self.0.will.as_mut().expect("will() before will_delay()");
        will.properties.will_delay_interval = Some(seconds);
        self
    }
}

impl From<ConnectSpec> for Connect {
    fn from(spec: ConnectSpec) -> Connect {
        spec.0
    }
}

/// One connection driven by the test as its transport. See the module docs.
pub struct TestChannel {
    /// The channel under test.
    pub channel: Channel,
    /// What the broker wrote for this client and the test has not taken yet.
    pub out: OutBuf,
    /// Doorbells collected by the last call (rung and emptied after each helper call).
    pub wake: WakeList,
    clock: Clock,
    next_packet_id: u16,
    /// Packets decoded by a helper that looked only at the first one.
    unread: Vec<Packet>,
    /// The arrival stamped on input from now on ([`TestChannel::arriving_at`]); `None`: the
    /// injected time, in nanoseconds since `t0`, plus one.
    arrival: Option<Arrival>,
}

impl TestChannel {
    /// The current injected time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Stamps the input handled from now on as having reached the broker at `arrival` (the
    /// transport's receive time), instead of at the injected time.
    pub fn arriving_at(&mut self, arrival: Arrival) -> &mut TestChannel {
        self.arrival = Some(arrival);
        self
    }

    fn arrival(&self) -> Arrival {
        self.arrival.unwrap_or_else(|| {
            let nanos = u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            Arrival::from_nanos(nanos + 1)
        })
    }

    /// Sends CONNECT and returns the CONNACK; panics unless it was accepted. Anything written
    /// after the CONNACK (a resumed session's messages) stays in the output.
    pub fn connect(&mut self, connect: impl Into<Connect>) -> ConnAck {
        let connect = connect.into();
        let id = connect.client_id.clone();
        self.send(Packet::Connect(Box::new(connect)))
            .unwrap_or_else(|close| panic!("CONNECT of {id} refused: {close:?}"));
        let first = self.take_first().expect("a CONNACK");
        match first {
            Packet::ConnAck(connack) => {
                assert_eq!(connack.reason_code.0, 0, "CONNACK refused: {connack:?}");
                connack
            }
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// What the transport does with one decoded packet: charges its encoded size to the
    /// keep-alive clock and rate limit ([`Channel::on_input`]), hands it to
    /// [`Channel::handle_packet`] and rings the doorbells. Panics when the channel does not
    /// accept input now (a transport would not hand a packet over); see [`TestChannel::handle`].
    pub fn send(&mut self, packet: Packet) -> Result<(), Close> {
        assert!(
            self.channel.accepts_input(),
            "the channel does not accept input now (paused); a transport would not read"
        );
        self.handle(packet)
    }

    /// Like [`TestChannel::send`] without the check that the channel accepts input.
    pub fn handle(&mut self, packet: Packet) -> Result<(), Close> {
        // CONNECT is encoded in its own version, everything else in the connection's.
        let version = match &packet {
            Packet::Connect(connect) => connect.protocol,
            _ => self.channel.version(),
        };
        let mut bytes = BytesMut::new();
        encode(&packet, version, &mut bytes).expect("packet encodes");
        let now = self.now();
        self.channel.on_input(bytes.len(), now, self.arrival());
        let result = self
            .channel
            .handle_packet(packet, now, &mut self.out, &mut self.wake);
        ring(&mut self.wake);
        result
    }

    /// `bytes` arrived at the current time (without a complete packet).
    pub fn on_input(&mut self, bytes: usize) {
        let now = self.now();
        self.channel.on_input(bytes, now, self.arrival());
    }

    /// Subscribes to `filter` at `qos` and returns the SUBACK's reason codes; panics if the
    /// channel closes or answers with something else first. Retained messages sent after the
    /// SUBACK stay in the output.
    pub fn subscribe(&mut self, filter: &str, qos: QoS) -> Vec<u8> {
        let packet_id = self.packet_id();
        let subscribe = Subscribe {
            packet_id,
            filters: vec![(filter.into(), SubscriptionOptions::with_qos(qos))],
            properties: Properties::default(),
        };
        self.send(Packet::Subscribe(subscribe))
            .unwrap_or_else(|close| panic!("SUBSCRIBE closed the connection: {close:?}"));
        match self.take_first() {
            Some(Packet::SubAck(suback)) => {
                assert_eq!(suback.packet_id, packet_id);
                suback.reason_codes.iter().map(|c| c.0).collect()
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Sends a PUBLISH (a fresh packet id for QoS 1/2). Its acknowledgement, if any, is left in
    /// the output.
    pub fn publish(&mut self, topic: &str, payload: &[u8], qos: QoS) -> Result<(), Close> {
        let packet_id = (qos != QoS::AtMostOnce).then(|| self.packet_id().get());
        self.send(Packet::Publish(crate::publish_packet(
            topic, payload, qos, false, packet_id,
        )))
    }

    /// Acknowledges a QoS 1 PUBLISH the broker sent (PUBACK), which may let more out.
    pub fn puback(&mut self, publish: &Publish) -> Result<(), Close> {
        assert_eq!(publish.qos, QoS::AtLeastOnce, "PUBACK is for QoS 1");
        let id = publish.packet_id.expect("QoS 1 has a packet id");
        self.send(Packet::PubAck(PubResp::new(id)))
    }

    /// [`Channel::poll_transmit`] at the current time.
    pub fn poll_transmit(&mut self) -> Result<(), Close> {
        let now = self.now();
        self.channel.poll_transmit(now, &mut self.out)
    }

    /// The subscriber's transport writing everything it may now: `poll_transmit` until it stops
    /// asking for more, then the packets written (everything in the output). Panics if the
    /// channel closes.
    pub fn transmit(&mut self) -> Vec<Packet> {
        loop {
            self.poll_transmit()
                .unwrap_or_else(|close| panic!("poll_transmit closed the connection: {close:?}"));
            if !self.channel.has_more_to_send() {
                break;
            }
        }
        self.received()
    }

    /// [`TestChannel::transmit`], expecting only PUBLISH packets.
    pub fn transmit_publishes(&mut self) -> Vec<Publish> {
        only_publishes(self.transmit())
    }

    /// Takes and decodes everything the broker wrote for this client so far.
    pub fn received(&mut self) -> Vec<Packet> {
        let mut bytes = BytesMut::from(&self.out.take_all()[..]);
        let mut packets: Vec<Packet> = self.unread.drain(..).collect();
        while let Some(packet) = decode(&mut bytes, self.channel.version(), u32::MAX)
            .unwrap_or_else(|error| panic!("the broker wrote a malformed packet: {error}"))
        {
            packets.push(packet);
        }
        assert!(
            bytes.is_empty(),
            "a partial packet in the output: {bytes:?}"
        );
        packets
    }

    /// [`TestChannel::received`], expecting only PUBLISH packets.
    pub fn received_publishes(&mut self) -> Vec<Publish> {
        only_publishes(self.received())
    }

    /// [`Channel::poll_timeout`].
    pub fn poll_timeout(&self) -> Instant {
        self.channel.poll_timeout()
    }

    /// [`Channel::handle_timeout`] at the current time; `reading` says whether the transport is
    /// reading from the client.
    pub fn handle_timeout(&mut self, reading: bool) -> Result<(), Close> {
        let now = self.now();
        self.channel.handle_timeout(now, reading, &mut self.out)
    }

    /// [`Channel::poll_gate`] at the current time (a held PUBLISH may be routed: the doorbells
    /// are rung).
    pub fn poll_gate(&mut self) -> Result<ReadGate, Close> {
        let now = self.now();
        let gate = self.channel.poll_gate(now, &mut self.out, &mut self.wake);
        ring(&mut self.wake);
        gate
    }

    /// [`Channel::accepts_input`].
    pub fn accepts_input(&self) -> bool {
        self.channel.accepts_input()
    }

    /// The client's input ended (end of stream): [`Channel::input_ended`] at the current time,
    /// doorbells rung.
    pub fn end_input(&mut self) -> Result<(), Close> {
        let now = self.now();
        let result = self.channel.input_ended(now, &mut self.out, &mut self.wake);
        ring(&mut self.wake);
        result
    }

    /// The connection ended: [`Channel::finish`] at the current time, doorbells rung.
    pub fn finish(&mut self) {
        let now = self.now();
        self.channel.finish(now, &mut self.wake);
        ring(&mut self.wake);
    }

    /// True when this connection's doorbell was rung since the last look (consumes the ring).
    pub fn woken(&self) -> bool {
        let notified = self.channel.doorbell().notified();
        let mut notified = std::pin::pin!(notified);
        notified
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    /// The session this connection is attached to.
    pub fn session(&self) -> Arc<SessionCell> {
        self.channel
            .session()
            .expect("attached to a session")
            .clone()
    }

    /// The first packet written; what follows it stays for [`TestChannel::received`].
    fn take_first(&mut self) -> Option<Packet> {
        let packets = self.received();
        let mut packets = packets.into_iter();
        let first = packets.next();
        self.unread.extend(packets);
        first
    }

    fn packet_id(&mut self) -> PacketId {
        self.next_packet_id = self.next_packet_id.checked_add(1).unwrap_or(1);
        PacketId::new(self.next_packet_id).expect("non-zero")
    }
}

/// True when a paused gate's release signal has fired: the transport would call
/// [`Channel::poll_gate`] again now rather than at `until`. False for an open gate or one
/// paused without a signal (the rate limit).
pub fn gate_released(gate: &mut ReadGate) -> bool {
    match gate {
        ReadGate::Paused {
            released: Some(released),
            ..
        } => released
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready(),
        _ => false,
    }
}

/// The `until` of a paused gate; panics on an open one.
pub fn paused_until(gate: &ReadGate) -> Instant {
    match gate {
        ReadGate::Paused { until, .. } => *until,
        ReadGate::Open => panic!("expected a paused gate, got Open"),
    }
}

fn only_publishes(packets: Vec<Packet>) -> Vec<Publish> {
    packets
        .into_iter()
        .map(|packet| match packet {
            Packet::Publish(publish) => publish,
            other => panic!("expected only PUBLISH, got {other:?}"),
        })
        .collect()
}

fn ring(wake: &mut WakeList) {
    for doorbell in wake.drain(..) {
        doorbell.notify_one();
    }
}
